// Helpers shared by the data-layer tests: a scratch directory, file I/O and a synthetic corpus.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/error.h"
#include "core/rng.h"

namespace boostlm::test {

// A fresh directory, removed with everything in it when the object goes out of scope.
class TempDir {
 public:
  TempDir() {
    static int counter = 0;
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = std::filesystem::temp_directory_path() /
            ("boostlm_data_" + std::to_string(::getpid()) + "_" + std::to_string(counter++) + "_" +
             (info ? info->name() : "test"));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Runs `action`, which must throw Error with a message containing every fragment.
template <typename Action>
void expect_error(Action&& action, const std::vector<std::string>& fragments) {
  try {
    action();
    ADD_FAILURE() << "no Error thrown; expected one mentioning '" << fragments.front() << "'";
  } catch (const Error& e) {
    const std::string message = e.what();
    for (const std::string& fragment : fragments) {
      EXPECT_NE(message.find(fragment), std::string::npos)
          << "message '" << message << "' does not mention '" << fragment << "'";
    }
  }
}

// English-looking text: `documents` paragraphs of `sentences` random sentences each, separated by
// blank lines. Deterministic in `seed`.
inline std::string synthetic_text(uint64_t seed, int documents, int sentences) {
  static const char* const kWords[] = {
      "the",    "river",  "flows",   "quietly", "past",  "old",    "stone",  "houses",   "and",
      "green",  "fields", "where",   "farmers", "grow",  "wheat",  "barley", "in",       "summer",
      "winter", "brings", "snow",    "to",      "hills", "above",  "town",   "people",   "gather",
      "at",     "market", "selling", "bread",   "fish",  "apples", "while",  "children", "play",
      "near",   "bridge", "over",    "water",   "light", "falls",  "on",     "roofs"};
  constexpr int kNumWords = sizeof(kWords) / sizeof(kWords[0]);
  Rng rng(seed);
  std::string text;
  for (int d = 0; d < documents; ++d) {
    for (int s = 0; s < sentences; ++s) {
      const int64_t length = 4 + rng.below(8);
      for (int64_t w = 0; w < length; ++w) {
        std::string word = kWords[rng.below(kNumWords)];
        if (w == 0) word[0] = static_cast<char>(word[0] - 'a' + 'A');
        text += (w ? " " : "") + word;
      }
      text += ". " + std::to_string(rng.below(1000)) + "\n";
    }
    text += "\n";
  }
  return text;
}

}  // namespace boostlm::test
