#include "train/run_dir.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <sstream>

#include "core/error.h"
#include "core/file_io.h"
#include "core/hostfile.h"

namespace boostlm {

namespace fs = std::filesystem;

namespace {

constexpr const char* kMetrics = "metrics.jsonl";
constexpr const char* kConfig = "config.json";
constexpr const char* kCheckpoints = "checkpoints";
constexpr const char* kEventFilePrefix = "events.out.tfevents.";

// The number `text` spells in decimal, or -1 when it is not all digits (or does not fit).
int64_t parse_digits(std::string_view text) {
  if (text.empty() || text.size() > 18) return -1;
  int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  return ec == std::errc() && end == text.data() + text.size() ? value : -1;
}

// True when `pid` has ended: no such process, or one that has exited and waits to be reaped (a
// zombie: a rank killed by its launcher is one until its parent, often init once the launcher has
// gone, collects it). The caller holds the run's lock, which the process that named a temporary
// held while it ran, so a process still exiting is given a moment (up to 2 s) to finish.
bool process_gone(int64_t pid) {
  if (pid == ::getpid()) return true;  // an earlier process that had our PID: we wrote nothing yet
  const auto ended = [pid] {
    if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return true;
    const std::string stat = read_text_file("/proc/" + std::to_string(pid) + "/stat");
    const size_t paren = stat.rfind(')');  // "PID (COMM) STATE ...": COMM may hold anything
    return paren != std::string::npos && paren + 2 < stat.size() &&
           (stat[paren + 2] == 'Z' || stat[paren + 2] == 'X');
  };
  for (int i = 0; i < 20; ++i) {
    try {
      if (ended()) return true;
    } catch (const std::exception&) {
      return true;  // its /proc entry went between the two looks
    }
    ::usleep(100000);
  }
  return false;
}

// "NAME.tmp.PID" or ".NAME.old.PID": {NAME without the leading dot, tag, PID}; pid < 0 otherwise.
struct Temporary {
  std::string original;
  std::string tag;
  int64_t pid = -1;
};

Temporary parse_temporary(const std::string& name) {
  Temporary t;
  for (const char* tag : {".tmp.", ".old."}) {
    const size_t at = name.rfind(tag);
    if (at == std::string::npos || at == 0) continue;
    const int64_t pid = parse_digits(std::string_view(name).substr(at + 5));
    if (pid <= 0) continue;
    t.original = name.substr(name[0] == '.' ? 1 : 0, at - (name[0] == '.' ? 1 : 0));
    t.tag = tag;
    t.pid = pid;
    return t;
  }
  return t;
}

}  // namespace

std::vector<CheckpointEntry> list_checkpoints(const fs::path& checkpoints) {
  std::vector<CheckpointEntry> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(checkpoints, ec)) {
    const std::string name = e.path().filename().string();
    if (!e.is_directory() || name.rfind("step_", 0) != 0) continue;
    const int64_t step = parse_digits(std::string_view(name).substr(5));
    if (step >= 0) out.push_back({step, e.path()});
  }
  std::sort(out.begin(), out.end(),
            [](const CheckpointEntry& a, const CheckpointEntry& b) { return a.step < b.step; });
  return out;
}

std::string latest_checkpoint_name(const fs::path& checkpoints) {
  const fs::path latest = checkpoints / "latest";
  if (!fs::exists(latest)) return "";
  std::string name = read_text_file(latest.string());
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  return name;
}

void prune_checkpoints(const fs::path& checkpoints, int64_t keep, const std::string& keep_also) {
  const std::vector<CheckpointEntry> all = list_checkpoints(checkpoints);
  const std::string latest = latest_checkpoint_name(checkpoints);
  const int64_t older = static_cast<int64_t>(all.size()) - std::max<int64_t>(1, keep);
  for (int64_t i = 0; i < older; ++i) {
    const std::string name = all[i].dir.filename().string();
    if (name == latest || name == keep_also) continue;
    fs::remove_all(all[i].dir);
  }
}

// A run is what a completed step leaves: a line of metrics or a checkpoint. A directory that a run
// made and left before its first step (config.json, an empty metrics.jsonl, no checkpoint) holds
// none, and the next `train -o` takes it over without --overwrite.
bool holds_run(const fs::path& run) {
  std::error_code ec;
  const auto metrics_bytes = fs::file_size(run / kMetrics, ec);
  if (!ec && metrics_bytes > 0) return true;
  ec.clear();
  return fs::is_directory(run / kCheckpoints, ec) && !fs::is_empty(run / kCheckpoints, ec);
}

void claim_run_directory(const fs::path& run, const std::string& resume_dir, bool overwrite) {
  if (!holds_run(run)) return;
  if (!resume_dir.empty()) {
    const fs::path checkpoints = fs::weakly_canonical(run / kCheckpoints);
    const fs::path resumed = fs::weakly_canonical(resume_dir);
    if (resumed.parent_path() == checkpoints) return;  // the run continues where it was
  }
  if (!overwrite)
    throw error("--out ", run.string(), " already holds a run (",
                fs::exists(run / kMetrics) ? "metrics.jsonl" : "checkpoints/",
                "). To continue it add --resume ", run.string(),
                "; to replace it add --overwrite (its metrics and checkpoints are deleted); or "
                "choose another --out");
  for (const char* name : {kMetrics, kConfig, kCheckpoints}) fs::remove_all(run / name);
  // TensorBoard merges every event file of a directory: the old run's would show as this one's.
  for (const auto& entry : fs::directory_iterator(run))
    if (entry.path().filename().string().starts_with(kEventFilePrefix)) fs::remove(entry.path());
}

namespace {

constexpr const char* kOwner = ".owner";

// The host and PID record_run_owner wrote ("" and -1 when there is none or it cannot be read).
std::pair<std::string, int64_t> run_owner(const fs::path& run) {
  try {
    if (!fs::exists(run / kOwner)) return {"", -1};
    const std::string text = read_text_file((run / kOwner).string());
    const size_t space = text.rfind(' ');
    if (space == std::string::npos) return {"", -1};
    std::string pid = text.substr(space + 1);
    while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
    return {text.substr(0, space), parse_digits(pid)};
  } catch (const std::exception&) {
    return {"", -1};
  }
}

}  // namespace

void record_run_owner(const fs::path& run) {
  write_file_atomically((run / kOwner).string(),
                        this_host_name() + " " + std::to_string(::getpid()) + "\n");
}

std::vector<std::string> clean_stale_temporaries(const fs::path& run) {
  const auto [owner_host, owner_pid] = run_owner(run);
  // The last owner ran on another host: its PID means nothing here, and the lock we hold says it
  // has ended.
  const bool owner_elsewhere = !owner_host.empty() && owner_host != this_host_name();
  std::vector<std::string> actions;
  for (const fs::path& dir : {run, run / kCheckpoints}) {
    std::error_code ec;
    std::vector<fs::path> entries;
    for (const auto& e : fs::directory_iterator(dir, ec)) entries.push_back(e.path());
    for (const fs::path& path : entries) {
      const Temporary t = parse_temporary(path.filename().string());
      if (t.pid < 0) continue;
      if (!(owner_elsewhere && t.pid == owner_pid) && !process_gone(t.pid)) continue;
      const fs::path original = dir / t.original;
      if (t.tag == ".old." && !fs::exists(original)) {
        fs::rename(path, original);
        actions.push_back("restored " + original.string() + " (its replacement never arrived)");
      } else {
        fs::remove_all(path);
        actions.push_back("removed " + path.string() + " (left by process " +
                          std::to_string(t.pid) + ")");
      }
    }
  }
  return actions;
}

RunDirectoryLock::RunDirectoryLock(const fs::path& run) {
  fs::create_directories(run);
  const std::string path = (run / ".lock").string();
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw error("cannot open ", path, ": ", std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    ::close(fd_);
    fd_ = -1;
    throw error("--out ", run.string(), " is in use by another boostlm train (it holds ", path,
                "); wait for it to end or choose another --out");
  }
}

RunDirectoryLock::~RunDirectoryLock() {
  if (fd_ >= 0) ::close(fd_);  // closing releases the lock
}

RunDirectoryLock& RunDirectoryLock::operator=(RunDirectoryLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

MetricsLog::MetricsLog(std::string path, int64_t keep_through_step, bool event_file)
    : path_(std::move(path)) {
  if (keep_through_step >= 0 && fs::exists(path_)) {
    std::istringstream lines(read_text_file(path_));
    std::string kept;
    for (std::string line; std::getline(lines, line);) {
      bool keep = false;
      try {
        const auto j = nlohmann::json::parse(line);
        keep = j.is_object() && j.value("step", int64_t{-1}) <= keep_through_step;
      } catch (const nlohmann::json::exception&) {  // a line cut short by a crash
      }
      if (keep)
        kept += line + "\n";
      else
        ++dropped_;
    }
    if (dropped_ > 0) write_file_atomically(path_, kept);
  }
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) throw error("cannot open ", path_, " for writing: ", std::strerror(errno));
  if (event_file) {
    // Every file starts a session: TensorBoard takes the first START of a directory for the run's
    // start and each later one for a restart, dropping the earlier points from its step on.
    events_ = EventFileWriter(fs::path(path_).parent_path());
    events_.write_session_start(std::max<int64_t>(keep_through_step, 0) + 1);
  }
}

MetricsLog::~MetricsLog() {
  if (fd_ >= 0) ::close(fd_);
}

MetricsLog::MetricsLog(MetricsLog&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(other.fd_),
      dropped_(other.dropped_),
      events_(std::move(other.events_)) {
  other.fd_ = -1;
}

MetricsLog& MetricsLog::operator=(MetricsLog&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = other.fd_;
    dropped_ = other.dropped_;
    events_ = std::move(other.events_);
    other.fd_ = -1;
  }
  return *this;
}

void MetricsLog::append(const nlohmann::json& line) {
  BOOSTLM_ASSERT_MSG(fd_ >= 0, "metrics log not open");
  const std::string text = line.dump() + "\n";
  const off_t before = ::lseek(fd_, 0, SEEK_END);
  try {
    write_fully(fd_, text.data(), text.size(), path_);
  } catch (const Error&) {
    if (before >= 0 && ::ftruncate(fd_, before) != 0) {  // best effort: no line cut short
    }
    throw;
  }
  if (events_.is_open() && line.contains("step"))
    events_.write_scalars(line["step"].get<int64_t>(), tensorboard_scalars(line));
}

namespace {

// The numbers of a metrics line that become scalars as they are, by JSON pointer.
struct ScalarSource {
  const char* tag;
  const char* pointer;
};
constexpr ScalarSource kScalarSources[] = {
    {"loss/train", "/loss"},
    {"loss/val", "/val_loss"},
    {"optimizer/lr", "/lr"},
    {"optimizer/grad_norm", "/grad_norm"},
    {"throughput/tokens_per_s", "/tokens_per_s"},
    {"throughput/mfu", "/mfu"},
    {"time/step_ms", "/step_ms"},
    {"progress/tokens_seen", "/tokens_seen"},
    {"memory/peak_rss_mb", "/peak_rss_mb_max"},  // the largest rank's
    {"pipeline/bubble_fraction", "/pipeline/bubble_fraction"},
    {"checkpoint/stall_ms", "/save/stall_ms"},
};

}  // namespace

std::vector<Scalar> tensorboard_scalars(const nlohmann::json& line) {
  std::vector<Scalar> scalars;
  for (const ScalarSource& source : kScalarSources) {
    const nlohmann::json::json_pointer pointer(source.pointer);
    if (line.contains(pointer) && line.at(pointer).is_number())
      scalars.push_back({source.tag, line.at(pointer).get<float>()});
  }
  // Bytes each group moved in the step, over every kind of collective (0 for a group of one).
  if (line.contains("comm"))
    for (const char* group : {"tp", "dp", "pp"}) {
      double bytes = 0;
      if (line["comm"].contains(group))
        for (const auto& [kind, counts] : line["comm"][group].items())
          bytes += counts.value("bytes", 0.0);
      scalars.push_back({std::string("comm/") + group + "_bytes", static_cast<float>(bytes)});
    }
  // A checkpoint committed in this step: from its begin to its commit (the last, should two be).
  if (line.contains("save_committed") && !line["save_committed"].empty())
    scalars.push_back(
        {"checkpoint/commit_ms", line["save_committed"].back().value("total_ms", 0.0f)});
  return scalars;
}

}  // namespace boostlm
