// `boostlm launch -n N [--hostfile FILE] [--threads-per-rank K] [--dry-run] -- <command> ...`:
// runs N ranks of this same binary under Open MPI's mpirun, with the placement decided here so a
// user need not know mpirun's flags.
//
// How the mpirun command is chosen ("cores" = logical CPUs this process may run on, the count
// OpenMP and `nproc` use):
//  - On this machine (no hostfile): `--use-hwthread-cpus` makes mpirun count slots the same way, so
//    on SMT machines its notion of "enough slots" agrees with ours. `--oversubscribe` when
//    N > cores (slower, but a small multi-rank test on a laptop must still run).
//    Threads per rank default to max(1, cores / N). When N × threads == cores each rank is bound
//    to its own `threads` CPUs (`--map-by slot:PE=threads --bind-to hwthread`); otherwise
//    `--bind-to none`, because mpirun's default binding (one core per rank for N ≤ 2) would pin
//    all of a rank's OpenMP threads to one CPU, and an oversubscribed or partly used machine is
//    better left to the OS scheduler.
//  - With a hostfile (several machines): the file's slots are the capacity, so no --oversubscribe
//    (mpirun's refusal is the right answer to asking for more ranks than slots), and N defaults to
//    all of them. The other machines are assumed to have as many cores as this one: threads
//    default to max(1, cores / ceil(N / hosts)). Always `--bind-to none`, since the exact fit
//    cannot be checked from here. Between hosts the ranks talk TCP (`--mca btl tcp,vader,self`:
//    shared memory stays in use between ranks of one machine); `--subnet CIDR` keeps MPI's data
//    (btl_tcp_if_include) and mpirun's control traffic (oob_tcp_if_include) on that network.
//  - An emulated cluster (a hostfile written by scripts/cluster.sh, whose first line is the
//    "# boostlm-emulated-cluster ..." marker, or --emulated): the hosts are network namespaces of
//    this machine. mpirun starts each host's daemon through Open MPI's rsh launcher with this
//    program as the agent (`boostlm netns-agent HOST WORDS...` runs the words under
//    `ip netns exec HOST`, as ssh would run them on HOST), one at a time rather than as a tree.
//    `--mca btl tcp,self`: every byte between hosts crosses the shaped links, and the interfaces
//    are those of the marker's subnet (default 198.18.0.0/15, the range cluster.sh draws from).
//    The hosts share this machine's cores, so threads default to max(1, cores / N): giving each
//    rank a real machine's share would oversubscribe the cores (measured 4-7x slower compute,
//    which would hide the very communication effect the emulation exists to show).
//    The marker's link rate reaches every rank as BOOSTLM_LINK_RATE, for the benchmarks' JSON.
//  - Always `-x OMP_NUM_THREADS=threads`, and `--mca orte_abort_on_non_zero_status 1` (Open MPI's
//    default, made explicit so a site configuration cannot turn it off): a rank that exits non-zero
//    ends the whole job instead of leaving the others blocked in a collective. MPI_Abort and ranks
//    killed by a signal end the job regardless.
//  - As root, Open MPI refuses to start unless OMPI_ALLOW_RUN_AS_ROOT=1 and
//    OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 are set; they are set for mpirun when euid is 0.
//  - `--stdin none`: mpirun runs in a process group of its own (below), outside a terminal's
//    foreground group, where reading the terminal would stop it; no boostlm command reads stdin.
//  - Inside a Slurm allocation (SLURM_JOB_ID set, no --hostfile; --launcher srun|mpirun chooses):
//    the ranks are started by `srun --mpi=pmix` on the allocation's nodes, as Slurm's users start
//    MPI jobs, so that Slurm tracks, signals and accounts for every rank (mpirun would start its
//    daemons through srun too, but its own signal handling would end the ranks before a save).
//    N defaults to the allocation's tasks (SLURM_NTASKS); threads per rank to SLURM_CPUS_PER_TASK,
//    else the cores of this node over its ranks (ranks / SLURM_JOB_NUM_NODES, rounded up).
//    `--kill-on-bad-exit=1` does what orte_abort_on_non_zero_status does for mpirun; binding is
//    Slurm's (its TaskPlugin), not ours.
// mpirun runs as a supervised child in a process group of its own (launch_restart.cpp): a Ctrl-C or
// SIGTERM reaches the launcher alone, which asks every rank to save and stop (a train rank by
// SIGURG, which mpirun forwards) and exits 130; with --max-restarts K > 0 a failed job is run
// again.
#include <netdb.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cli/checks.h"
#include "cli/commands.h"
#include "cli/host.h"
#include "cli/launch_restart.h"
#include "comm/mpi_runtime.h"
#include "comm/overlap.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/hostfile.h"

namespace boostlm::cli {
namespace {

struct LaunchOptions {
  int ranks = 0;  // 0: the hostfile's slots
  std::string hostfile;
  int threads_per_rank = 0;  // 0: derived from the cores
  bool dry_run = false;
  bool emulated = false;  // the hostfile's hosts are network namespaces (scripts/cluster.sh)
  std::string subnet;     // the hosts' network, for btl/oob_tcp_if_include
  int max_restarts = 0;   // 0: a failed job is not run again
  int min_ranks = 0;      // 0: as many as --ranks (never shrink)
  std::string launcher = "auto";  // auto: srun inside a Slurm allocation, else mpirun
};

// Whether this process runs inside a Slurm allocation (sbatch, salloc, srun).
bool in_slurm_allocation() {
  return std::getenv("SLURM_JOB_ID") != nullptr;
}

bool uses_srun(const LaunchOptions& o) {
  if (o.launcher == "srun") return true;
  return o.launcher == "auto" && o.hostfile.empty() && in_slurm_allocation();
}

int int_from_env(const char* name, int fallback) {
  const char* value = std::getenv(name);
  const int parsed = value ? std::atoi(value) : 0;
  return parsed > 0 ? parsed : fallback;
}

// What an Open MPI hostfile says ("host [slots=N] ...", '#' starts a comment), and the marker line
// scripts/cluster.sh writes first: "# boostlm-emulated-cluster name=... rate=R subnet=S ...".
struct Hostfile {
  int hosts = 0;  // distinct names
  int slots = 0;  // all of them; a line without slots= counts 1
  bool emulated = false;
  std::string rate, subnet;  // from the marker
};

constexpr const char* kEmulatedMarker = "# boostlm-emulated-cluster";
// Every address scripts/cluster.sh gives out lies in this range (RFC 2544's benchmarking networks).
constexpr const char* kEmulatedNetwork = "198.18.0.0/15";

// The value of `key=value` among the words of a line, or "".
std::string marker_value(const std::string& line, const std::string& key) {
  std::istringstream words(line);
  for (std::string word; words >> word;)
    if (word.rfind(key + "=", 0) == 0) return word.substr(key.size() + 1);
  return "";
}

// The hostfile as launch needs it: core/hostfile's parse (which refuses mistakes by line), the
// totals, and the emulated cluster's marker line.
Hostfile describe_hostfile(const std::string& path) {
  const std::string text = read_text_file(path);
  Hostfile file;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(kEmulatedMarker, 0) != 0) continue;
    file.emulated = true;
    file.rate = marker_value(line, "rate");
    file.subnet = marker_value(line, "subnet");
  }
  const std::vector<HostfileEntry> entries = parse_hostfile(text, path);
  file.hosts = count_hosts(entries);
  for (const HostfileEntry& e : entries) file.slots += e.slots > 0 ? e.slots : 1;
  return file;
}

// Every host of a (real) hostfile resolves, checked before mpirun: Open MPI's own message for a
// name that does not ("ORTE was unable to reliably start one or more daemons ... PATH and
// LD_LIBRARY_PATH") does not name the host. With restarts allowed such a host is one that does
// not answer: it is named here, and the restart after the first attempt leaves it out.
void check_hosts_resolve(const std::string& path, bool restarts) {
  for (const HostfileEntry& e : parse_hostfile(read_text_file(path), path)) {
    if (e.host == "localhost") continue;
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    addrinfo* found = nullptr;
    const int status = getaddrinfo(e.host.c_str(), nullptr, &hints, &found);
    if (found) freeaddrinfo(found);
    if (status == 0) continue;
    if (restarts) {
      std::fprintf(stderr,
                   "boostlm launch: --hostfile %s line %d: host '%s' does not resolve (%s): the "
                   "first attempt will fail, and a restart leaves it out\n",
                   path.c_str(), e.line, e.host.c_str(), gai_strerror(status));
      continue;
    }
    throw error("--hostfile ", path, " line ", e.line, ": host '", e.host, "' does not resolve (",
                gai_strerror(status), "): correct the name, or add it to /etc/hosts or DNS");
  }
}

// The mpirun flags for ranks spread over the hosts of a hostfile (see the top of this file).
void add_hostfile_flags(const LaunchOptions& o, const Hostfile& file, const std::string& exe,
                        MpirunCommand& plan) {
  auto& a = plan.argv;
  const bool emulated = o.emulated || file.emulated;
  a.insert(a.end(), {"--hostfile", o.hostfile, "--bind-to", "none"});
  a.insert(a.end(), {"--mca", "btl", emulated ? "tcp,self" : "tcp,vader,self"});
  std::string subnet = o.subnet.empty() ? file.subnet : o.subnet;
  if (subnet.empty() && emulated) subnet = kEmulatedNetwork;
  if (!subnet.empty()) {
    a.insert(a.end(), {"--mca", "btl_tcp_if_include", subnet});
    a.insert(a.end(), {"--mca", "oob_tcp_if_include", subnet});
  }
  // TCP between hosts: messages up to 4 MiB go eagerly, in one fragment, through 4 MiB socket
  // buffers. Under Open MPI's default rendezvous (above 64 KiB) a receiver's go-ahead queues
  // behind its own bulk data on the same connection, so the two directions of an exchange run one
  // after the other; measured on the emulated cluster at 500mbit (60m btp, TP 2), a 788 KB
  // exchange took twice its wire time while --tp-overlap ran, and the overlapped step gained
  // nothing. Eagerly, both directions flow at once and a progress call moves a whole message;
  // the overlap's exchanges (comm/overlap.cpp) come in messages of at most this size.
  for (const char* param : {"btl_tcp_eager_limit", "btl_tcp_rndv_eager_limit",
                            "btl_tcp_max_send_size", "btl_tcp_sndbuf", "btl_tcp_rcvbuf"})
    a.insert(a.end(), {"--mca", param, std::to_string(CommOverlap::kEagerBytes)});
  if (emulated) {
    // Open MPI splits the agent at spaces and appends the host and the daemon's command words.
    a.insert(a.end(), {"--mca", "plm_rsh_agent", exe + " netns-agent"});
    a.insert(a.end(), {"--mca", "plm_rsh_no_tree_spawn", "1"});
  }
  if (!file.rate.empty()) a.insert(a.end(), {"-x", "BOOSTLM_LINK_RATE=" + file.rate});
}

// Open MPI's consent to run as root (see the top of this file), for mpirun or srun's ranks.
std::vector<std::pair<std::string, std::string>> run_as_root_env() {
  if (geteuid() != 0) return {};
  return {{"OMPI_ALLOW_RUN_AS_ROOT", "1"}, {"OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"}};
}

// srun on the allocation's nodes (see the top of this file).
MpirunCommand plan_srun(const LaunchOptions& o, const std::vector<std::string>& command) {
  if (!o.hostfile.empty())
    throw error("launch --launcher srun takes its nodes from Slurm: drop --hostfile");
  if (!in_slurm_allocation())
    throw error("launch --launcher srun runs inside a Slurm allocation (sbatch, salloc): no ",
                "SLURM_JOB_ID here");
  const int ranks = o.ranks ? o.ranks : int_from_env("SLURM_NTASKS", 0);
  if (ranks == 0) throw error("launch: give -n RANKS (the allocation does not say its tasks)");
  const int nodes = int_from_env("SLURM_JOB_NUM_NODES", 1);
  const int ranks_per_node = (ranks + nodes - 1) / nodes;
  int threads = o.threads_per_rank;
  if (threads == 0) threads = int_from_env("SLURM_CPUS_PER_TASK", 0);
  if (threads == 0) threads = std::max(1, available_cpus() / ranks_per_node);
  MpirunCommand plan;
  plan.srun = true;
  plan.env = run_as_root_env();
  plan.env.emplace_back("OMP_NUM_THREADS", std::to_string(threads));  // srun passes the environment
  plan.argv = {
      "srun",         "--mpi=pmix",     "--ntasks", std::to_string(ranks), "--kill-on-bad-exit=1",
      "--input=none", this_executable()};
  plan.argv.insert(plan.argv.end(), command.begin(), command.end());
  return plan;
}

MpirunCommand plan_mpirun(const LaunchOptions& o, const std::vector<std::string>& command) {
  if (uses_srun(o)) return plan_srun(o, command);
  const int cores = available_cpus();
  const std::string exe = this_executable();
  MpirunCommand plan;
  plan.env = run_as_root_env();
  const Hostfile file = o.hostfile.empty() ? Hostfile{} : describe_hostfile(o.hostfile);
  if (o.hostfile.empty() && o.emulated)
    throw error("launch --emulated needs the --hostfile that scripts/cluster.sh up wrote");
  if (o.hostfile.empty() && o.ranks == 0) throw error("launch: give -n RANKS (or a --hostfile)");
  const int ranks = o.ranks ? o.ranks : file.slots;
  auto& a = plan.argv;
  a = {"mpirun", "-n", std::to_string(ranks)};
  int threads = o.threads_per_rank;
  if (o.hostfile.empty()) {
    if (threads == 0) threads = std::max(1, cores / ranks);
    a.push_back("--use-hwthread-cpus");
    if (ranks > cores) a.push_back("--oversubscribe");
    if (ranks * threads == cores) {
      a.insert(a.end(),
               {"--map-by", "slot:PE=" + std::to_string(threads), "--bind-to", "hwthread"});
    } else {
      a.insert(a.end(), {"--bind-to", "none"});
    }
  } else {
    const bool emulated = o.emulated || file.emulated;
    const int ranks_per_machine = emulated ? ranks : (ranks + file.hosts - 1) / file.hosts;
    if (threads == 0) threads = std::max(1, cores / ranks_per_machine);
    add_hostfile_flags(o, file, exe, plan);
  }
  a.insert(a.end(), {"-x", "OMP_NUM_THREADS=" + std::to_string(threads)});
  a.insert(a.end(), {"--mca", "orte_abort_on_non_zero_status", "1", "--stdin", "none"});
  // A train rank is asked to stop with SIGURG, which mpirun passes on when told to. Its default
  // action is to ignore it: a rank that has not reached train's main, where the stop signals are
  // blocked and polled, drops it instead of dying, and the launcher sends it again every second
  // until the job ends (run_child). SIGUSR1 killed ranks still loading their libraries (a few
  // hundred ms where the CUDA ones are linked): 3 of 20 launch runs interrupted 0-2.7 s after
  // start were lost so (issue 37 section 2). Starting the rank with it ignored, through
  // `/bin/sh -c 'trap "" USR1; exec ...'`, left the shell's start-up, where mpirun's handler had
  // just been reset to the default action by exec, open: 1 start in 10 died under a stop sent
  // every 5 ms. Other commands keep SIGUSR1, whose default action ends them.
  if (is_train(command)) {
    a.insert(a.end(), {"--mca", "ess_base_forward_signals", "SIGURG"});
    plan.stop_signal = SIGURG;
  }
  a.push_back(exe);
  a.insert(a.end(), command.begin(), command.end());
  return plan;
}

// Quotes a word for a POSIX shell only where needed, so a dry run can be pasted into one.
std::string shell_quote(const std::string& word) {
  const bool plain = !word.empty() && word.find_first_not_of(
                                          "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                          "0123456789_-+=/.,:@%") == std::string::npos;
  if (plain) return word;
  std::string quoted = "'";
  for (char c : word) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

std::string to_shell(const MpirunCommand& plan) {
  std::string line;
  for (const auto& [name, value] : plan.env) line += name + "=" + shell_quote(value) + " ";
  for (size_t i = 0; i < plan.argv.size(); ++i) {
    line += (i ? " " : "") + shell_quote(plan.argv[i]);
  }
  return line;
}

// `boostlm netns-agent HOST WORDS...`: Open MPI's rsh agent for an emulated cluster. mpirun calls
// its agent as it would call ssh, with the host and the words of a shell command line (quoted for
// a remote shell: the daemon's contact URI carries a ';'), so the words are joined and given to
// /bin/sh inside the host's network namespace, as sshd would give them to the login shell.
// Each host gets a /tmp of its own (TMPDIR=/tmp/boostlm-netns-HOST), as separate machines have:
// Open MPI names its session directory after the host name, which all namespaces share, and two
// daemons creating the same directory at once fail one start in about twenty.
void add_netns_agent(CLI::App& app) {
  auto* cmd = app.add_subcommand("netns-agent", "")->group("");  // hidden: mpirun's, not a user's
  auto host = std::make_shared<std::string>();
  cmd->add_option("host", *host)->required();
  cmd->prefix_command();  // the words after the host are the command's, not ours: remaining()
  cmd->callback([cmd, host] {
    if (access(("/run/netns/" + *host).c_str(), F_OK) != 0)
      throw error("netns-agent: ", *host,
                  " is not a network namespace; is the emulated cluster up? (scripts/cluster.sh "
                  "status)");
    const std::string tmp = "/tmp/boostlm-netns-" + *host;
    if (mkdir(tmp.c_str(), 0700) != 0 && errno != EEXIST)
      throw error("netns-agent: cannot make ", tmp, ": ", std::strerror(errno));
    setenv("TMPDIR", tmp.c_str(), 1);
    std::string line;
    for (const std::string& w : cmd->remaining()) line += (line.empty() ? "" : " ") + w;
    std::vector<std::string> argv = {"ip", "netns", "exec", *host, "/bin/sh", "-c", line};
    std::vector<char*> args;
    for (std::string& w : argv) args.push_back(w.data());
    args.push_back(nullptr);
    execvp(args[0], args.data());
    throw error("netns-agent: cannot run ip: ", std::strerror(errno));
  });
}

}  // namespace

void add_launch(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "launch", "run a boostlm command on several ranks through mpirun: launch -n 4 -- train ...");
  auto o = std::make_shared<LaunchOptions>();
  computed_default(cmd->add_option("-n,--ranks", o->ranks,
                                   "number of ranks (processes); required without --hostfile, "
                                   "with it the default is all its slots"))
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--hostfile", o->hostfile, "Open MPI hostfile, to run on several machines")
      ->check(CLI::ExistingFile);
  cmd->add_flag("--emulated", o->emulated,
                "the hostfile's hosts are network namespaces of this machine (scripts/cluster.sh); "
                "implied by the hostfile cluster.sh writes");
  cmd->add_option("--subnet", o->subnet,
                  "the hosts' network (CIDR), for MPI's TCP traffic (default: the emulated "
                  "cluster's, else Open MPI's choice)");
  computed_default(cmd->add_option("--threads-per-rank", o->threads_per_rank,
                                   "OpenMP threads per rank (default: the cores divided among "
                                   "the ranks)"))
      ->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--launcher", o->launcher,
                  "what starts the ranks: mpirun, or srun (the nodes of the Slurm allocation "
                  "this runs in); auto: srun inside an allocation without --hostfile")
      ->check(CLI::IsMember({"auto", "mpirun", "srun"}))
      ->default_val("auto");
  cmd->add_flag("--dry-run", o->dry_run,
                "print the mpirun (or srun) command instead of running it");
  cmd->add_option("--max-restarts", o->max_restarts,
                  "when the job fails (a rank dies, the communication watchdog fires), run it "
                  "again up to this many times; train resumes from its latest checkpoint")
      ->default_val(0)
      ->check(CLI::Range(0, 1000));
  computed_default(
      cmd->add_option("--min-ranks", o->min_ranks,
                      "with --max-restarts: when fewer slots answer on a restart, continue on as "
                      "few as this many ranks (train: fewer data-parallel replicas; default: "
                      "--ranks)"))
      ->check(CLI::Range(1, 1 << 20));
  // Everything after `--`, or from the first word that is not a launch option, is the command:
  // positionals_at_end stops option parsing at the first positional.
  auto command_words = std::make_shared<std::vector<std::string>>();
  cmd->add_option("command", *command_words, "the boostlm command and its arguments, after `--`");
  cmd->positionals_at_end();
  cmd->callback([o, command_words] {
    const std::vector<std::string>& command = *command_words;
    if (command.empty()) {
      throw error("nothing to launch: give the boostlm command after `--`, e.g. boostlm launch -n ",
                  o->ranks, " -- train --data DIR --out DIR");
    }
    if (command.front() == "launch") throw error("launch cannot launch itself");
    if (launched_by_mpi()) {
      throw error("launch starts mpirun itself: run it directly, not under mpirun");
    }
    if (o->ranks == 0 && !o->hostfile.empty()) o->ranks = describe_hostfile(o->hostfile).slots;
    if (o->min_ranks > 0 && o->max_restarts == 0) {
      throw error("--min-ranks applies to restarts: give --max-restarts too");
    }
    if (o->min_ranks > o->ranks) {
      throw error("--min-ranks ", o->min_ranks, " is more than the ", o->ranks, " ranks launched");
    }
    const MpirunCommand plan = plan_mpirun(*o, command);
    if (o->dry_run) {
      std::printf("%s\n", to_shell(plan).c_str());
      return;
    }
    const bool emulated =
        o->emulated || (!o->hostfile.empty() && describe_hostfile(o->hostfile).emulated);
    if (!o->hostfile.empty() && !emulated) check_hosts_resolve(o->hostfile, o->max_restarts > 0);
    // Restarts probe the hosts through the agent mpirun uses (launch_restart.cpp reads it from
    // Open MPI's environment variable): on an emulated cluster, the namespace agent.
    if (emulated) setenv("OMPI_MCA_plm_rsh_agent", (this_executable() + " netns-agent").c_str(), 1);
    const RestartPolicy policy{o->max_restarts, o->min_ranks, o->ranks, o->hostfile};
    exit_code() = run_with_restarts(
        policy, command,
        [o](int ranks, const std::string& hostfile, const std::vector<std::string>& words) {
          LaunchOptions attempt = *o;
          attempt.ranks = ranks;
          attempt.hostfile = hostfile;
          return plan_mpirun(attempt, words);
        });
  });
  add_netns_agent(app);
}

}  // namespace boostlm::cli
