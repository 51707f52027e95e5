// The main of boostlm_comm_tests: gtest_main does not start MPI, so this one does when the program
// runs under mpirun (and runs as one process without MPI otherwise).
//
// Every rank runs every test. Rank 0 prints the usual report; the other ranks print only their
// failures, prefixed with their rank, so a failure on any rank is visible and makes its exit code
// (and so mpirun's) non-zero.
#include <gtest/gtest.h>

#include <cstdio>

#include "comm/mpi_runtime.h"

namespace {

class FailurePrinter : public testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: failure\n%s\n", rank_,
                 result.file_name() ? result.file_name() : "?", result.line_number(),
                 result.summary());
  }
  void OnTestEnd(const testing::TestInfo& info) override {
    if (info.result()->Failed()) {
      std::fprintf(stderr, "[rank %d] FAILED %s.%s\n", rank_, info.test_suite_name(), info.name());
    }
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  boostlm::mpi_start(&argc, &argv);
  testing::InitGoogleTest(&argc, argv);
  const int rank = boostlm::mpi_world_rank();
  if (rank != 0) {
    testing::TestEventListeners& listeners = testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailurePrinter(rank));
  }
  const int result = RUN_ALL_TESTS();
  boostlm::mpi_stop();
  return result;
}
