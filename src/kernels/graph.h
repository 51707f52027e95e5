// A fixed sequence of kernel calls replayed as one launch: a CUDA graph on the CUDA backend
// (issue 47: launch gaps dominate a small model's step on a GPU), the calls themselves elsewhere.
//
//   KernelGraph g;
//   g.run(key, [&] { ...kernel calls... });   // every step
//
// The first run with a key runs the calls as they come (the warm-up: GEMM plans, workspaces and
// whatever else a first call sets up outside a capture). The second captures them into a graph
// (its allocations from a pool of its own, caching_allocator.h) and launches
// it; every later run launches that graph and does not run `calls` at all. What the calls do on
// the host besides enqueueing (a Communicator's counts; the watched wait for a collective in the
// graph) they register while capturing (core/graph_capture.h), and the graph runs it after its
// launches. The calls must
// therefore be the same calls with the same arguments at every run with one key: whatever
// changes from step to step (the learning rate, a step count) is read by the kernels from memory
// the caller writes before the run (AdamWStep), never passed by value; a key that changes (other
// buffers) captures again. Nothing inside may read device memory on the host: a capture refuses
// it. Off (set_kernel_graphs(false), --cuda-graph off) or on a backend without graphs, every run
// runs the calls.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/graph_capture.h"

namespace boostlm {

struct KernelTable;

class KernelGraph {
 public:
  KernelGraph() = default;
  ~KernelGraph();
  KernelGraph(const KernelGraph&) = delete;
  KernelGraph& operator=(const KernelGraph&) = delete;

  void run(const std::vector<const void*>& key, const std::function<void()>& calls);

 private:
  void drop();
  std::vector<const void*> key_;
  int runs_with_key_ = 0;
  void* graph_ = nullptr;
  const KernelTable* backend_ = nullptr;  // the table that made graph_
  GraphHostWork host_;                     // what graph_'s calls registered while captured
};

// --cuda-graph: whether KernelGraph captures where the backend can (on by default).
void set_kernel_graphs(bool on);
bool kernel_graphs();

}  // namespace boostlm
