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

#include "comm/bf16_sum.h"
#include "comm/communicator.h"
#include "comm/watchdog.h"
#include "core/device.h"
#include "core/error.h"
#include "core/fiber.h"
#include "core/profile.h"

namespace boostlm {

// One collective handed to the progress thread. It lives on the stack of the task that issued it,
// which stays suspended until `done`.
struct OverlapOp {
  MPI_Comm comm = MPI_COMM_NULL;
  void* data = nullptr;
  int count = 0;                     // elements of `type`
  MPI_Datatype type = MPI_FLOAT;     // MPI_FLOAT; MPI_UINT16_T (bf16); a row of a row message
  int64_t element_bytes = 4;         // the bytes of one element of `type`
  MPI_Op op = MPI_SUM;               // MPI_SUM, MPI_MAX, or the bf16 sum (comm/bf16_sum.h)
  int64_t values = 0, stats = 0;     // a row message's row shape
  double started_s = 0, finished_s = 0;  // written by the progress thread before `done`
  std::atomic<bool> done{false};
};

namespace {

using Op = OverlapOp;

// The tag of the exchanges below on the TP communicator, which carries no other point-to-point
// traffic (its collectives match separately from point-to-point in MPI).
constexpr int kExchangeTag = 0x0b1;
// The most floats of one message of an exchange.

// inout = in ⊕ inout for an Op's elements, as MPI's operator would.
void combine(const Op& op, const void* in, void* inout, int64_t n) {
  if (op.type == MPI_FLOAT) {
    const auto* a = static_cast<const float*>(in);
    auto* x = static_cast<float*>(inout);
    if (op.op == MPI_MAX)
      for (int64_t i = 0; i < n; ++i) x[i] = std::max(x[i], a[i]);
    else
      for (int64_t i = 0; i < n; ++i) x[i] += a[i];
  } else if (op.type == MPI_UINT16_T) {
    sum_bf16(static_cast<const bf16_t*>(in), static_cast<bf16_t*>(inout), n);
  } else {
    sum_rows(in, inout, n, op.values, op.stats);
  }
}

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
    const int64_t bytes = op.count * op.element_bytes;
    if (scratch_.size() < static_cast<size_t>(bytes)) scratch_.resize(bytes);
    requests_.clear();
    pairs_ = size == 2;
    if (pairs_) {
      // Messages to one peer with one tag match in the order they were posted. Bytes: every
      // element type goes as it is; the sum is taken in test().
      const int peer = 1 - rank;
      const auto* out = static_cast<const char*>(op.data);
      for (int64_t at = 0; at < bytes; at += CommOverlap::kEagerBytes) {
        const int n = static_cast<int>(std::min<int64_t>(CommOverlap::kEagerBytes, bytes - at));
        requests_.emplace_back();
        MPI_Irecv(scratch_.data() + at, n, MPI_BYTE, peer, kExchangeTag, op.comm,
                  &requests_.back());
        requests_.emplace_back();
        MPI_Isend(out + at, n, MPI_BYTE, peer, kExchangeTag, op.comm, &requests_.back());
      }
    } else {
      requests_.emplace_back();
      MPI_Iallreduce(op.data, scratch_.data(), op.count, op.type, op.op, op.comm,
                     &requests_.back());
    }
  }

  // Lets MPI progress the transfer; true (and the result in place) once it is complete.
  bool test() {
    int finished = 0;
    MPI_Testall(static_cast<int>(requests_.size()), requests_.data(), &finished,
                MPI_STATUSES_IGNORE);
    if (!finished) return false;
    if (!pairs_)
      std::copy_n(scratch_.data(), op_->count * op_->element_bytes, static_cast<char*>(op_->data));
    else
      combine(*op_, scratch_.data(), op_->data, op_->count);
    in_flight_.reset();
    return true;
  }

 private:
  Op* op_ = nullptr;
  std::optional<DeviceAccess> in_flight_;
  std::vector<MPI_Request> requests_;
  bool pairs_ = false;
  std::vector<char> scratch_;
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
  Op op;
  op.comm = static_cast<MPI_Comm>(mpi_comm);
  op.data = data;
  op.count = static_cast<int>(count);
  op.op = max ? MPI_MAX : MPI_SUM;
  run_op(op, max ? "all_reduce_max" : "all_reduce");
}

void CommOverlap::all_reduce_bf16(void* mpi_comm, bf16_t* data, int64_t count, void* bf16_op) {
  Op op;
  op.comm = static_cast<MPI_Comm>(mpi_comm);
  op.data = data;
  op.count = static_cast<int>(count);
  op.type = MPI_UINT16_T;
  op.element_bytes = 2;
  op.op = static_cast<MPI_Op>(bf16_op);
  run_op(op, "all_reduce");
}

void CommOverlap::all_reduce_rows(void* mpi_comm, void* buffer, const RowMessage& m,
                                  void* row_type, void* bf16_op) {
  Op op;
  op.comm = static_cast<MPI_Comm>(mpi_comm);
  op.data = buffer;
  op.count = static_cast<int>(m.rows);
  op.type = static_cast<MPI_Datatype>(row_type);
  op.element_bytes = 2 * m.values_ld;
  op.op = static_cast<MPI_Op>(bf16_op);
  op.values = m.values;
  op.stats = m.stats;
  run_op(op, "all_reduce");
}

void CommOverlap::run_op(Op& op, const char* name) {
  BOOSTLM_ASSERT(Fibers::in_task());
  progress_->hand_over(&op);
  Fibers::yield();  // the other chunks compute while this one's data moves
  const double wait_start = now_s();
  if (!op.done.load(std::memory_order_acquire)) {
    WatchedExchange watch(group_.watch_name(), name, op.count * op.element_bytes);
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
