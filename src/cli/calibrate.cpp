// `boostlm calibrate [-o hardware/this-machine.json] [--ranks N]`: measures this machine for the
// performance model and writes its hardware file.
//
// A "device" here is what one rank of a TP group gets when the node's cores are shared among
// `--ranks` ranks (default: one per core), as `boostlm launch` places them. So calibrate measures
// in two runs:
//  1. in this process, on all cores: the solo device (a rank alone on the machine, as TP 1 runs);
//  2. a probe of itself under `boostlm launch -n N` (mpirun), where every rank measures the same
//     kernels at the same time on its share of the cores (the slowest rank's time counts, as a TP
//     step waits for it), and then MPI all-reduce for the α–β of the intra-node link.
// Without mpirun the probe is skipped: the device is measured in this process alone on its share
// of the cores, and the link keeps a default that the file marks as not measured. One machine has
// no inter-node link to measure: the file copies the intra-node one and says so.
// Everything takes about a minute on 2 cores.
#include <omp.h>
#include <sched.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "comm/grid.h"
#include "comm/mpi_runtime.h"
#include "core/error.h"
#include "plan/calibration.h"

namespace boostlm::cli {
namespace {

struct CalibrateOptions {
  std::string out, probe;
  int ranks = 0;
};

int available_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

std::string cpu_name() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

std::string today() {
  char buf[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(buf, sizeof buf, "%Y-%m-%d", std::localtime(&now));
  return buf;
}

std::string this_executable() {
  std::vector<char> path(4096);
  const ssize_t n = readlink("/proc/self/exe", path.data(), path.size() - 1);
  if (n <= 0) throw error("cannot find this program's path (/proc/self/exe)");
  return std::string(path.data(), static_cast<size_t>(n));
}

// Under mpirun: every rank measures its device and the all-reduce; rank 0 writes `path`.
void run_probe(const std::string& path) {
  ProcessGrid grid(GridShape{mpi_world_size(), 1, 1});
  Communicator& world = grid.world();
  const plan::DeviceMeasurement d = plan::measure_device(omp_get_max_threads(), &world);
  std::string link_note;
  const plan::Link link = plan::measure_link(world, link_note);
  if (world.rank() != 0) return;
  plan::Hardware h;  // a carrier for the two parts, in the hardware file's own format
  h.name = "probe";
  h.device = d.device;
  h.intra_node = h.inter_node = link;
  h.sources = d.notes;
  h.sources.push_back(link_note);
  std::ofstream(path) << h.to_json().dump(2) << "\n";
}

// Runs the probe on `ranks` ranks through `boostlm launch`; false when it could not run.
bool launch_probe(int ranks, int threads, const std::string& path) {
  const std::string command = "'" + this_executable() + "' launch -n " + std::to_string(ranks) +
                              " --threads-per-rank " + std::to_string(threads) +
                              " -- calibrate --probe '" + path + "'";
  std::printf("probe: %s\n", command.c_str());
  std::fflush(stdout);
  return std::system(command.c_str()) == 0 && std::filesystem::exists(path);
}

plan::Hardware calibrate(int ranks) {
  const int cores = available_cpus();
  const int threads = std::max(1, cores / ranks);
  plan::Hardware h;
  h.name = "this-machine";
  h.description = cpu_name() + ", " + std::to_string(cores) + " cores, as " +
                  std::to_string(ranks) + " devices of " + std::to_string(threads) +
                  " core(s); measured by boostlm calibrate on " + today();
  h.devices_per_node = ranks;
  h.activations_fp32 = true;
  std::printf("solo device: %d thread(s) ...\n", cores);
  std::fflush(stdout);
  plan::DeviceMeasurement solo = plan::measure_device(cores, nullptr);
  h.solo_device = solo.device;
  for (const auto& n : solo.notes) h.sources.push_back("solo device: " + n);
  const std::string path = std::filesystem::temp_directory_path() /
                           ("boostlm-probe-" + std::to_string(getpid()) + ".json");
  if (ranks > 1 && launch_probe(ranks, threads, path)) {
    plan::Hardware probe = plan::load_hardware(path);
    std::filesystem::remove(path);
    h.device = probe.device;
    h.intra_node = probe.intra_node;
    for (const auto& n : probe.sources) h.sources.push_back("device (all ranks at once): " + n);
  } else {
    std::printf("probe did not run: measuring one device alone; the link is a default\n");
    plan::DeviceMeasurement d = plan::measure_device(threads, nullptr);
    h.device = d.device;
    h.intra_node = {5e-6, 5e9, 1.0, false};
    h.sources.push_back("device measured alone (no mpirun): optimistic when ranks share memory");
    h.sources.push_back("intra-node link NOT measured (no mpirun): alpha 5 us, 5 GB/s assumed");
  }
  h.inter_node = h.intra_node;
  h.sources.push_back("inter-node link: one machine, none to measure; copied from intra-node");
  return h;
}

void print_summary(const plan::Hardware& h) {
  auto show = [](const char* what, const plan::Device& d) {
    std::printf(
        "%-12s fp32 GEMM %.1f GFLOP/s (half dim %.0f), bf16 %.1f GFLOP/s (half dim %.0f), "
        "element-wise %.1f GB/s, attention %.0f%% of fp32\n",
        what, d.gemm.at(DType::f32).peak_flops / 1e9, d.gemm.at(DType::f32).half_dim,
        d.gemm.at(DType::bf16).peak_flops / 1e9, d.gemm.at(DType::bf16).half_dim,
        d.memory_bandwidth / 1e9, 100 * d.attention_max_efficiency);
  };
  show("device:", h.device);
  if (h.solo_device) show("solo device:", *h.solo_device);
  std::printf("%-12s all-reduce alpha %.1f us, beta %.2f GB/s\n",
              "link:", h.intra_node.alpha_s * 1e6, h.intra_node.bandwidth / 1e9);
}

}  // namespace

void add_calibrate(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "calibrate", "measure this machine (GEMM curve, bandwidth, MPI alpha-beta) for `plan`");
  auto o = std::make_shared<CalibrateOptions>();
  cmd->add_option("--out,-o", o->out,
                  "hardware file to write (default hardware/this-machine.json)");
  cmd->add_option("--ranks", o->ranks, "devices to split the cores into (default: one per core)")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--probe", o->probe, "internal: the multi-rank measurement, under mpirun");
  cmd->callback([o] {
    if (!o->probe.empty()) {
      if (!mpi_active()) throw error("--probe runs under mpirun (boostlm launch)");
      run_probe(o->probe);
      return;
    }
    if (launched_by_mpi())
      throw error("run calibrate directly: it starts its own multi-rank probe through mpirun");
    const int ranks = o->ranks ? o->ranks : available_cpus();
    const plan::Hardware h = calibrate(ranks);
    const std::string out =
        o->out.empty() ? plan::default_hardware_dir() + "/this-machine.json" : o->out;
    std::ofstream file(out);
    if (!file) throw error("cannot write ", out);
    file << h.to_json().dump(2) << "\n";
    print_summary(h);
    std::printf("wrote %s\n", out.c_str());
  });
}

}  // namespace boostlm::cli
