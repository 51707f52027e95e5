// boostlm_watchdog_probe MODE: a 2-rank job in which rank 0 waits for an exchange that rank 1
// never joins (rank 1 sleeps, outside any exchange, so only rank 0's watchdog can fire).
// test_watchdog.sh checks that the job ends within the 1 s timeout plus slack, with exit code 75
// and a message naming the group, the operation, its bytes and the step. MODE is the stuck
// exchange:
//   recv        a blocking receive with no matching send (1024 floats)
//   wait        a non-blocking receive, then CommRequest::wait (1024 floats)
//   all_reduce  an all-reduce rank 1 never joins (256 floats)
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "comm/grid.h"
#include "comm/mpi_runtime.h"
#include "comm/watchdog.h"

int main(int argc, char** argv) {
  using namespace boostlm;
  mpi_start(&argc, &argv);
  const std::string mode = argc > 1 ? argv[1] : "";
  ProcessGrid grid(GridShape{1, 1, mpi_world_size()});
  Communicator& world = grid.world();
  configure_watchdog(1.0);
  set_watchdog_step(7);
  world.barrier();  // every rank is up, and a completed exchange does not fire
  std::vector<float> buffer(1024);
  if (world.rank() == 0) {
    if (mode == "recv") world.recv(buffer.data(), 1024, 1, 0);
    if (mode == "wait") world.irecv(buffer.data(), 1024, 1, 0).wait();
    if (mode == "all_reduce") world.all_reduce(buffer.data(), 256);
    std::printf("watchdog_probe: rank 0 passed the stuck exchange, which it must not\n");
  } else {
    std::this_thread::sleep_for(std::chrono::seconds(60));
  }
  mpi_stop();
  return 0;
}
