#include "core/graph_capture.h"

#include <atomic>
#include <utility>

namespace boostlm {
namespace {
thread_local GraphHostWork* t_work = nullptr;
std::atomic<uint64_t> g_next_id{1};
}  // namespace

GraphHostWork* set_graph_capture(GraphHostWork* work) {
  GraphHostWork* previous = t_work;
  if (work && work->id == 0) work->id = g_next_id.fetch_add(1);
  t_work = work;
  return previous;
}

uint64_t graph_capture_id() {
  return t_work ? t_work->id : 0;
}

void on_graph_replay(std::function<void()> action) {
  if (t_work) t_work->on_replay.push_back(std::move(action));
}

void after_graph_launch(std::function<void()> action) {
  if (t_work) t_work->after_launch.push_back(std::move(action));
}

}  // namespace boostlm
