// Kernel launches in the emulated device: what `kernel<<<grid, block, smem, stream>>>(args)`
// becomes after rewrite_launch.py, namely
//   ::cuda_emulator::launch(<the kernel's address, where the expression names one function>,
//                           [=](const auto&... a) { kernel(a...); }, "kernel", __FILE__, __LINE__,
//                           ::cuda_emulator::launch_config(grid, block, smem, stream))(args)
// The body calls the kernel as the launch would: a kernel template is deduced from the arguments
// (which is why the kernel is not taken by address: a template deduced from the call has none
// before the call). The arguments are copied at the launch (CUDA passes them by value; each device
// thread then converts its own copy to the parameters); the launch is checked at once (a bad
// geometry is cudaGetLastError's, as on a GPU) and enqueued on its stream.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstring>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "cuda_emulator/counters.h"

namespace cuda_emulator {

struct LaunchConfig {
  dim3 grid;
  dim3 block;
  std::size_t shared_bytes = 0;
  cudaStream_t stream = nullptr;
};

inline LaunchConfig launch_config(dim3 grid, dim3 block, std::size_t shared_bytes = 0,
                                  cudaStream_t stream = nullptr) {
  return {grid, block, shared_bytes, stream};
}

// One launch as the executor runs it: `run_thread(params)` is one device thread's body.
struct KernelLaunch {
  const char* name = nullptr;  // the launch's kernel expression, as written
  const char* file = nullptr;  // where it was launched
  int line = 0;
  const void* function = nullptr;  // the kernel (its attributes: cudaFuncSetAttribute)
  LaunchConfig config;
  void (*run_thread)(const void* params) = nullptr;
  std::shared_ptr<const void> params;  // the arguments, copied at the launch
  // What the arguments point to: each pointer argument, and every aligned word of each class
  // argument (a struct or lambda holding pointers); record.cpp hashes the allocations they name.
  // Integers and floats are not read as pointers: a float and the padding after it can look like
  // a device address.
  std::vector<const void*> pointers;
  // What its launcher declared (counters.h), taken at the launch.
  bool declared = false;
  LaunchDeclaration cost;
};

// Zeroes the padding of a class argument copied at the launch. The kernel never reads it, but
// add_pointers reads every aligned word: padding keeps whatever the caller's stack held (often a
// device address from an earlier call), which would name an allocation the kernel does not touch,
// differently from run to run.
template <typename T>
void clear_padding(T& value) {
  if constexpr (std::is_class_v<T> && std::is_trivially_copyable_v<T>) __builtin_clear_padding(&value);
}

template <typename T>
void add_pointers(const T& value, std::vector<const void*>& out) {
  if constexpr (std::is_pointer_v<T> && !std::is_function_v<std::remove_pointer_t<T>>) {
    out.push_back(static_cast<const void*>(value));
  } else if constexpr (std::is_class_v<T>) {
    const unsigned char* bytes = reinterpret_cast<const unsigned char*>(&value);
    for (std::size_t offset = 0; offset + sizeof(void*) <= sizeof(T); offset += alignof(void*)) {
      const void* word;
      std::memcpy(&word, bytes + offset, sizeof word);
      out.push_back(word);
    }
  }
}

// Checks the launch as CUDA does (cudaErrorInvalidConfiguration, cudaErrorInvalidValue: kept for
// cudaGetLastError, nothing enqueued) and otherwise enqueues it on its stream.
void submit_launch(KernelLaunch launch);

// The kernel's address where the launch names one function (a function, a fully specified
// template, a pointer): the key of its attributes (cudaFuncSetAttribute). The rewriter asks for it
// in a requires-expression, so a template deduced from the call gives none and is keyed by its
// launch site instead.
template <typename Tag, typename... P>
const void* kernel_address(Tag, void (*kernel)(P...)) {
  return reinterpret_cast<const void*>(kernel);
}

template <typename Body>
const void* launch_site_key() {
  static const char key = 0;
  return &key;
}

template <typename Body>
class Launcher {
 public:
  Launcher(const void* function, Body body, const char* name, const char* file, int line,
           LaunchConfig config)
      : function_(function ? function : launch_site_key<Body>()),
        body_(std::move(body)),
        name_(name),
        file_(file),
        line_(line),
        config_(config) {}

  template <typename... Args>
  void operator()(Args&&... args) const {
    using Params = std::tuple<std::decay_t<Args>...>;
    struct Bound {
      Body body;
      Params params;
    };
    auto bound = std::make_shared<Bound>(Bound{body_, Params(std::forward<Args>(args)...)});
    KernelLaunch launch;
    launch.name = name_;
    launch.file = file_;
    launch.line = line_;
    launch.function = function_;
    launch.config = config_;
    launch.run_thread = [](const void* p) {
      const Bound& b = *static_cast<const Bound*>(p);
      std::apply(b.body, b.params);
    };
    std::apply([](auto&... p) { (clear_padding(p), ...); }, bound->params);
    std::apply([&](const auto&... p) { (add_pointers(p, launch.pointers), ...); }, bound->params);
    launch.params = std::move(bound);
    submit_launch(std::move(launch));
  }

 private:
  const void* function_;
  Body body_;
  const char* name_;
  const char* file_;
  int line_;
  LaunchConfig config_;
};

template <typename Body>
Launcher<Body> launch(const void* function, Body body, const char* name, const char* file,
                      int line, LaunchConfig config) {
  return Launcher<Body>(function, std::move(body), name, file, line, config);
}

}  // namespace cuda_emulator

// cuda_runtime.h declares this overload only for nvcc (__CUDACC__); the kernels call it with a
// kernel's own pointer.
template <typename T>
inline cudaError_t cudaFuncSetAttribute(T* entry, enum cudaFuncAttribute attribute, int value) {
  return ::cudaFuncSetAttribute(reinterpret_cast<const void*>(entry), attribute, value);
}
