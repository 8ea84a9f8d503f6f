// Fuzzer of the device plugin's kubelet requests: the input is a serialised protobuf,
// parsed (ParseFromArray) both as a v1beta1 AllocateRequest and as a
// PreferredAllocationRequest — the two share their layout up to the device ID lists — and
// handed to DevicePluginService::Allocate and ::GetPreferredAllocation of every slice
// class (normal, high, best effort: 8 slices per GPU, 2 of them high, 4 best-effort
// ones), without a gRPC server. Allocate talks to a broker: a real AdminServer on
// <scratch>/run/admin.sock, served by an event loop thread over FuzzAdminBackend (two
// simulated GPUs), so plan_allocation, ensure_tenant (list, create or update, the stale
// tenant clean-up) and fill_container_response all run as in production. Checked:
//  Allocate  refusals are "fracgpu: <sentence>"; an answer has one response per
//            container, the shim, preload and tenant directory mounted read-only (the
//            directory the broker's, under its run directory), the GPU one of the
//            node's, and the tenant it names served by the broker, within admission
//            (unless another container of the request shares its slices: then it may
//            wait for its start);
//  PreStartContainer, for each container in order: a refusal with its sentence, or
//            the container's tenant served;
//  Preferred exactly min(size, distinct candidates) distinct IDs, all of must_include
//            among them, nothing that was not offered, and all on one GPU when nothing
//            is pinned and one GPU can hold the request (best fit).
// Each input starts on a node without tenants. Seeds: corpus/device_plugin/ (requests
// as the kubelet sends them, made by make_device_plugin_seeds.py).
#include <google/protobuf/stubs/logging.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <thread>

#include "core/admin_server.h"
#include "core/event_loop.h"
#include "device_plugin/device_plugin_service.h"
#include "device_plugin/plugin_config.h"
#include "device_plugin/resource_class.h"
#include "device_plugin/slice_ids.h"
#include "fuzz_admin_backend.h"
#include "fuzz_support.h"

namespace {

using namespace fracgpu;

struct Harness {
  broker::EventLoop loop;
  fuzz::FuzzAdminBackend backend{fuzz::scratch_dir()};
  broker::AdminServer server{loop, backend, ::geteuid()};
  k8s::BrokerAdmin broker{backend.run_dir().string(), k8s::RetryPolicy{.attempts = 1}};
  k8s::PluginConfig config;
  k8s::SliceInventory inventory;
  // Each input starts with no container allocated and none started: a fresh set of marks
  // (pending_starts.h) and the services that share it.
  std::unique_ptr<k8s::PendingStarts> pending;
  std::vector<std::unique_ptr<k8s::DevicePluginService>> services;

  void fresh_services() {
    services.clear();
    pending = std::make_unique<k8s::PendingStarts>();
    for (auto& cls : k8s::resource_classes(config))
      services.push_back(
          std::make_unique<k8s::DevicePluginService>(config, cls, inventory, broker, *pending));
  }

  Harness() {
    if (auto s = server.listen(backend.run_dir() / "admin.sock"); !s) fuzz::fail(s.error());
    std::thread([this] { loop.run(); }).detach();  // serves until the process exits
    config.broker_run_dir = backend.run_dir().string();
    config.high_slices = 2;
    config.besteffort_slices = 4;
    if (auto s = k8s::validate(config); !s) fuzz::fail(s.error());
    if (!inventory.refresh(broker)) fuzz::fail("the plugin cannot read the broker's GPUs");
    fresh_services();
  }
};

Harness& harness() {
  static Harness* h = new Harness();  // never destroyed: the loop thread outlives main
  return *h;
}

// Whether another container of the request holds a slice the i-th holds.
bool overlapped(const v1beta1::AllocateRequest& request, int i) {
  std::set<std::pair<std::string, int>> mine;
  for (const auto& id : request.container_requests(i).devices_ids())
    if (auto s = k8s::parse_slice_id(id)) mine.insert({s->gpu_uuid, s->index});
  for (int j = 0; j < request.container_requests_size(); ++j) {
    if (j == i) continue;
    for (const auto& id : request.container_requests(j).devices_ids()) {
      auto s = k8s::parse_slice_id(id);
      if (s && mine.count({s->gpu_uuid, s->index})) return true;
    }
  }
  return false;
}

void check_container(Harness& h, const v1beta1::ContainerAllocateResponse& r, bool served) {
  FUZZ_CHECK(r.mounts_size() == 3, "a container response without its three mounts");
  for (const auto& m : r.mounts()) FUZZ_CHECK(m.read_only(), "a writable mount " + m.host_path());
  const std::filesystem::path dir = r.mounts(2).host_path();
  const std::string tenant = r.annotations().at("fracgpu.io/tenant");
  FUZZ_CHECK(dir.parent_path().parent_path() == h.backend.run_dir() && dir.filename() == tenant,
             "tenant directory " + dir.string() + " is not the broker's for " + tenant);
  FUZZ_CHECK(!served || h.backend.registry().find(tenant) != nullptr,
             "tenant " + tenant + " is not served");
  const std::string gpu = r.envs().at("NVIDIA_VISIBLE_DEVICES");
  bool known = false;
  for (const auto& g : h.backend.gpus().gpus) known = known || g.uuid == gpu;
  FUZZ_CHECK(known, "the container is given an unknown GPU " + gpu);
}

void allocate(Harness& h, const v1beta1::AllocateRequest& request) {
  for (auto& service : h.services) {
    v1beta1::AllocateResponse response;
    const grpc::Status status = service->Allocate(nullptr, &request, &response);
    if (!status.ok()) {
      FUZZ_CHECK(
          status.error_message().rfind("fracgpu: ", 0) == 0 && status.error_message().size() > 9,
          "a refusal without its sentence: " + status.error_message());
      continue;
    }
    FUZZ_CHECK(response.container_responses_size() == request.container_requests_size(),
               "not one response per container");
    for (int i = 0; i < response.container_responses_size(); ++i) {
      // A container whose slices another container of the request holds too may wait for
      // its tenant until its start (ensure_tenant: deferred behind a holder not started
      // yet): only the others must be served now.
      check_container(h, response.container_responses(i), !overlapped(request, i));
    }
    h.backend.check_books();
    // The containers start in order, as the kubelet starts a pod's (init containers
    // first): PreStartContainer either refuses with a sentence or leaves the container's
    // tenant served.
    for (int i = 0; i < request.container_requests_size(); ++i) {
      v1beta1::PreStartContainerRequest start;
      *start.mutable_devices_ids() = request.container_requests(i).devices_ids();
      v1beta1::PreStartContainerResponse started;
      const grpc::Status s = service->PreStartContainer(nullptr, &start, &started);
      if (!s.ok()) {
        FUZZ_CHECK(s.error_message().rfind("fracgpu: ", 0) == 0 && s.error_message().size() > 9,
                   "a refused start without its sentence: " + s.error_message());
        continue;
      }
      const std::string tenant =
          response.container_responses(i).annotations().at("fracgpu.io/tenant");
      FUZZ_CHECK(h.backend.registry().find(tenant) != nullptr,
                 "tenant " + tenant + " is not served after its container's start");
    }
    h.backend.check_books();
  }
}

void check_preferred(const v1beta1::ContainerPreferredAllocationRequest& c,
                     const v1beta1::ContainerPreferredAllocationResponse& r) {
  const std::set<std::string> must(c.must_include_deviceids().begin(),
                                   c.must_include_deviceids().end());
  std::set<std::string> offered(c.available_deviceids().begin(), c.available_deviceids().end());
  offered.insert(must.begin(), must.end());
  const std::set<std::string> chosen(r.deviceids().begin(), r.deviceids().end());
  FUZZ_CHECK(chosen.size() == static_cast<std::size_t>(r.deviceids_size()), "an ID chosen twice");
  for (const auto& id : must) FUZZ_CHECK(chosen.count(id), "must-include ID " + id + " left out");
  for (const auto& id : chosen) FUZZ_CHECK(offered.count(id), "ID " + id + " was not offered");
  const std::size_t size = static_cast<std::size_t>(std::max(0, c.allocation_size()));
  const std::size_t want = std::max(must.size(), std::min(size, offered.size()));
  FUZZ_CHECK(chosen.size() == want,
             "chose " + std::to_string(chosen.size()) + " IDs, not " + std::to_string(want));
  if (!must.empty() || chosen.size() <= must.size()) return;
  // Best fit: one GPU when some GPU was offered enough slices.
  std::map<std::string, std::size_t> free;
  for (const auto& id : offered)
    if (auto s = k8s::parse_slice_id(id)) ++free[s->gpu_uuid];
  bool fits = false;
  for (const auto& [gpu, n] : free) fits = fits || n >= size;
  if (!fits) return;
  std::set<std::string> gpus;
  for (const auto& id : chosen) {
    auto s = k8s::parse_slice_id(id);
    FUZZ_CHECK(s.has_value(), "an unparsable ID chosen while a GPU could hold the request");
    gpus.insert(s->gpu_uuid);
  }
  FUZZ_CHECK(gpus.size() == 1, "the request was split although one GPU could hold it");
}

void prefer(Harness& h, const v1beta1::PreferredAllocationRequest& request) {
  for (auto& service : h.services) {
    v1beta1::PreferredAllocationResponse response;
    const grpc::Status status = service->GetPreferredAllocation(nullptr, &request, &response);
    FUZZ_CHECK(status.ok(), "GetPreferredAllocation failed: " + status.error_message());
    FUZZ_CHECK(response.container_responses_size() == request.container_requests_size(),
               "not one answer per container");
    for (int i = 0; i < request.container_requests_size(); ++i)
      check_preferred(request.container_requests(i), response.container_responses(i));
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::quiet_logging();
  google::protobuf::SetLogHandler(nullptr);  // "invalid UTF-8" and the like: not findings
  harness();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  Harness& h = harness();
  const int length = static_cast<int>(std::min<std::size_t>(size, 1 << 20));
  v1beta1::AllocateRequest allocate_request;
  if (allocate_request.ParseFromArray(data, length)) allocate(h, allocate_request);
  v1beta1::PreferredAllocationRequest preferred_request;
  if (preferred_request.ParseFromArray(data, length)) prefer(h, preferred_request);
  h.backend.reset();
  h.fresh_services();
  return 0;
}
