// The CUDA backend's KernelTable (kernels/backend.h) and what starts it: every entry of the
// interface on device memory, enqueued on the engine's stream (device_allocator.h's buffer stream:
// the one stream Buffers are allocated for and kernels run on, so no event is needed between
// them). Scratch a launcher takes (workspace) comes from the caching allocator on that stream and
// goes back as soon as the launch is enqueued (stream order makes the reuse safe). An entry whose
// CPU form returns a value (sum_squares, mean_loss: the grad norm and the loss, read once a step)
// downloads it, waiting for the stream.
#pragma once

#include "kernels/backend.h"

namespace boostlm::cuda {

const KernelTable& kernel_table();

// The backend for the rest of the process, before any Buffer exists: a stream on the current GPU
// as the buffers' and kernels' stream, device memory through the caching allocator
// (install_device_buffers), and this table (use_kernels). The GPU must be chosen first.
void start_backend();

}  // namespace boostlm::cuda
