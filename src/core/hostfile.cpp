#include "core/hostfile.h"

#include <unistd.h>

#include <set>

#include "core/error.h"
#include "core/file_io.h"

namespace boostlm {

namespace {

constexpr std::string_view kSpace = " \t\r\v\f";

// The words of one line, without its comment.
std::vector<std::string_view> words_of(std::string_view line) {
  line = line.substr(0, line.find('#'));
  std::vector<std::string_view> words;
  for (size_t begin = line.find_first_not_of(kSpace); begin != std::string_view::npos;) {
    const size_t end = std::min(line.find_first_of(kSpace, begin), line.size());
    words.push_back(line.substr(begin, end - begin));
    begin = line.find_first_not_of(kSpace, end);
  }
  return words;
}

// A slot count: decimal digits only, no sign, at most kMaxHostfileSlots (checked digit by digit,
// so a long number cannot overflow on the way).
int parse_slots(std::string_view key, std::string_view value, const std::string& where) {
  auto bad = [&] {
    return error(where, ": ", key, "=", value, " is not a whole number in [1, ", kMaxHostfileSlots,
                 "]");
  };
  if (value.empty()) throw bad();
  int64_t n = 0;
  for (char c : value) {
    if (c < '0' || c > '9') throw bad();
    n = n * 10 + (c - '0');
    if (n > kMaxHostfileSlots) throw bad();
  }
  if (n < 1) throw bad();
  return static_cast<int>(n);
}

HostfileEntry parse_line(const std::vector<std::string_view>& words, int line,
                         const std::string& source) {
  const std::string where = source + " line " + std::to_string(line);
  HostfileEntry entry;
  entry.line = line;
  // Checked before any word is echoed: a control character would garble (NUL: cut) the message.
  for (const auto word : words)
    for (char c : word)
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
        throw error(where, ": control character ", static_cast<int>(static_cast<unsigned char>(c)),
                    " (a binary file, not a hostfile?)");
  if (words[0].find('=') != std::string_view::npos)
    throw error(where, ": '", words[0], "' is not a host name (a line starts with the host)");
  entry.host = std::string(words[0]);
  for (size_t i = 1; i < words.size(); ++i) {
    const size_t eq = words[i].find('=');
    const std::string_view key = words[i].substr(0, eq);
    const std::string_view value = eq == std::string_view::npos ? "" : words[i].substr(eq + 1);
    if (key == "slots" || key == "slot" || key == "count" || key == "cpu") {
      entry.slots = parse_slots(key, value, where);
    } else if (key == "max_slots" || key == "max-slots" || key == "slots_max" ||
               key == "slots-max") {
      entry.max_slots = parse_slots(key, value, where);
    } else {
      throw error(where, ": unknown '", words[i], "' after host ", entry.host,
                  " (expected slots=N or max_slots=N)");
    }
  }
  if (entry.max_slots && entry.slots > entry.max_slots)
    throw error(where, ": slots=", entry.slots, " exceeds max_slots=", entry.max_slots);
  return entry;
}

}  // namespace

std::vector<HostfileEntry> parse_hostfile(std::string_view text, const std::string& source) {
  std::vector<HostfileEntry> entries;
  int line = 0;
  for (size_t begin = 0; begin < text.size();) {
    const size_t end = std::min(text.find('\n', begin), text.size());
    ++line;
    const auto words = words_of(text.substr(begin, end - begin));
    if (!words.empty()) entries.push_back(parse_line(words, line, source));
    begin = end + 1;
  }
  if (entries.empty()) throw error("hostfile ", source, " lists no hosts");
  return entries;
}

std::vector<HostfileEntry> read_hostfile(const std::string& path) {
  return parse_hostfile(read_text_file(path), path);
}

int count_hosts(const std::vector<HostfileEntry>& entries) {
  std::set<std::string> hosts;
  for (const auto& e : entries) hosts.insert(e.host);
  return static_cast<int>(hosts.size());
}

std::string this_host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "?";
  return name;
}

}  // namespace boostlm
