#include "kernels/cuda/event_timer.h"

#include <algorithm>

#include "core/error.h"
#include "core/profile.h"

namespace boostlm::cuda {

EventTimer::~EventTimer() {
  for (EventApi::Event e : pool_) api_.destroy(e);
  for (const Pending& p : pending_) {
    api_.destroy(p.start);
    if (p.stop) api_.destroy(p.stop);
  }
}

EventApi::Event EventTimer::take() {
  if (pool_.empty()) {
    ++created_;
    return api_.create();
  }
  EventApi::Event e = pool_.back();
  pool_.pop_back();
  return e;
}

EventTimer::Interval EventTimer::start(StreamKey stream) {
  EventApi::Event e = take();
  api_.record(e, stream);
  pending_.push_back({next_, e, nullptr});
  return next_++;
}

void EventTimer::stop(Interval interval, StreamKey stream) {
  auto it = std::find_if(pending_.begin(), pending_.end(),
                         [&](const Pending& p) { return p.interval == interval; });
  BOOSTLM_ASSERT_MSG(it != pending_.end() && it->stop == nullptr,
                     "stopping an interval that was not started, or stopped twice");
  it->stop = take();
  api_.record(it->stop, stream);
}

EventTimer::Interval PhaseTimer::begin(const char* phase, StreamKey stream) {
  const EventTimer::Interval interval = timer_.start(stream);
  names_.emplace_back(interval, phase);
  return interval;
}

void PhaseTimer::collect() {
  timer_.collect([&](EventTimer::Interval interval, double seconds) {
    auto it = std::find_if(names_.begin(), names_.end(),
                           [&](const auto& n) { return n.first == interval; });
    BOOSTLM_ASSERT(it != names_.end());
    Profile::global().add(it->second, seconds);
    names_.erase(it);
  });
}

}  // namespace boostlm::cuda
