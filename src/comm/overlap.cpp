#include "comm/overlap.h"

#include <mpi.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "comm/communicator.h"
#include "comm/watchdog.h"
#include "core/error.h"
#include "core/fiber.h"
#include "core/profile.h"

namespace boostlm {

namespace {

// One collective handed to the progress thread. It lives on the stack of the task that issued it,
// which stays suspended until `done`.
struct Op {
  MPI_Comm comm = MPI_COMM_NULL;
  float* data = nullptr;
  int count = 0;
  MPI_Op op = MPI_SUM;
  MPI_Request request = MPI_REQUEST_NULL;
  double started_s = 0, finished_s = 0;  // written by the progress thread before `done`
  std::atomic<bool> done{false};
};

}  // namespace

// The progress thread: starts handed-over collectives in order and tests them until they finish.
struct CommOverlap::Progress {
  std::mutex mutex;
  std::condition_variable wake;
  std::deque<Op*> incoming;
  bool stop = false;
  std::thread thread;

  Progress() : thread([this] { loop(); }) {}
  ~Progress() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stop = true;
    }
    wake.notify_all();
    thread.join();
  }

  void hand_over(Op* op) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      incoming.push_back(op);
    }
    wake.notify_one();
  }

  void loop() {
    std::vector<Op*> active, started;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mutex);
        if (active.empty()) wake.wait(lock, [&] { return stop || !incoming.empty(); });
        if (stop && incoming.empty() && active.empty()) return;
        started.assign(incoming.begin(), incoming.end());
        incoming.clear();
      }
      for (Op* op : started) {
        op->started_s = now_s();
        MPI_Iallreduce(MPI_IN_PLACE, op->data, op->count, MPI_FLOAT, op->op, op->comm,
                       &op->request);
        active.push_back(op);
      }
      for (size_t i = 0; i < active.size();) {
        int finished = 0;
        MPI_Test(&active[i]->request, &finished, MPI_STATUS_IGNORE);
        if (!finished) {
          ++i;
          continue;
        }
        Op* op = active[i];
        op->finished_s = now_s();
        op->done.store(true, std::memory_order_release);
        op->done.notify_all();
        active.erase(active.begin() + static_cast<std::ptrdiff_t>(i));
      }
      if (!active.empty())
        std::this_thread::sleep_for(std::chrono::microseconds(kPollMicroseconds));
    }
  }
};

OverlapMode parse_overlap_mode(const std::string& text) {
  if (text == "on") return OverlapMode::on;
  if (text == "off") return OverlapMode::off;
  if (text == "auto") return OverlapMode::automatic;
  throw error("unknown --tp-overlap '", text, "' (expected on, off or auto)");
}

const char* to_string(OverlapMode mode) {
  switch (mode) {
    case OverlapMode::on:
      return "on";
    case OverlapMode::off:
      return "off";
    case OverlapMode::automatic:
      return "auto";
  }
  return "?";
}

int overlap_chunks(OverlapMode mode, int chunks, Communicator& tp) {
  if (tp.size() == 1 || mode == OverlapMode::off) return 1;
  if (mode == OverlapMode::automatic && !tp.spans_hosts()) return 1;
  return chunks;
}

CommOverlap::CommOverlap(Communicator& group)
    : group_(group), progress_(std::make_unique<Progress>()) {}

CommOverlap::~CommOverlap() = default;

void CommOverlap::run(const std::vector<std::function<void()>>& tasks) {
  group_.set_overlap(this);
  try {
    fibers_.run(tasks);
  } catch (...) {
    group_.set_overlap(nullptr);
    throw;
  }
  group_.set_overlap(nullptr);
}

void CommOverlap::all_reduce(void* mpi_comm, float* data, int64_t count, bool max) {
  BOOSTLM_ASSERT(Fibers::in_task());
  Op op;
  op.comm = static_cast<MPI_Comm>(mpi_comm);
  op.data = data;
  op.count = static_cast<int>(count);
  op.op = max ? MPI_MAX : MPI_SUM;
  progress_->hand_over(&op);
  Fibers::yield();  // the other chunks compute while this one's data moves
  const double wait_start = now_s();
  if (!op.done.load(std::memory_order_acquire)) {
    WatchedExchange watch(group_.watch_name(), max ? "all_reduce_max" : "all_reduce",
                          count * static_cast<int64_t>(sizeof(float)));
    op.done.wait(false, std::memory_order_acquire);
  }
  const double waited = now_s() - wait_start;
  stats_.collectives += 1;
  stats_.busy_s += op.finished_s - op.started_s;
  stats_.wait_s += waited;
  Profile::global().add("comm", waited);
  const double hidden = op.finished_s - op.started_s - waited;
  if (hidden > 0) Profile::global().add("comm_hidden", hidden);
}

}  // namespace boostlm
