// Admin requests to the broker with retry and backoff (policy in broker_admin.h), and
// the TENANT "pod" object in both directions.
#include "device_plugin/broker_admin.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <thread>

#include "client/admin_client.h"

namespace fracgpu::k8s {

nlohmann::json pod_json(const PodIdentity& pod) {
  if (pod.empty()) return nlohmann::json::object();
  return {{"namespace", pod.namespace_name}, {"pod", pod.pod}, {"container", pod.container}};
}

PodIdentity pod_of(const nlohmann::json& tenant_status) {
  if (!tenant_status.is_object()) return {};
  auto it = tenant_status.find("pod");
  if (it == tenant_status.end() || !it->is_object()) return {};
  auto text = [&](const char* key) {
    auto field = it->find(key);
    return field != it->end() && field->is_string() ? field->get<std::string>() : std::string();
  };
  return {text("namespace"), text("pod"), text("container")};
}

std::string describe(const PodIdentity& pod) {
  return pod.empty() ? "(no pod)" : pod.namespace_name + "/" + pod.pod + "/" + pod.container;
}

Result<nlohmann::json> BrokerAdmin::call(const nlohmann::json& request) const {
  std::string last_error = "no attempt was made";
  auto delay = retry_.first_delay;
  for (int attempt = 1; attempt <= std::max(1, retry_.attempts); ++attempt) {
    auto client = client::AdminClient::connect(run_dir_, std::chrono::seconds(5));
    if (client) {
      auto reply = client->exchange(request);
      if (reply) {
        if ((*reply)["ok"].get<bool>()) return reply;
        const auto& error = (*reply)["error"];
        return Result<nlohmann::json>::failure(
            error.is_string() ? error.get<std::string>() : "the broker refused the request");
      }
      last_error = reply.error();
    } else {
      last_error = client.error();
    }
    if (attempt < retry_.attempts) {
      spdlog::debug("broker at {} not answering (attempt {}): {}", run_dir_, attempt, last_error);
      std::this_thread::sleep_for(delay);
      delay = std::min(delay * 2, retry_.max_delay);
    }
  }
  return Result<nlohmann::json>::failure("the fracgpu broker at " + run_dir_ +
                                         " cannot be reached: " + last_error);
}

Result<std::vector<BrokerGpu>> BrokerAdmin::gpus() const {
  auto reply = call({{"op", "gpus"}});
  if (!reply) return Result<std::vector<BrokerGpu>>::failure(reply.error());
  std::vector<BrokerGpu> out;
  const auto& list = (*reply)["gpus"];
  if (!list.is_array())
    return Result<std::vector<BrokerGpu>>::failure("the broker's gpus reply has no list");
  for (const auto& g : list) {
    if (!g.is_object() || !g.contains("uuid") || !g["uuid"].is_string() || !g.contains("index") ||
        !g["index"].is_number_integer() || !g.contains("memory_total") ||
        !g["memory_total"].is_number_unsigned()) {
      spdlog::warn("ignoring a malformed GPU entry from the broker: {}", g.dump());
      continue;
    }
    BrokerGpu gpu;
    gpu.index = g["index"].get<int>();
    gpu.uuid = g["uuid"].get<std::string>();
    gpu.name = g.contains("name") && g["name"].is_string() ? g["name"].get<std::string>() : "";
    gpu.memory_total = g["memory_total"].get<uint64_t>();
    gpu.memory_capacity = g.contains("memory_capacity") && g["memory_capacity"].is_number_unsigned()
                              ? g["memory_capacity"].get<uint64_t>()
                              : gpu.memory_total;
    out.push_back(std::move(gpu));
  }
  return out;
}

Result<std::vector<std::string>> BrokerAdmin::tenant_names() const {
  auto reply = call({{"op", "list"}});
  if (!reply) return Result<std::vector<std::string>>::failure(reply.error());
  std::vector<std::string> names;
  const auto& tenants = (*reply)["tenants"];
  if (!tenants.is_array()) return names;
  for (const auto& t : tenants) {
    if (t.is_object() && t.contains("name") && t["name"].is_string())
      names.push_back(t["name"].get<std::string>());
  }
  return names;
}

Result<nlohmann::json> BrokerAdmin::tenants() const {
  auto reply = call({{"op", "list"}});
  if (!reply) return Result<nlohmann::json>::failure(reply.error());
  const auto& tenants = (*reply)["tenants"];
  return tenants.is_array() ? tenants : nlohmann::json::array();
}

Status BrokerAdmin::set_pod(const std::string& tenant, const PodIdentity& pod) const {
  auto reply = call({{"op", "update"}, {"tenant", {{"name", tenant}, {"pod", pod_json(pod)}}}});
  return reply ? Status() : Status::failure(reply.error());
}

}  // namespace fracgpu::k8s
