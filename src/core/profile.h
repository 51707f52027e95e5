// Wall-clock time per named phase (attention, norm, loss, optimizer, ...), accumulated across
// calls. Cheap enough to leave on: one steady_clock read at each end of a scope.
#pragma once

#include <chrono>
#include <map>
#include <string>

namespace boostlm {

// Seconds on the monotonic clock, for intervals.
inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

class Profile {
 public:
  static Profile& global();
  void add(const char* phase, double seconds) { seconds_[phase] += seconds; }
  const std::map<std::string, double>& seconds() const { return seconds_; }
  void clear() { seconds_.clear(); }

 private:
  std::map<std::string, double> seconds_;
};

class ScopedPhase {
 public:
  explicit ScopedPhase(const char* phase)
      : phase_(phase), start_(std::chrono::steady_clock::now()) {}
  ~ScopedPhase() {
    Profile::global().add(
        phase_, std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
  }
  ScopedPhase(const ScopedPhase&) = delete;
  ScopedPhase& operator=(const ScopedPhase&) = delete;

 private:
  const char* phase_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace boostlm

#define BOOSTLM_CONCAT_(a, b) a##b
#define BOOSTLM_CONCAT(a, b) BOOSTLM_CONCAT_(a, b)
#define BOOSTLM_PHASE(name) ::boostlm::ScopedPhase BOOSTLM_CONCAT(phase_, __LINE__)(name)
