// Reading a checkpoint's tensors by piece: a rank asks for the piece of a tensor it holds (its TP
// shard of a weight, its ZeRO-1 range of a moment) and gets exactly those elements, copied from
// whichever stored pieces meet it, whatever grid wrote them. Files are mapped, not read whole, and
// opened only when a piece is needed from them; each file's checksum (checksums.json) is checked
// when it is first opened, so a rank verifies the files it reads and no others.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "checkpoint/index.h"
#include "formats/safetensors.h"

namespace boostlm {

class CheckpointReader {
 public:
  explicit CheckpointReader(std::string dir);
  const CheckpointIndex& index() const { return index_; }
  bool has(const std::string& name) const { return index_.tensors.count(name) > 0; }
  const std::vector<int64_t>& shape(const std::string& name) const;
  // out[0, want.numel()) := the elements of `want` of tensor `name`. Throws Error when the tensor
  // is missing or of another shape, or a value read is not finite (a diverged or corrupt save).
  void read(const std::string& name, const TensorPiece& want, float* out);

 private:
  const SafetensorsReader& open(const std::string& file);

  std::string dir_;
  CheckpointIndex index_;
  bool checked_ = false;  // the directory has checksums.json
  std::map<std::string, std::string> checksums_;
  std::map<std::string, std::unique_ptr<SafetensorsReader>> files_;
};

}  // namespace boostlm
