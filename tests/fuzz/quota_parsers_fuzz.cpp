// Fuzzer of the quantity and quota parsers: every input goes, as text, to parse_size and
// parse_size_allow_zero (--memory, --memory-request, --reserve ...), parse_percent
// (--compute), parse_priority and validate_tenant_name, and, when it is JSON, to
// tenant_spec_from_json (admin "create", tenants.json entries) and apply_tenant_update
// (admin "update") over two existing tenants. Checked, besides never throwing:
//  sizes     the two size parsers agree; a size re-parses from its plain bytes, from the
//            text padded with spaces and upper-cased; format_size prints it as a size that
//            parses back exactly when printed exactly, else within the 0.1 unit printed;
//  percents  1..100, and "N%" parses back to N;
//  specs     every field within its documented range, an update keeps the name and the
//            owners' kind, and a spec's persisted form reads back as the same spec.
// Seeds: corpus/quota_parsers/ (sizes and shares users type, tenant definitions).
#include <algorithm>
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <set>

#include "core/quantity_parser.h"
#include "core/tenant_spec.h"
#include "fuzz_support.h"

namespace {

using namespace fracgpu;
using broker::TenantSpec;
using nlohmann::json;

void check_size(std::string_view text) {
  auto strict = broker::parse_size(text, "--memory");
  auto zero_ok = broker::parse_size_allow_zero(text, "--memory");
  if (!zero_ok) {
    FUZZ_CHECK(!strict, "parse_size accepts what parse_size_allow_zero refuses");
    FUZZ_CHECK(zero_ok.error().rfind("--memory", 0) == 0, "an error must name the flag");
    return;
  }
  const uint64_t v = *zero_ok;
  FUZZ_CHECK(strict ? *strict == v : v == 0,
             "the two size parsers disagree on " + std::string(text));
  const std::string shown = "'" + std::string(text) + "' = " + std::to_string(v);
  auto plain = broker::parse_size_allow_zero(std::to_string(v), "x");
  FUZZ_CHECK(plain && *plain == v, shown + " does not re-parse from its plain bytes");
  auto padded = broker::parse_size_allow_zero(" " + std::string(text) + " ", "x");
  FUZZ_CHECK(padded && *padded == v, shown + " changes when padded with spaces");
  std::string upper(text);
  std::transform(upper.begin(), upper.end(), upper.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  auto upper_v = broker::parse_size_allow_zero(upper, "x");
  FUZZ_CHECK(upper_v && *upper_v == v, shown + " changes when upper-cased");

  const std::string printed = broker::format_size(v);
  auto again = broker::parse_size_allow_zero(printed, "x");
  if (printed.find('.') == std::string::npos) {
    FUZZ_CHECK(again && *again == v, shown + " prints as '" + printed + "', which is not it");
    return;
  }
  // "%.1f <unit>": a tenth of the unit at most (and the decimal's own rounding).
  uint64_t unit = 1;
  while (unit < (1ull << 40) && v >= unit * 1024) unit *= 1024;
  if (!again) {
    FUZZ_CHECK(again.error().find("too large") != std::string::npos,
               shown + " prints as '" + printed + "', which does not parse: " + again.error());
    return;
  }
  const uint64_t diff = *again > v ? *again - v : v - *again;
  FUZZ_CHECK(diff <= unit / 20 + unit / 1000 + 1,
             shown + " prints as '" + printed + "' = " + std::to_string(*again));
}

void check_percent(std::string_view text) {
  auto p = broker::parse_percent(text, "--compute");
  if (!p) {
    FUZZ_CHECK(p.error().rfind("--compute", 0) == 0, "an error must name the flag");
    return;
  }
  FUZZ_CHECK(*p >= 1 && *p <= 100, "a share outside 1..100: " + std::to_string(*p));
  auto again = broker::parse_percent(std::to_string(*p) + "%", "x");
  FUZZ_CHECK(again && *again == *p, "a share does not re-parse as N%");
}

void check_names(std::string_view text) {
  if (auto p = broker::parse_priority(text))
    FUZZ_CHECK(broker::priority_name(*p) == text, "a priority prints differently");
  if (!broker::validate_tenant_name(text)) return;
  FUZZ_CHECK(!text.empty() && text.size() < kTenantNameSize, "a tenant name of a bad length");
  for (char c : text) {
    FUZZ_CHECK((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-',
               "a tenant name with a character outside [a-z0-9._-]");
  }
}

void check_spec(const TenantSpec& spec, const std::string& how) {
  const std::string who = how + " of tenant '" + spec.name + "': ";
  FUZZ_CHECK(broker::validate_tenant_name(spec.name).ok(), who + "a bad name");
  FUZZ_CHECK(!spec.devices.empty() && spec.devices.size() <= kMaxDevices, who + "device count");
  FUZZ_CHECK(spec.owners.size() <= broker::kMaxOwners, who + "too many owners");
  FUZZ_CHECK(
      std::set<uint32_t>(spec.owners.begin(), spec.owners.end()).size() == spec.owners.size(),
      who + "an owner listed twice");
  std::set<uint32_t> gpus;
  bool available = false;
  for (const broker::DeviceSpec& d : spec.devices) {
    FUZZ_CHECK(d.gpu < kMaxDevices && gpus.insert(d.gpu).second, who + "GPU index");
    available = available || d.memory_limit == broker::kMemoryLimitAvailable;
    FUZZ_CHECK(
        d.memory_limit == broker::kMemoryLimitAvailable || d.memory_request <= d.memory_limit,
        who + "request above the limit");
    FUZZ_CHECK(d.compute >= 1 && d.compute <= broker::kMaxComputeWeight, who + "compute weight");
    FUZZ_CHECK(d.compute_limit <= 100, who + "compute ceiling");
    FUZZ_CHECK(d.priority != PriorityClass::kHigh || d.compute_limit == 0,
               who + "a ceiling on a high tenant");
    FUZZ_CHECK(d.uuid.size() < kUuidSize, who + "uuid length");
  }
  if (available) return;  // "available" is filled in by admission before it is ever persisted
  const json persisted = broker::tenant_spec_to_json(spec);
  auto again = broker::tenant_spec_from_json(persisted);
  FUZZ_CHECK(again && *again == spec, who + "its persisted form " + persisted.dump() +
                                          " does not read back as the same spec");
}

// The tenants updates apply to: one with owners on two GPUs, one without on GPU 0.
const std::vector<TenantSpec>& existing_tenants() {
  static const std::vector<TenantSpec> specs = [] {
    std::vector<TenantSpec> out;
    for (
        const char* text :
        {R"({"name":"team-a","owners":[1000,1001],"devices":[{"gpu":0,"memory_limit":8589934592,"memory_request":1073741824,"compute":30},{"gpu":1,"memory_limit":4294967296,"priority":"high"}]})",
         R"({"name":"s-3fa01c22-c","devices":[{"gpu":0,"memory_limit":2147483648,"swap":"allow"}],"pod":{"namespace":"ml","pod":"train-0","container":"main"}})"}) {
      auto spec = broker::tenant_spec_from_json(json::parse(text));
      if (!spec) fuzz::fail("a fixed tenant does not parse: " + spec.error());
      out.push_back(*spec);
    }
    return out;
  }();
  return specs;
}

void check_tenant_json(const json& j) {
  if (auto spec = broker::tenant_spec_from_json(j)) check_spec(*spec, "create");
  for (const TenantSpec& current : existing_tenants()) {
    auto updated = broker::apply_tenant_update(current, j);
    if (!updated) continue;
    check_spec(*updated, "update");
    FUZZ_CHECK(updated->name == current.name, "an update renamed a tenant");
    FUZZ_CHECK(updated->owners.empty() == current.owners.empty(),
               "an update changed whether the tenant has owners");
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::quiet_logging();
  existing_tenants();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const std::string_view text = fuzz::as_text(data, size);
  try {
    check_size(text);
    check_percent(text);
    check_names(text);
    const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return 0;
    check_tenant_json(j);
    if (j.is_object() && j.contains("tenant")) check_tenant_json(j["tenant"]);
  } catch (const std::exception& e) {
    fuzz::fail(std::string("a parser threw: ") + e.what());
  }
  return 0;
}
