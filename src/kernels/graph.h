// A fixed sequence of kernel calls replayed as one launch: a CUDA graph on the CUDA backend
// (issue 47: launch gaps dominate a small model's step on a GPU), the calls themselves elsewhere.
//
//   KernelGraph g;
//   g.run(key, [&] { ...kernel calls... });   // every step
//
// The first run with a key runs the calls as they come (the warm-up: the caching allocator's
// blocks are then cached for the capture). The second captures them into a graph and launches
// it; every later run launches that graph and does not run `calls` at all. The calls must
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

namespace boostlm {

class KernelGraph {
 public:
  KernelGraph() = default;
  ~KernelGraph();
  KernelGraph(const KernelGraph&) = delete;
  KernelGraph& operator=(const KernelGraph&) = delete;

  void run(const std::vector<const void*>& key, const std::function<void()>& calls);
  // How many runs launched the graph (0 where calls ran each time).
  int64_t replays() const { return replays_; }

 private:
  void drop();
  std::vector<const void*> key_;
  int runs_with_key_ = 0;
  void* graph_ = nullptr;
  const void* backend_ = nullptr;  // the table that made graph_
  int64_t replays_ = 0;
};

// --cuda-graph: whether KernelGraph captures where the backend can (on by default).
void set_kernel_graphs(bool on);
bool kernel_graphs();

}  // namespace boostlm
