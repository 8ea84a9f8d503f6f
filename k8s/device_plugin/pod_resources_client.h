// A client of the kubelet's PodResources API v1 (v1.PodResourcesLister/List on
// /var/lib/kubelet/pod-resources/kubelet.sock, or the path given): one List per call,
// on a fresh channel, with a deadline. A fresh channel costs one Unix-socket connect
// every few seconds and needs no recovery when a restarting kubelet replaces the socket
// (a long-lived channel would sit in gRPC's reconnect backoff). Failures are one
// sentence that says what to fix: the socket absent (not mounted, or the kubelet does
// not serve the API), not a socket, nothing listening, the API not served, no answer
// within the deadline.
#pragma once

#include <chrono>
#include <string>

#include "common/result.h"
#include "podresources/podresources.pb.h"

namespace fracgpu::k8s {

using broker::Result;

// The kubelet's own client allows 16 MiB answers; a node's full list is far smaller.
inline constexpr int kPodResourcesMaxMessageBytes = 16 * 1024 * 1024;

class PodResourcesClient {
 public:
  explicit PodResourcesClient(std::string socket_path,
                              std::chrono::milliseconds deadline = std::chrono::seconds(3))
      : socket_path_(std::move(socket_path)), deadline_(deadline) {}

  Result<v1::ListPodResourcesResponse> list() const;

  const std::string& socket_path() const { return socket_path_; }

 private:
  std::string socket_path_;
  std::chrono::milliseconds deadline_;
};

}  // namespace fracgpu::k8s
