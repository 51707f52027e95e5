// A checkpoint's trainer_state.json, and the loader position inside it as `--resume` restores it.
#include <vector>

#include "core/error.h"
#include "data/loader.h"
#include "fuzz_util.h"
#include "checkpoint/checkpoint_json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace boostlm;
  TrainingState state;
  try {
    const int64_t optimizer_step = parse_trainer_state(text_of(data, size), "state.json", state);
    FUZZ_CHECK(optimizer_step >= 0 && state.step >= 0 && state.tokens_seen >= 0);
  } catch (const Error&) {
    return 0;
  }
  try {
    LoaderConfig config;
    config.batch_size = 2;
    config.seq_len = 4;
    DataLoader loader(std::vector<int32_t>(64, 1), config, "train.bin");
    loader.load_state(state.loader);
    FUZZ_CHECK(loader.position() >= 0);
    loader.next();
  } catch (const Error&) {
  }
  return 0;
}
