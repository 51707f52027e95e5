// index.json: where every tensor of a sharded checkpoint lives. For each tensor (SPEC §2's names;
// the AdamW moments as "<name>.exp_avg" and "<name>.exp_avg_sq") its full shape and its pieces,
// each stored whole in one safetensors file of the directory under the tensor's own name:
//
//   {"format": "boostlm-sharded", "version": 1, "grid": {...as saved, for people},
//    "tensors": {"model.norm.weight": {"shape": [64], "pieces": [{"file": "model.safetensors"}]},
//                "lm_head.weight": {"shape": [512, 64], "pieces": [
//                    {"file": "model-r00000.safetensors", "axis": 0, "begin": 0, "size": 256},
//                    {"file": "model-r00001.safetensors", "axis": 0, "begin": 256, "size": 256}]},
//                "lm_head.weight.exp_avg": {... "flat": [0, 8192] ...}}}
//
// A piece without "axis" is the whole tensor; "flat" [lo, hi) keeps part of the box (ZeRO-1's
// range; stored then as a 1-D tensor of hi - lo elements). Checkpoints written before sharding
// (one model.safetensors and one optimizer.safetensors of whole tensors) have no index.json: their
// index is made from the files' headers.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint/piece.h"

namespace boostlm {

struct StoredPiece {
  std::string file;
  TensorPiece piece;
};

struct StoredTensor {
  std::vector<int64_t> shape;
  std::vector<StoredPiece> pieces;
};

struct CheckpointIndex {
  std::map<std::string, StoredTensor> tensors;
  nlohmann::json grid = nlohmann::json::object();  // how it was saved (informational)

  void add(const std::string& name, const std::string& file, const TensorPiece& piece);
  nlohmann::json to_json() const;
  // Every tensor's pieces cover it exactly once; throws Error naming `source` and the tensor.
  void check_complete(const std::string& source) const;

  // Parses and checks index.json's text (file names plain names, pieces inside their tensors,
  // every tensor covered exactly once); throws Error naming `source` on anything else.
  static CheckpointIndex parse(std::string_view text, const std::string& source);
  // A checkpoint directory's: its index.json, or one made from a pre-sharding checkpoint's files.
  static CheckpointIndex of_directory(const std::string& dir);
};

constexpr const char* kIndexFile = "index.json";

}  // namespace boostlm
