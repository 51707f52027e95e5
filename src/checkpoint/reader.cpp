#include "checkpoint/reader.h"

#include <cmath>
#include <filesystem>

#include "core/error.h"
#include "core/file_io.h"
#include "checkpoint/checkpoint_json.h"

namespace boostlm {

namespace fs = std::filesystem;

CheckpointReader::CheckpointReader(std::string dir)
    : dir_(std::move(dir)), index_(CheckpointIndex::of_directory(dir_)) {
  const fs::path checksums = fs::path(dir_) / "checksums.json";
  checked_ = fs::exists(checksums);
  if (checked_)
    checksums_ = parse_checksums(read_text_file(checksums.string()), checksums.string());
}

const std::vector<int64_t>& CheckpointReader::shape(const std::string& name) const {
  auto it = index_.tensors.find(name);
  if (it == index_.tensors.end())
    throw error("checkpoint: ", dir_, " is missing tensor '", name, "'");
  return it->second.shape;
}

const SafetensorsReader& CheckpointReader::open(const std::string& file) {
  auto& slot = files_[file];
  if (slot) return *slot;
  const std::string path = (fs::path(dir_) / file).string();
  if (!fs::exists(path)) throw error("checkpoint: ", dir_, " is missing ", file);
  // Every file a checkpoint's commit wrote is listed: one that is not was put there since, and
  // nothing vouches for its bytes.
  if (checked_ && !checksums_.contains(file))
    throw error("checkpoint: ", dir_, ": ", file,
                " is not listed in checksums.json, so its contents cannot be checked: refused "
                "(was it added after the checkpoint was written?)");
  if (auto it = checksums_.find(file); it != checksums_.end()) {
    const MappedFile mapped(path);
    const std::string actual = Checksum64::hex(Checksum64::of(mapped.data(), mapped.size()));
    if (actual != it->second)
      throw error("checkpoint: checksum mismatch for ", path, " (expected ", it->second,
                  ", found ", actual, "): the file is corrupt");
  }
  slot = std::make_unique<SafetensorsReader>(path);
  return *slot;
}

void CheckpointReader::read(const std::string& name, const TensorPiece& want, float* out) {
  if (shape(name) != want.shape)
    throw error("checkpoint: ", dir_, ": tensor '", name, "' has shape ",
                shape_string(shape(name)), ", expected ", shape_string(want.shape));
  const int64_t n = want.numel();
  if (n == 0) return;
  int64_t copied = 0;
  for (const StoredPiece& s : index_.tensors.at(name).pieces) {
    const SafetensorsReader& file = open(s.file);
    copied += copy_overlap(s.piece, file.f32_bytes(name, s.piece.numel()), want, out);
  }
  BOOSTLM_ASSERT_MSG(copied == n, "checkpoint: an index that covers every element once (checked "
                                  "when read) left elements of '" + name + "' unread");
  int64_t non_finite = 0;
  for (int64_t i = 0; i < n; ++i) non_finite += !std::isfinite(out[i]);
  if (non_finite)
    throw error("checkpoint: ", dir_, ": tensor '", name, "' holds ", non_finite,
                " non-finite values (NaN or inf): it was saved from a diverged run or is corrupt");
}

}  // namespace boostlm
