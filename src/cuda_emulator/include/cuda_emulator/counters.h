// The emulated device's counters (issue 47): per kernel, how many launches ran, the FLOPs its
// tensor-core instructions executed (the emulated mma.sync, kernels/cuda/mma.cuh; cuBLASLt's
// matmuls on bf16 or a tensor-core compute type), the matrix-product FLOPs it ran on the CUDA
// cores, and the bytes it reads and writes in global memory. What a profiler of a GPU would count,
// on a machine without one: a kernel whose FLOPs should be on the tensor cores and are not shows
// them under other_flops.
//
// FLOPs off the tensor cores and bytes are what the kernel's launcher declares
// (declare_next_launch, before the launch; kernels/cuda/launch_cost.h). The tensor-core FLOPs are
// counted from the instructions the kernel executes, and a launcher that declares them is held to
// them: a launch whose executed mma FLOPs differ from its declaration is a fault, so every
// emulated test checks every declaration of a tensor-core kernel.
//
// Count-only mode (set_count_only): launches are checked, counted and not executed (cuBLASLt's
// matmuls, copies and fills too; a matmul's FLOPs are its shape's, a kernel's tensor FLOPs its
// declaration), and fresh device memory is zero, not poison (and never touched: a model of any
// size costs the host no memory). It prices a step at shapes the emulator could never run (a
// 1B model at sequence 4096); the numbers it gives are those of executed launches wherever the
// tests hold the declarations to execution.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cuda_emulator {

struct KernelCounters {
  std::string kernel;  // the launch's kernel expression as written (templates included)
  std::uint64_t launches = 0;
  std::uint64_t graph_launches = 0;  // of those, run as nodes of a graph (cudaGraphLaunch)
  std::uint64_t tensor_flops = 0;
  std::uint64_t other_flops = 0;  // matrix-product FLOPs on the CUDA cores (fp32 GEMMs too)
  std::uint64_t bytes_read = 0, bytes_written = 0;
  std::uint64_t undeclared = 0;  // launches whose launcher declared nothing
  // cuBLASLt rows: the matmul's shape (its name carries it too); 0 for kernels.
  std::int64_t m = 0, n = 0, k = 0;
  int dim = 0;  // what a kernel's efficiency depends on, as declared (attention: the head dim)
};

// Since the last reset, by kernel in the order each first ran.
std::vector<KernelCounters> kernel_counters();
void reset_kernel_counters();

// What a launcher declares about the launch it makes next on this host thread.
struct LaunchDeclaration {
  std::uint64_t tensor_flops = 0;  // held to the executed mma instructions
  std::uint64_t other_flops = 0;
  std::uint64_t bytes_read = 0, bytes_written = 0;
  int dim = 0;
  const char* file = nullptr;  // the launcher's file: a declaration is taken only by a launch there
  const char* name = nullptr;  // the counters' name, where the launch expression is generic
};
void declare_next_launch(const LaunchDeclaration& declaration);

void set_count_only(bool on);
bool count_only();

// The host-side accounting of a library call (cuBLASLt).
void count_library_call(const KernelCounters& call);

}  // namespace cuda_emulator
