// `boostlm launch`: mpirun as a supervised child in a process group of its own, which the launcher
// stops on SIGINT/SIGTERM by asking the ranks to save (MpirunCommand::stop_signal); with
// --max-restarts K [--min-ranks M] restarted when the job fails, in the manner of torchrun's
// elastic agent (a failed worker group is torn down whole and started again, up to a restart
// budget, on the nodes that are still there).
#pragma once

#include <csignal>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace boostlm::cli {

struct MpirunCommand {
  std::vector<std::pair<std::string, std::string>> env;  // set for mpirun
  std::vector<std::string> argv;
  bool srun = false;  // argv is srun (inside a Slurm allocation), not mpirun
  // What asks the ranks to save and stop: mpirun and srun pass it on to every rank. SIGURG for a
  // train under mpirun (ignored by default, so a rank still starting drops it; see plan_mpirun),
  // SIGUSR1 otherwise (a command without a stop handler dies of it; srun passes SIGUSR1 on, not
  // SIGURG).
  int stop_signal = SIGUSR1;
};

// Whether the command is `train` (what launch saves on a stop and resumes on a restart).
bool is_train(const std::vector<std::string>& command);

// Replaces this process with the plan's mpirun (its environment set, stdio flushed first). Returns
// only when the exec failed, with errno saying why.
void exec_plan(const MpirunCommand& plan);

struct RestartPolicy {
  int max_restarts = 0;
  int min_ranks = 0;  // 0: never fewer than `ranks`
  int ranks = 0;
  std::string hostfile;  // empty: this machine
};

// The mpirun command for `ranks` ranks on `hostfile` (empty: this machine) running `command`.
using PlanMpirun = std::function<MpirunCommand(int ranks, const std::string& hostfile,
                                               const std::vector<std::string>& command)>;

// Runs the job; when it fails and restarts remain, says why on stderr and runs it again: a `train`
// command resumes from its run's latest checkpoint, and where fewer slots answer than the job had,
// it continues with fewer data-parallel replicas if at least min_ranks remain. The first SIGINT or
// SIGTERM reaches every rank as the plan's stop_signal (train saves a checkpoint and stops), a
// second one as mpirun's SIGTERM (the job ends without saving); either ends the supervision (no
// restart after the user stopped the job) and the launcher returns kInterruptedExitCode (130)
// unless the job had finished. Otherwise returns the exit code of the last attempt (128 + signal
// for mpirun killed by a signal).
int run_with_restarts(const RestartPolicy& policy, std::vector<std::string> command,
                      const PlanMpirun& plan);

}  // namespace boostlm::cli
