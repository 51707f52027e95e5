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
//
// `boostlm calibrate --hostfile FILE [--from this-machine] [-o FILE]` measures a cluster's ranks
// where they run (for the emulated one of scripts/cluster.sh: across the shaped veth links): the
// all-reduce α–β probe becomes the inter-node link, and the device every rank measures there at
// once replaces --from's (emulated hosts share this machine's cores and its kernel does their
// TCP, which halved the GEMM rate here), in a copy of the --from hardware file written as
// hardware/cluster-<rate>.json. One rank per host (cluster.sh's default), so devices_per_node is
// 1 and a TP group of 2 crosses the link; the copy drops the solo device (no rank has all cores).
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

#include "cli/checks.h"
#include "cli/commands.h"
#include "cli/host.h"
#include "comm/grid.h"
#include "comm/mpi_runtime.h"
#include "core/error.h"
#include "plan/calibration.h"

namespace boostlm::cli {
namespace {

struct CalibrateOptions {
  std::string out, probe, hostfile, from = "this-machine", probe_link;
  int ranks = 0;
};

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
  h.collectives_fp32 = false;  // bf16 training sends bf16 activations (issue 60)
  h.attention_fp32 = true;
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
    h.intra_node = {5e-6, 5e9, 1.0, false, {}, 0};
    h.sources.push_back("device measured alone (no mpirun): optimistic when ranks share memory");
    h.sources.push_back("intra-node link NOT measured (no mpirun): alpha 5 us, 5 GB/s assumed");
  }
  h.inter_node = h.intra_node;
  h.sources.push_back("inter-node link: one machine, none to measure; copied from intra-node");
  return h;
}

// Under mpirun across hosts: the all-reduce α–β; rank 0 writes it with the link's rate label.
// The device too, as every rank sees it there: emulated hosts share this machine's cores (and its
// kernel does their TCP), so a rank's GEMM rate across them is its own measurement, not this
// machine's calibration (seen here: about half of it).
void run_link_probe(const std::string& path) {
  ProcessGrid grid(GridShape{mpi_world_size(), 1, 1});
  const plan::DeviceMeasurement device = plan::measure_device(omp_get_max_threads(), &grid.world());
  std::string note, overlap_note;
  plan::Link link = plan::measure_link(grid.world(), note);
  link.overlap_cost_s_per_byte = plan::measure_overlap_cost(grid.world(), link, overlap_note);
  note += "; " + overlap_note;
  if (grid.world().rank() != 0) return;
  const char* rate = std::getenv("BOOSTLM_LINK_RATE");
  plan::Hardware carrier;  // the device in the hardware file's own format
  carrier.name = "probe";
  carrier.device = device.device;
  carrier.intra_node = carrier.inter_node = link;
  carrier.sources = device.notes;
  nlohmann::json j = {{"alpha_s", link.alpha_s},
                      {"bandwidth", link.bandwidth},
                      {"note", note},
                      {"ranks", grid.world().size()},
                      {"link_rate", rate && *rate ? rate : "unknown"},
                      {"hardware", carrier.to_json()}};
  std::ofstream(path) << j.dump(2) << "\n";
}

plan::Hardware calibrate_cluster(const CalibrateOptions& o, std::string& rate) {
  plan::Hardware h;
  try {
    h = plan::load_hardware(o.from);
  } catch (const Error& e) {
    throw error(
        "calibrate --hostfile measures the device and the link across the hosts and "
        "takes the rest from --from ",
        o.from, " (", e.what(), "); run `boostlm calibrate` on this machine first");
  }
  const std::string path = std::filesystem::temp_directory_path() /
                           ("boostlm-link-" + std::to_string(getpid()) + ".json");
  const std::string command = "'" + this_executable() + "' launch --hostfile '" + o.hostfile + "'" +
                              (o.ranks ? " -n " + std::to_string(o.ranks) : "") +
                              " -- calibrate --probe-link '" + path + "'";
  std::printf("link probe: %s\n", command.c_str());
  std::fflush(stdout);
  if (std::system(command.c_str()) != 0 || !std::filesystem::exists(path))
    throw error("the link probe across ", o.hostfile, " failed (see above)");
  std::ifstream in(path);
  const nlohmann::json probe = nlohmann::json::parse(in);
  std::filesystem::remove(path);
  rate = probe.at("link_rate");
  h.name = "cluster-" + rate;
  h.description +=
      "; inter-node link: " + o.hostfile + " (rate " + rate + "), measured on " + today();
  h.devices_per_node = 1;
  h.solo_device.reset();  // the hosts share this machine's cores: no rank has them all
  const plan::Hardware measured = plan::Hardware::from_json(probe.at("hardware"));
  h.inter_node = measured.inter_node;  // α–β and the measured points
  h.device = measured.device;
  for (const std::string& source : measured.sources)
    h.sources.push_back("device across the hosts: " + source);
  h.sources.push_back("inter-node link (" + rate + ", " +
                      std::to_string(probe.at("ranks").get<int>()) +
                      " hosts): " + probe.at("note").get<std::string>());
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
  if (h.devices_per_node == 1)
    std::printf("%-12s all-reduce alpha %.1f us, beta %.3f GB/s\n",
                "inter-node:", h.inter_node.alpha_s * 1e6, h.inter_node.bandwidth / 1e9);
}

void write_hardware(const std::string& out, nlohmann::json j) {
  std::ofstream file(out);
  if (!file) throw error("cannot write ", out);
  file << j.dump(2) << "\n";
}

}  // namespace

void add_calibrate(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "calibrate", "measure this machine (GEMM curve, bandwidth, MPI alpha-beta) for `plan`");
  add_device_option(*cmd);
  auto o = std::make_shared<CalibrateOptions>();
  cmd->add_option("--out,-o", o->out,
                  "hardware file to write (default hardware/this-machine.json)");
  computed_default(cmd->add_option("--ranks", o->ranks,
                                   "devices to split the cores into (default: one per core)"))
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--probe", o->probe, "internal: the multi-rank measurement, under mpirun");
  cmd->add_option("--hostfile", o->hostfile,
                  "measure the link between this cluster's hosts (e.g. scripts/cluster.sh's) as "
                  "the inter-node link; writes hardware/cluster-<rate>.json")
      ->check(CLI::ExistingFile);
  cmd->add_option("--from", o->from, "with --hostfile: the hardware file the device comes from");
  cmd->add_option("--probe-link", o->probe_link, "internal: the link measurement, under mpirun");
  cmd->callback([o] {
    if (!o->probe.empty()) {
      if (!mpi_active()) throw error("--probe runs under mpirun (boostlm launch)");
      run_probe(o->probe);
      return;
    }
    if (!o->probe_link.empty()) {
      if (!mpi_active()) throw error("--probe-link runs under mpirun (boostlm launch)");
      run_link_probe(o->probe_link);
      return;
    }
    if (launched_by_mpi())
      throw error("run calibrate directly: it starts its own multi-rank probe through mpirun");
    if (!o->hostfile.empty()) {
      std::string rate;
      plan::Hardware h = calibrate_cluster(*o, rate);
      const std::string out =
          o->out.empty() ? plan::default_hardware_dir() + "/cluster-" + rate + ".json" : o->out;
      nlohmann::json j = h.to_json();
      j["link_rate"] = rate;
      write_hardware(out, j);
      print_summary(h);
      std::printf("wrote %s\n", out.c_str());
      return;
    }
    const int ranks = o->ranks ? o->ranks : available_cpus();
    const plan::Hardware h = calibrate(ranks);
    const std::string out =
        o->out.empty() ? plan::default_hardware_dir() + "/this-machine.json" : o->out;
    write_hardware(out, h.to_json());
    print_summary(h);
    std::printf("wrote %s\n", out.c_str());
  });
}

}  // namespace boostlm::cli
