#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <string_view>
#include <thread>

#include "cli/checks.h"
#include "cli/commands.h"
#include "comm/mpi_runtime.h"
#include "core/error.h"
#include "core/threads.h"
#include "train/trainer.h"

namespace {

// Ranks started without `launch` (srun --mpi=pmix, a bare mpirun) get no OMP_NUM_THREADS, and
// OpenMP would give each all the cores: two ranks on two cores then spin against each other, 47x
// slower per step under srun (issue 39). Where OMP_NUM_THREADS is unset, a process takes the
// cores it is bound to when the scheduler bound it to fewer than the machine's; else the CPUs
// Slurm gave its task (SLURM_CPUS_PER_TASK, set by --cpus-per-task: the scheduler's count, which
// is the only one that knows about the other jobs on the node); else, a rank of several, its share
// of the machine's cores (the machine's over its host's ranks, MPI's own count), as `launch`
// would have set.
void set_rank_threads() {
  if (std::getenv("OMP_NUM_THREADS")) return;
  cpu_set_t mask;
  CPU_ZERO(&mask);
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  int usable = cores;
  if (sched_getaffinity(0, sizeof mask, &mask) == 0) usable = std::max(1, CPU_COUNT(&mask));
  if (usable < cores) {
    omp_set_num_threads(usable);
    return;
  }
  if (const char* slurm = std::getenv("SLURM_CPUS_PER_TASK")) {
    const int given = std::atoi(slurm);
    if (given >= 1) {
      omp_set_num_threads(std::min(given, cores));
      return;
    }
  }
  if (boostlm::mpi_world_size() > 1)
    omp_set_num_threads(std::max(1, cores / std::max(1, boostlm::mpi_local_size())));
}

}  // namespace

int main(int argc, char** argv) {
  // Under mpirun every rank runs the same command (MPI starts only then); a failure on any rank
  // ends the whole job with that rank's message instead of leaving the others waiting.
  // train saves and stops on a stop signal; its handlers go in before anything that takes time.
  if (argc > 1 && std::string_view(argv[1]) == "train") boostlm::install_stop_signal_handlers();
  boostlm::mpi_start(&argc, &argv);
  set_rank_threads();
  CLI::App app{"boostlm: training low-rank LLaMA models (BOOST, arXiv 2512.12131)"};
  app.require_subcommand(1);
  boostlm::cli::show_defaults(app);
  app.set_version_flag("--version", "boostlm 0.1");
  boostlm::cli::add_prepare(app);
  boostlm::cli::add_train(app);
  boostlm::cli::add_eval(app);
  boostlm::cli::add_init(app);
  boostlm::cli::add_generate(app);
  boostlm::cli::add_convert(app);
  boostlm::cli::add_launch(app);
  boostlm::cli::add_plan(app);
  boostlm::cli::add_calibrate(app);
  boostlm::cli::add_bench(app);
  boostlm::cli::add_plot(app);
  boostlm::cli::finish_help(app);
  int code = 0;
  try {
    boostlm::ThreadGovernor::instance();  // checks BOOSTLM_THREADS before any work
    boostlm::cli::check_command_name(app, argc, argv);
    app.parse(argc, argv);
    code = boostlm::cli::exit_code();
  } catch (const CLI::ParseError& e) {
    code = app.exit(e);
    if (code != 0 && boostlm::mpi_world_size() > 1) boostlm::fail_job("bad command line", code);
  } catch (const std::exception& e) {  // boostlm::Error, and filesystem or allocation failures
    const std::string name =
        app.get_subcommands().empty() ? "" : " " + app.get_subcommands()[0]->get_name();
    const bool out_of_memory = dynamic_cast<const std::bad_alloc*>(&e) != nullptr;
    const std::string message =
        "boostlm" + name + ": error: " +
        (out_of_memory ? "out of memory (a smaller model, batch or more ranks would fit)"
                       : e.what());
    if (boostlm::mpi_world_size() > 1) boostlm::fail_job(message);
    std::fprintf(stderr, "%s\n", message.c_str());
    code = 1;
  }
  boostlm::mpi_stop();
  return code;
}
