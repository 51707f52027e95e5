#include "comm/mpi_runtime.h"

#include <mpi.h>

#include <cstdio>
#include <cstdlib>

#include "comm/watchdog.h"
#include "core/error.h"

namespace boostlm {
namespace {

// A failed assertion ends the job with the status of a process killed by SIGABRT (128 + 6), so
// scripts see the same code with and without MPI.
constexpr int kAssertExitCode = 134;

bool g_initialised_here = false;
bool g_thread_multiple = false;  // MPI granted MPI_THREAD_MULTIPLE
AbortHandler g_previous_abort_handler = nullptr;

// assert_fail has printed file:line; say which rank it was and take every rank down with it, so
// the others do not wait forever in their next collective.
void abort_job_on_assert(const std::string&) {
  std::fprintf(stderr, "boostlm: rank %d: assertion failed, aborting the job\n", mpi_world_rank());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, kAssertExitCode);
}

}  // namespace

// Open MPI's mpirun sets OMPI_COMM_WORLD_SIZE; PMIx launchers (Open MPI, Slurm) set PMIX_RANK;
// MPICH's Hydra and Slurm's PMI-1/2 set PMI_RANK.
bool mpi_thread_multiple() {
  return g_thread_multiple;
}

namespace {
int g_local_rank = 0, g_local_size = 1;  // the shared-memory split's, set by mpi_start
}  // namespace

bool launched_by_mpi() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMIX_RANK") || std::getenv("PMI_RANK");
}

int mpi_start(int* argc, char*** argv) {
  if (mpi_active()) return mpi_world_size();  // already started, by an earlier call or the host
  if (!launched_by_mpi()) return 1;
  // MULTIPLE: the progress thread of --tp-overlap (comm/overlap.h) calls MPI beside the main
  // thread; everything else needs only FUNNELED (OpenMP threads never call MPI).
  int provided = MPI_THREAD_SINGLE;
  MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
  g_thread_multiple = provided >= MPI_THREAD_MULTIPLE;
  g_initialised_here = true;
  // The default, made explicit: an MPI error ends the job instead of returning a code nobody reads.
  // Communicators made later (dup, split) inherit it.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
  if (provided < MPI_THREAD_FUNNELED) {
    fail_job("this MPI does not support MPI_THREAD_FUNNELED (OpenMP threads beside MPI calls)");
  }
  g_previous_abort_handler = set_abort_handler(abort_job_on_assert);
  set_warning_rank(mpi_world_rank());
  MPI_Comm local = MPI_COMM_NULL;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
  MPI_Comm_rank(local, &g_local_rank);
  MPI_Comm_size(local, &g_local_size);
  MPI_Comm_free(&local);
  return mpi_world_size();
}

int mpi_local_rank() {
  return mpi_active() ? g_local_rank : 0;
}

int mpi_local_size() {
  return mpi_active() ? g_local_size : 1;
}

void mpi_stop() {
  stop_watchdog();  // nothing is exchanged after this
  if (!g_initialised_here || !mpi_active()) return;
  set_abort_handler(g_previous_abort_handler);
  MPI_Finalize();
  g_initialised_here = false;
}

bool mpi_active() {
  int initialised = 0, finalised = 0;
  MPI_Initialized(&initialised);
  MPI_Finalized(&finalised);
  return initialised && !finalised;
}

int mpi_world_rank() {
  if (!mpi_active()) return 0;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

int mpi_world_size() {
  if (!mpi_active()) return 1;
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

void fail_job(const std::string& message, int code) {
  std::fflush(stdout);  // keep what this rank printed before the message
  std::fprintf(stderr, "boostlm: rank %d: %s\n", mpi_world_rank(), message.c_str());
  std::fflush(stderr);
  // MPI_Abort makes mpirun kill every rank of the job; the others may be blocked in a collective
  // that this rank will never join.
  if (mpi_active()) MPI_Abort(MPI_COMM_WORLD, code);
  std::exit(code);
}

}  // namespace boostlm
