// `--comm-timeout SECONDS`, shared by the commands that communicate (train, the multi-rank
// benches).
#include <memory>

#include "cli/commands.h"
#include "comm/watchdog.h"

namespace boostlm::cli {

// The watchdog is configured once the command line is parsed, before the command runs, so the
// command's own code needs no knowledge of it (comm/watchdog.h).
void add_comm_timeout(CLI::App& cmd) {
  auto seconds = std::make_shared<double>(kDefaultCommTimeoutS);
  cmd.add_option("--comm-timeout", *seconds,
                 "end the job when one exchange between ranks takes longer than this many "
                 "seconds (a stalled or dead rank); 0: wait forever")
      ->default_val(kDefaultCommTimeoutS)
      ->check(CLI::Range(0.0, 1e9));
  cmd.parse_complete_callback([seconds] { configure_watchdog(*seconds); });
}

}  // namespace boostlm::cli
