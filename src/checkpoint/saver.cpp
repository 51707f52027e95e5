#include "checkpoint/saver.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <mutex>
#include <set>
#include <thread>

#include "checkpoint/index.h"
#include "comm/watchdog.h"
#include "core/device.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/hostfile.h"
#include "core/profile.h"
#include "formats/safetensors.h"

namespace boostlm {

namespace fs = std::filesystem;

namespace {

constexpr const char* kChecksums = "checksums.json";

// BOOSTLM_CHECKPOINT_FAULT=KIND@RANK[#N][:SECONDS], a test's fault in one rank's save (every
// save, or its N-th). In its writer: die (the process ends after its model file), full (the write
// fails as on a full disk), slow (the writer sleeps SECONDS, default 2, before its model file, as
// on a disk that stalls it). In rank 0's commit: rename (the rename into place fails), fsync (the
// directory fsync after it fails), die-commit (the process ends after the rename, before
// `latest`), latest (writing `latest` fails).
struct Fault {
  std::string kind;
  int rank = -1, save = 0;
  double seconds = 2;
};

Fault fault_for(int rank, int save) {
  const char* text = std::getenv("BOOSTLM_CHECKPOINT_FAULT");
  if (!text || !*text) return {};
  const std::string s = text;
  Fault f;
  const size_t at = s.find('@');
  if (at == std::string::npos) throw error("BOOSTLM_CHECKPOINT_FAULT='", s, "': KIND@RANK[#N][:S]");
  f.kind = s.substr(0, at);
  static const std::set<std::string> kinds = {"die",   "full",       "slow",  "rename",
                                              "fsync", "die-commit", "latest"};
  if (!kinds.contains(f.kind))
    throw error("BOOSTLM_CHECKPOINT_FAULT='", s,
                "': KIND is die, full, slow, rename, fsync, die-commit or latest");
  f.rank = std::atoi(s.c_str() + at + 1);
  if (const size_t hash = s.find('#'); hash != std::string::npos)
    f.save = std::atoi(s.c_str() + hash + 1);
  if (const size_t colon = s.find(':'); colon != std::string::npos)
    f.seconds = std::atof(s.c_str() + colon + 1);
  if (f.rank != rank || (f.save > 0 && f.save != save)) return {};
  return f;
}

std::string rank_file(const char* stem, int rank, int world) {
  if (world == 1) return std::string(stem) + ".safetensors";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s-r%05d.safetensors", stem, rank);
  return buf;
}

nlohmann::json piece_to_json(const TensorPiece& p) {
  return {{"shape", p.shape}, {"axis", p.axis}, {"begin", p.begin}, {"size", p.size},
          {"flat", {p.flat_begin, p.flat_stop()}}};
}

TensorPiece piece_from_json(const nlohmann::json& j) {
  TensorPiece p;
  p.shape = j.at("shape").get<std::vector<int64_t>>();
  p.axis = j.at("axis").get<int>();
  p.begin = j.at("begin").get<int64_t>();
  p.size = j.at("size").get<int64_t>();
  p.flat_begin = j.at("flat")[0].get<int64_t>();
  p.flat_end = j.at("flat")[1].get<int64_t>();
  return p;
}

// Every file a rank reported written is in the temporary directory as rank 0 sees it, at its
// size: a rank that wrote to a disk rank 0 does not see would otherwise leave a checkpoint of
// rank 0's files alone, committed and named by `latest`.
void check_files_seen(const std::vector<std::string>& reports, const std::string& temp_dir) {
  std::string unseen;
  int count = 0;
  for (size_t r = 0; r < reports.size(); ++r) {
    const nlohmann::json j = nlohmann::json::parse(reports[r]);
    if (!j.contains("sizes")) continue;
    for (const auto& [file, size] : j["sizes"].items()) {
      const fs::path path = fs::path(temp_dir) / file;
      std::error_code ec;
      const auto found = fs::file_size(path, ec);
      if (!ec && static_cast<int64_t>(found) == size.get<int64_t>()) continue;
      if (count++ < 4)
        unseen += (unseen.empty() ? "" : "; ") +
                  ("rank " + std::to_string(r) + "'s " + file + " (" +
                   std::to_string(size.get<int64_t>()) +
                   " bytes): " + (ec ? std::string("missing") : std::to_string(found) + " bytes"));
    }
  }
  if (count == 0) return;
  throw error(count, " file", count == 1 ? "" : "s", " that the ranks wrote ",
              count == 1 ? "is" : "are", " not in ", temp_dir, " as rank 0 sees it (", unseen,
              count > 4 ? "; ..." : "",
              "). Sharded checkpoints need a file system that every rank sees, as PyTorch "
              "DCP's and Megatron's do: put --out on one (not a disk of each node's own)");
}

}  // namespace

void check_shared_directory(Communicator& world, const std::string& dir) {
  if (world.size() == 1) return;
  // A name of this job's own (rank 0's clock and PID), so that no probe an earlier job left can
  // stand in for one; ".tmp.PID" makes a probe left by a crash a stale temporary for cleaning.
  int64_t token[2] = {static_cast<int64_t>(now_s() * 1e6), ::getpid()};
  world.broadcast_bytes(token, sizeof token, 0);
  auto probe = [&](int rank) {
    return fs::path(dir) / (".shared-probe-" + std::to_string(token[0]) + "-r" +
                            std::to_string(rank) + ".tmp." + std::to_string(token[1]));
  };
  const fs::path mine = probe(world.rank());
  nlohmann::json report = {{"host", this_host_name()}, {"error", ""}};
  try {
    if (!fs::is_directory(dir)) throw error("no directory ", dir, " on its host");
    write_file_atomically(mine.string(), report["host"].get<std::string>() + "\n");
  } catch (const std::exception& e) {
    report["error"] = e.what();
  }
  const std::vector<std::string> all = world.gather_text(report.dump(), 0);  // after every write
  std::string failure;
  if (world.rank() == 0) {
    const std::string root_host = nlohmann::json::parse(all[0])["host"].get<std::string>();
    for (size_t r = 0; r < all.size(); ++r) {
      const nlohmann::json j = nlohmann::json::parse(all[r]);
      const std::string who =
          "rank " + std::to_string(r) + " (host " + j["host"].get<std::string>() + ")";
      std::string why;
      if (!j["error"].get<std::string>().empty())
        why = who + " cannot write into it: " + j["error"].get<std::string>();
      else if (!fs::exists(probe(static_cast<int>(r))))
        why = who + " wrote a file into it that rank 0 (host " + root_host + ") does not see";
      if (!why.empty()) failure += (failure.empty() ? "" : "; ") + why;
    }
  }
  world.broadcast_text(failure, 0);
  std::error_code ignored;
  fs::remove(mine, ignored);
  if (!failure.empty())
    throw error("--out ", dir, " is not one directory that every rank sees: ", failure,
                ". Sharded checkpoints need a file system that every rank sees, as PyTorch DCP's "
                "and Megatron's do: put --out on one (not a disk of each node's own)");
}

WriteAssignment assign_writers(const ParamTable& table, const ShardRanks& r, bool zero1,
                               int64_t moments_begin, int64_t moments_end) {
  const auto& entries = table.entries();
  const size_t n = entries.size();
  WriteAssignment w{std::vector<bool>(n), std::vector<bool>(n)};
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return entries[a].numel > entries[b].numel; });
  // Bytes given so far to TP rank t of DP replica d (weights and moments, which go together
  // without ZeRO).
  std::vector<double> load(static_cast<size_t>(r.tp * r.dp), 0.0);
  auto at = [&](int t, int d) -> double& { return load[static_cast<size_t>(d * r.tp + t)]; };
  for (size_t i : order) {
    const ParamInfo& p = entries[i];
    const double bytes = static_cast<double>(p.numel) * (zero1 ? 4 : 12);
    int best_t = 0, best_d = 0;
    if (p.shard_axis >= 0 || r.tp == 1) {
      // Each TP rank writes its own shard: one DP replica, the least loaded, for all of them.
      double best = -1;
      for (int d = 0; d < r.dp; ++d) {
        double worst = 0;
        for (int t = 0; t < r.tp; ++t) worst = std::max(worst, at(t, d));
        if (best < 0 || worst < best) best = worst, best_d = d;
      }
      for (int t = 0; t < r.tp; ++t) at(t, best_d) += bytes;
      w.weights[i] = best_d == r.dp_rank;
    } else {
      double best = -1;
      for (int d = 0; d < r.dp; ++d)
        for (int t = 0; t < r.tp; ++t)
          if (best < 0 || at(t, d) < best) best = at(t, d), best_t = t, best_d = d;
      at(best_t, best_d) += bytes;
      w.weights[i] = best_t == r.tp_rank && best_d == r.dp_rank;
    }
    if (!zero1) w.moments[i] = w.weights[i];
  }
  if (!zero1) return w;
  // ZeRO-1: this DP replica's range; an unsharded tensor's part of it is held by every TP rank.
  std::vector<double> tp_load(static_cast<size_t>(r.tp), 0.0);
  for (size_t i : order) {
    const ParamInfo& p = entries[i];
    const int64_t held = piece_of(p, moments_begin, moments_end).numel();
    if (held == 0) continue;
    if (p.shard_axis >= 0 || r.tp == 1) {
      w.moments[i] = true;
      continue;
    }
    const size_t t = static_cast<size_t>(
        std::min_element(tp_load.begin(), tp_load.end()) - tp_load.begin());
    tp_load[t] += static_cast<double>(held);
    w.moments[i] = static_cast<int>(t) == r.tp_rank;
  }
  return w;
}

struct CheckpointSaver::JobItem {
  std::string name, file;
  TensorPiece piece;
  int64_t at = 0;  // in staging
};

struct CheckpointSaver::Job {
  std::string final_dir, temp_dir;
  std::vector<JobItem> items;
  const float* staging = nullptr;  // the saver's staging buffer
  std::string model_file, optimizer_file;
  RootFiles root;
  const ParamTable* full_table = nullptr;
  bool with_moments = false;
  Fault fault;
  double begun_at = 0;

  std::thread thread;
  std::mutex mutex;
  std::condition_variable finished;
  bool done = false;  // under mutex
  std::string failure;         // why the write failed
  std::exception_ptr cause;    // what failed it (a job of one process rethrows it as it came)
  std::map<std::string, std::string> checksums;
  std::map<std::string, int64_t> sizes;  // of the files written, for rank 0 to find them so
  int64_t bytes = 0;
  double write_s = 0;
  std::string writing;  // under mutex: the path the writer is at, for a save that never ends

  void at(const std::string& path) {
    std::lock_guard lock(mutex);
    writing = path;
  }

  void write() {
    const double t0 = now_s();
    try {
      at(temp_dir);
      fs::create_directories(temp_dir);
      for (const std::string& file : {model_file, optimizer_file}) {
        std::vector<TensorToWrite> tensors;
        for (const JobItem& it : items)
          if (it.file == file)
            tensors.push_back({it.name, it.piece.stored_shape(), staging + it.at});
        if (tensors.empty()) continue;
        const std::string path = (fs::path(temp_dir) / file).string();
        at(path);
        if (fault.kind == "slow" && file == model_file)
          std::this_thread::sleep_for(std::chrono::duration<double>(fault.seconds));
        if (fault.kind == "full" && file == optimizer_file)
          throw error("writing ", path, ": No space left on device (BOOSTLM_CHECKPOINT_FAULT)");
        checksums[file] = Checksum64::hex(
            write_safetensors(path, tensors, {{"format", "pt"}, {"producer", "boostlm"}}));
        sizes[file] = static_cast<int64_t>(fs::file_size(path));
        bytes += sizes[file];
        if (fault.kind == "die") {
          std::fprintf(stderr, "boostlm: BOOSTLM_CHECKPOINT_FAULT: this rank dies mid-save\n");
          std::_Exit(86);
        }
      }
    } catch (const std::filesystem::filesystem_error& e) {
      cause = std::current_exception();
      failure = describe_filesystem_error("writing the checkpoint's files", e);
    } catch (const std::exception& e) {
      cause = std::current_exception();
      failure = e.what();
    }
    write_s = now_s() - t0;
    std::lock_guard lock(mutex);
    done = true;
    finished.notify_all();
  }

  bool wait_for(double seconds) {
    std::unique_lock lock(mutex);
    finished.wait_for(lock, std::chrono::duration<double>(seconds), [&] { return done; });
    return done;
  }
};

CheckpointSaver::CheckpointSaver(Communicator& world, ShardRanks ranks, bool async,
                                 double timeout_s)
    : world_(world), ranks_(ranks), async_(async), timeout_s_(timeout_s) {}

CheckpointSaver::~CheckpointSaver() {
  if (job_ && job_->thread.joinable()) job_->thread.join();
}

double CheckpointSaver::pending_age_s() const {
  return job_ ? now_s() - job_->begun_at : 0;
}

std::string CheckpointSaver::pending_dir() const {
  return job_ ? job_->final_dir : "";
}

// Where each piece of a rank's share starts in its buffers.
struct CheckpointSaver::ShareSource {
  const FlatBuffer* buffer;
  int64_t at;
};

// What this rank writes of `s` (assign_writers), as items laid out one after the other in the
// staging buffer; returns their elements.
int64_t CheckpointSaver::plan_share(const RankState& s, const ShardRanks& ranks,
                                    const std::string& model_file,
                                    const std::string& optimizer_file,
                                    std::vector<JobItem>& items,
                                    std::vector<ShareSource>& sources) {
  const bool with_moments = s.exp_avg && s.exp_avg_sq;
  const int64_t m_begin = s.moments_begin;
  const int64_t m_end = s.moments_end < 0 ? s.table->total_elements() : s.moments_end;
  const WriteAssignment w = assign_writers(*s.table, ranks, s.zero1, m_begin, m_end);
  int64_t total = 0;
  const auto& entries = s.table->entries();
  for (size_t i = 0; i < entries.size(); ++i) {
    const ParamInfo& p = entries[i];
    if (w.weights[i]) {
      items.push_back({p.name, model_file, piece_of(p), total});
      sources.push_back({s.weights, p.offset});
      total += p.numel;
    }
    if (!with_moments || !w.moments[i]) continue;
    const TensorPiece held = s.zero1 ? piece_of(p, m_begin, m_end) : piece_of(p);
    if (held.numel() == 0) continue;
    const int64_t at = p.offset + held.flat_begin - m_begin;
    for (const auto& [suffix, buffer] : {std::pair{".exp_avg", s.exp_avg},
                                         std::pair{".exp_avg_sq", s.exp_avg_sq}}) {
      items.push_back({p.name + suffix, optimizer_file, held, total});
      sources.push_back({buffer, at});
      total += held.numel();
    }
  }
  return total;
}

void CheckpointSaver::reserve(const RankState& s) {
  std::vector<JobItem> items;
  std::vector<ShareSource> sources;
  staging_.reserve(static_cast<size_t>(plan_share(s, ranks_, "", "", items, sources)));
}

std::optional<SaveResult> CheckpointSaver::begin(const std::string& dir, const RankState& s,
                                                 RootFiles files) {
  BOOSTLM_ASSERT_MSG(!job_, "CheckpointSaver::begin: finish the pending save first");
  BOOSTLM_ASSERT(s.table && s.weights);
  const double t0 = now_s();
  auto job = std::make_unique<Job>();
  job->begun_at = t0;
  job->fault = fault_for(world_.rank(), ++saves_);
  const fs::path final_dir = fs::absolute(dir).lexically_normal();
  job->final_dir = final_dir.string();
  int64_t pid = ::getpid();  // the root's names the temporary directory
  world_.broadcast_bytes(&pid, sizeof pid, 0);
  job->temp_dir = (final_dir.parent_path() /
                   ("." + final_dir.filename().string() + ".tmp." + std::to_string(pid)))
                      .string();
  // No leftover of that name can exist: a failed save removes its own, and another process's has
  // another PID. (Removing one here would race with the other ranks' writers.)
  job->model_file = rank_file("model", world_.rank(), world_.size());
  job->optimizer_file = rank_file("optimizer", world_.rank(), world_.size());
  job->with_moments = s.exp_avg && s.exp_avg_sq;
  job->full_table = s.full_table;
  std::vector<ShareSource> sources;
  const int64_t total = plan_share(s, ranks_, job->model_file, job->optimizer_file, job->items,
                                   sources);
  // The stall: a copy of this rank's pieces (a download from a device) to host memory.
  float* staging = staging_.reserve(static_cast<size_t>(total));
  job->staging = staging;
  for (size_t k = 0; k < job->items.size(); ++k)
    device_download(staging + job->items[k].at,
                    sources[k].buffer->data() + sources[k].at,
                    static_cast<size_t>(job->items[k].piece.numel()) * sizeof(float));
  if (world_.rank() == 0) job->root = std::move(files);
  stall_s_ = now_s() - t0;
  job_ = std::move(job);
  // A thread in either mode, so that a synchronous save is bounded by the timeout too: its wait
  // is finish()'s.
  job_->thread = std::thread([job = job_.get()] { job->write(); });
  if (!async_) return finish();
  return std::nullopt;
}

std::optional<SaveResult> CheckpointSaver::poll() {
  if (!job_) return std::nullopt;
  return agree(/*wait=*/false);
}

std::optional<SaveResult> CheckpointSaver::finish() {
  if (!job_) return std::nullopt;
  return agree(/*wait=*/true);
}

std::optional<SaveResult> CheckpointSaver::agree(bool wait) {
  for (;;) {
    // Short waits between small all-reduces: no collective of the job lasts as long as the
    // slowest disk, so the watchdog never mistakes a save for a hang. That is why the save
    // bounds itself: a rank past the timeout says so in the same all-reduce, so that every rank
    // learns it at the same point.
    const bool done = wait ? job_->wait_for(0.05) : job_->wait_for(0);
    const bool overdue = !done && timeout_s_ > 0 && now_s() - job_->begun_at > timeout_s_;
    double votes[2] = {done ? 1.0 : 0.0, overdue ? 1.0 : 0.0};
    world_.all_reduce_host(votes, 2);
    if (votes[0] >= world_.size()) return commit();
    if (votes[1] > 0) end_overdue();
    if (!wait) return std::nullopt;
  }
}

void CheckpointSaver::commit_into_place(Job& job) {
  const Fault& fault = job.fault;
  // Into place; an existing checkpoint of the same name is swapped out, then removed.
  const fs::path temp(job.temp_dir), final_dir(job.final_dir);
  const fs::path old = final_dir.parent_path() /
                       ("." + final_dir.filename().string() + ".old." + std::to_string(::getpid()));
  const bool replace = fs::exists(final_dir);
  if (replace) fs::rename(final_dir, old);
  try {
    if (fault.kind == "rename")
      throw error("renaming ", temp.string(), " to ", final_dir.string(),
                  ": Input/output error (BOOSTLM_CHECKPOINT_FAULT)");
    fs::rename(temp, final_dir);
  } catch (...) {
    // The checkpoint it was to replace goes back where it was (or, should even that fail, the
    // next start's cleaning moves it back: train/run_dir.h).
    std::error_code ignored;
    if (replace) fs::rename(old, final_dir, ignored);
    throw;
  }
  // Committed: from here on the checkpoint is complete in its place, and what fails does not
  // undo it or call it lost.
  try {
    if (fault.kind == "fsync")
      throw error("fsync of ", final_dir.parent_path().string(),
                  ": Input/output error (BOOSTLM_CHECKPOINT_FAULT)");
    fsync_directory(final_dir.parent_path().string());
  } catch (const std::exception& e) {
    warn("checkpoint " + job.final_dir + " is committed, but the directory holding it could " +
         "not be synced (" + e.what() + "): a power loss now may lose the rename");
  }
  if (replace) {
    std::error_code ec;
    fs::remove_all(old, ec);
    if (ec)
      warn("checkpoint " + job.final_dir + " is committed, but the one it replaced, moved to " +
           old.string() + ", could not be removed (" + ec.message() +
           "); the next start removes it");
  }
  if (fault.kind == "die-commit") {
    std::fprintf(stderr, "boostlm: BOOSTLM_CHECKPOINT_FAULT: rank 0 dies after the commit\n");
    std::_Exit(86);
  }
  if (job.root.latest.empty()) return;
  try {
    if (fault.kind == "latest")
      throw error("writing ", job.root.latest,
                  ": No space left on device (BOOSTLM_CHECKPOINT_FAULT)");
    write_file_atomically(job.root.latest, final_dir.filename().string() + "\n");
  } catch (const std::exception& e) {
    throw error("checkpoint ", job.final_dir, " is committed and complete, but ", job.root.latest,
                " could not be updated to name it (", e.what(), "); resume from it with --resume ",
                job.final_dir);
  }
}

void CheckpointSaver::end_overdue() {
  Job& job = *job_;
  bool done = false;
  std::string writing;
  {
    std::lock_guard lock(job.mutex);
    done = job.done;
    writing = job.writing;
  }
  const nlohmann::json mine = {{"done", done}, {"writing", writing}};
  const std::vector<std::string> all = world_.gather_text(mine.dump(), 0);
  if (world_.rank() == 0) {
    std::string stuck;
    int count = 0;
    for (size_t r = 0; r < all.size(); ++r) {
      const nlohmann::json j = nlohmann::json::parse(all[r]);
      if (j["done"].get<bool>()) continue;
      stuck += (count++ ? "; rank " : "rank ") + std::to_string(r) + " at " +
               j["writing"].get<std::string>();
    }
    char seconds[32];
    std::snprintf(seconds, sizeof seconds, "%g", timeout_s_);
    report_as_watchdog(
        "boostlm: checkpoint " + job.final_dir + ": " + std::to_string(count) +
        (count == 1 ? " rank has" : " ranks have") + " not finished writing within " + seconds +
        " s of the save's start (" + stuck +
        "): a disk or network file system is stuck or far too slow. Ending the job (exit code " +
        std::to_string(kWatchdogExitCode) +
        "); the checkpoints committed before this one are intact, and the next start removes "
        "its temporary directory " +
        job.temp_dir +
        ". Raise --save-timeout if a save can legitimately take this long (0: wait forever).\n");
  }
  // Rank 0 ends the job with the message; the others follow once it is written (mpirun would
  // otherwise kill rank 0 before it has said why).
  world_.barrier();
  end_job_as_watchdog();
}

SaveResult CheckpointSaver::commit() {
  Job& job = *job_;
  if (job.thread.joinable()) job.thread.join();
  nlohmann::json mine = {{"files", job.checksums},
                         {"sizes", job.sizes},
                         {"bytes", job.bytes},
                         {"write_s", job.write_s},
                         {"error", job.failure}};
  nlohmann::json pieces = nlohmann::json::array();
  if (job.failure.empty())
    for (const JobItem& it : job.items)
      pieces.push_back({it.name, it.file, piece_to_json(it.piece)});
  mine["pieces"] = std::move(pieces);
  const std::vector<std::string> all = world_.gather_text(mine.dump(), 0);
  SaveResult result;
  result.dir = job.final_dir;
  result.stall_s = stall_s_;
  std::string failure;
  std::exception_ptr cause = job.cause;
  if (world_.rank() == 0) {
    try {
      CheckpointIndex index;
      index.grid = job.root.grid;
      nlohmann::json checksums = nlohmann::json::object();
      for (size_t r = 0; r < all.size(); ++r) {
        const nlohmann::json j = nlohmann::json::parse(all[r]);
        if (!j["error"].get<std::string>().empty())
          throw error("rank ", r, ": ", j["error"].get<std::string>());
        for (const auto& [file, sum] : j["files"].items()) checksums[file] = sum;
        for (const auto& p : j["pieces"])
          index.add(p[0].get<std::string>(), p[1].get<std::string>(), piece_from_json(p[2]));
        result.bytes += j["bytes"].get<int64_t>();
        result.write_s = std::max(result.write_s, j["write_s"].get<double>());
      }
      const std::string source = job.final_dir + " (being saved)";
      check_files_seen(all, job.temp_dir);
      index.check_complete(source);
      if (job.full_table)
        for (const ParamInfo& p : job.full_table->entries())
          for (const std::string suffix : {"", ".exp_avg", ".exp_avg_sq"}) {
            if (!suffix.empty() && !job.with_moments) continue;
            auto it = index.tensors.find(p.name + suffix);
            if (it == index.tensors.end() || it->second.shape != p.shape)
              throw error(source, ": no rank wrote '", p.name, suffix, "' ", shape_string(p.shape));
          }
      const fs::path temp(job.temp_dir);
      fs::create_directories(temp);
      auto add_file = [&](const std::string& name, std::string_view bytes) {
        AtomicFile file((temp / name).string());
        file.write(bytes);
        checksums[name] = Checksum64::hex(file.checksum());
        file.commit();
      };
      for (const auto& [name, text] : job.root.texts) add_file(name, text);
      for (const auto& [name, source_path] : job.root.copies)
        add_file(name, read_text_file(source_path));
      add_file(kIndexFile, index.to_json().dump(1) + "\n");
      write_file_atomically((temp / kChecksums).string(), checksums.dump(2) + "\n");
      fsync_directory(temp.string());
      commit_into_place(job);
    } catch (const std::exception& e) {
      failure = e.what();
      if (!cause) cause = std::current_exception();
      std::error_code ignored;
      fs::remove_all(job.temp_dir, ignored);  // what the failed save took; the others stay
    }
  }
  world_.broadcast_text(failure, 0);
  if (!failure.empty() && world_.rank() != 0) {
    // Where rank 0 could not see this rank's files (a disk of its own), they are this rank's
    // to remove; on a shared one rank 0 has removed them already.
    std::error_code ignored;
    fs::remove_all(job.temp_dir, ignored);
  }
  double times[2] = {result.write_s, static_cast<double>(result.bytes)};
  world_.broadcast_bytes(times, sizeof times, 0);
  result.write_s = times[0];
  result.bytes = static_cast<int64_t>(times[1]);
  result.total_s = now_s() - job.begun_at;
  job_.reset();
  // One process: its own exception, so that a caller's context (while_doing) can word it.
  if (!failure.empty() && world_.size() == 1 && cause) std::rethrow_exception(cause);
  if (!failure.empty()) throw error(failure);
  return result;
}

}  // namespace boostlm
