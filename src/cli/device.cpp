// `--device cpu|cpu-checked|cuda`, shared by the commands that compute (train, eval, generate,
// bench, calibrate). The device is chosen while the command line is parsed, before the command
// allocates its first buffer, and a device that cannot be used here stops it then (core/device.h).
#include <string>

#include "cli/commands.h"
#include "core/device.h"
#include "kernels/graph.h"
#ifdef BOOSTLM_HAVE_CUDA
#include "comm/cuda_transport.h"
#include "comm/grid.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/device_allocator.h"
#include "kernels/cuda/table.h"
#endif

namespace boostlm::cli {

void add_device_option(CLI::App& cmd) {
#ifdef BOOSTLM_HAVE_CUDA
  set_cuda_probe([](std::string* why_none) { return cuda::cuda_visible_devices(why_none); });
  // The GPU of this rank's local rank, its stream, memory and kernels; each group of the process
  // grid then collects on the device (NCCL, or staged through the host with BOOSTLM_NCCL=0).
  set_cuda_start([] {
    use_device_of_local_rank();
    cuda::start_backend();
    // Data parallelism's reductions on a stream of their own, overlapping backward.
    set_group_setup([](Communicator& group) {
      group.set_device_transport(
          make_device_transport(group, cuda::buffer_stream(), group.name() == "dp"));
    });
  });
#endif
  cmd.add_option_function<std::string>(
         "--device", [](const std::string& name) { select_device(parse_device(name)); },
         "where the arrays live and kernels run: cpu, cpu-checked (cpu, with any host access to "
         "the engine's buffers outside a kernel, collective or named copy crashing at its line: "
         "the test that the engine is ready for a GPU) or cuda (the CUDA backend: not yet run on a "
         "GPU; refused with the reason where none is visible)")
      ->default_str("cpu")
      ->check(CLI::IsMember({"cpu", "cpu-checked", "cuda"}));
  cmd.add_option_function<std::string>(
         "--cuda-graph", [](const std::string& v) { set_kernel_graphs(v == "on"); },
         "on: with --device cuda, kernels are captured once as CUDA graphs and replayed (one "
         "process, or TP, DP, ZeRO-1 and PP over NCCL: the whole step as one graph, collectives "
         "and the pipeline's sends included, LaX and --recompute block too; not with "
         "--tp-overlap, nor over the staged transport, whose collectives wait on the host); off: "
         "every kernel launched from the host (no effect on the CPU)")
      ->default_str("on")
      ->check(CLI::IsMember({"on", "off"}));
}

}  // namespace boostlm::cli
