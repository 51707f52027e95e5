// The CPU backend's kernels: the interface of src/kernels/*.h (documented there) in namespace
// boostlm::cpu, one declaration per entry of BOOSTLM_KERNEL_LIST (kernels/backend.h), so the
// definitions in this folder are checked against the list. cpu_kernel_table() (table.cpp) points
// the CPU table at them. Kernels of this backend call each other through these names, not through
// the dispatch (qualified as cpu::name: the interface's function of the same name is also found by
// argument-dependent lookup).
#pragma once

#include "kernels/backend.h"

namespace boostlm::cpu {

#define BOOSTLM_CPU_KERNEL_DECLARATION(ret, function, entry, params, args) ret function params;
BOOSTLM_KERNEL_LIST(BOOSTLM_CPU_KERNEL_DECLARATION)
#undef BOOSTLM_CPU_KERNEL_DECLARATION

// Whether oneDNN builds bf16 matmuls on this CPU (AVX-512; probed once). Without, bf16 GEMMs run
// as fp32 GEMMs of the widened bf16 operands (gemm.cpp).
bool bf16_matmul_available();
// How this backend's GEMMs of `compute` precision run, for the run's first line.
const char* describe_gemm(DType compute);
bool gemm_keeps_threads(DType compute);  // bf16 where oneDNN's bf16 matmul runs it
// The bf16 path chosen (gemm.cpp: by measured rates), as kernels/gemm.h's gemm_path.
int gemm_path(DType compute);
void set_gemm_path(DType compute, int path);

}  // namespace boostlm::cpu
