// A sharded checkpoint's index.json (checkpoint/index.h), as every rank reads it before opening
// the files it names and copying the pieces it describes.
#include "checkpoint/index.h"
#include "core/error.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace boostlm;
  try {
    const CheckpointIndex index = CheckpointIndex::parse(text_of(data, size), "index.json");
    for (const auto& [name, tensor] : index.tensors) {
      int64_t numel = 1;
      for (int64_t d : tensor.shape) numel *= d;
      for (const StoredPiece& s : tensor.pieces) {
        // Only plain names inside the checkpoint directory ever reach the file system.
        FUZZ_CHECK(!s.file.empty() && s.file.find('/') == std::string::npos && s.file != "..");
        // Every run a reader would copy lies inside the tensor and inside the piece.
        for (const PieceRun& r : runs_of(s.piece)) {
          FUZZ_CHECK(r.global >= 0 && r.length > 0 && r.global + r.length <= numel);
          FUZZ_CHECK(r.local >= 0 && r.local + r.length <= s.piece.numel());
        }
      }
    }
  } catch (const Error&) {
  }
  return 0;
}
