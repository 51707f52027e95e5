#include "comm/overlap.h"

#include <mpi.h>
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>

#include "comm/communicator.h"
#include "comm/watchdog.h"
#include "core/device.h"
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
  double started_s = 0, finished_s = 0;  // written by the progress thread before `done`
  std::atomic<bool> done{false};
};

// The tag of the exchanges below on the TP communicator, which carries no other point-to-point
// traffic (its collectives match separately from point-to-point in MPI).
constexpr int kExchangeTag = 0x0b1;
// The most floats of one message of an exchange.
constexpr int kEagerFloats = static_cast<int>(CommOverlap::kEagerBytes / sizeof(float));

// One all-reduce in flight on the progress thread. Between two ranks it is a single exchange of
// the whole buffer, both directions at once, and an element-wise sum (or max), the same on both
// ranks (a + b == b + a in IEEE arithmetic): Open MPI's MPI_Iallreduce (libnbc) runs an in-place
// all-reduce as a binomial reduce and then a broadcast, two transfers one after the other, which
// on a slow link takes twice as long. The exchange goes in messages of at most kEagerBytes (the
// launcher's eager limit, cli/launch.cpp), all posted at once: a larger message would go by
// rendezvous, whose go-ahead queues behind the other direction's bulk data, so the two directions
// would run one after the other. Larger groups use MPI_Iallreduce out of place (libnbc's ring for
// large buffers), copied back when it is done.
class InFlight {
 public:
  void start(Op& op) {
    op_ = &op;
    in_flight_.emplace("overlapped collective");  // MPI reads and writes op.data until test()
    int size = 0, rank = 0;
    MPI_Comm_size(op.comm, &size);
    MPI_Comm_rank(op.comm, &rank);
    if (scratch_.size() < static_cast<size_t>(op.count)) scratch_.resize(op.count);
    requests_.clear();
    pairs_ = size == 2;
    if (pairs_) {
      // Messages to one peer with one tag match in the order they were posted.
      const int peer = 1 - rank;
      for (int64_t at = 0; at < op.count; at += kEagerFloats) {
        const int n = static_cast<int>(std::min<int64_t>(kEagerFloats, op.count - at));
        requests_.emplace_back();
        MPI_Irecv(scratch_.data() + at, n, MPI_FLOAT, peer, kExchangeTag, op.comm,
                  &requests_.back());
        requests_.emplace_back();
        MPI_Isend(op.data + at, n, MPI_FLOAT, peer, kExchangeTag, op.comm, &requests_.back());
      }
    } else {
      requests_.emplace_back();
      MPI_Iallreduce(op.data, scratch_.data(), op.count, MPI_FLOAT, op.op, op.comm,
                     &requests_.back());
    }
  }

  // Lets MPI progress the transfer; true (and the result in place) once it is complete.
  bool test() {
    int finished = 0;
    MPI_Testall(static_cast<int>(requests_.size()), requests_.data(), &finished,
                MPI_STATUSES_IGNORE);
    if (!finished) return false;
    float* x = op_->data;
    const float* other = scratch_.data();
    const int n = op_->count;
    if (!pairs_)
      std::copy_n(other, n, x);
    else if (op_->op == MPI_MAX)
      for (int i = 0; i < n; ++i) x[i] = std::max(x[i], other[i]);
    else
      for (int i = 0; i < n; ++i) x[i] += other[i];
    in_flight_.reset();
    return true;
  }

 private:
  Op* op_ = nullptr;
  std::optional<DeviceAccess> in_flight_;
  std::vector<MPI_Request> requests_;
  bool pairs_ = false;
  std::vector<float> scratch_;
};

}  // namespace

// The progress thread: starts handed-over collectives in order and tests them until they finish.
struct CommOverlap::Progress {
  std::mutex mutex;
  std::condition_variable wake;
  std::deque<Op*> incoming;
  bool stop = false;
  const int poll_us;   // between polls
  std::thread thread;  // last: it starts running loop() at once

  explicit Progress(int poll) : poll_us(poll), thread([this] { loop(); }) {}

  // The progress thread shares its core with the compute of its own rank (and, on an emulated
  // cluster, of other hosts): at normal priority the scheduler lets it run only every few
  // milliseconds, and each step of a collective's protocol waits that long. A real-time priority
  // (root or CAP_SYS_NICE), else the highest nice value allowed (Linux: per thread, by its kernel
  // thread id), lets it in on time; it sleeps between polls, so it takes little from the compute.
  // Best effort: without either it still works, later.
  static void prioritise_this_thread() {
    sched_param param{};
    param.sched_priority = 1;
    if (pthread_setschedparam(pthread_self(), SCHED_FIFO, &param) == 0) return;
    setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), -10);
  }

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
    prioritise_this_thread();
    // One collective in flight at a time, in the order handed over: two at once would share the
    // link and both finish late, while the first one's chunk waits for it.
    std::deque<Op*> queued;
    Op* active = nullptr;
    InFlight transfer;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mutex);
        if (!active && queued.empty()) wake.wait(lock, [&] { return stop || !incoming.empty(); });
        if (stop && incoming.empty() && !active && queued.empty()) return;
        queued.insert(queued.end(), incoming.begin(), incoming.end());
        incoming.clear();
      }
      if (!active && !queued.empty()) {
        active = queued.front();
        queued.pop_front();
        active->started_s = now_s();
        transfer.start(*active);
      }
      if (transfer.test()) {
        active->finished_s = now_s();
        active->done.store(true, std::memory_order_release);
        active->done.notify_all();
        active = nullptr;
        continue;  // start the next one at once
      }
      std::this_thread::sleep_for(std::chrono::microseconds(poll_us));
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
  // On a device the TP collectives are NCCL's (or staged), already asynchronous on their stream;
  // the overlap's progress thread drives host-memory MPI collectives only.
  if (tp.device_transport()) {
    if (mode == OverlapMode::on)
      throw error("--tp-overlap on: the overlap hides host (MPI) collectives behind compute; with "
                  "--device cuda the TP collectives run on the device (NCCL or staged): use "
                  "--tp-overlap off or auto");
    return 1;
  }
  if (mode == OverlapMode::automatic && !tp.spans_hosts()) return 1;
  return chunks;
}

int overlap_poll_us(const char* text) {
  if (!text) return CommOverlap::kPollMicroseconds;
  char* end = nullptr;
  errno = 0;
  const long us = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || errno != 0 || us < 1 || us > 1000000)
    throw error("BOOSTLM_OVERLAP_POLL_US='", text,
                "' is not a number of microseconds from 1 to 1000000 (unset it for the default, ",
                CommOverlap::kPollMicroseconds, ")");
  return static_cast<int>(us);
}

CommOverlap::CommOverlap(Communicator& group)
    : group_(group),
      progress_(
          std::make_unique<Progress>(overlap_poll_us(std::getenv("BOOSTLM_OVERLAP_POLL_US")))) {}

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
