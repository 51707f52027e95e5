// The emulated device's memory spaces. Device memory (cudaMalloc) lives in one reserved region
// that is PROT_NONE whenever no device work runs, so a host dereference faults (while device work
// runs, an allocation opens at the work's first access to it); each allocation
// starts 256-byte aligned and ends (rounded to 256 bytes) just before a PROT_NONE guard page, so a
// kernel running past its end faults, and the few bytes between its end and the guard hold a
// canary checked after every piece of device work. Freed addresses are never handed out again (a
// use after free faults). Pinned host memory (cudaMallocHost) is ordinary host memory, reachable
// from both sides and known by its range.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace cuda_emulator::memory {

cudaError_t allocate_device(void** pointer, std::size_t bytes);
// cudaErrorInvalidValue unless `pointer` is the start of a live allocation (or null).
cudaError_t free_device(void* pointer);
cudaError_t allocate_pinned(void** pointer, std::size_t bytes);
cudaError_t free_pinned(void* pointer);

struct Range {
  const char* begin = nullptr;
  std::size_t bytes = 0;
};
// The live device allocation holding `address`, or an empty range.
Range device_allocation_of(const void* address);
bool is_device_range(const void* pointer, std::size_t bytes);
bool is_pinned_range(const void* pointer, std::size_t bytes);
// True for any address of the device region (live, freed or never allocated).
bool in_device_region(const void* address);
std::size_t allocated_bytes();

// Device work is about to run (true): each live allocation it touches opens, readable and
// writable, at its first access (the fault handler opens it); or it is over (false): whatever was
// opened closes.
void set_device_access(bool open);
// Opens every live allocation at once, for device work that hands device memory to the kernel or
// to another process (MPI in the emulated NCCL: a peer's single-copy read cannot fault here).
void open_all_device_memory();
// Faults naming `after` when a canary next to an allocation was overwritten.
void check_canaries(const char* after);

// The live allocations that `pointers` (a launch's arguments) point into, in their order.
std::vector<Range> allocations_named_by(const std::vector<const void*>& pointers);

// Installs the SIGSEGV / SIGBUS / SIGABRT handlers that explain a fault of the emulated device
// (once per process) and an alternate signal stack for the calling thread.
void install_fault_handlers();
// fault() is ending the process: the abort handler adds nothing.
void mark_faulting();

}  // namespace cuda_emulator::memory
