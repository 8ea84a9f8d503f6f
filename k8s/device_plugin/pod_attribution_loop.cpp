// The pod attribution thread (see pod_attribution_loop.h).
#include "device_plugin/pod_attribution_loop.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "device_plugin/pod_attribution.h"

namespace fracgpu::k8s {
namespace {

constexpr auto kStopCheck = std::chrono::milliseconds(100);
constexpr int kGoneAfterReadings = 3;  // gone_tenants.h

RetryPolicy single_attempt() {
  RetryPolicy policy;
  policy.attempts = 1;
  return policy;
}

}  // namespace

PodAttributionLoop::PodAttributionLoop(PodAttributionSettings settings,
                                       std::vector<ResourceClass> classes,
                                       std::string broker_run_dir, const PendingStarts& pending)
    : settings_(std::move(settings)),
      classes_(std::move(classes)),
      kubelet_(settings_.socket_path),
      broker_(std::move(broker_run_dir), single_attempt()),
      pending_(pending),
      gone_(kGoneAfterReadings, 2 * settings_.interval) {}

void PodAttributionLoop::nudge() {
  std::lock_guard lock(mutex_);
  nudge_due_ = std::min(nudge_due_, std::chrono::steady_clock::now() + settings_.after_allocate);
  followups_left_ = settings_.followups;
  wake_.notify_one();
}

void PodAttributionLoop::run(const std::atomic<bool>& stop) {
  using Clock = std::chrono::steady_clock;
  auto next_periodic = Clock::now();  // the first pass at once
  while (!stop) {
    {
      std::unique_lock lock(mutex_);
      const auto now = Clock::now();
      const auto due = std::min(next_periodic, nudge_due_);
      if (now < due) {
        wake_.wait_until(lock, std::min(due, now + kStopCheck));
        continue;
      }
      if (nudge_due_ <= now) {
        nudge_due_ =
            followups_left_ > 0 ? now + settings_.followup_spacing : Clock::time_point::max();
        followups_left_ = std::max(0, followups_left_ - 1);
      }
      if (next_periodic <= now) next_periodic = now + settings_.interval;
    }
    pass();
  }
}

void PodAttributionLoop::pass() {
  auto listed = kubelet_.list();
  if (!listed) {
    problem("kubelet", listed.error() + "; until it answers, new tenants get no pod labels");
    return;
  }
  no_problem("kubelet");
  const PodAttribution found = attribute_tenants(*listed, classes_);
  for (const auto& why : found.skipped) spdlog::debug("PodResources: {}", why);
  auto tenants = broker_.tenants();
  if (!tenants) {
    problem("broker",
            "cannot tell the broker which pods its tenants belong to: " + tenants.error());
    return;
  }
  no_problem("broker");
  bool all_updated = true;
  for (const auto& [tenant, pod] : identity_changes(found.tenants, *tenants)) {
    if (auto s = broker_.set_pod(tenant, pod); !s) {
      problem("update", "the broker refused the pod " + describe(pod) + " of tenant " + tenant +
                            ": " + s.error());
      all_updated = false;
      continue;
    }
    spdlog::info("tenant {} belongs to pod {} (namespace/pod/container)", tenant, describe(pod));
  }
  if (all_updated) no_problem("update");
  const auto awaiting = [this](const std::string& name) { return pending_.awaiting(name); };
  for (const std::string& name :
       gone_.pass(found.tenants, *tenants, awaiting, std::chrono::steady_clock::now())) {
    auto deleted = broker_.call({{"op", "delete"}, {"name", name}});
    if (!deleted) {
      problem("delete",
              "cannot delete tenant " + name + ", whose container is gone: " + deleted.error());
      continue;
    }
    no_problem("delete");
    spdlog::info("deleted tenant {}: the kubelet no longer lists its container (pod removed)",
                 name);
  }
}

void PodAttributionLoop::problem(const std::string& kind, const std::string& sentence) {
  const auto now = std::chrono::steady_clock::now();
  auto it = std::find_if(problems_.begin(), problems_.end(),
                         [&](const auto& p) { return p.first == kind; });
  if (it != problems_.end() && it->second.sentence == sentence &&
      now - it->second.at < settings_.repeat_problem_after) {
    return;
  }
  spdlog::warn("pod attribution: {}", sentence);
  if (it == problems_.end()) {
    problems_.emplace_back(kind, Logged{sentence, now});
  } else {
    it->second = {sentence, now};
  }
}

void PodAttributionLoop::no_problem(const std::string& kind) {
  auto it = std::find_if(problems_.begin(), problems_.end(),
                         [&](const auto& p) { return p.first == kind; });
  if (it == problems_.end()) return;
  spdlog::info("pod attribution: {}", kind == "kubelet"  ? "the kubelet's PodResources API answers"
                                      : kind == "broker" ? "the broker answers again"
                                      : kind == "delete" ? "the broker deletes gone tenants again"
                                                         : "the broker accepts pod updates again");
  problems_.erase(it);
}

}  // namespace fracgpu::k8s
