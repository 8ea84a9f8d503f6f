// PodResources List over gRPC (see pod_resources_client.h).
#include "device_plugin/pod_resources_client.h"

#include <grpcpp/grpcpp.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "podresources/podresources.grpc.pb.h"

namespace fracgpu::k8s {
namespace {

using R = Result<v1::ListPodResourcesResponse>;

// Before dialling: a missing or wrong file is the common mistake (the hostPath not
// mounted), and gRPC would only say "failed to connect to all addresses".
std::string socket_problem(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) {
      return "the kubelet's PodResources socket " + path +
             " does not exist (mount the host's /var/lib/kubelet/pod-resources into the "
             "plugin's container: the kubelet serves the API there)";
    }
    return "cannot reach the kubelet's PodResources socket " + path + ": " + std::strerror(errno);
  }
  if (!S_ISSOCK(st.st_mode))
    return path + " is not a socket (expected the kubelet's PodResources socket)";
  return {};
}

std::string call_problem(const std::string& path, const grpc::Status& status,
                         std::chrono::milliseconds deadline) {
  switch (status.error_code()) {
    case grpc::StatusCode::UNIMPLEMENTED:
      return "the kubelet at " + path +
             " does not serve the PodResources API v1 (v1.PodResourcesLister/List: " +
             status.error_message() + "); Kubernetes 1.20 or newer serves it";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "the kubelet's PodResources API at " + path + " did not answer within " +
             std::to_string(deadline.count()) + " ms";
    case grpc::StatusCode::UNAVAILABLE:
      return "nothing answers on the kubelet's PodResources socket " + path + " (" +
             status.error_message() + ")";
    default:
      return "the kubelet's PodResources API at " + path + " failed: " + status.error_message();
  }
}

}  // namespace

R PodResourcesClient::list() const {
  if (std::string problem = socket_problem(socket_path_); !problem.empty())
    return R::failure(problem);
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kPodResourcesMaxMessageBytes);
  auto channel =
      grpc::CreateCustomChannel("unix://" + socket_path_, grpc::InsecureChannelCredentials(), args);
  auto stub = v1::PodResourcesLister::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + deadline_);
  v1::ListPodResourcesResponse response;
  const grpc::Status status = stub->List(&context, v1::ListPodResourcesRequest(), &response);
  if (!status.ok()) return R::failure(call_problem(socket_path_, status, deadline_));
  return response;
}

}  // namespace fracgpu::k8s
