// Tenant names and the TENANT JSON: defaults (request = limit), strict types and
// ranges, unknown fields refused, partial updates, and the owners (uids that may
// register) with the rule that an update cannot move a tenant between having owners
// and having none; the Kubernetes container a tenant belongs to ("pod": namespace, pod,
// container under the Kubernetes name rules), set, replaced and cleared by an update.
#include "core/tenant_spec.h"

#include <gtest/gtest.h>

namespace fracgpu::broker {
namespace {

using nlohmann::json;

TEST(TenantName, Valid) {
  for (const char* name : {"a", "0", "run-1234", "team.a_b-c",
                           "x0123456789012345678901234567890123456789012345678901234567890y"}) {
    EXPECT_TRUE(validate_tenant_name(name).ok()) << name;
  }
}

TEST(TenantName, Invalid) {
  const std::string too_long(64, 'a');
  for (const std::string& name :
       {std::string(), too_long, std::string("A"), std::string("-a"), std::string(".a"),
        std::string("_a"), std::string("a/b"), std::string("a b"), std::string("ä"),
        std::string("a\nb"), std::string(".."), std::string("Tenant")}) {
    EXPECT_FALSE(validate_tenant_name(name).ok()) << name;
  }
  EXPECT_TRUE(validate_tenant_name(std::string(63, 'a')).ok());
}

TEST(TenantSpecJson, DefaultsRequestToLimit) {
  auto spec = tenant_spec_from_json(
      json::parse(R"({"name":"a","devices":[{"gpu":0,"memory_limit":1000}]})"));
  ASSERT_TRUE(spec.ok()) << spec.error();
  ASSERT_EQ(spec->devices.size(), 1u);
  EXPECT_EQ(spec->devices[0].memory_limit, 1000u);
  EXPECT_EQ(spec->devices[0].memory_request, 1000u);
  EXPECT_EQ(spec->devices[0].compute, 100u);
  EXPECT_EQ(spec->devices[0].compute_limit, 0u);
  EXPECT_EQ(spec->devices[0].priority, PriorityClass::kNormal);
}

// "available" (fracgpu run without --memory): a limit admission fills in, request 0
// unless given; only when creating, and only that word.
TEST(TenantSpecJson, AvailableMemoryLimit) {
  auto spec = tenant_spec_from_json(
      json::parse(R"({"name":"a","devices":[{"gpu":0,"memory_limit":"available"}]})"));
  ASSERT_TRUE(spec.ok()) << spec.error();
  EXPECT_EQ(spec->devices[0].memory_limit, kMemoryLimitAvailable);
  EXPECT_EQ(spec->devices[0].memory_request, 0u);
  spec = tenant_spec_from_json(json::parse(
      R"({"name":"a","devices":[{"gpu":0,"memory_limit":"available","memory_request":5000,"compute":30}]})"));
  ASSERT_TRUE(spec.ok()) << spec.error();
  EXPECT_EQ(spec->devices[0].memory_request, 5000u);
  EXPECT_EQ(spec->devices[0].compute, 30u);
  EXPECT_FALSE(tenant_spec_from_json(
                   json::parse(R"({"name":"a","devices":[{"gpu":0,"memory_limit":"all"}]})"))
                   .ok());
  auto existing = tenant_spec_from_json(
      json::parse(R"({"name":"a","devices":[{"gpu":0,"memory_limit":100}]})"));
  ASSERT_TRUE(existing.ok());
  auto update = apply_tenant_update(
      *existing, json::parse(R"({"name":"a","devices":[{"gpu":0,"memory_limit":"available"}]})"));
  ASSERT_FALSE(update.ok());
  EXPECT_NE(update.error().find("only for creating a tenant"), std::string::npos) << update.error();
}

TEST(TenantSpecJson, AllFields) {
  auto spec = tenant_spec_from_json(json::parse(
      R"({"name":"b","devices":[{"gpu":1,"memory_limit":1000,"memory_request":0,"compute":30,"compute_limit":50,"priority":"low"}]})"));
  ASSERT_TRUE(spec.ok()) << spec.error();
  const DeviceSpec& d = spec->devices[0];
  EXPECT_EQ(d.gpu, 1u);
  EXPECT_EQ(d.memory_request, 0u);
  EXPECT_EQ(d.compute, 30u);
  EXPECT_EQ(d.compute_limit, 50u);
  EXPECT_EQ(d.priority, PriorityClass::kLow);
}

// A high tenant never waits at the gate, so a ceiling on it could not be enforced.
TEST(TenantSpecJson, RefusesCeilingOnHighPriority) {
  auto spec = tenant_spec_from_json(json::parse(
      R"({"name":"b","devices":[{"gpu":1,"memory_limit":1000,"compute_limit":50,"priority":"high"}]})"));
  ASSERT_FALSE(spec.ok());
  EXPECT_NE(spec.error().find("cannot be combined with priority"), std::string::npos)
      << spec.error();
  auto high = tenant_spec_from_json(
      json::parse(R"({"name":"b","devices":[{"gpu":1,"memory_limit":1000,"priority":"high"}]})"));
  ASSERT_TRUE(high.ok()) << high.error();
  EXPECT_EQ(high->devices[0].priority, PriorityClass::kHigh);
}

TEST(TenantSpecJson, RejectsBadInput) {
  const char* bad[] = {
      R"([])",
      R"({"devices":[{"gpu":0,"memory_limit":1}]})",
      R"({"name":"A","devices":[{"gpu":0,"memory_limit":1}]})",
      R"({"name":"a"})",
      R"({"name":"a","devices":[]})",
      R"({"name":"a","devices":{}})",
      R"({"name":"a","devices":[{"memory_limit":1}]})",
      R"({"name":"a","devices":[{"gpu":0}]})",
      R"({"name":"a","devices":[{"gpu":0,"memory_limit":0}]})",
      R"({"name":"a","devices":[{"gpu":0,"memory_limit":-5}]})",
      R"({"name":"a","devices":[{"gpu":0,"memory_limit":"1GiB"}]})",
      R"({"name":"a","devices":[{"gpu":0,"memory_limit":1.5}]})",
      R"({"name":"a","devices":[{"gpu":-1,"memory_limit":1}]})",
      R"({"name":"a","devices":[{"gpu":16,"memory_limit":1}]})",
      R"({"name":"a","devices":[{"gpu":0,"memory_limit":10,"memory_request":11}]})",
      R"({"name":"a","devices":[{"gpu":0,"memory_limit":10,"compute":0}]})",
      R"({"name":"a","devices":[{"gpu":0,"memory_limit":10,"compute":10001}]})",
      R"({"name":"a","devices":[{"gpu":0,"memory_limit":10,"compute_limit":101}]})",
      R"({"name":"a","devices":[{"gpu":0,"memory_limit":10,"priority":"urgent"}]})",
      R"({"name":"a","devices":[{"gpu":0,"memory_limit":10,"priority":2}]})",
      R"({"name":"a","devices":[{"gpu":0,"memory_limit":10,"memory_limt":5}]})",
      R"({"name":"a","devices":[{"gpu":0,"memory_limit":10},{"gpu":0,"memory_limit":10}]})",
      R"({"name":"a","extra":1,"devices":[{"gpu":0,"memory_limit":10}]})",
  };
  for (const char* text : bad) {
    auto spec = tenant_spec_from_json(json::parse(text));
    EXPECT_FALSE(spec.ok()) << text;
    if (!spec.ok()) {
      EXPECT_FALSE(spec.error().empty());
    }
  }
}

TEST(TenantSpecJson, RoundTrip) {
  auto spec = tenant_spec_from_json(json::parse(
      R"({"name":"c","devices":[{"gpu":0,"memory_limit":100,"memory_request":50,"compute":7,"priority":"low","uuid":"GPU-1"},{"gpu":2,"memory_limit":9}]})"));
  ASSERT_TRUE(spec.ok()) << spec.error();
  auto again = tenant_spec_from_json(tenant_spec_to_json(*spec));
  ASSERT_TRUE(again.ok()) << again.error();
  EXPECT_EQ(*spec, *again);
}

TEST(TenantUpdate, ChangesOnlyGivenFields) {
  auto spec = tenant_spec_from_json(json::parse(
      R"({"name":"a","devices":[{"gpu":0,"memory_limit":100,"memory_request":60,"compute":30}]})"));
  ASSERT_TRUE(spec.ok());
  auto updated = apply_tenant_update(
      *spec, json::parse(R"({"name":"a","devices":[{"gpu":0,"memory_limit":200}]})"));
  ASSERT_TRUE(updated.ok()) << updated.error();
  EXPECT_EQ(updated->devices[0].memory_limit, 200u);
  EXPECT_EQ(updated->devices[0].memory_request, 60u);  // kept
  EXPECT_EQ(updated->devices[0].compute, 30u);         // kept

  auto lowered = apply_tenant_update(
      *spec, json::parse(R"({"name":"a","devices":[{"gpu":0,"memory_limit":40}]})"));
  ASSERT_TRUE(lowered.ok()) << lowered.error();
  EXPECT_EQ(lowered->devices[0].memory_request, 40u);  // follows a limit that drops below it
}

TEST(TenantUpdate, AddsGpusAndValidates) {
  auto spec = tenant_spec_from_json(
      json::parse(R"({"name":"a","devices":[{"gpu":0,"memory_limit":100}]})"));
  ASSERT_TRUE(spec.ok());
  auto added = apply_tenant_update(
      *spec, json::parse(R"({"name":"a","devices":[{"gpu":1,"memory_limit":7}]})"));
  ASSERT_TRUE(added.ok()) << added.error();
  ASSERT_EQ(added->devices.size(), 2u);
  EXPECT_EQ(added->devices[1].memory_request, 7u);
  EXPECT_FALSE(
      apply_tenant_update(*spec, json::parse(R"({"name":"a","devices":[{"gpu":1}]})")).ok());
  EXPECT_FALSE(apply_tenant_update(
                   *spec, json::parse(R"({"name":"a","devices":[{"gpu":0,"memory_request":101}]})"))
                   .ok());
  EXPECT_FALSE(
      apply_tenant_update(*spec, json::parse(R"({"name":"a","devices":[{"gpu":0,"compute":"x"}]})"))
          .ok());
}

TEST(TenantOwners, ParsedValidatedAndKept) {
  auto none =
      tenant_spec_from_json(json::parse(R"({"name":"a","devices":[{"gpu":0,"memory_limit":1}]})"));
  ASSERT_TRUE(none.ok()) << none.error();
  EXPECT_TRUE(none->owners.empty());
  EXPECT_FALSE(none->has_owners());
  EXPECT_EQ(tenant_spec_to_json(*none)["owners"], json::array());

  auto spec = tenant_spec_from_json(json::parse(
      R"({"name":"a","owners":[1000,0,4294967294],"devices":[{"gpu":0,"memory_limit":1}]})"));
  ASSERT_TRUE(spec.ok()) << spec.error();
  EXPECT_EQ(spec->owners, (std::vector<uint32_t>{1000, 0, 4294967294u}));
  EXPECT_TRUE(spec->has_owners());
  EXPECT_TRUE(spec->owned_by(1000));
  EXPECT_TRUE(spec->owned_by(4294967294u));
  EXPECT_FALSE(spec->owned_by(1001));
  const json persisted = tenant_spec_to_json(*spec);  // also tenants.json's form
  EXPECT_EQ(persisted["owners"], json::parse("[1000,0,4294967294]"));
  auto again = tenant_spec_from_json(persisted);
  ASSERT_TRUE(again.ok()) << again.error();
  EXPECT_EQ(*again, *spec);

  std::string many = "[";
  for (int i = 0; i < 64; ++i) many += (i ? "," : "") + std::to_string(1000 + i);
  auto sixty_four = tenant_spec_from_json(json::parse(
      R"({"name":"a","owners":)" + many + R"(],"devices":[{"gpu":0,"memory_limit":1}]})"));
  EXPECT_TRUE(sixty_four.ok()) << sixty_four.error();
  EXPECT_EQ(sixty_four->owners.size(), 64u);
}

TEST(TenantOwners, BadOwnersAreRefusedWithTheReason) {
  std::string too_many = "[";
  for (int i = 0; i < 65; ++i) too_many += (i ? "," : "") + std::to_string(1000 + i);
  too_many += "]";
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"\"1000\"", "must be an array"},
      {"1000", "must be an array"},
      {"[\"alice\"]", "owners[0] must be a numeric uid"},
      {"[1000,-1]", "owners[1] must not be negative"},
      {"[4294967295]", "is not a uid"},
      {"[99999999999]", "is not a uid"},
      {"[1.5]", "must be a numeric uid"},
      {"[null]", "must be a numeric uid"},
      {"[1000,1001,1000]", "uid 1000 is listed twice"},
      {too_many, "at most 64"},
  };
  for (const auto& [owners, reason] : bad) {
    auto spec = tenant_spec_from_json(json::parse(R"({"name":"a","owners":)" + owners +
                                                  R"(,"devices":[{"gpu":0,"memory_limit":1}]})"));
    ASSERT_FALSE(spec.ok()) << owners;
    EXPECT_NE(spec.error().find(reason), std::string::npos) << owners << ": " << spec.error();
    // The same rules in an update.
    auto base = tenant_spec_from_json(
        json::parse(R"({"name":"a","owners":[7],"devices":[{"gpu":0,"memory_limit":1}]})"));
    ASSERT_TRUE(base.ok());
    auto updated =
        apply_tenant_update(*base, json::parse(R"({"name":"a","owners":)" + owners + "}"));
    ASSERT_FALSE(updated.ok()) << owners;
    EXPECT_NE(updated.error().find(reason), std::string::npos) << updated.error();
  }
}

TEST(TenantOwners, UpdateChangesOwnersButNotTheTenantsKind) {
  auto owned = tenant_spec_from_json(
      json::parse(R"({"name":"a","owners":[1000],"devices":[{"gpu":0,"memory_limit":1}]})"));
  ASSERT_TRUE(owned.ok());
  auto kept = apply_tenant_update(
      *owned, json::parse(R"({"name":"a","devices":[{"gpu":0,"memory_limit":2}]})"));
  ASSERT_TRUE(kept.ok()) << kept.error();
  EXPECT_EQ(kept->owners, std::vector<uint32_t>{1000});  // not given: unchanged
  auto changed = apply_tenant_update(*owned, json::parse(R"({"name":"a","owners":[1001,1002]})"));
  ASSERT_TRUE(changed.ok()) << changed.error();
  EXPECT_EQ(changed->owners, (std::vector<uint32_t>{1001, 1002}));
  EXPECT_EQ(changed->devices, owned->devices);

  auto emptied = apply_tenant_update(*owned, json::parse(R"({"name":"a","owners":[]})"));
  ASSERT_FALSE(emptied.ok());
  EXPECT_NE(emptied.error().find("cannot lose all its owners"), std::string::npos)
      << emptied.error();

  auto pod =
      tenant_spec_from_json(json::parse(R"({"name":"p","devices":[{"gpu":0,"memory_limit":1}]})"));
  ASSERT_TRUE(pod.ok());
  auto given = apply_tenant_update(*pod, json::parse(R"({"name":"p","owners":[1000]})"));
  ASSERT_FALSE(given.ok());
  EXPECT_NE(given.error().find("has no owners"), std::string::npos) << given.error();
  EXPECT_NE(given.error().find("delete it and create it again"), std::string::npos);
  auto still_none = apply_tenant_update(*pod, json::parse(R"({"name":"p","owners":[]})"));
  EXPECT_TRUE(still_none.ok()) << still_none.error();
}

// The "pod" object of a TENANT: Kubernetes name rules, all three names or none.
json with_pod(const json& pod) {
  json t = json::parse(R"({"name":"s-1a2b3c4d-3","devices":[{"gpu":0,"memory_limit":1}]})");
  t["pod"] = pod;
  return t;
}

TEST(TenantPod, ParsedAndWrittenOnlyWhenKnown) {
  auto none = tenant_spec_from_json(with_pod(json::object()));
  ASSERT_TRUE(none.ok()) << none.error();
  EXPECT_TRUE(none->pod.empty());
  EXPECT_FALSE(tenant_spec_to_json(*none).contains("pod"));  // outside Kubernetes: absent

  const json pod = {
      {"namespace", "ml-team"}, {"pod", "trainer-7d9f8.job-0"}, {"container", "main"}};
  auto spec = tenant_spec_from_json(with_pod(pod));
  ASSERT_TRUE(spec.ok()) << spec.error();
  EXPECT_EQ(spec->pod, (PodIdentity{"ml-team", "trainer-7d9f8.job-0", "main"}));
  const json persisted = tenant_spec_to_json(*spec);  // also tenants.json's form
  EXPECT_EQ(persisted["pod"], pod);
  auto again = tenant_spec_from_json(persisted);
  ASSERT_TRUE(again.ok()) << again.error();
  EXPECT_EQ(*again, *spec);

  // The longest names Kubernetes allows.
  const std::string label(63, 'a');
  std::string subdomain = std::string(63, 'b') + "." + std::string(63, 'c') + "." +
                          std::string(63, 'd') + "." + std::string(61, 'e');
  ASSERT_EQ(subdomain.size(), 253u);
  auto longest = tenant_spec_from_json(
      with_pod({{"namespace", label}, {"pod", subdomain}, {"container", label}}));
  EXPECT_TRUE(longest.ok()) << longest.error();
}

TEST(TenantPod, BadNamesAndShapesAreRefusedWithTheReason) {
  const std::string label(63, 'a');
  const std::string subdomain(253, 'p');
  const std::vector<std::pair<json, std::string>> bad = {
      {"ml/main", "\"pod\" must be an object"},
      {json::array(), "\"pod\" must be an object"},
      {{{"namespace", "a"}, {"pod", "b"}, {"container", "c"}, {"uid", "x"}},
       "unknown field \"uid\""},
      {{{"namespace", "a"}, {"pod", "b"}}, "pod.container is missing"},
      {{{"pod", "b"}, {"container", "c"}}, "pod.namespace is missing"},
      {{{"namespace", "a"}, {"container", "c"}}, "pod.pod is missing"},
      {{{"namespace", ""}, {"pod", "b"}, {"container", "c"}}, "pod.namespace"},
      {{{"namespace", "a"}, {"pod", ""}, {"container", "c"}}, "pod.pod"},
      {{{"namespace", "a"}, {"pod", "b"}, {"container", ""}}, "pod.container"},
      {{{"namespace", 7}, {"pod", "b"}, {"container", "c"}}, "pod.namespace must be"},
      {{{"namespace", "Team"}, {"pod", "b"}, {"container", "c"}}, "DNS-1123 label"},
      {{{"namespace", "a.b"}, {"pod", "b"}, {"container", "c"}}, "DNS-1123 label"},
      {{{"namespace", "-a"}, {"pod", "b"}, {"container", "c"}}, "DNS-1123 label"},
      {{{"namespace", label + "a"}, {"pod", "b"}, {"container", "c"}}, "at most 63"},
      {{{"namespace", "a"}, {"pod", "b"}, {"container", "c_1"}}, "pod.container \"c_1\""},
      {{{"namespace", "a"}, {"pod", "b"}, {"container", "c-"}}, "DNS-1123 label"},
      {{{"namespace", "a"}, {"pod", subdomain + "p"}, {"container", "c"}}, "at most 253"},
      {{{"namespace", "a"}, {"pod", "b..c"}, {"container", "c"}}, "DNS-1123 subdomain"},
      {{{"namespace", "a"}, {"pod", ".b"}, {"container", "c"}}, "DNS-1123 subdomain"},
      {{{"namespace", "a"}, {"pod", "b."}, {"container", "c"}}, "DNS-1123 subdomain"},
      {{{"namespace", "a"}, {"pod", "B"}, {"container", "c"}}, "DNS-1123 subdomain"},
      {{{"namespace", "a"}, {"pod", "b\nc"}, {"container", "c"}}, "DNS-1123 subdomain"},
      {{{"namespace", "a"}, {"pod", std::string(64, 'x')}, {"container", "c"}},
       "DNS-1123 subdomain"},  // each label of a subdomain is at most 63, too
  };
  auto base = tenant_spec_from_json(with_pod(json::object()));
  ASSERT_TRUE(base.ok());
  for (const auto& [pod, reason] : bad) {
    auto spec = tenant_spec_from_json(with_pod(pod));
    ASSERT_FALSE(spec.ok()) << pod.dump();
    EXPECT_NE(spec.error().find(reason), std::string::npos) << pod.dump() << ": " << spec.error();
    auto updated = apply_tenant_update(*base, json{{"name", base->name}, {"pod", pod}});
    ASSERT_FALSE(updated.ok()) << pod.dump();
    EXPECT_NE(updated.error().find(reason), std::string::npos) << updated.error();
  }
}

TEST(TenantPod, UpdateSetsReplacesKeepsAndClears) {
  auto spec = tenant_spec_from_json(with_pod(json::object()));
  ASSERT_TRUE(spec.ok());
  const std::string name = spec->name;
  auto set = apply_tenant_update(
      *spec,
      json{{"name", name}, {"pod", {{"namespace", "a"}, {"pod", "p1"}, {"container", "c"}}}});
  ASSERT_TRUE(set.ok()) << set.error();
  EXPECT_EQ(set->pod, (PodIdentity{"a", "p1", "c"}));
  EXPECT_EQ(set->devices, spec->devices);  // a pod-only update changes nothing else

  auto replaced = apply_tenant_update(
      *set, json{{"name", name}, {"pod", {{"namespace", "b"}, {"pod", "p2"}, {"container", "d"}}}});
  ASSERT_TRUE(replaced.ok()) << replaced.error();
  EXPECT_EQ(replaced->pod, (PodIdentity{"b", "p2", "d"}));

  // Not given (the plugin's quota update of a restarted container): kept.
  auto kept = apply_tenant_update(
      *replaced, json::parse(R"({"name":"s-1a2b3c4d-3","devices":[{"gpu":0,"memory_limit":2}]})"));
  ASSERT_TRUE(kept.ok()) << kept.error();
  EXPECT_EQ(kept->pod, replaced->pod);
  EXPECT_EQ(kept->devices[0].memory_limit, 2u);

  auto cleared = apply_tenant_update(*kept, json{{"name", name}, {"pod", json::object()}});
  ASSERT_TRUE(cleared.ok()) << cleared.error();
  EXPECT_TRUE(cleared->pod.empty());
  EXPECT_FALSE(tenant_spec_to_json(*cleared).contains("pod"));
}

}  // namespace
}  // namespace fracgpu::broker
