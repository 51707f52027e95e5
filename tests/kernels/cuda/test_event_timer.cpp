// Event timing: the pooled interval bookkeeping on the host with a fake event API (each stream a
// clock the test moves), and on a GPU real events around real work (skipped without one).
#include <gtest/gtest.h>

#include <map>
#include <utility>
#include <vector>

#include "core/profile.h"
#include "kernels/cuda/cuda_test_util.h"
#include "kernels/cuda/event_timer.h"
#include "kernels/cuda/kernels.h"

namespace boostlm::cuda {
namespace {

// An event records its stream's clock at record(); elapsed is the difference.
class FakeEvents final : public EventApi {
 public:
  Event create() override {
    ++created;
    Event e = reinterpret_cast<Event>(static_cast<uintptr_t>(created) * 16);
    times[e] = -1;
    return e;
  }
  void destroy(Event e) override {
    EXPECT_EQ(times.erase(e), 1u) << "destroying an unknown event";
    ++destroyed;
  }
  void record(Event e, StreamKey stream) override { times.at(e) = clock[stream]; }
  double elapsed_s(Event start, Event stop) override {
    ++waits;
    return times.at(stop) - times.at(start);
  }
  std::map<StreamKey, double> clock;
  std::map<Event, double> times;
  int created = 0, destroyed = 0, waits = 0;
};

const StreamKey kCompute = reinterpret_cast<StreamKey>(0x100);
const StreamKey kComm = reinterpret_cast<StreamKey>(0x200);

TEST(EventTimer, IntervalsAreMeasuredOnTheirStreamsAndCollectedInStartOrder) {
  FakeEvents api;
  {
    EventTimer timer(api);
    api.clock[kCompute] = 1.0;
    api.clock[kComm] = 10.0;
    const auto a = timer.start(kCompute);
    const auto b = timer.start(kComm);  // overlapping, on another stream
    api.clock[kCompute] = 1.5;
    const auto c = timer.start(kCompute);  // nested in a
    api.clock[kCompute] = 1.75;
    timer.stop(c, kCompute);
    api.clock[kComm] = 13.0;
    timer.stop(b, kComm);
    api.clock[kCompute] = 3.0;
    timer.stop(a, kCompute);
    const auto open = timer.start(kCompute);  // not stopped: stays pending
    EXPECT_EQ(timer.pending(), 4u);
    std::vector<std::pair<EventTimer::Interval, double>> seen;
    timer.collect([&](EventTimer::Interval i, double s) { seen.emplace_back(i, s); });
    ASSERT_EQ(seen.size(), 3u);
    EXPECT_EQ(seen[0], std::make_pair(a, 2.0));
    EXPECT_EQ(seen[1], std::make_pair(b, 3.0));
    EXPECT_EQ(seen[2], std::make_pair(c, 0.25));
    EXPECT_EQ(timer.pending(), 1u);
    api.clock[kCompute] = 4.0;
    timer.stop(open, kCompute);
    seen.clear();
    timer.collect([&](EventTimer::Interval i, double s) { seen.emplace_back(i, s); });
    ASSERT_EQ(seen.size(), 1u);
    EXPECT_EQ(seen[0], std::make_pair(open, 1.0));
  }
  EXPECT_EQ(api.destroyed, api.created);  // the timer destroys every event it made
  EXPECT_TRUE(api.times.empty());
}

// Events are pooled: a step that times the same work as the previous one creates none.
TEST(EventTimer, RepeatedStepsReuseTheirEvents) {
  FakeEvents api;
  EventTimer timer(api);
  auto step = [&] {
    std::vector<EventTimer::Interval> open;
    for (int i = 0; i < 5; ++i) open.push_back(timer.start(kCompute));
    for (auto i : open) timer.stop(i, kCompute);
    timer.collect([](EventTimer::Interval, double) {});
  };
  step();
  EXPECT_EQ(timer.events_created(), 10u);
  for (int i = 0; i < 4; ++i) step();
  EXPECT_EQ(timer.events_created(), 10u);
  EXPECT_EQ(api.created, 10);
  EXPECT_EQ(api.waits, 25);
}

TEST(EventTimerDeathTest, StoppingTwiceIsABrokenInvariant) {
  FakeEvents api;
  EventTimer timer(api);
  const auto i = timer.start(kCompute);
  timer.stop(i, kCompute);
  EXPECT_DEATH(timer.stop(i, kCompute), "stopped twice");
  EXPECT_DEATH(timer.stop(12345, kCompute), "not started");
}

TEST(EventTimer, PhasesAreBookedIntoTheProfile) {
  FakeEvents api;
  PhaseTimer phases(api);
  Profile::global().clear();
  api.clock[kCompute] = 0.0;
  const auto norm = phases.begin("norm", kCompute);
  api.clock[kCompute] = 0.25;
  phases.end(norm, kCompute);
  for (int i = 0; i < 2; ++i) {
    const auto gemm = phases.begin("gemm_fake", kCompute);
    api.clock[kCompute] += 0.5;
    phases.end(gemm, kCompute);
  }
  phases.collect();
  EXPECT_DOUBLE_EQ(Profile::global().seconds().at("norm"), 0.25);
  EXPECT_DOUBLE_EQ(Profile::global().seconds().at("gemm_fake"), 1.0);
  Profile::global().clear();
}

// ---- On a GPU: real events around real work on a stream.
using CudaEventTimer = testing::DeviceTest;

TEST_F(CudaEventTimer, MeasuresWorkOnTheStream) {
  EventTimer timer(cuda_event_api());
  const int64_t n = int64_t{1} << 26;  // 256 MB of fills: milliseconds on any GPU
  testing::DeviceArray<float> x(n);
  const auto empty = timer.start(stream);
  timer.stop(empty, stream);
  const auto work = timer.start(stream);
  for (int i = 0; i < 4; ++i) fill(x.get(), n, static_cast<float>(i), stream);
  timer.stop(work, stream);
  std::map<EventTimer::Interval, double> seconds;
  timer.collect([&](EventTimer::Interval i, double s) { seconds[i] = s; });
  ASSERT_EQ(seconds.size(), 2u);
  EXPECT_GE(seconds[empty], 0.0);
  EXPECT_LT(seconds[empty], 1e-3);
  EXPECT_GT(seconds[work], seconds[empty]);
  EXPECT_GT(seconds[work], 1e-5);  // 1 GB written
#ifdef BOOSTLM_CUDA_EMULATOR
  // The emulated device (BOOSTLM_CUDA=EMULATE) runs each of the 2^24 threads of a fill as a fiber
  // on one host core: seconds, not milliseconds; the bound only catches a unit error there.
  EXPECT_LT(seconds[work], 120.0);
#else
  EXPECT_LT(seconds[work], 1.0);
#endif
  std::printf("4 fills of %lld floats: %.3f ms (%.0f GB/s)\n", static_cast<long long>(n),
              seconds[work] * 1e3, 4.0 * n * 4 / seconds[work] * 1e-9);
}

}  // namespace
}  // namespace boostlm::cuda
