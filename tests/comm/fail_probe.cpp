// boostlm_fail_probe MODE: a 4-rank job in which rank 2 fails while the other ranks wait for it in
// an all-reduce. test_fail.sh checks that the whole job ends promptly, non-zero, with rank 2's
// message. MODE is how rank 2 fails:
//   error   a boostlm::Error reaches main, which hands it to fail_job (MPI_Abort, exit code 3)
//   assert  a BOOSTLM_ASSERT fails (abort handler: MPI_Abort, exit code 134)
//   exit    main returns 5 without MPI_Finalize, as a main that only prints errors would
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "comm/grid.h"
#include "comm/mpi_runtime.h"
#include "core/error.h"

int main(int argc, char** argv) {
  using namespace boostlm;
  mpi_start(&argc, &argv);
  const std::string mode = argc > 1 ? argv[1] : "";
  try {
    ProcessGrid grid(GridShape{1, 1, mpi_world_size()});
    Communicator& world = grid.world();
    world.barrier();  // every rank is up
    if (world.rank() == 2) {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));  // the others are blocked by now
      const auto now = std::chrono::system_clock::now().time_since_epoch();
      std::fprintf(stderr, "fail_probe: rank 2 fails at %.3f\n",
                   std::chrono::duration<double>(now).count());
      std::fflush(stderr);
      if (mode == "error") throw error("fail_probe: rank 2 fails on purpose (", mode, ")");
      BOOSTLM_ASSERT_MSG(mode != "assert", "fail_probe: rank 2 fails on purpose (assert)");
      if (mode == "exit") {
        std::fprintf(stderr, "fail_probe: rank 2 exits with code 5 on purpose\n");
        return 5;
      }
    }
    float x = 1;
    world.all_reduce(&x, 1);  // rank 2 never gets here
    std::printf("fail_probe: rank %d passed the all-reduce, which it must not\n", world.rank());
  } catch (const Error& e) {
    fail_job(e.what(), 3);
  }
  mpi_stop();
  return 0;
}
