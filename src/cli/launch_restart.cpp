// How a failed job is restarted (launch_restart.h). The launcher stays outside the job: it never
// joins MPI, so it survives whatever ends the ranks (a rank killed, the communication watchdog, a
// host gone), and decides from mpirun's exit status alone.
#include "cli/launch_restart.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <map>
#include <sstream>
#include <string_view>
#include <thread>

#include "cli/commands.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/hostfile.h"
#include "train/run_dir.h"

namespace boostlm::cli {
namespace {

namespace fs = std::filesystem;

// mpirun could not be started at all (the child's exec failed): a restart cannot help.
constexpr int kExecFailed = 127;

volatile sig_atomic_t g_child = 0;
volatile sig_atomic_t g_child_srun = 0;        // the child is srun: two SIGINTs abort its step
volatile sig_atomic_t g_child_stop = SIGUSR1;  // the child's MpirunCommand::stop_signal
volatile sig_atomic_t g_stop_signal = 0;       // the first SIGINT or SIGTERM
volatile sig_atomic_t g_stop_count = 0;

// mpirun runs in a process group of its own (run_child), so a Ctrl-C at a terminal or a signal to
// the launcher's process group reaches this process alone, once, and is passed on from here only.
// mpirun's own SIGINT/SIGTERM handling would not do: it sends the ranks SIGTERM and kills them one
// second later (odls_base_sigkill_timeout), too soon for a checkpoint, and a second SIGINT (the
// same signal reaching it directly and from here) kills them at once. The plan's stop signal is
// passed on to every rank instead (SIGURG for train, SIGUSR1 for the rest: Open MPI forwards them),
// and a train rank saves and stops on it. A second stop signal gives up on the save: SIGTERM to
// mpirun, which ends the job.
extern "C" void forward_signal(int sig) {
  const bool first = g_stop_count == 0;
  g_stop_count = g_stop_count + 1;
  if (first) g_stop_signal = sig;
  static const char kSaving[] =
      "\nboostlm launch: stopping: asking the ranks to save a checkpoint and stop (signal again "
      "to stop without saving)\n";
  static const char kAbort[] = "\nboostlm launch: stopping without saving\n";
  if (first)
    (void)!write(STDERR_FILENO, kSaving, sizeof kSaving - 1);
  else
    (void)!write(STDERR_FILENO, kAbort, sizeof kAbort - 1);
  if (g_child <= 0) return;
  if (first) {
    kill(g_child, g_child_stop);  // mpirun and srun both pass it on to every rank
  } else if (g_child_srun) {
    // srun ends the step (SIGKILL to every task) on two SIGINTs within a second; run_child
    // sends another in case these two reach it as one.
    kill(g_child, SIGINT);
    kill(g_child, SIGINT);
  } else {
    kill(g_child, SIGTERM);
  }
}

void install_forwarding() {
  struct sigaction action {};
  action.sa_handler = forward_signal;
  action.sa_flags = SA_RESTART;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

}  // namespace

bool is_train(const std::vector<std::string>& command) {
  return !command.empty() && command.front() == "train";
}

void exec_plan(const MpirunCommand& plan) {
  for (const auto& [name, value] : plan.env) setenv(name.c_str(), value.c_str(), 1);
  std::vector<char*> argv;
  for (const std::string& arg : plan.argv) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  std::fflush(stdout);
  std::fflush(stderr);
  execvp(argv[0], argv.data());
}

namespace {

void write_all(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    data += n;
    size -= static_cast<size_t>(n);
  }
}

// mpirun's stderr, passed on as it comes, except what reads as a failure, or is noise, after a
// stop the user asked for: Open MPI's boxed notices that ranks exited non-zero ("Primary job
// terminated normally, but 1 process returned a non-zero exit code ... aborted", and "mpirun
// detected that one or more processes exited with non-zero status ... Exit code: 130"), as every
// rank then exits 130 on purpose, and its line "mpirun: Forwarding signal 23 to job" for each stop
// passed on. The launcher gives its own account of the stop. Only a box (a line of dashes, lines, a
// line of dashes) or a line that may be the forwarding one is held back until it is complete;
// everything else goes through at once, partial lines too.
class StderrFilter {
 public:
  void feed(const char* data, size_t size) {
    for (size_t i = 0; i < size; ++i) take(data[i]);
    flush_pending();
  }
  void finish() {
    flush_pending();
    write_all(STDERR_FILENO, held_.data(), held_.size());
    held_.clear();
    state_ = State::kText;
  }

 private:
  enum class State { kText, kFirstLine, kBox, kForwarding };
  static constexpr std::string_view kForwardingLine = "mpirun: Forwarding signal ";

  // Whether text holds "-----...\n" from `from`.
  static bool is_rule(const std::string& text, size_t from) {
    const size_t end = text.size() - 1;  // the newline
    return end - from >= 10 && text.find_first_not_of('-', from) == end;
  }

  // A notice that ranks exited non-zero, where each exit was a stop's 130.
  static bool is_stop_notice(const std::string& box) {
    if (box.find("terminated normally, but") != std::string::npos) return true;
    if (box.find("exited with non-zero status") == std::string::npos) return false;
    bool stopped = false;
    for (size_t at = box.find("Exit code:"); at != std::string::npos;
         at = box.find("Exit code:", at + 1)) {
      const size_t value = box.find_first_not_of(' ', at + 10);
      if (value == std::string::npos || box.compare(value, 4, "130\n") != 0) return false;
      stopped = true;
    }
    return stopped;
  }

  void release_held() {
    pending_ += held_;
    held_.clear();
    state_ = State::kText;
    line_start_ = true;
  }

  void take(char c) {
    switch (state_) {
      case State::kText:
        if (line_start_ && (c == '-' || c == kForwardingLine[0])) {
          flush_pending();
          state_ = c == '-' ? State::kFirstLine : State::kForwarding;
          held_ = c;
        } else {
          pending_ += c;
        }
        line_start_ = c == '\n';
        return;
      case State::kForwarding:
        held_ += c;
        if (held_.size() <= kForwardingLine.size()) {
          if (c != kForwardingLine[held_.size() - 1]) {  // another line: let it through
            release_held();
            line_start_ = c == '\n';
          }
          return;
        }
        if (c != '\n') return;
        if (g_stop_signal) held_.clear();
        release_held();
        return;
      case State::kFirstLine:
        held_ += c;
        if (c != '\n') return;
        if (is_rule(held_, 0)) {
          state_ = State::kBox;
          line_begin_ = held_.size();
        } else {
          release_held();
        }
        return;
      case State::kBox:
        held_ += c;
        if (c != '\n') return;
        if (is_rule(held_, line_begin_) && line_begin_ > 0) {
          if (g_stop_signal && is_stop_notice(held_)) held_.clear();
          release_held();
        } else if (held_.size() > kLongestBox) {  // not a box after all: let it through
          release_held();
        } else {
          line_begin_ = held_.size();
        }
        return;
    }
  }

  void flush_pending() {
    write_all(STDERR_FILENO, pending_.data(), pending_.size());
    pending_.clear();
  }

  static constexpr size_t kLongestBox = 16384;  // Open MPI's notices are a few hundred bytes
  State state_ = State::kText;
  bool line_start_ = true;
  std::string pending_, held_;
  size_t line_begin_ = 0;  // where the box's current line starts in held_
};

// Runs mpirun and waits for it, its stderr through StderrFilter; returns its wait status.
int run_child(const MpirunCommand& plan) {
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t launcher = getpid();
  int errors[2];
  if (pipe2(errors, O_CLOEXEC) != 0)
    throw error("cannot start mpirun: pipe failed: ", std::strerror(errno));
  const pid_t pid = fork();
  if (pid < 0) throw error("cannot start mpirun: fork failed: ", std::strerror(errno));
  if (pid == 0) {
    dup2(errors[1], STDERR_FILENO);  // dup2 clears close-on-exec on the copy
    setpgid(0, 0);  // out of the terminal's foreground group: stop signals come from the launcher
    // A launcher killed outright (SIGKILL, timeout -k) cannot pass anything on: mpirun then gets
    // SIGTERM from the kernel and ends the job, instead of running on unsupervised.
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != launcher) _exit(kExecFailed);  // it died before the line above
    // mpirun catches the stop signal to pass it on, and puts back the disposition it found when
    // it takes its handler down at the end: SIGUSR1 ignored, a stop resent then (see resend_stop)
    // cannot kill it (SIGURG is ignored by default).
    if (!plan.srun) signal(SIGUSR1, SIG_IGN);
    exec_plan(plan);
    std::fprintf(stderr, "boostlm launch: cannot run %s: %s%s\n", plan.argv[0].c_str(),
                 std::strerror(errno),
                 errno == ENOENT ? " (is Open MPI installed? apt-get install openmpi-bin)" : "");
    _exit(kExecFailed);
  }
  setpgid(pid, pid);  // also here, so it holds before the first signal whichever runs first
  g_child_srun = plan.srun;
  g_child_stop = plan.stop_signal;
  g_child = pid;
  if (g_stop_signal) kill(pid, plan.stop_signal);  // it arrived while mpirun was being started
  close(errors[1]);
  int status = 0;
  bool aborted = false;
  // mpirun: the first stop's signal again every second until the job ends, for a rank that
  // dropped it while it was starting (plan_mpirun) or did not exist yet. A train rank takes one
  // stop and consumes the rest; a second stop signal (SIGTERM to mpirun) ends the resending.
  auto last_stop = std::chrono::steady_clock::now();
  const auto resend_stop = [&] {
    if (plan.srun || g_stop_count != 1) return;
    const auto now = std::chrono::steady_clock::now();
    if (now - last_stop < std::chrono::seconds(1)) return;
    last_stop = now;
    kill(pid, plan.stop_signal);
  };
  // srun: a second SIGINT within the second (see forward_signal).
  const auto abort_srun_step = [&] {
    if (plan.srun && g_stop_count >= 2 && !aborted) {
      aborted = true;
      usleep(200 * 1000);
      kill(pid, SIGINT);
    }
  };
  // Until mpirun's stderr closes; a process it left behind may hold the pipe open, so once mpirun
  // has exited the rest is read for one more second at most.
  StderrFilter filter;
  bool exited = false;
  auto deadline = std::chrono::steady_clock::now();
  for (;;) {
    pollfd readable{errors[0], POLLIN, 0};
    const int ready = poll(&readable, 1, 200);
    abort_srun_step();
    if (!exited) resend_stop();
    if (ready > 0) {
      char buffer[4096];
      const ssize_t n = read(errors[0], buffer, sizeof buffer);
      if (n > 0) {
        filter.feed(buffer, static_cast<size_t>(n));
        continue;
      }
      if (n == 0 || errno != EINTR) break;
      continue;
    }
    if (ready < 0 && errno != EINTR) break;
    if (!exited && waitpid(pid, &status, WNOHANG) == pid) {
      exited = true;
      deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    }
    if (exited && std::chrono::steady_clock::now() > deadline) break;
  }
  filter.finish();
  close(errors[0]);
  while (!exited && waitpid(pid, &status, 0) < 0 && errno == EINTR) abort_srun_step();
  g_child = 0;
  return status;
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

std::string describe(int status) {
  if (WIFSIGNALED(status)) {
    return "mpirun was killed by signal " + std::to_string(WTERMSIG(status)) + " (" +
           strsignal(WTERMSIG(status)) + ")";
  }
  const int code = exit_code_of(status);
  std::string why = "exit code " + std::to_string(code);
  if (code == 75) why += ": the communication watchdog ended it (a rank stalled or a link died)";
  if (code > 128 && code < 128 + 32) {  // a shell's convention for "killed by a signal"
    why += ": a rank was killed by signal " + std::to_string(code - 128) + " (" +
           strsignal(code - 128) + ")";
  }
  return why;
}

// Whether `word` is option `name` with its value attached (--out=DIR, -oDIR).
bool attached(const std::string& word, std::string_view name) {
  if (word.size() <= name.size() || word.compare(0, name.size(), name) != 0) return false;
  return name.size() == 2 || word[name.size()] == '=';  // short options take -oDIR
}

std::string attached_value(const std::string& word, std::string_view name) {
  return word.substr(name.size() + (name.size() == 2 && word[name.size()] != '=' ? 0 : 1));
}

// The value of an option of the command (the last one given, as CLI11 keeps); empty if absent.
std::string option_value(const std::vector<std::string>& words,
                         std::initializer_list<std::string_view> names) {
  std::string value;
  for (size_t i = 1; i < words.size(); ++i) {
    if (words[i] == "--") break;
    for (std::string_view name : names) {
      if (words[i] == name && i + 1 < words.size()) value = words[i + 1];
      if (attached(words[i], name)) value = attached_value(words[i], name);
    }
  }
  return value;
}

std::vector<std::string> without_option(const std::vector<std::string>& words,
                                        std::initializer_list<std::string_view> names) {
  std::vector<std::string> kept;
  for (size_t i = 0; i < words.size(); ++i) {
    bool drop = false;
    for (std::string_view name : names) {
      if (i > 0 && words[i] == name) {
        drop = true;
        ++i;  // and its value
        break;
      }
      if (i > 0 && attached(words[i], name)) drop = true;
    }
    if (!drop) kept.push_back(words[i]);
  }
  return kept;
}

std::vector<std::string> with_option(const std::vector<std::string>& words, std::string_view name,
                                     std::initializer_list<std::string_view> aliases,
                                     const std::string& value) {
  std::vector<std::string> out = without_option(words, aliases);
  out.push_back(std::string(name));
  out.push_back(value);
  return out;
}

int int_option(const std::vector<std::string>& words, std::initializer_list<std::string_view> names,
               int fallback) {
  const std::string value = option_value(words, names);
  return value.empty() ? fallback : std::atoi(value.c_str());
}

// A train command resumes from its run's latest checkpoint (train's --resume takes the run
// directory); any --resume or --init-from it had is older than that checkpoint.
std::vector<std::string> resume_latest(const std::vector<std::string>& command, int restart) {
  if (!is_train(command)) return command;
  const std::string out = option_value(command, {"-o", "--out"});
  const std::string latest =
      out.empty() ? "" : latest_checkpoint_name(fs::path(out) / "checkpoints");
  if (latest.empty()) {
    std::fprintf(stderr,
                 "boostlm launch: no checkpoint in %s yet: restart %d starts the run over\n",
                 out.empty() ? "the run directory" : out.c_str(), restart);
    // The failed attempt made the run directory; the run over replaces what it left there.
    std::vector<std::string> over = command;
    if (std::find(over.begin(), over.end(), "--overwrite") == over.end())
      over.push_back("--overwrite");
    return over;
  }
  std::fprintf(stderr, "boostlm launch: restart %d resumes from %s\n", restart,
               (fs::path(out) / "checkpoints" / latest).c_str());
  return with_option(without_option(command, {"--init-from"}), "--resume", {"--resume"}, out);
}

// The hosts of an Open MPI hostfile (core/hostfile's parse) in order, with their slots (0: not
// given); a host listed on several lines once, with the sum.
std::vector<std::pair<std::string, int>> read_hosts(const std::string& path) {
  std::vector<std::pair<std::string, int>> hosts;
  for (const HostfileEntry& e : read_hostfile(path)) {
    auto it = std::find_if(hosts.begin(), hosts.end(), [&](auto& h) { return h.first == e.host; });
    if (it == hosts.end())
      hosts.emplace_back(e.host, e.slots);
    else
      it->second += e.slots;
  }
  return hosts;
}

bool is_this_host(const std::string& host) {
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  return host == "localhost" || host == "127.0.0.1" || host == name;
}

// Whether `host` runs a command through the agent mpirun would use to start ranks there: Open
// MPI's plm_rsh_agent (from the environment; its default is ssh), so a host passes only where
// mpirun could start a rank. Runs `AGENT... HOST true` for at most timeout_s.
bool host_answers(const std::string& host, int timeout_s) {
  if (is_this_host(host)) return true;
  const char* configured = std::getenv("OMPI_MCA_plm_rsh_agent");
  std::string agent = configured ? configured : "ssh";
  agent = agent.substr(0, agent.find(':'));  // "ssh : rsh": the first choice
  std::vector<std::string> argv;
  std::istringstream words(agent);
  for (std::string w; words >> w;) argv.push_back(w);
  if (argv.empty()) argv.push_back("ssh");
  if (fs::path(argv[0]).filename() == "ssh") {
    argv.insert(argv.begin() + 1,
                {"-o", "BatchMode=yes", "-o", "ConnectTimeout=" + std::to_string(timeout_s)});
  }
  argv.push_back(host);
  argv.push_back("true");
  const pid_t pid = fork();
  if (pid < 0) return false;
  if (pid == 0) {
    std::vector<char*> args;
    for (std::string& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    execvp(args[0], args.data());
    _exit(kExecFailed);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// The slots a restart can use. Without a hostfile this machine's (it cannot lose hosts), unless
// BOOSTLM_LAUNCH_SLOTS says otherwise: a test hook standing in for a host that no longer answers.
// With a hostfile, the slots of the hosts that still answer; where one does not, `live_hostfile`
// becomes a copy listing only those (a host without slots= counts for the job's ranks per host),
// its comments kept.
int usable_slots(const RestartPolicy& policy, int ranks, std::string& live_hostfile) {
  if (const char* hook = std::getenv("BOOSTLM_LAUNCH_SLOTS")) return std::atoi(hook);
  if (policy.hostfile.empty()) return ranks;
  const auto hosts = read_hosts(policy.hostfile);
  const int per_host = (policy.ranks + static_cast<int>(hosts.size()) - 1) /
                       std::max<int>(1, static_cast<int>(hosts.size()));
  int slots = 0;
  bool all_answer = true;
  std::ostringstream live;
  // Comment lines carry over: scripts/cluster.sh's marker says the hosts are emulated.
  std::istringstream original(read_text_file(policy.hostfile));
  for (std::string line; std::getline(original, line);)
    if (line.rfind('#', 0) == 0) live << line << "\n";
  for (const auto& [host, host_slots] : hosts) {
    if (!host_answers(host, 10)) {
      std::fprintf(stderr, "boostlm launch: host %s does not answer\n", host.c_str());
      all_answer = false;
      continue;
    }
    slots += host_slots > 0 ? host_slots : per_host;
    live << host << (host_slots > 0 ? " slots=" + std::to_string(host_slots) : "") << "\n";
  }
  if (all_answer) {  // the hostfile as it is (again, should an earlier restart have lost a host)
    if (live_hostfile != policy.hostfile) std::remove(live_hostfile.c_str());
    live_hostfile = policy.hostfile;
    return slots;
  }
  live_hostfile =
      (fs::temp_directory_path() / ("boostlm_hosts." + std::to_string(getpid()))).string();
  std::ofstream(live_hostfile) << live.str();
  return slots;
}

struct Shape {
  int ranks;
  std::vector<std::string> command;
};

// Fewer slots than ranks: a train command drops data-parallel replicas (the checkpoint reshards to
// any TP/PP/DP), keeping the sequences per step by raising --grad-accum where that divides evenly.
// Returns ranks 0 when the job cannot continue on at least min_ranks.
Shape shrink(const RestartPolicy& policy, const Shape& now, int slots) {
  const int min_ranks = policy.min_ranks > 0 ? policy.min_ranks : policy.ranks;
  if (!is_train(now.command)) {
    return slots >= min_ranks ? Shape{slots, now.command} : Shape{0, now.command};
  }
  const std::vector<std::string>& c = now.command;
  const int tp = int_option(c, {"--tp"}, 1), pp = int_option(c, {"--pp"}, 1);
  const int dp = int_option(c, {"--dp"}, 1), accum = int_option(c, {"--grad-accum"}, 1);
  const int new_dp = slots / (tp * pp);
  if (new_dp < 1 || tp * pp * new_dp < min_ranks) return {0, c};
  std::vector<std::string> command = with_option(c, "--dp", {"--dp"}, std::to_string(new_dp));
  std::fprintf(stderr,
               "boostlm launch: only %d slots answer: continuing on %d ranks with data-parallel "
               "size %d instead of %d (--min-ranks %d)\n",
               slots, tp * pp * new_dp, new_dp, dp, min_ranks);
  if ((accum * dp) % new_dp == 0) {
    const int new_accum = accum * dp / new_dp;
    command = with_option(command, "--grad-accum", {"--grad-accum"}, std::to_string(new_accum));
    std::fprintf(stderr,
                 "boostlm launch: --grad-accum %d instead of %d keeps the sequences per step\n",
                 new_accum, accum);
  } else {
    std::fprintf(stderr,
                 "boostlm launch: warning: %d x %d micro-batches cannot be spread over %d "
                 "replicas: the sequences per step change\n",
                 dp, accum, new_dp);
  }
  return {tp * pp * new_dp, command};
}

}  // namespace

int run_with_restarts(const RestartPolicy& policy, std::vector<std::string> command,
                      const PlanMpirun& plan) {
  install_forwarding();
  Shape shape{policy.ranks, std::move(command)};
  std::string hostfile = policy.hostfile;
  struct RemoveLiveHostfile {  // the hostfile of the hosts that still answered, if one was written
    const RestartPolicy& policy;
    const std::string& path;
    ~RemoveLiveHostfile() {
      if (path != policy.hostfile) std::remove(path.c_str());
    }
  } remove_live_hostfile{policy, hostfile};
  for (int restart = 0;; ++restart) {
    const int status = run_child(plan(shape.ranks, hostfile, shape.command));
    const int code = exit_code_of(status);
    if (code == 0) return 0;
    if (g_stop_signal) {
      // What happened, not what was asked: train exits kInterruptedExitCode once every rank has
      // saved; anything else (a rank that crashed or was killed while saving) saved nothing.
      if (code == kInterruptedExitCode) {
        std::fprintf(stderr,
                     "boostlm launch: stopped by %s: the job saved a checkpoint (continue it with "
                     "--resume); not restarting\n",
                     strsignal(g_stop_signal));
        return kInterruptedExitCode;
      }
      std::fprintf(stderr,
                   "boostlm launch: stopped by %s, but the job ended with %s: this stop saved "
                   "nothing (earlier checkpoints are kept); not restarting\n",
                   strsignal(g_stop_signal), describe(status).c_str());
      return code == kInterruptedExitCode ? 1 : code;
    }
    if (code == kExecFailed) return code;
    if (restart == policy.max_restarts) {
      if (policy.max_restarts == 0) return code;  // nothing to add to the job's own message
      std::fprintf(stderr, "boostlm launch: the job failed (%s); no restarts left (%d used)\n",
                   describe(status).c_str(), policy.max_restarts);
      return code;
    }
    std::fprintf(stderr, "boostlm launch: the job failed (%s); restart %d of %d\n",
                 describe(status).c_str(), restart + 1, policy.max_restarts);
    const int slots = usable_slots(policy, shape.ranks, hostfile);
    if (slots < shape.ranks) {
      Shape smaller = shrink(policy, shape, slots);
      if (smaller.ranks == 0) {
        std::fprintf(stderr,
                     "boostlm launch: only %d slots answer, fewer than --min-ranks %d allows: "
                     "giving up\n",
                     slots, policy.min_ranks > 0 ? policy.min_ranks : policy.ranks);
        return code;
      }
      shape = std::move(smaller);
    }
    shape.command = resume_latest(shape.command, restart + 1);
  }
}

}  // namespace boostlm::cli
