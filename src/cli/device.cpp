// `--device cpu|cpu-checked|cuda`, shared by the commands that compute (train, eval, generate,
// bench, calibrate). The device is chosen while the command line is parsed, before the command
// allocates its first buffer, and a device that cannot be used here stops it then (core/device.h).
#include <string>

#include "cli/commands.h"
#include "core/device.h"
#ifdef BOOSTLM_HAVE_CUDA
#include "kernels/cuda/device.h"
#endif

namespace boostlm::cli {

void add_device_option(CLI::App& cmd) {
#ifdef BOOSTLM_HAVE_CUDA
  set_cuda_probe([](std::string* why_none) { return cuda::cuda_visible_devices(why_none); });
#endif
  cmd.add_option_function<std::string>(
         "--device", [](const std::string& name) { select_device(parse_device(name)); },
         "where the arrays live and kernels run: cpu, cpu-checked (cpu, with any host access to "
         "the engine's buffers outside a kernel, collective or named copy crashing at its line: "
         "the test that the engine is ready for a GPU) or cuda (refused, with the reason, until "
         "the engine dispatches to the CUDA kernels)")
      ->default_str("cpu")
      ->check(CLI::IsMember({"cpu", "cpu-checked", "cuda"}));
}

}  // namespace boostlm::cli
