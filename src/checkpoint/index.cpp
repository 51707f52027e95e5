#include "checkpoint/index.h"

#include <filesystem>

#include "core/error.h"
#include "core/file_io.h"
#include "formats/safetensors.h"

namespace boostlm {

namespace fs = std::filesystem;

namespace {

constexpr const char* kFormat = "boostlm-sharded";
constexpr int kVersion = 1;
constexpr int64_t kMaxRuns = int64_t{1} << 22;
constexpr int64_t kMaxElements = int64_t{1} << 48;

nlohmann::json piece_json(const StoredPiece& s) {
  nlohmann::json j = {{"file", s.file}};
  const TensorPiece& p = s.piece;
  if (p.axis >= 0) {
    j["axis"] = p.axis;
    j["begin"] = p.begin;
    j["size"] = p.size;
  }
  if (p.flat_begin != 0 || p.flat_stop() != p.box_numel())
    j["flat"] = {p.flat_begin, p.flat_stop()};
  return j;
}

int64_t int_field(const nlohmann::json& j, const char* key, const std::string& where) {
  if (!j.contains(key) || !j[key].is_number_integer())
    throw error(where, ": \"", key, "\" must be an integer");
  return j[key].get<int64_t>();
}

// A plain file name of the directory (no path, no "..").
std::string file_field(const nlohmann::json& j, const std::string& where) {
  if (!j.contains("file") || !j["file"].is_string())
    throw error(where, ": \"file\" must be a string");
  const std::string f = j["file"].get<std::string>();
  if (f.empty() || f == "." || f == ".." || f.find('/') != std::string::npos ||
      f.find('\\') != std::string::npos)
    throw error(where, ": \"file\" '", f, "' is not a plain file name of the checkpoint");
  return f;
}

}  // namespace

void CheckpointIndex::add(const std::string& name, const std::string& file,
                          const TensorPiece& piece) {
  StoredTensor& t = tensors[name];
  if (t.pieces.empty()) t.shape = piece.shape;
  BOOSTLM_ASSERT_MSG(t.shape == piece.shape, "index: pieces of '" + name + "' disagree on shape");
  t.pieces.push_back({file, piece});
}

nlohmann::json CheckpointIndex::to_json() const {
  nlohmann::json tensors_json = nlohmann::json::object();
  for (const auto& [name, t] : tensors) {
    nlohmann::json pieces = nlohmann::json::array();
    for (const StoredPiece& s : t.pieces) pieces.push_back(piece_json(s));
    tensors_json[name] = {{"shape", t.shape}, {"pieces", pieces}};
  }
  return {{"format", kFormat}, {"version", kVersion}, {"grid", grid}, {"tensors", tensors_json}};
}

void CheckpointIndex::check_complete(const std::string& source) const {
  for (const auto& [name, t] : tensors) {
    std::vector<TensorPiece> pieces;
    for (const StoredPiece& s : t.pieces) pieces.push_back(s.piece);
    std::string why;
    if (!covers_exactly_once(pieces, t.shape, &why))
      throw error(source, ": tensor '", name, "' ", shape_string(t.shape), ": ", why);
  }
}

CheckpointIndex CheckpointIndex::parse(std::string_view text, const std::string& source) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) throw error(source, ": not a JSON object");
  // Typed reads only after the type is checked: a "format" of another JSON type is refused, not
  // a nlohmann type_error (found by fuzz_checkpoint_index).
  if (!j.contains("format") || !j["format"].is_string() ||
      j["format"].get<std::string>() != kFormat)
    throw error(source, ": \"format\" is not \"", kFormat, "\"");
  if (!j.contains("version") || !j["version"].is_number_integer() || j["version"] != kVersion)
    throw error(source, ": \"version\" must be ", kVersion,
                " (written by another boostlm version?)");
  if (!j.contains("tensors") || !j["tensors"].is_object())
    throw error(source, ": \"tensors\" must be an object");
  CheckpointIndex index;
  if (j.contains("grid") && j["grid"].is_object()) index.grid = j["grid"];
  for (const auto& [name, t] : j["tensors"].items()) {
    const std::string where = source + ": tensor '" + name + "'";
    if (!t.is_object() || !t.contains("shape") || !t["shape"].is_array() ||
        !t.contains("pieces") || !t["pieces"].is_array() || t["pieces"].empty())
      throw error(where, ": needs \"shape\" and a non-empty \"pieces\" array");
    StoredTensor& stored = index.tensors[name];
    // The bound is checked before each product, so that no product overflows: [2^40, 2^40]
    // would wrap to 0 elements and pass a check after it.
    int64_t elements = 1;
    for (const auto& d : t["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0 || d.get<int64_t>() > (int64_t{1} << 40))
        throw error(where, ": a dimension of \"shape\" is not an integer in [0, 2^40]");
      stored.shape.push_back(d.get<int64_t>());
      const int64_t factor = std::max<int64_t>(1, d.get<int64_t>());
      if (factor > kMaxElements / elements)
        throw error(where, ": \"shape\" has more than 2^48 elements");
      elements *= factor;
    }
    for (const auto& pj : t["pieces"]) {
      if (!pj.is_object()) throw error(where, ": a piece is not an object");
      StoredPiece s;
      s.file = file_field(pj, where);
      TensorPiece& p = s.piece;
      p.shape = stored.shape;
      if (pj.contains("axis")) {
        p.axis = static_cast<int>(int_field(pj, "axis", where));
        p.begin = int_field(pj, "begin", where);
        p.size = int_field(pj, "size", where);
        // begin + size is not formed: both may be near 2^63.
        if (p.axis < 0 || p.axis >= static_cast<int>(p.shape.size()) || p.begin < 0 || p.size < 0 ||
            p.begin > p.shape[static_cast<size_t>(p.axis)] ||
            p.size > p.shape[static_cast<size_t>(p.axis)] - p.begin)
          throw error(where, ": a piece's axis, begin or size lies outside the tensor");
        // A tensor with no elements along an axis is stored whole (a piece without "axis"):
        // no grid cuts one, and a cut of it has no rows to place.
        if (p.shape[static_cast<size_t>(p.axis)] == 0)
          throw error(where, ": a piece cut along axis ", p.axis, ", whose length is 0");
      }
      // Its runs (one per index before the axis) are what reading it walks: a crafted index
      // must not make that walk unbounded. A model's tensors have at most a vocabulary's rows.
      int64_t runs = 1;
      for (int a = 0; a < p.axis; ++a) runs *= std::max<int64_t>(1, p.shape[static_cast<size_t>(a)]);
      if (runs > kMaxRuns) throw error(where, ": a piece of more than ", kMaxRuns, " runs");
      if (pj.contains("flat")) {
        const auto& f = pj["flat"];
        if (!f.is_array() || f.size() != 2 || !f[0].is_number_integer() ||
            !f[1].is_number_integer())
          throw error(where, ": \"flat\" must be [begin, end]");
        p.flat_begin = f[0].get<int64_t>();
        p.flat_end = f[1].get<int64_t>();
        if (p.flat_begin < 0 || p.flat_end < p.flat_begin || p.flat_end > p.box_numel())
          throw error(where, ": \"flat\" lies outside its box");
      }
      stored.pieces.push_back(std::move(s));
    }
  }
  index.check_complete(source);
  return index;
}

CheckpointIndex CheckpointIndex::of_directory(const std::string& dir) {
  const fs::path index_path = fs::path(dir) / kIndexFile;
  if (fs::exists(index_path))
    return parse(read_text_file(index_path.string()), index_path.string());
  // Before sharding: whole tensors in model.safetensors, moments in optimizer.safetensors.
  CheckpointIndex index;
  for (const char* file : {"model.safetensors", "optimizer.safetensors"}) {
    const fs::path path = fs::path(dir) / file;
    if (!fs::exists(path)) continue;
    const SafetensorsReader reader(path.string());
    for (const auto& [name, entry] : reader.entries())
      index.add(name, file, whole_piece(entry.shape));
  }
  return index;
}

}  // namespace boostlm
