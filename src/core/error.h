// Errors and assertions.
//
// Two kinds of failure, kept apart on purpose (STYLE.md):
//  - boostlm::Error: bad input at a boundary (config, data files, checkpoints, flags). It carries a
//    message the user can act on and is thrown, so the caller can report it and exit cleanly.
//  - BOOSTLM_ASSERT: a broken invariant inside the engine. It prints file:line and aborts the
//  process
//    through an abort handler (under MPI the handler ends the whole job).
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace boostlm {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Builds an Error message from streamable parts: throw error("config: n_heads=", n, " ...").
template <typename... Parts>
Error error(const Parts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  return Error(os.str());
}

// Prints "boostlm: warning: <message>" to stderr, once per job: only the process whose rank
// set_warning_rank() made 0 (every process, until the MPI runtime sets it) prints.
void warn(const std::string& message);
void set_warning_rank(int world_rank);

using AbortHandler = void (*)(const std::string& message);
// Replaces what a failed assertion does after printing (default: std::abort). Returns the old one.
AbortHandler set_abort_handler(AbortHandler handler);

[[noreturn]] void assert_fail(const char* expr, const char* file, int line, const std::string& msg);

}  // namespace boostlm

#define BOOSTLM_ASSERT(cond)                                            \
  do {                                                                  \
    if (!(cond)) ::boostlm::assert_fail(#cond, __FILE__, __LINE__, ""); \
  } while (0)

#define BOOSTLM_ASSERT_MSG(cond, msg)                                    \
  do {                                                                   \
    if (!(cond)) ::boostlm::assert_fail(#cond, __FILE__, __LINE__, msg); \
  } while (0)
