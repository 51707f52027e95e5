// Starting and stopping MPI, and making a failure on any rank end the whole job.
#pragma once

#include <string>

namespace boostlm {

// True when this process was started by mpirun/mpiexec (Open MPI or PMIx environment variables).
bool launched_by_mpi();

// Initialises MPI if launched_by_mpi() (asking for MPI_THREAD_MULTIPLE, needing FUNNELED), and
// installs an abort handler so a failed BOOSTLM_ASSERT on any rank calls MPI_Abort. Safe to call
// when not under mpirun: then it does nothing and the program runs as one process. Returns the
// world size (1 without MPI).
int mpi_start(int* argc, char*** argv);
void mpi_stop();  // MPI_Finalize if mpi_start initialised MPI
bool mpi_active();
int mpi_world_rank();  // 0 without MPI
int mpi_world_size();  // 1 without MPI
// This process's rank among the ranks of its host, and their number: an MPI shared-memory split of
// the world (MPI_COMM_TYPE_SHARED) made once by mpi_start; 0 and 1 without MPI. What a host is
// for the GPU a rank takes, the memory check and the ranks' threads, however the ranks were
// started (launch, mpirun, srun --mpi=pmix), not from the launcher's variables.
int mpi_local_rank();
int mpi_local_size();
// Whether MPI granted MPI_THREAD_MULTIPLE (what comm/overlap.h's progress thread needs).
bool mpi_thread_multiple();

// Prints "boostlm: rank R: <message>" to stderr and ends the whole job with `code` (MPI_Abort), or
// exits the process with `code` when MPI is not active. Never returns.
[[noreturn]] void fail_job(const std::string& message, int code = 1);

}  // namespace boostlm
