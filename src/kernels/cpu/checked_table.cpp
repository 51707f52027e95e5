// The CPU backend's table for --device cpu-checked: every entry checks that each array it is given
// is device memory (the checked arena, core/device.h) before running the CPU kernel. The arena's
// protection catches the host reading device memory outside a backend call; this catches the
// converse, a kernel given host memory (a std::vector, a stack array), which a GPU kernel could not
// read. Scalars, shapes and hyperparameters are passed by value and not checked.
#include <cstdio>
#include <cstdlib>
#include <tuple>
#include <type_traits>

#include "core/device.h"
#include "kernels/gemm_measure.h"
#include "kernels/cpu/kernels.h"

namespace boostlm {

namespace {

[[noreturn]] void refuse_host_memory(const char* entry, int argument, const void* p) {
  std::fprintf(stderr,
               "boostlm: kernel %s was given host memory (argument %d, %p) under --device "
               "cpu-checked: a GPU kernel could not read it; the array must be a Buffer (or a "
               "window into one)\n",
               entry, argument, p);
  std::abort();
}

void check_pointer(const char* entry, int argument, const void* p) {
  if (p != nullptr && !in_checked_arena(p)) refuse_host_memory(entry, argument, p);
}

template <class T>
void check_argument(const char* entry, int argument, const T& value) {
  if constexpr (std::is_pointer_v<T>) {
    check_pointer(entry, argument, value);
  } else if constexpr (std::is_same_v<T, GemmInput>) {
    check_pointer(entry, argument, value.f32);
    check_pointer(entry, argument, value.bf16);
  } else if constexpr (std::is_same_v<T, RopeTable>) {
    check_pointer(entry, argument, value.cos.data());
    check_pointer(entry, argument, value.sin.data());
  }
}

template <class Tuple>
void check_arguments(const char* entry, const Tuple& args) {
  std::apply(
      [&](const auto&... a) {
        int argument = 0;
        (check_argument<std::decay_t<decltype(a)>>(entry, ++argument, a), ...);
      },
      args);
}

#define BOOSTLM_CHECKED_KERNEL(ret, function, entry, params, args) \
  ret checked_##entry params {                                     \
    check_arguments(#entry, std::forward_as_tuple args);           \
    return cpu::function args;                                     \
  }
BOOSTLM_KERNEL_LIST(BOOSTLM_CHECKED_KERNEL)
#undef BOOSTLM_CHECKED_KERNEL

}  // namespace

const KernelTable& cpu_checked_kernel_table() {
  static const KernelTable table = [] {
    KernelTable t;
    t.backend = "cpu-checked";
    t.describe_gemm = &cpu::describe_gemm;
    t.gemm_path = &cpu::gemm_path;
    t.set_gemm_path = &cpu::set_gemm_path;
    t.gemm_keeps_threads = &cpu::gemm_keeps_threads;
    t.measure_peak_gemm_gflops = [](DType compute) {
      return measure_peak_gemm_gflops_on_host(cpu_kernel_table(), compute);
    };
#define BOOSTLM_CHECKED_ENTRY(ret, function, entry, params, args) t.entry = &checked_##entry;
    BOOSTLM_KERNEL_LIST(BOOSTLM_CHECKED_ENTRY)
#undef BOOSTLM_CHECKED_ENTRY
    return t;
  }();
  return table;
}

}  // namespace boostlm
