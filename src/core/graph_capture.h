// Host work beside a captured graph (kernels/graph.h).
//
// A graph replays what its calls enqueued on the device, nothing they did on the host. Where a call
// also keeps host state that must follow every run (a Communicator's counts of calls and bytes),
// or must be waited on from the host after a launch (a collective's completion, watched for a
// hang), it registers that here while a graph captures on its thread: `on_replay` actions run
// after each later launch of that graph (the capture's own run did the work itself), `after_launch`
// actions after every launch, the capture's included. Outside a capture both do nothing, and
// capture_id() is 0. It lives at the lowest floor so that comm/ and kernels/ can both use it.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace boostlm {

struct GraphHostWork {
  std::vector<std::function<void()>> on_replay, after_launch;
  uint64_t id = 0;  // set by set_graph_capture
};

// Which graph captures on this thread (nullptr: none); returns the one it replaces, for nesting.
GraphHostWork* set_graph_capture(GraphHostWork* work);
// A number per capture, distinct for every capture of the process (0: none on this thread), for a
// caller that registers something once per graph.
uint64_t graph_capture_id();
void on_graph_replay(std::function<void()> action);
void after_graph_launch(std::function<void()> action);

}  // namespace boostlm
