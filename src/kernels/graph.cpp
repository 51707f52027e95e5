#include "kernels/graph.h"

#include <atomic>

#include "kernels/backend.h"

namespace boostlm {

namespace {
std::atomic<bool> g_graphs{true};
}  // namespace

void set_kernel_graphs(bool on) {
  g_graphs.store(on);
}

bool kernel_graphs() {
  return g_graphs.load();
}

KernelGraph::~KernelGraph() {
  drop();
}

void KernelGraph::drop() {
  if (graph_) backend_->graphs.destroy(graph_);
  graph_ = nullptr;
  backend_ = nullptr;
  host_ = {};
}

void KernelGraph::run(const std::vector<const void*>& key, const std::function<void()>& calls) {
  const KernelTable& table = active_kernels();
  const KernelGraphHooks& hooks = table.graphs;
  if (!kernel_graphs() || !hooks.begin) {
    calls();
    return;
  }
  if (key != key_ || (graph_ && backend_ != &table)) {
    drop();
    key_ = key;
    runs_with_key_ = 0;
  }
  const bool replay = graph_ != nullptr;
  if (!graph_) {
    if (runs_with_key_++ == 0) {
      calls();  // the warm-up
      return;
    }
    host_ = {};
    hooks.begin();
    GraphHostWork* outer = set_graph_capture(&host_);
    try {
      calls();
    } catch (...) {
      set_graph_capture(outer);
      host_ = {};
      // The capture is ended and dropped; the calls' own error is the one reported.
      try {
        if (void* partial = hooks.end()) hooks.destroy(partial);
      } catch (...) {
      }
      throw;
    }
    set_graph_capture(outer);
    graph_ = hooks.end();
    backend_ = &table;
  }
  hooks.launch(graph_);
  if (replay)
    for (const auto& action : host_.on_replay) action();
  for (const auto& action : host_.after_launch) action();
}

}  // namespace boostlm
