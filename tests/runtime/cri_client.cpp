// fracgpu-cri-client: the kubelet's side of the CRI (runtime.v1 gRPC, cri/api.proto), as a
// command, so that tests/runtime/cri_pod_test.sh can run a pod through a real containerd +
// runc the way the kubelet does. There is no crictl package in Debian 12, and crictl would
// not do the kubelet's part anyway: turning a Pod and the device plugin's Allocate response
// into a PodSandboxConfig and a ContainerConfig. That part is here, after the kubelet's
// pkg/kubelet/kuberuntime (kuberuntime_sandbox.go, kuberuntime_container.go,
// security_context*.go) and kubelet_pods.go's GenerateRunContainerOptions:
//   - the device plugin's envs, mounts, devices come FIRST, the container's own after
//     (the kubelet appends the pod's to the device-manager's options); annotations from the
//     plugin are the container's annotations; its CDI device names go to CDI_devices;
//   - namespaces: network NODE with hostNetwork else POD; pid NODE with hostPID, POD with
//     shareProcessNamespace, else CONTAINER (each container its own PID namespace); ipc POD;
//   - securityContext: runAsUser/runAsGroup (container's over the pod's), readOnlyRootFilesystem,
//     no_new_privs = (allowPrivilegeEscalation == false), capabilities add/drop as given,
//     the kubelet's default masked and read-only /proc and /sys paths;
//   - labels io.kubernetes.pod.{name,namespace,uid} and io.kubernetes.container.name; the
//     log path <container>/<attempt>.log under the sandbox's log directory.
// Not done (no kubelet here): DNS, /etc/hosts and the termination-log mount, volumes other
// than hostPath (a container's "volumeMounts" here carry their "hostPath" directly), resources.
//
//   fracgpu-cri-client --endpoint unix:///PATH [--timeout-s S] COMMAND ...
//     version                          runtime name and version (one JSON line)
//     run-pod POD.json                 RunPodSandbox; prints the sandbox ID
//     create POD.json SANDBOX NAME [ALLOCATION.json]
//                                      CreateContainer for the pod's container NAME with the
//                                      fracgpu-fake-kubelet JSON's "allocate"; prints its ID
//     start ID | stop ID [GRACE_S] | rm ID | stop-pod ID | rm-pod ID
//     status ID                        ContainerStatus (one JSON line)
//     wait ID                          until the container has exited; prints its status
//     exec ID -- CMD...                ExecSync: the command's stdout and stderr, its exit code
// Failures: one line on stderr naming the step and the gRPC status, exit 1 (exec: 125);
// usage errors exit 2. Test code: run by cri_pod_test.sh only.
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "api.grpc.pb.h"

namespace {

namespace cri = runtime::v1;
using nlohmann::json;

int g_timeout_s = 60;

[[noreturn]] void fail(const std::string& what, int code = 1) {
  std::fprintf(stderr, "fracgpu-cri-client: %s\n", what.c_str());
  std::fflush(stderr);
  std::_Exit(code);
}

[[noreturn]] void usage(const std::string& why) {
  fail(
      why +
          "\nusage: fracgpu-cri-client --endpoint unix:///PATH [--timeout-s S] "
          "{version | run-pod POD.json | create POD.json SANDBOX NAME [ALLOCATION.json] | start ID "
          "| status ID | wait ID | exec ID -- CMD... | stop ID [GRACE_S] | rm ID | stop-pod ID | "
          "rm-pod ID}",
      2);
}

json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail("cannot read " + path);
  json out = json::parse(in, nullptr, false);
  if (out.is_discarded()) fail(path + " is not JSON");
  return out;
}

void check(const grpc::Status& status, const std::string& step) {
  if (!status.ok()) {
    fail(step + " failed: gRPC code " + std::to_string(status.error_code()) + ": " +
         status.error_message());
  }
}

void deadline(grpc::ClientContext& context) {
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(g_timeout_s));
}

// The kubelet's defaults (pkg/securitycontext/util.go): what a container must not read or
// write in /proc and /sys unless its procMount is Unmasked.
const std::vector<std::string> kMaskedPaths = {"/proc/asound",
                                               "/proc/acpi",
                                               "/proc/kcore",
                                               "/proc/keys",
                                               "/proc/latency_stats",
                                               "/proc/timer_list",
                                               "/proc/timer_stats",
                                               "/proc/sched_debug",
                                               "/proc/scsi",
                                               "/sys/firmware",
                                               "/sys/devices/virtual/powercap"};
const std::vector<std::string> kReadonlyPaths = {"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys",
                                                 "/proc/sysrq-trigger"};

void namespaces(const json& spec, cri::NamespaceOption& ns) {
  ns.set_network(spec.value("hostNetwork", false) ? cri::NODE : cri::POD);
  ns.set_pid(spec.value("hostPID", false)                 ? cri::NODE
             : spec.value("shareProcessNamespace", false) ? cri::POD
                                                          : cri::CONTAINER);
  ns.set_ipc(spec.value("hostIPC", false) ? cri::NODE : cri::POD);
}

cri::PodSandboxConfig sandbox_config(const json& pod) {
  const json& meta = pod.at("metadata");
  const json& spec = pod.at("spec");
  const std::string name = meta.at("name"), ns = meta.value("namespace", "default"),
                    uid = meta.at("uid");
  cri::PodSandboxConfig config;
  auto* m = config.mutable_metadata();
  m->set_name(name);
  m->set_namespace_(ns);
  m->set_uid(uid);
  m->set_attempt(0);
  // The kubelet names the host only of a pod with its own network (and UTS) namespace.
  if (!spec.value("hostNetwork", false)) config.set_hostname(name);
  config.set_log_directory(pod.at("logDirectory"));  // /var/log/pods/<ns>_<name>_<uid> there
  (*config.mutable_labels())["io.kubernetes.pod.name"] = name;
  (*config.mutable_labels())["io.kubernetes.pod.namespace"] = ns;
  (*config.mutable_labels())["io.kubernetes.pod.uid"] = uid;
  auto* linux = config.mutable_linux();
  auto* sc = linux->mutable_security_context();
  namespaces(spec, *sc->mutable_namespace_options());
  const json psc = spec.value("securityContext", json::object());
  if (psc.contains("runAsUser")) sc->mutable_run_as_user()->set_value(psc["runAsUser"]);
  if (psc.contains("runAsGroup")) sc->mutable_run_as_group()->set_value(psc["runAsGroup"]);
  return config;
}

const json& container_spec(const json& pod, const std::string& name) {
  for (const auto& c : pod.at("spec").at("containers"))
    if (c.at("name") == name) return c;
  fail("the pod has no container " + name);
}

cri::ContainerConfig container_config(const json& pod, const std::string& name,
                                      const json& allocation) {
  const json& c = container_spec(pod, name);
  const json& spec = pod.at("spec");
  cri::ContainerConfig config;
  config.mutable_metadata()->set_name(name);
  config.mutable_metadata()->set_attempt(0);
  config.mutable_image()->set_image(c.at("image"));
  for (const auto& s : c.value("command", json::array())) config.add_command(s);
  for (const auto& s : c.value("args", json::array())) config.add_args(s);
  config.set_working_dir(c.value("workingDir", ""));
  // The device plugin's part first, as GenerateRunContainerOptions appends the pod's to it.
  const json alloc = allocation.is_object() ? allocation.value("allocate", json::object()) : json();
  if (alloc.is_object()) {
    // Named first: items() of a temporary would outlive it in the loop.
    const json envs = alloc.value("envs", json::object());
    const json annotations = alloc.value("annotations", json::object());
    for (const auto& [key, value] : envs.items()) {
      auto* kv = config.add_envs();
      kv->set_key(key);
      kv->set_value(value.get<std::string>());
    }
    for (const auto& mount : alloc.value("mounts", json::array())) {
      auto* m = config.add_mounts();
      m->set_container_path(mount.at("container_path"));
      m->set_host_path(mount.at("host_path"));
      m->set_readonly(mount.at("read_only"));
      m->set_propagation(cri::PROPAGATION_PRIVATE);
    }
    for (const auto& device : alloc.value("devices", json::array())) {
      auto* d = config.add_devices();
      d->set_container_path(device.at("container_path"));
      d->set_host_path(device.at("host_path"));
      d->set_permissions(device.at("permissions"));
    }
    for (const auto& [key, value] : annotations.items())
      (*config.mutable_annotations())[key] = value;
    for (const auto& cdi : alloc.value("cdi_devices", json::array()))
      config.add_cdi_devices()->set_name(cdi);
  }
  for (const auto& env : c.value("env", json::array())) {
    auto* kv = config.add_envs();
    kv->set_key(env.at("name"));
    kv->set_value(env.value("value", ""));
  }
  for (const auto& vm : c.value("volumeMounts", json::array())) {
    auto* m = config.add_mounts();
    m->set_container_path(vm.at("mountPath"));
    m->set_host_path(vm.at("hostPath"));
    m->set_readonly(vm.value("readOnly", false));
    m->set_propagation(cri::PROPAGATION_PRIVATE);
  }
  const std::string pod_name = pod.at("metadata").at("name");
  (*config.mutable_labels())["io.kubernetes.pod.name"] = pod_name;
  (*config.mutable_labels())["io.kubernetes.pod.namespace"] =
      pod.at("metadata").value("namespace", "default");
  (*config.mutable_labels())["io.kubernetes.pod.uid"] = pod.at("metadata").at("uid");
  (*config.mutable_labels())["io.kubernetes.container.name"] = name;
  config.set_log_path(name + "/0.log");

  auto* sc = config.mutable_linux()->mutable_security_context();
  namespaces(spec, *sc->mutable_namespace_options());
  const json psc = spec.value("securityContext", json::object());
  const json csc = c.value("securityContext", json::object());
  const auto effective = [&](const char* key) {
    return csc.contains(key) ? csc[key] : psc.value(key, json());
  };
  if (json v = effective("runAsUser"); !v.is_null()) sc->mutable_run_as_user()->set_value(v);
  if (json v = effective("runAsGroup"); !v.is_null()) sc->mutable_run_as_group()->set_value(v);
  sc->set_readonly_rootfs(csc.value("readOnlyRootFilesystem", false));
  sc->set_privileged(csc.value("privileged", false));
  // securitycontext.AddNoNewPrivileges: set only when allowPrivilegeEscalation is false.
  sc->set_no_new_privs(csc.contains("allowPrivilegeEscalation") &&
                       !csc["allowPrivilegeEscalation"].get<bool>());
  const json caps = csc.value("capabilities", json::object());
  for (const auto& cap : caps.value("add", json::array()))
    sc->mutable_capabilities()->add_add_capabilities(cap);
  for (const auto& cap : caps.value("drop", json::array()))
    sc->mutable_capabilities()->add_drop_capabilities(cap);
  if (!sc->privileged()) {
    for (const auto& p : kMaskedPaths) sc->add_masked_paths(p);
    for (const auto& p : kReadonlyPaths) sc->add_readonly_paths(p);
  }
  return config;
}

json status_json(const cri::ContainerStatus& s) {
  static const char* const kStates[] = {"created", "running", "exited", "unknown"};
  const int state = s.state();
  return {{"id", s.id()},
          {"state", state >= 0 && state <= 3 ? kStates[state] : "?"},
          {"exit_code", s.exit_code()},
          {"reason", s.reason()},
          {"message", s.message()},
          {"log_path", s.log_path()},
          {"annotations", json(std::map<std::string, std::string>(s.annotations().begin(),
                                                                  s.annotations().end()))}};
}

cri::ContainerStatus container_status(cri::RuntimeService::Stub& stub, const std::string& id) {
  cri::ContainerStatusRequest request;
  request.set_container_id(id);
  cri::ContainerStatusResponse response;
  grpc::ClientContext context;
  deadline(context);
  check(stub.ContainerStatus(&context, request, &response), "ContainerStatus " + id);
  return response.status();
}

// One ID-only RPC (start, stop, rm, stop-pod, rm-pod).
template <typename Request, typename Response, typename Call>
void by_id(Call call, const std::string& step, const std::string& id,
           void (Request::*set)(const std::string&)) {
  Request request;
  (request.*set)(id);
  Response response;
  grpc::ClientContext context;
  deadline(context);
  check(call(&context, request, &response), step + " " + id);
}

}  // namespace

int main(int argc, char** argv) {
  std::string endpoint;
  int i = 1;
  for (; i + 1 < argc && argv[i][0] == '-' && argv[i][1] == '-'; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--endpoint") {
      endpoint = argv[i + 1];
    } else if (flag == "--timeout-s") {
      g_timeout_s = std::atoi(argv[i + 1]);
      if (g_timeout_s < 1) usage("--timeout-s needs a whole number >= 1");
    } else {
      usage("unknown flag " + flag);
    }
  }
  if (endpoint.empty() || i >= argc) usage("--endpoint and a command are required");
  const std::string command = argv[i++];
  const std::vector<std::string> args(argv + i, argv + argc);
  const auto need = [&](std::size_t n) {
    if (args.size() < n) usage(command + " needs " + std::to_string(n) + " argument(s)");
  };
  auto channel = grpc::CreateChannel(endpoint, grpc::InsecureChannelCredentials());
  auto stub = cri::RuntimeService::NewStub(channel);

  if (command == "version") {
    cri::VersionRequest request;
    request.set_version("v1");
    cri::VersionResponse response;
    grpc::ClientContext context;
    deadline(context);
    check(stub->Version(&context, request, &response), "Version");
    std::cout << json{{"runtime_name", response.runtime_name()},
                      {"runtime_version", response.runtime_version()},
                      {"runtime_api_version", response.runtime_api_version()}}
                     .dump()
              << std::endl;
  } else if (command == "run-pod") {
    need(1);
    cri::RunPodSandboxRequest request;
    *request.mutable_config() = sandbox_config(read_json(args[0]));
    cri::RunPodSandboxResponse response;
    grpc::ClientContext context;
    deadline(context);
    check(stub->RunPodSandbox(&context, request, &response), "RunPodSandbox");
    std::cout << response.pod_sandbox_id() << std::endl;
  } else if (command == "create") {
    need(3);
    const json pod = read_json(args[0]);
    const json allocation = args.size() > 3 ? read_json(args[3]) : json();
    cri::CreateContainerRequest request;
    request.set_pod_sandbox_id(args[1]);
    *request.mutable_config() = container_config(pod, args[2], allocation);
    *request.mutable_sandbox_config() = sandbox_config(pod);
    cri::CreateContainerResponse response;
    grpc::ClientContext context;
    deadline(context);
    check(stub->CreateContainer(&context, request, &response), "CreateContainer " + args[2]);
    std::cout << response.container_id() << std::endl;
  } else if (command == "start") {
    need(1);
    by_id<cri::StartContainerRequest, cri::StartContainerResponse>(
        [&](auto* c, auto& q, auto* r) { return stub->StartContainer(c, q, r); }, "StartContainer",
        args[0], &cri::StartContainerRequest::set_container_id);
  } else if (command == "stop") {
    need(1);
    cri::StopContainerRequest request;
    request.set_container_id(args[0]);
    // Seconds from SIGTERM to SIGKILL: the pod's terminationGracePeriodSeconds.
    request.set_timeout(args.size() > 1 ? std::atoi(args[1].c_str()) : 30);
    cri::StopContainerResponse response;
    grpc::ClientContext context;
    deadline(context);
    check(stub->StopContainer(&context, request, &response), "StopContainer " + args[0]);
  } else if (command == "rm") {
    need(1);
    by_id<cri::RemoveContainerRequest, cri::RemoveContainerResponse>(
        [&](auto* c, auto& q, auto* r) { return stub->RemoveContainer(c, q, r); },
        "RemoveContainer", args[0], &cri::RemoveContainerRequest::set_container_id);
  } else if (command == "stop-pod") {
    need(1);
    by_id<cri::StopPodSandboxRequest, cri::StopPodSandboxResponse>(
        [&](auto* c, auto& q, auto* r) { return stub->StopPodSandbox(c, q, r); }, "StopPodSandbox",
        args[0], &cri::StopPodSandboxRequest::set_pod_sandbox_id);
  } else if (command == "rm-pod") {
    need(1);
    by_id<cri::RemovePodSandboxRequest, cri::RemovePodSandboxResponse>(
        [&](auto* c, auto& q, auto* r) { return stub->RemovePodSandbox(c, q, r); },
        "RemovePodSandbox", args[0], &cri::RemovePodSandboxRequest::set_pod_sandbox_id);
  } else if (command == "status") {
    need(1);
    std::cout << status_json(container_status(*stub, args[0])).dump() << std::endl;
  } else if (command == "wait") {
    need(1);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(g_timeout_s);
    for (;;) {
      const cri::ContainerStatus s = container_status(*stub, args[0]);
      if (s.state() == cri::CONTAINER_EXITED) {
        std::cout << status_json(s).dump() << std::endl;
        break;
      }
      if (std::chrono::steady_clock::now() > until)
        fail("container " + args[0] + " still " + status_json(s)["state"].get<std::string>() +
             " after " + std::to_string(g_timeout_s) + " s");
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  } else if (command == "exec") {
    need(3);
    if (args[1] != "--") usage("exec ID -- CMD...");
    cri::ExecSyncRequest request;
    request.set_container_id(args[0]);
    for (std::size_t k = 2; k < args.size(); ++k) request.add_cmd(args[k]);
    request.set_timeout(g_timeout_s);
    cri::ExecSyncResponse response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(g_timeout_s + 5));
    const grpc::Status status = stub->ExecSync(&context, request, &response);
    if (!status.ok()) {
      fail("ExecSync in " + args[0] + " failed: gRPC code " + std::to_string(status.error_code()) +
               ": " + status.error_message(),
           125);
    }
    std::fwrite(response.stdout().data(), 1, response.stdout().size(), stdout);
    std::fwrite(response.stderr().data(), 1, response.stderr().size(), stderr);
    std::fflush(stdout);
    std::fflush(stderr);
    return response.exit_code();
  } else {
    usage("unknown command " + command);
  }
  return 0;
}
