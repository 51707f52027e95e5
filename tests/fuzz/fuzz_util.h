// Shared by the libFuzzer targets. Each target feeds its bytes to one parser of outside input and
// accepts exactly one outcome besides success: boostlm::Error (the parser refused the input with
// a message). Anything else is a finding: a crash or sanitizer report, any other exception
// escaping (uncaught, it aborts), an allocation over -malloc_limit_mb, or a broken property
// checked with FUZZ_CHECK.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#define FUZZ_CHECK(cond)                                                                 \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      std::fprintf(stderr, "%s:%d: property violated: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                      \
    }                                                                                    \
  } while (0)

inline std::string_view text_of(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}
