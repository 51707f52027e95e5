// Token shards (llm.c's format): header validation and token decoding.
#include "core/error.h"
#include "data/shard.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace boostlm;
  try {
    const auto tokens = parse_shard(data, size, "fuzz.bin");
    FUZZ_CHECK(!tokens.empty());
    for (int32_t t : tokens) FUZZ_CHECK(t >= 0);
  } catch (const Error&) {
  }
  // The header alone, as read_shard_header sees it: only the first words, and a file size that
  // need not match (here the input's first 8 bytes, when present, stand for it).
  if (size >= 8) {
    int64_t file_bytes;
    __builtin_memcpy(&file_bytes, data, 8);
    try {
      const ShardHeader header = parse_shard_header(data + 8, size - 8, file_bytes, "fuzz.bin");
      FUZZ_CHECK(header.num_tokens > 0 &&
                 (header.bytes_per_token == 2 || header.bytes_per_token == 4));
    } catch (const Error&) {
    }
  }
  return 0;
}
