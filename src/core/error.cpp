#include "core/error.h"

#include <cstdio>
#include <cstdlib>

namespace boostlm {
namespace {
void default_abort(const std::string&) {
  std::abort();
}
AbortHandler g_abort_handler = default_abort;
int g_warning_rank = 0;
}  // namespace

void warn(const std::string& message) {
  if (g_warning_rank == 0) std::fprintf(stderr, "boostlm: warning: %s\n", message.c_str());
}

void set_warning_rank(int world_rank) {
  g_warning_rank = world_rank;
}

AbortHandler set_abort_handler(AbortHandler handler) {
  AbortHandler old = g_abort_handler;
  g_abort_handler = handler ? handler : default_abort;
  return old;
}

void assert_fail(const char* expr, const char* file, int line, const std::string& msg) {
  std::string text = std::string("boostlm: assertion failed: ") + expr + " at " + file + ":" +
                     std::to_string(line) + (msg.empty() ? "" : " (" + msg + ")");
  std::fprintf(stderr, "%s\n", text.c_str());
  std::fflush(stderr);
  g_abort_handler(text);
  std::abort();
}

}  // namespace boostlm
