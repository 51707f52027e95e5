// The run directory: checkpoint retention by step, refusing to mix runs, stale temporaries,
// metrics that survive a full disk and a resume.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_io.h"
#include "core/hostfile.h"
#include "train/run_dir.h"
#include "train_fixture.h"

namespace boostlm {
namespace {

namespace fs = std::filesystem;
using test_support::fresh_dir;

void touch_checkpoint(const fs::path& checkpoints, const std::string& name) {
  fs::create_directories(checkpoints / name);
  write_file_atomically((checkpoints / name / "model.safetensors").string(), "x");
}

// A PID no process has: a child that has exited and been reaped.
pid_t dead_pid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);
  return child;
}

TEST(RunDir, CheckpointsAreOrderedByStepNotName) {
  const fs::path dir = fresh_dir("rundir_order");
  for (const char* name : {"step_999999", "step_1000000", "step_000005", "step_abc", "latest_x"})
    touch_checkpoint(dir, name);
  const auto all = list_checkpoints(dir);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].step, 5);
  EXPECT_EQ(all[1].step, 999999);
  EXPECT_EQ(all[2].step, 1000000);
}

// Past step 999,999 the names no longer sort as the steps do: pruning by name deleted the newest.
TEST(RunDir, PruningPastAMillionStepsKeepsTheNewest) {
  const fs::path dir = fresh_dir("rundir_million");
  touch_checkpoint(dir, "step_999999");
  touch_checkpoint(dir, "step_1000000");
  write_file_atomically((dir / "latest").string(), "step_1000000\n");
  prune_checkpoints(dir, 1, "step_1000000");
  EXPECT_TRUE(fs::exists(dir / "step_1000000"));
  EXPECT_FALSE(fs::exists(dir / "step_999999"));
}

// A run resumed from an older checkpoint writes steps below those of newer ones: `latest` and the
// checkpoint just written survive even though their steps are not the highest.
TEST(RunDir, PruningSparesLatestAndTheCheckpointJustWritten) {
  const fs::path dir = fresh_dir("rundir_spare");
  for (const char* name :
       {"step_000010", "step_000020", "step_000030", "step_000040", "step_000050"})
    touch_checkpoint(dir, name);
  write_file_atomically((dir / "latest").string(), "step_000010\n");
  prune_checkpoints(dir, 2, "step_000020");
  EXPECT_TRUE(fs::exists(dir / "step_000010"));  // latest
  EXPECT_TRUE(fs::exists(dir / "step_000020"));  // just written
  EXPECT_FALSE(fs::exists(dir / "step_000030"));
  EXPECT_TRUE(fs::exists(dir / "step_000040"));  // the newest two
  EXPECT_TRUE(fs::exists(dir / "step_000050"));
}

TEST(RunDir, RefusesADirectoryHoldingAnotherRun) {
  const fs::path run = fresh_dir("rundir_claim");
  claim_run_directory(run, "", false);  // empty: fine
  touch_checkpoint(run / "checkpoints", "step_000004");
  write_file_atomically((run / "metrics.jsonl").string(), "{\"step\": 1}\n");
  try {
    claim_run_directory(run, "", false);
    ADD_FAILURE() << "a second run into the same directory was accepted";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("already holds a run"), std::string::npos) << message;
    EXPECT_NE(message.find("--resume"), std::string::npos) << message;
    EXPECT_NE(message.find("--overwrite"), std::string::npos) << message;
  }
  // Continuing the run there is fine, and leaves it as it is.
  claim_run_directory(run, (run / "checkpoints" / "step_000004").string(), false);
  EXPECT_TRUE(fs::exists(run / "metrics.jsonl"));
  // Resuming another run's checkpoint into it is not.
  const fs::path other = fresh_dir("rundir_claim_other");
  touch_checkpoint(other / "checkpoints", "step_000002");
  EXPECT_THROW(claim_run_directory(run, (other / "checkpoints" / "step_000002").string(), false),
               Error);
  // --overwrite removes the old run's files and nothing else.
  write_file_atomically((run / "notes.txt").string(), "mine");
  claim_run_directory(run, "", true);
  EXPECT_FALSE(holds_run(run));
  EXPECT_TRUE(fs::exists(run / "notes.txt"));
}

TEST(RunDir, CleansTemporariesOfDeadProcessesOnly) {
  const fs::path run = fresh_dir("rundir_stale");
  const fs::path ck = run / "checkpoints";
  const std::string dead = std::to_string(dead_pid());
  const std::string alive = std::to_string(::getppid());
  touch_checkpoint(ck, ".step_000010.tmp." + dead);   // a save cut short
  touch_checkpoint(ck, ".step_000012.tmp." + alive);  // a save in progress elsewhere
  write_file_atomically((ck / ("latest.tmp." + dead)).string(), "step_000010\n");
  write_file_atomically((run / ("config.json.tmp." + dead)).string(), "{}");
  // Replacing step_000020 was cut between moving the old copy aside and moving the new one in.
  touch_checkpoint(ck, ".step_000020.old." + dead);
  // Replacing step_000030 was cut after the new copy arrived: the old copy is garbage.
  touch_checkpoint(ck, "step_000030");
  touch_checkpoint(ck, ".step_000030.old." + dead);

  const auto actions = clean_stale_temporaries(run);
  EXPECT_EQ(actions.size(), 5u);
  EXPECT_FALSE(fs::exists(ck / (".step_000010.tmp." + dead)));
  EXPECT_TRUE(fs::exists(ck / (".step_000012.tmp." + alive)));
  EXPECT_FALSE(fs::exists(ck / ("latest.tmp." + dead)));
  EXPECT_FALSE(fs::exists(run / ("config.json.tmp." + dead)));
  EXPECT_TRUE(fs::exists(ck / "step_000020" / "model.safetensors"));
  EXPECT_FALSE(fs::exists(ck / (".step_000020.old." + dead)));
  EXPECT_TRUE(fs::exists(ck / "step_000030"));
  EXPECT_FALSE(fs::exists(ck / (".step_000030.old." + dead)));
}

// After a restart on another node, the last owner's PID names a process of its host, not of
// this one: its temporaries are stale even where a process of this host has that PID (here,
// our parent), and a moved-aside checkpoint goes back. The same PID of an owner on this host
// is alive and kept.
TEST(RunDir, CleansTemporariesOfAnOwnerOnAnotherHost) {
  const fs::path run = fresh_dir("rundir_other_host");
  const fs::path ck = run / "checkpoints";
  const std::string alive = std::to_string(::getppid());
  for (const bool elsewhere : {false, true}) {
    write_file_atomically((run / ".owner").string(), (elsewhere ? "another-host-" : "") +
                                                         this_host_name() + " " + alive + "\n");
    touch_checkpoint(ck, ".step_000012.tmp." + alive);
    touch_checkpoint(ck, ".step_000020.old." + alive);
    const auto actions = clean_stale_temporaries(run);
    EXPECT_EQ(fs::exists(ck / (".step_000012.tmp." + alive)), !elsewhere);
    EXPECT_EQ(fs::exists(ck / "step_000020" / "model.safetensors"), elsewhere);
    EXPECT_EQ(actions.size(), elsewhere ? 2u : 0u);
  }
  // The next owner is this process, on this host.
  record_run_owner(run);
  EXPECT_EQ(read_text_file((run / ".owner").string()),
            this_host_name() + " " + std::to_string(::getpid()) + "\n");
}

// A rank its launcher killed can outlive the launcher as a zombie until init reaps it (CI saw a
// resume keep such a rank's partial checkpoint): its temporaries are stale all the same.
TEST(RunDir, CleansTemporariesOfAZombie) {
  const fs::path run = fresh_dir("rundir_zombie");
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(0);
  // Not reaped yet: the child is a zombie once it has exited.
  for (int i = 0; i < 200; ++i) {
    siginfo_t info{};
    if (::waitid(P_PID, child, &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == child)
      break;
    ::usleep(10000);
  }
  ASSERT_EQ(::kill(child, 0), 0) << "the zombie is still there to signal";
  touch_checkpoint(run / "checkpoints", ".step_000004.tmp." + std::to_string(child));
  const auto actions = clean_stale_temporaries(run);
  EXPECT_EQ(actions.size(), 1u);
  EXPECT_FALSE(fs::exists(run / "checkpoints" / (".step_000004.tmp." + std::to_string(child))));
  ::waitpid(child, nullptr, 0);
}

TEST(RunDir, OneTrainerPerDirectory) {
  const fs::path run = fresh_dir("rundir_lock");
  {
    RunDirectoryLock first(run);
    try {
      RunDirectoryLock second(run);
      ADD_FAILURE() << "two locks on one run directory";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("in use by another boostlm train"), std::string::npos);
    }
  }
  EXPECT_NO_THROW(RunDirectoryLock again(run));  // released with the first
}

std::vector<int64_t> steps_in(const std::string& path) {
  std::vector<int64_t> steps;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);)
    steps.push_back(nlohmann::json::parse(line).at("step").get<int64_t>());
  return steps;
}

// A crash after step 7 with the last checkpoint at step 5: the resumed run redoes 6 and 7, and the
// file must hold each step once.
TEST(RunDir, MetricsOfAResumedRunHoldEachStepOnce) {
  const std::string path = (fresh_dir("rundir_metrics") / "metrics.jsonl").string();
  {
    MetricsLog log(path, -1);
    for (int step = 1; step <= 7; ++step) log.append({{"step", step}, {"loss", 1.0 / step}});
  }
  {
    std::ofstream cut(path, std::ios::app);
    cut << "{\"step\": 8, \"lo";  // the crash cut the last line
  }
  MetricsLog log(path, 5);
  EXPECT_EQ(log.dropped_lines(), 3);
  for (int step = 6; step <= 8; ++step) log.append({{"step", step}});
  EXPECT_EQ(steps_in(path), (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8}));
}

// With the disk full a write fails: the log says so (naming the file) instead of training on,
// and takes back the part of the line that was written.
TEST(RunDir, MetricsWriteFailureIsAnErrorAndLeavesNoPartialLine) {
  const std::string path = (fresh_dir("rundir_full") / "metrics.jsonl").string();
  MetricsLog log(path, -1);
  log.append({{"step", 1}});
  const auto size_after_one = fs::file_size(path);
  // RLIMIT_FSIZE makes writes beyond the limit fail (EFBIG) as a full disk would (ENOSPC).
  struct rlimit old_limit;
  ::getrlimit(RLIMIT_FSIZE, &old_limit);
  auto old_handler = ::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = {static_cast<rlim_t>(size_after_one + 10), old_limit.rlim_max};
  ::setrlimit(RLIMIT_FSIZE, &small);
  std::string message;
  try {
    log.append({{"step", 2}, {"padding", std::string(100, 'x')}});
  } catch (const Error& e) {
    message = e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &old_limit);
  ::signal(SIGXFSZ, old_handler);
  EXPECT_NE(message.find("metrics.jsonl"), std::string::npos) << message;
  EXPECT_EQ(fs::file_size(path), size_after_one);
}

// A metrics line's scalars for TensorBoard: its numbers under their tags, each group's bytes summed
// over kinds, and the committed checkpoint's begin-to-commit time.
TEST(RunDir, TensorboardScalarsOfAMetricsLine) {
  const auto line = nlohmann::json::parse(R"({"step": 4, "loss": 2.5, "lr": 0.001,
      "peak_rss_mb": 10, "peak_rss_mb_max": 12,
      "comm": {"tp": {"all_reduce": {"calls": 3, "bytes": 1000},
                      "all_gather": {"calls": 1, "bytes": 24}}, "dp": {}, "pp": {}},
      "save": {"stall_ms": 1.5}, "save_committed": [{"total_ms": 9.0}]})");
  std::map<std::string, float> scalars;
  for (const Scalar& s : tensorboard_scalars(line)) scalars[s.tag] = s.value;
  const std::map<std::string, float> expected = {
      {"loss/train", 2.5f},       {"optimizer/lr", 0.001f},     {"memory/peak_rss_mb", 12.0f},
      {"comm/tp_bytes", 1024.0f}, {"comm/dp_bytes", 0.0f},      {"comm/pp_bytes", 0.0f},
      {"checkpoint/stall_ms", 1.5f}, {"checkpoint/commit_ms", 9.0f}};
  EXPECT_EQ(scalars, expected);
}

// With an event file, each line's scalars follow it there; every file's first event after the
// version is a SessionLog START at its first step, a resumed log's at the first step to be rerun.
TEST(RunDir, MetricsLogWritesEventFiles) {
  const fs::path run = fresh_dir("metrics_events");
  auto event_files = [&] {
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(run))
      if (e.path().filename().string().starts_with("events.out.tfevents.")) files.push_back(e);
    return files;
  };
  {
    MetricsLog log((run / "metrics.jsonl").string(), -1, true);
    log.append({{"step", 1}, {"loss", 3.0}});
    log.append({{"step", 2}, {"loss", 2.0}});
  }
  ASSERT_EQ(event_files().size(), 1u);
  const std::string first = event_files()[0].string();
  // The version, a START at step 1, the 2 steps.
  EXPECT_EQ(read_tfrecords(read_text_file(first), first).size(), 4u);
  {
    MetricsLog log((run / "metrics.jsonl").string(), 1, true);
    EXPECT_NE(log.event_path(), first);
  }
  ASSERT_EQ(event_files().size(), 2u);
  const std::string second =
      event_files()[0].string() == first ? event_files()[1].string() : event_files()[0].string();
  const auto records = read_tfrecords(read_text_file(second), second);
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[1], session_start_event(0, 2).replace(1, 8, records[1].substr(1, 8)));
  // --overwrite takes the event files with the run.
  claim_run_directory(run, "", true);
  EXPECT_TRUE(event_files().empty());
}

}  // namespace
}  // namespace boostlm
