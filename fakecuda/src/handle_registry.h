// Every opaque handle the fake driver hands out (CUcontext, CUstream, CUevent,
// CUmodule, CUfunction, CUgraph…) is the address of an object registered here. API
// calls look a handle up before touching it, so a stale, foreign or garbage handle
// yields CUDA_ERROR_INVALID_HANDLE instead of a crash, and shared ownership keeps an
// object alive while a call that found it is still using it.
#pragma once

#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace fakecuda {

enum class HandleKind {
  Context,
  Stream,
  Event,
  Module,
  Library,
  Function,
  Graph,
  GraphNode,
  GraphExec,
  MemPool,
  Array,
  MipmappedArray
};

class HandleObject : public std::enable_shared_from_this<HandleObject> {
 public:
  explicit HandleObject(HandleKind kind) : kind_(kind) {}
  virtual ~HandleObject() = default;
  HandleObject(const HandleObject&) = delete;
  HandleObject& operator=(const HandleObject&) = delete;
  HandleKind kind() const { return kind_; }

 private:
  HandleKind kind_;
};

class HandleRegistry {
 public:
  void add(std::shared_ptr<HandleObject> object);

  // Returns the live object of type T (T::kKind) behind `handle`, or null.
  template <typename T>
  std::shared_ptr<T> get(const void* handle) const {
    return std::static_pointer_cast<T>(find(handle, T::kKind));
  }

  // Unregisters and returns the object (null if it was not a live T).
  template <typename T>
  std::shared_ptr<T> take(const void* handle) {
    return std::static_pointer_cast<T>(remove(handle, T::kKind));
  }

  // All live objects of one kind (used at shutdown and for context teardown).
  template <typename T>
  std::vector<std::shared_ptr<T>> all() const {
    std::vector<std::shared_ptr<T>> result;
    for (std::shared_ptr<HandleObject>& object : snapshot(T::kKind)) {
      result.push_back(std::static_pointer_cast<T>(object));
    }
    return result;
  }

 private:
  std::shared_ptr<HandleObject> find(const void* handle, HandleKind kind) const;
  std::shared_ptr<HandleObject> remove(const void* handle, HandleKind kind);
  std::vector<std::shared_ptr<HandleObject>> snapshot(HandleKind kind) const;

  mutable std::mutex mutex_;
  std::unordered_map<const void*, std::shared_ptr<HandleObject>> objects_;
};

}  // namespace fakecuda
