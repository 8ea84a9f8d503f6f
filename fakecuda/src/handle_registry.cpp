// Handle lookup table (see handle_registry.h).
#include "handle_registry.h"

namespace fakecuda {

void HandleRegistry::add(std::shared_ptr<HandleObject> object) {
  std::lock_guard lock(mutex_);
  const void* key = object.get();
  objects_[key] = std::move(object);
}

std::shared_ptr<HandleObject> HandleRegistry::find(const void* handle, HandleKind kind) const {
  if (handle == nullptr) return nullptr;
  std::lock_guard lock(mutex_);
  auto it = objects_.find(handle);
  if (it == objects_.end() || it->second->kind() != kind) return nullptr;
  return it->second;
}

std::shared_ptr<HandleObject> HandleRegistry::remove(const void* handle, HandleKind kind) {
  if (handle == nullptr) return nullptr;
  std::lock_guard lock(mutex_);
  auto it = objects_.find(handle);
  if (it == objects_.end() || it->second->kind() != kind) return nullptr;
  std::shared_ptr<HandleObject> object = std::move(it->second);
  objects_.erase(it);
  return object;
}

std::vector<std::shared_ptr<HandleObject>> HandleRegistry::snapshot(HandleKind kind) const {
  std::lock_guard lock(mutex_);
  std::vector<std::shared_ptr<HandleObject>> result;
  for (const auto& [key, object] : objects_) {
    if (object->kind() == kind) result.push_back(object);
  }
  return result;
}

}  // namespace fakecuda
