// Tenants allocated but not yet started (see pending_starts.h).
#include "device_plugin/pending_starts.h"

namespace fracgpu::k8s {

void PendingStarts::allocated(const std::string& tenant, Clock::time_point now) {
  std::lock_guard lock(mutex_);
  std::erase_if(marked_, [&](const auto& e) { return now - e.second > limit_; });  // bounded
  marked_[tenant] = now;
}

void PendingStarts::started(const std::string& tenant) {
  std::lock_guard lock(mutex_);
  marked_.erase(tenant);
}

bool PendingStarts::awaiting(const std::string& tenant, Clock::time_point now) const {
  std::lock_guard lock(mutex_);
  auto it = marked_.find(tenant);
  return it != marked_.end() && now - it->second <= limit_;
}

}  // namespace fracgpu::k8s
