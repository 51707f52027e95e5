// The emulated device's execution model (CUDA programming guide, "Programming Model"): a launch's
// blocks run one after another on the calling host thread; each thread of a block is a fiber;
// between two barriers the threads run one at a time, in the order the settings choose
// (forward, reverse, a seeded shuffle), each until it reaches a barrier or exits. __syncthreads
// is a barrier over the block, __syncwarp and the shuffles over the lanes of their mask. A barrier
// that not every named thread reaches, and a block in which no thread can run, are faults naming
// the kernel, the block and the threads.
#pragma once

#include <cstddef>

#include "cuda_emulator/launch.h"

namespace cuda_emulator {

// Runs every block of `launch` now, on this host thread (the caller holds device access).
// In count-only mode (counters.h) it counts the launch without running it.
void execute_kernel(const KernelLaunch& launch);
// Moves this host thread's pending launch declaration (counters.h) into `launch`; a declaration
// made in another file is a fault (its launcher returned without launching).
void take_declaration(KernelLaunch& launch);

// The kernel attributes a launch is checked against (cudaFuncSetAttribute).
// cudaFuncAttributeMaxDynamicSharedMemorySize: cudaErrorInvalidValue beyond what the device allows.
cudaError_t set_max_dynamic_shared(const void* function, int bytes);
// The launch-time check of the dynamic shared memory: the kernel's limit (its attribute, or the
// default 48 KiB less its static shared memory where an earlier launch measured that).
bool dynamic_shared_allowed(const void* function, std::size_t bytes);

// The kernel running on this host thread, for the fault handlers ("kernel K, block (..), thread
// (..)"), or null when no device thread runs here. `stack_overflow` asks whether `address` lies
// in a device thread's stack guard page, `shared_guard` in the shared-memory arena's guard pages.
const char* running_thread_description();
bool in_stack_guard(const void* address);
bool in_shared_guard(const void* address);

}  // namespace cuda_emulator
