// fracgpu-fake-kubelet: the kubelet's side of one container's device allocation, as a
// command, for runs without a cluster (tests/gpu/k8s/run_pod_checks.sh on a real GPU, and
// the k8s CI test that keeps this tool honest). It serves Registration on
// <plugin-dir>/kubelet.sock through the tests' FakeKubelet (fake_kubelet.h), waits for the
// plugin's registration(s), dials the endpoint registered for --resource, reads the first
// ListAndWatch list, asks GetPreferredAllocation for --count of the healthy IDs, calls
// Allocate with exactly the preferred IDs, then PreStartContainer with them where the plugin's
// registration asked for it — the kubelet's order of calls — and prints ONE
// JSON object on stdout:
//   {"resource", "endpoint", "devices": [healthy IDs], "preferred": [IDs],
//    "allocate": {"mounts": [{"container_path", "host_path", "read_only"}],
//                 "envs": {...}, "annotations": {...},
//                 "devices": [{"container_path", "host_path", "permissions"}],
//                 "cdi_devices": [names]}}
// Any failure (timeout, no such resource, too few healthy slices, an RPC error with the
// gRPC status and message) is one line on stderr and exit status 1; bad usage exits 2.
//
//   fracgpu-fake-kubelet --plugin-dir DIR --resource NAME --count K
//                        [--registrations N] [--timeout-s S] [--in-use ID,...]
//                        [--pre-start yes|no|only:ID,...]
// --in-use: slices other containers hold, left out of what GetPreferredAllocation is offered
// (the kubelet's device manager offers only unallocated ones): two pods get disjoint slices.
// --pre-start no: Allocate only, PreStartContainer left for a later run (the kubelet calls
// it right before creating the container, which may be after the plugin restarted);
// only:IDS: no ListAndWatch, no Allocate, just PreStartContainer for those IDs, printing
// {"resource", "endpoint", "pre_started": [IDS]}.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fake_kubelet.h"

namespace {

using fracgpu::testing::FakeKubelet;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string plugin_dir, resource;
  int count = 0;
  int registrations = 1;
  int timeout_s = 30;
  std::vector<std::string> in_use;
  std::string pre_start = "yes";           // yes | no | only
  std::vector<std::string> pre_start_ids;  // only:
};

std::vector<std::string> split_ids(const std::string& text) {
  std::vector<std::string> out;
  std::size_t from = 0;
  while (from <= text.size()) {
    const std::size_t comma = text.find(',', from);
    const std::string id = text.substr(from, comma == std::string::npos ? comma : comma - from);
    if (!id.empty()) out.push_back(id);
    if (comma == std::string::npos) break;
    from = comma + 1;
  }
  return out;
}

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(
      stderr,
      "fracgpu-fake-kubelet: %s\n"
      "usage: fracgpu-fake-kubelet --plugin-dir DIR --resource NAME --count K [--registrations N] "
      "[--timeout-s S] [--in-use ID,...] [--pre-start yes|no|only:ID,...]\n",
      why.c_str());
  std::exit(2);
}

// _Exit: the kubelet's gRPC server may still be running, and its threads must not meet
// static destructors on the way out.
[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "fracgpu-fake-kubelet: %s\n", what.c_str());
  std::fflush(stderr);
  std::_Exit(1);
}

int positive(const std::string& flag, const char* text) {
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || value < 1 || value > 1000000)
    usage(flag + " needs a whole number >= 1");
  return static_cast<int>(value);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) usage("missing value after " + arg);
    const char* value = argv[++i];
    if (arg == "--plugin-dir") {
      o.plugin_dir = value;
    } else if (arg == "--resource") {
      o.resource = value;
    } else if (arg == "--count") {
      o.count = positive(arg, value);
    } else if (arg == "--registrations") {
      o.registrations = positive(arg, value);
    } else if (arg == "--timeout-s") {
      o.timeout_s = positive(arg, value);
    } else if (arg == "--in-use") {
      o.in_use = split_ids(value);
    } else if (arg == "--pre-start") {
      const std::string v = value;
      if (v == "yes" || v == "no") {
        o.pre_start = v;
      } else if (v.rfind("only:", 0) == 0 && !split_ids(v.substr(5)).empty()) {
        o.pre_start = "only";
        o.pre_start_ids = split_ids(v.substr(5));
      } else {
        usage("--pre-start needs yes, no or only:ID,...");
      }
    } else {
      usage("unknown argument " + arg);
    }
  }
  if (o.plugin_dir.empty() || o.resource.empty() || (o.count == 0 && o.pre_start != "only"))
    usage("--plugin-dir, --resource and --count are required");
  return o;
}

std::string describe(const grpc::Status& status) {
  static const char* const kCodes[] = {"OK",
                                       "CANCELLED",
                                       "UNKNOWN",
                                       "INVALID_ARGUMENT",
                                       "DEADLINE_EXCEEDED",
                                       "NOT_FOUND",
                                       "ALREADY_EXISTS",
                                       "PERMISSION_DENIED",
                                       "RESOURCE_EXHAUSTED",
                                       "FAILED_PRECONDITION",
                                       "ABORTED",
                                       "OUT_OF_RANGE",
                                       "UNIMPLEMENTED",
                                       "INTERNAL",
                                       "UNAVAILABLE",
                                       "DATA_LOSS",
                                       "UNAUTHENTICATED"};
  const int code = status.error_code();
  const std::string name = code >= 0 && code <= 16 ? kCodes[code] : std::to_string(code);
  return name + ": " + status.error_message();
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  const auto deadline = Clock::now() + std::chrono::seconds(o.timeout_s);
  // What is left of the overall limit, as a gRPC deadline.
  const auto rpc_deadline = [&] {
    return std::chrono::system_clock::now() +
           std::chrono::duration_cast<std::chrono::system_clock::duration>(deadline - Clock::now());
  };

  std::error_code ec;
  std::filesystem::create_directories(o.plugin_dir, ec);
  if (ec) fail("cannot create the plugin directory " + o.plugin_dir + ": " + ec.message());
  FakeKubelet kubelet(o.plugin_dir);
  // FakeKubelet does not report a failed listen; the socket's absence does.
  if (!std::filesystem::is_socket(kubelet.socket_path(), ec))
    fail("could not serve " + kubelet.socket_path());

  const auto registrations = kubelet.registration().wait_for(
      static_cast<std::size_t>(o.registrations),
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
  std::string endpoint, registered;
  bool pre_start = false;
  for (const auto& r : registrations) {
    registered += (registered.empty() ? "" : ", ") + r.resource_name() + " at " + r.endpoint();
    if (r.resource_name() == o.resource && endpoint.empty()) {
      endpoint = r.endpoint();
      pre_start = r.options().pre_start_required();
    }
  }
  if (registrations.size() < static_cast<std::size_t>(o.registrations)) {
    fail("timed out after " + std::to_string(o.timeout_s) + " s waiting for " +
         std::to_string(o.registrations) + " registration(s) on " + kubelet.socket_path() +
         "; got " + std::to_string(registrations.size()) +
         (registered.empty() ? "" : " (" + registered + ")"));
  }
  if (endpoint.empty())
    fail("no registration for resource " + o.resource + "; registered: " + registered);
  auto stub = kubelet.dial(endpoint);
  // PreStartContainer with the container's IDs, as the kubelet calls it right before it
  // creates the container (which the caller of this tool does next). Only to a plugin that
  // asked for it at registration.
  const auto pre_start_container = [&](const nlohmann::json& ids) {
    if (!pre_start) return;
    v1beta1::PreStartContainerRequest request;
    for (const auto& id : ids) request.add_devices_ids(id.get<std::string>());
    v1beta1::PreStartContainerResponse started;
    grpc::ClientContext context;
    context.set_deadline(rpc_deadline());
    const grpc::Status status = stub->PreStartContainer(&context, request, &started);
    if (!status.ok()) fail("PreStartContainer " + ids.dump() + " failed: " + describe(status));
  };
  if (o.pre_start == "only") {
    if (!pre_start) fail("the plugin did not ask for PreStartContainer at registration");
    const nlohmann::json ids = o.pre_start_ids;
    pre_start_container(ids);
    std::cout << nlohmann::json{{"resource", o.resource},
                                {"endpoint", endpoint},
                                {"pre_started", ids}}
                     .dump()
              << std::endl;
    return 0;
  }

  // The first ListAndWatch list: the slices the kubelet would know about.
  nlohmann::json devices = nlohmann::json::array();
  {
    grpc::ClientContext context;
    context.set_deadline(rpc_deadline());
    auto stream = stub->ListAndWatch(&context, v1beta1::Empty());
    v1beta1::ListAndWatchResponse list;
    if (!stream->Read(&list))
      fail("ListAndWatch on " + endpoint + " ended before a list: " + describe(stream->Finish()));
    for (const auto& device : list.devices()) {
      if (device.health() == "Healthy" &&
          std::find(o.in_use.begin(), o.in_use.end(), device.id()) == o.in_use.end())
        devices.push_back(device.id());
    }
    context.TryCancel();
  }
  if (devices.size() < static_cast<std::size_t>(o.count)) {
    fail(o.resource + ": " + std::to_string(devices.size()) + " healthy slice(s) listed, " +
         std::to_string(o.count) + " wanted");
  }

  nlohmann::json preferred = nlohmann::json::array();
  {
    v1beta1::PreferredAllocationRequest request;
    auto* container = request.add_container_requests();
    for (const auto& id : devices) container->add_available_deviceids(id.get<std::string>());
    container->set_allocation_size(o.count);
    v1beta1::PreferredAllocationResponse response;
    grpc::ClientContext context;
    context.set_deadline(rpc_deadline());
    const grpc::Status status = stub->GetPreferredAllocation(&context, request, &response);
    if (!status.ok()) fail("GetPreferredAllocation failed: " + describe(status));
    if (response.container_responses_size() != 1)
      fail("GetPreferredAllocation answered for no container");
    for (const auto& id : response.container_responses(0).deviceids()) preferred.push_back(id);
  }
  if (preferred.size() != static_cast<std::size_t>(o.count)) {
    fail("GetPreferredAllocation preferred " + std::to_string(preferred.size()) + " slice(s), " +
         std::to_string(o.count) + " asked: " + preferred.dump());
  }

  v1beta1::AllocateResponse response;
  {
    v1beta1::AllocateRequest request;
    auto* container = request.add_container_requests();
    for (const auto& id : preferred) container->add_devices_ids(id.get<std::string>());
    grpc::ClientContext context;
    context.set_deadline(rpc_deadline());
    const grpc::Status status = stub->Allocate(&context, request, &response);
    if (!status.ok()) fail("Allocate " + preferred.dump() + " failed: " + describe(status));
  }
  if (response.container_responses_size() != 1) {
    fail("Allocate answered " + std::to_string(response.container_responses_size()) +
         " containers, 1 asked");
  }
  if (o.pre_start == "yes") pre_start_container(preferred);
  const auto& container = response.container_responses(0);
  nlohmann::json mounts = nlohmann::json::array();
  for (const auto& m : container.mounts()) {
    mounts.push_back({{"container_path", m.container_path()},
                      {"host_path", m.host_path()},
                      {"read_only", m.read_only()}});
  }
  nlohmann::json envs = nlohmann::json::object(), annotations = nlohmann::json::object();
  for (const auto& [key, value] : container.envs()) envs[key] = value;
  for (const auto& [key, value] : container.annotations()) annotations[key] = value;
  // Device specs and CDI device names too: a runtime test hands the whole response on.
  nlohmann::json specs = nlohmann::json::array(), cdi = nlohmann::json::array();
  for (const auto& d : container.devices()) {
    specs.push_back({{"container_path", d.container_path()},
                     {"host_path", d.host_path()},
                     {"permissions", d.permissions()}});
  }
  for (const auto& d : container.cdi_devices()) cdi.push_back(d.name());
  const nlohmann::json out = {{"resource", o.resource},
                              {"endpoint", endpoint},
                              {"devices", devices},
                              {"preferred", preferred},
                              {"allocate",
                               {{"mounts", mounts},
                                {"envs", envs},
                                {"annotations", annotations},
                                {"devices", specs},
                                {"cdi_devices", cdi}}}};
  std::cout << out.dump() << std::endl;
  return 0;
}
