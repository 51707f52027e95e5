// The devices this process can see. Safe to call on a machine without a GPU or a driver: it then
// reports none, with the reason, and never aborts (tests skip on it, the CLI can print it).
#pragma once

#include <string>

namespace boostlm::cuda {

// The number of CUDA devices visible (CUDA_VISIBLE_DEVICES applies). 0 when there are none or the
// driver cannot be used, with the reason written to *why_none when it is given.
int cuda_visible_devices(std::string* why_none = nullptr);

// "NVIDIA H100 80GB HBM3 (sm_90, 79.1 GiB)"; throws Error for a device that does not exist.
std::string cuda_device_name(int device);

}  // namespace boostlm::cuda
