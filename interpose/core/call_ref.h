// CallRef: a non-owning reference to a callable — how a hook hands the core "the real
// driver call, with the hook's arguments bound" (a lambda on the hook's stack) without
// the core being a template over every hook. Two words; calling it is one indirect
// call. It must not outlive the callable it refers to (the core calls it within the hook).
#pragma once

#include <memory>
#include <type_traits>

namespace fracgpu {

template <typename Signature>
class CallRef;

template <typename R, typename... Args>
class CallRef<R(Args...)> {
 public:
  template <typename F, typename = std::enable_if_t<!std::is_same_v<std::decay_t<F>, CallRef>>>
  CallRef(F&& f) noexcept  // NOLINT(google-explicit-constructor): lambdas convert implicitly
      : object_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
        invoke_([](void* object, Args... args) -> R {
          return (*static_cast<std::remove_reference_t<F>*>(object))(static_cast<Args>(args)...);
        }) {}

  R operator()(Args... args) const { return invoke_(object_, static_cast<Args>(args)...); }

 private:
  void* object_;
  R (*invoke_)(void*, Args...);
};

}  // namespace fracgpu
