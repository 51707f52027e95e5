// Helpers shared by the communication tests.
//
// Every rank of the job runs every test, so whether a test skips may depend only on the job size,
// never on the rank: a skip on some ranks would leave the others waiting in a collective.
#pragma once

#include <gtest/gtest.h>
#include <mpi.h>

#include "comm/communicator.h"
#include "comm/mpi_runtime.h"

namespace boostlm::test {

#define REQUIRE_MPI()                                                      \
  do {                                                                     \
    if (!::boostlm::mpi_active()) {                                        \
      GTEST_SKIP() << "needs MPI: run under mpirun (ctest runs comm_np*)"; \
    }                                                                      \
  } while (0)

inline Communicator world_communicator() {
  return Communicator(static_cast<void*>(MPI_COMM_WORLD), "world");
}

// The counts must show exactly `calls` calls and `bytes` bytes of `kind`, and nothing of any other
// kind. In a group of one nothing is communicated, so nothing may be counted.
inline void expect_counted(const Communicator& comm, Collective kind, int64_t calls,
                           int64_t bytes) {
  const bool counted = comm.size() > 1;
  for (int k = 0; k < kCollectiveKinds; ++k) {
    const auto each = static_cast<Collective>(k);
    const bool is_kind = each == kind && counted;
    EXPECT_EQ(comm.counts()[each].calls, is_kind ? calls : 0) << to_string(each);
    EXPECT_EQ(comm.counts()[each].bytes, is_kind ? bytes : 0) << to_string(each);
  }
}

}  // namespace boostlm::test
