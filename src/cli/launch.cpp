// `boostlm launch -n N [--hostfile FILE] [--threads-per-rank K] [--dry-run] -- <command> ...`:
// runs N ranks of this same binary under Open MPI's mpirun, with the placement decided here so a
// user need not know mpirun's flags.
//
// How the mpirun command is chosen ("cores" = logical CPUs this process may run on, the count
// OpenMP and `nproc` use):
//  - On this machine (no hostfile): `--use-hwthread-cpus` makes mpirun count slots the same way, so
//    on SMT machines its notion of "enough slots" agrees with ours. `--oversubscribe` when
//    N > cores (slower, but a small multi-rank test on a laptop must still run).
//    Threads per rank default to max(1, cores / N). When N × threads == cores each rank is bound
//    to its own `threads` CPUs (`--map-by slot:PE=threads --bind-to hwthread`); otherwise
//    `--bind-to none`, because mpirun's default binding (one core per rank for N ≤ 2) would pin
//    all of a rank's OpenMP threads to one CPU, and an oversubscribed or partly used machine is
//    better left to the OS scheduler.
//  - With a hostfile (several machines): the file's slots are the capacity, so no --oversubscribe
//    (mpirun's refusal is the right answer to asking for more ranks than slots). The other machines
//    are assumed to have as many cores as this one: threads default to
//    max(1, cores / ceil(N / hosts)). Always `--bind-to none`, since the exact fit cannot be
//    checked from here.
//  - Always `-x OMP_NUM_THREADS=threads`, and `--mca orte_abort_on_non_zero_status 1` (Open MPI's
//    default, made explicit so a site configuration cannot turn it off): a rank that exits non-zero
//    ends the whole job instead of leaving the others blocked in a collective. MPI_Abort and ranks
//    killed by a signal end the job regardless.
//  - As root, Open MPI refuses to start unless OMPI_ALLOW_RUN_AS_ROOT=1 and
//    OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 are set; they are set for mpirun when euid is 0.
// mpirun replaces this process (execvp), so signals reach it directly and its exit code is ours.
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cli/commands.h"
#include "comm/mpi_runtime.h"
#include "core/error.h"
#include "core/hostfile.h"

namespace boostlm::cli {
namespace {

struct LaunchOptions {
  int ranks = 0;
  std::string hostfile;
  int threads_per_rank = 0;  // 0: derived from the cores
  bool dry_run = false;
};

struct MpirunCommand {
  std::vector<std::pair<std::string, std::string>> env;  // set for mpirun
  std::vector<std::string> argv;
};

int available_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

std::string this_executable() {
  std::vector<char> path(4096);
  const ssize_t n = readlink("/proc/self/exe", path.data(), path.size() - 1);
  if (n <= 0) throw error("cannot find this program's path (/proc/self/exe)");
  return std::string(path.data(), static_cast<size_t>(n));
}

MpirunCommand plan_mpirun(const LaunchOptions& o, const std::vector<std::string>& command) {
  const int cores = available_cpus();
  MpirunCommand plan;
  if (geteuid() == 0) {
    plan.env = {{"OMPI_ALLOW_RUN_AS_ROOT", "1"}, {"OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"}};
  }
  auto& a = plan.argv;
  a = {"mpirun", "-n", std::to_string(o.ranks)};
  int threads = o.threads_per_rank;
  if (o.hostfile.empty()) {
    if (threads == 0) threads = std::max(1, cores / o.ranks);
    a.push_back("--use-hwthread-cpus");
    if (o.ranks > cores) a.push_back("--oversubscribe");
    if (o.ranks * threads == cores) {
      a.insert(a.end(),
               {"--map-by", "slot:PE=" + std::to_string(threads), "--bind-to", "hwthread"});
    } else {
      a.insert(a.end(), {"--bind-to", "none"});
    }
  } else {
    const int hosts = count_hosts(read_hostfile(o.hostfile));
    const int ranks_per_host = (o.ranks + hosts - 1) / hosts;
    if (threads == 0) threads = std::max(1, cores / ranks_per_host);
    a.insert(a.end(), {"--hostfile", o.hostfile, "--bind-to", "none"});
  }
  a.insert(a.end(), {"-x", "OMP_NUM_THREADS=" + std::to_string(threads)});
  a.insert(a.end(), {"--mca", "orte_abort_on_non_zero_status", "1"});
  a.push_back(this_executable());
  a.insert(a.end(), command.begin(), command.end());
  return plan;
}

// Quotes a word for a POSIX shell only where needed, so a dry run can be pasted into one.
std::string shell_quote(const std::string& word) {
  const bool plain = !word.empty() && word.find_first_not_of(
                                          "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                          "0123456789_-+=/.,:@%") == std::string::npos;
  if (plain) return word;
  std::string quoted = "'";
  for (char c : word) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

std::string to_shell(const MpirunCommand& plan) {
  std::string line;
  for (const auto& [name, value] : plan.env) line += name + "=" + shell_quote(value) + " ";
  for (size_t i = 0; i < plan.argv.size(); ++i) {
    line += (i ? " " : "") + shell_quote(plan.argv[i]);
  }
  return line;
}

[[noreturn]] void exec_mpirun(const MpirunCommand& plan) {
  for (const auto& [name, value] : plan.env) setenv(name.c_str(), value.c_str(), 1);
  std::vector<char*> argv;
  for (const std::string& arg : plan.argv) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  std::fflush(stdout);
  std::fflush(stderr);
  execvp(argv[0], argv.data());
  const int err = errno;
  throw error("cannot run mpirun: ", std::strerror(err),
              err == ENOENT ? " (is Open MPI installed? apt-get install openmpi-bin)" : "");
}

}  // namespace

void add_launch(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "launch", "run a boostlm command on several ranks through mpirun: launch -n 4 -- train ...");
  auto o = std::make_shared<LaunchOptions>();
  cmd->add_option("-n,--ranks", o->ranks, "number of ranks (processes)")
      ->required()
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--hostfile", o->hostfile, "Open MPI hostfile, to run on several machines")
      ->check(CLI::ExistingFile);
  cmd->add_option("--threads-per-rank", o->threads_per_rank,
                  "OpenMP threads per rank (default: the cores divided among the ranks)")
      ->check(CLI::Range(1, 1 << 16));
  cmd->add_flag("--dry-run", o->dry_run, "print the mpirun command instead of running it");
  // Everything after `--`, or from the first word that is not a launch option, is the command:
  // positionals_at_end stops option parsing at the first positional.
  auto command_words = std::make_shared<std::vector<std::string>>();
  cmd->add_option("command", *command_words, "the boostlm command and its arguments, after `--`");
  cmd->positionals_at_end();
  cmd->callback([o, command_words] {
    const std::vector<std::string>& command = *command_words;
    if (command.empty()) {
      throw error("nothing to launch: give the boostlm command after `--`, e.g. boostlm launch -n ",
                  o->ranks, " -- train --data DIR --out DIR");
    }
    if (command.front() == "launch") throw error("launch cannot launch itself");
    if (launched_by_mpi()) {
      throw error("launch starts mpirun itself: run it directly, not under mpirun");
    }
    const MpirunCommand plan = plan_mpirun(*o, command);
    if (o->dry_run) {
      std::printf("%s\n", to_shell(plan).c_str());
      return;
    }
    exec_mpirun(plan);
  });
}

}  // namespace boostlm::cli
