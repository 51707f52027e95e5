// A checkpoint's checksums.json, as verify_checkpoint reads it before opening the files it names.
#include "core/error.h"
#include "fuzz_util.h"
#include "checkpoint/checkpoint_json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace boostlm;
  try {
    for (const auto& [file, checksum] : parse_checksums(text_of(data, size), "checksums.json")) {
      // Only plain names inside the checkpoint directory ever reach the file system.
      FUZZ_CHECK(!file.empty() && file != "." && file != "..");
      FUZZ_CHECK(file.find('/') == std::string::npos && file.find('\0') == std::string::npos);
    }
  } catch (const Error&) {
  }
  return 0;
}
