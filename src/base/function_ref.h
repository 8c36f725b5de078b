// A non-owning reference to a callable, for the parallel loops of the thread pool and CpuExec.
// A std::function holding a lambda that captures more than its small buffer (two pointers in
// libstdc++) allocates on every construction; the kernels' loops capture many references and run
// on every decode step, which must not allocate (engine.h, "Steady-state decode"). FunctionRef
// stores a pointer to the caller's callable and a call thunk: nothing is copied or allocated.
// The callable is borrowed: it must outlive every call through the reference (pass lambdas
// straight into the call that runs them; never store a FunctionRef built from a temporary).
#pragma once

#include <type_traits>
#include <utility>

namespace dsv41 {

template <typename Signature>
class FunctionRef;

template <typename R, typename... Args>
class FunctionRef<R(Args...)> {
 public:
  template <typename F, typename = std::enable_if_t<!std::is_same_v<std::decay_t<F>, FunctionRef> &&
                                                    std::is_invocable_r_v<R, F&, Args...>>>
  FunctionRef(F&& fn)  // NOLINT(implicit): a lambda passes where a FunctionRef is expected
      : object_(const_cast<void*>(static_cast<const void*>(&fn))), call_(&call<std::remove_reference_t<F>>) {}

  R operator()(Args... args) const { return call_(object_, std::forward<Args>(args)...); }

 private:
  template <typename F>
  static R call(void* object, Args... args) {
    return (*static_cast<F*>(object))(std::forward<Args>(args)...);
  }

  void* object_;
  R (*call_)(void*, Args...);
};

}  // namespace dsv41
