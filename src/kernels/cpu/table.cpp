// The CPU backend's KernelTable: every entry points at this folder's function of that name (the
// entry's parameter types pick the overload).
#include "kernels/cpu/kernels.h"

namespace boostlm {

const KernelTable& cpu_kernel_table() {
  static const KernelTable table = [] {
    KernelTable t;
    t.backend = "cpu";
    t.describe_gemm = &cpu::describe_gemm;
    t.gemm_keeps_threads = &cpu::gemm_keeps_threads;
    t.gemm_path = &cpu::gemm_path;
    t.set_gemm_path = &cpu::set_gemm_path;
#define BOOSTLM_CPU_KERNEL_ENTRY(ret, function, entry, params, args) t.entry = &cpu::function;
    BOOSTLM_KERNEL_LIST(BOOSTLM_CPU_KERNEL_ENTRY)
#undef BOOSTLM_CPU_KERNEL_ENTRY
    return t;
  }();
  return table;
}

}  // namespace boostlm
