// Timing of GPU work with events recorded on the stream that runs it: a launch returns at once, so
// the host clock around it measures the enqueue, not the kernel. An interval is a pair of events
// (start, stop) recorded on a stream; collect() waits for the stopped intervals' last events (a
// visible synchronisation: call it where the step already waits, e.g. after reading the loss) and
// hands each interval's seconds to a sink, in the order the intervals started: the GEMM counters
// (gemm.h) and the profile's phases (core/profile.h).
//
// Events are pooled: an interval's pair goes back to the pool when it is collected, so a step that
// times the same work as the step before creates no event. The core here calls the events through
// an EventApi, so it is tested on the host with a fake; CudaEventApi (event_timer_cuda.cpp) is the
// real one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/cuda/caching_allocator.h"  // StreamKey

namespace boostlm::cuda {

class EventApi {
 public:
  using Event = void*;
  virtual ~EventApi() = default;
  virtual Event create() = 0;  // an event that records timing
  virtual void destroy(Event event) = 0;
  virtual void record(Event event, StreamKey stream) = 0;
  // Seconds from start to stop, waiting for stop to complete.
  virtual double elapsed_s(Event start, Event stop) = 0;
};

// cudaEventCreate / cudaEventRecord / cudaEventElapsedTime, every call checked.
EventApi& cuda_event_api();

class EventTimer {
 public:
  using Interval = int64_t;  // a ticket, unique for the timer's life
  explicit EventTimer(EventApi& api) : api_(api) {}
  ~EventTimer();  // destroys every event (pending intervals are dropped)
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;

  // Records the start of an interval on `stream`.
  Interval start(StreamKey stream);
  // Records its stop on `stream` (the stream it started on, or one ordered after it).
  void stop(Interval interval, StreamKey stream);
  // Waits for every stopped interval, calls sink(interval, seconds) for each in start order, and
  // returns their events to the pool. Intervals started but not stopped stay pending.
  template <typename Sink>
  void collect(Sink&& sink) {
    std::vector<Pending> still_open;
    for (const Pending& p : pending_) {
      if (p.stop == nullptr) {
        still_open.push_back(p);
        continue;
      }
      sink(p.interval, api_.elapsed_s(p.start, p.stop));
      pool_.push_back(p.start);
      pool_.push_back(p.stop);
    }
    pending_ = std::move(still_open);
  }

  std::size_t pending() const { return pending_.size(); }
  std::size_t events_created() const { return created_; }

 private:
  struct Pending {
    Interval interval;
    EventApi::Event start, stop;  // stop nullptr: not stopped yet
  };
  EventApi::Event take();

  EventApi& api_;
  std::vector<EventApi::Event> pool_;
  std::vector<Pending> pending_;
  Interval next_ = 0;
  std::size_t created_ = 0;
};

// Times named phases on a stream and books them into core/profile.h's Profile (what
// BOOSTLM_PHASE does with the host clock, for GPU work): begin/end around the work, collect()
// after the step's synchronisation.
class PhaseTimer {
 public:
  explicit PhaseTimer(EventApi& api) : timer_(api) {}
  EventTimer::Interval begin(const char* phase, StreamKey stream);
  void end(EventTimer::Interval interval, StreamKey stream) { timer_.stop(interval, stream); }
  // Adds each stopped phase's seconds to Profile::global() under its name.
  void collect();
  EventTimer& timer() { return timer_; }

 private:
  EventTimer timer_;
  std::vector<std::pair<EventTimer::Interval, const char*>> names_;
};

}  // namespace boostlm::cuda
