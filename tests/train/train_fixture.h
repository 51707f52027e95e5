// Shared helpers for trainer and checkpoint tests: a tiny model config and random token shards.
#pragma once

#include <filesystem>
#include <string>

#include "core/rng.h"
#include "data/shard.h"
#include "model/config.h"

namespace boostlm::test_support {

inline ModelConfig tiny_config(Arch arch = Arch::cola) {
  ModelConfig c;
  c.arch = arch;
  c.vocab_size = 64;
  c.d_model = 32;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.d_ff = 48;
  c.attn_rank = 8;
  c.mlp_rank = 8;
  c.max_seq_len = 32;
  c.validate();
  return c;
}

// A fresh directory under the system temp dir, removed first if it exists.
inline std::filesystem::path fresh_dir(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / ("boostlm_test_" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// A data directory with train.bin and val.bin of random tokens below `vocab`.
inline std::string make_data_dir(const std::string& name, int64_t vocab, int64_t tokens = 5000) {
  const auto dir = fresh_dir(name);
  Rng rng(99);
  std::vector<uint32_t> train(tokens), val(tokens / 5);
  for (auto& t : train) t = static_cast<uint32_t>(rng.below(vocab));
  for (auto& t : val) t = static_cast<uint32_t>(rng.below(vocab));
  write_shard((dir / "train.bin").string(), train, vocab);
  write_shard((dir / "val.bin").string(), val, vocab);
  return dir.string();
}

}  // namespace boostlm::test_support
