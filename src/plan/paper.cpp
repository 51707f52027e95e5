#include "plan/paper.h"

#include "core/error.h"

namespace boostlm::plan {

const std::vector<PaperRow>& paper_rows() {
  // SPEC §5 (the paper's Table: seconds per iteration on A100).
  static const std::vector<PaperRow> rows = {
      {"1b", 2048, 5472, 32, 24, 512, 1, 1, 0.85, 0.56, 0.59},
      {"3b", 3072, 8192, 24, 28, 768, 2, 1, 1.14, 1.41, 0.78},
      {"7b", 4096, 11008, 32, 32, 1024, 4, 1, 1.06, 1.64, 0.72},
      {"13b", 5120, 13824, 40, 40, 1280, 4, 2, 2.07, 2.42, 1.30},
      {"30b", 8192, 22016, 64, 36, 2048, 4, 4, 2.43, 2.58, 1.27},
  };
  return rows;
}

ModelConfig paper_model(const PaperRow& row, Arch arch) {
  ModelConfig c;
  c.arch = arch;
  c.vocab_size = 32000;
  c.d_model = row.d_model;
  c.n_layers = row.n_layers;
  c.n_heads = row.n_heads;
  c.n_kv_heads = row.n_heads;
  c.d_ff = row.d_ff;
  c.attn_rank = arch == Arch::dense ? 0 : row.rank;
  c.mlp_rank = arch == Arch::dense ? 0 : row.rank;
  c.max_seq_len = 4096;
  c.validate();
  return c;
}

namespace {
std::string strip_prefix(const std::string& name) {
  return name.rfind("paper-", 0) == 0 ? name.substr(6) : name;
}
}  // namespace

bool is_paper_model(const std::string& name) {
  for (const auto& r : paper_rows())
    if (r.name == strip_prefix(name)) return true;
  return false;
}

ModelConfig paper_model(const std::string& name, Arch arch) {
  for (const auto& r : paper_rows())
    if (r.name == strip_prefix(name)) return paper_model(r, arch);
  throw error("no paper model named ", name, " (1b, 3b, 7b, 13b, 30b)");
}

StepConfig paper_step(const PaperRow& row, LayoutKind layout, int64_t micro_batches) {
  StepConfig s;
  s.layout = layout;
  s.config = paper_model(row, layout_traits(layout).low_rank ? Arch::cola : Arch::dense);
  s.tp = row.tp;
  s.pp = row.pp;
  s.dp = 1;
  s.micro_batch = 4;
  s.micro_batches = micro_batches;
  s.seq_len = 4096;
  s.precision = DType::bf16;
  // The paper's naive baseline all-reduces every projection's output on its own (7 calls).
  s.options.grouping = layout != LayoutKind::naive_tp;
  s.cuda_graphs = false;  // their engines launched every kernel from the host
  return s;
}

Hardware paper_engine(Hardware hw) {
  hw.activations_fp32 = false;  // bf16 activations in the element-wise passes and collectives
  for (Device* d : {&hw.device, hw.solo_device ? &*hw.solo_device : nullptr})
    if (d) d->attention_backward_products = kFusedAttentionBackwardProducts;
  return hw;
}

std::vector<PaperPrediction> predict_paper(const Hardware& hardware, int64_t m) {
  const Hardware hw = paper_engine(hardware);
  std::vector<PaperPrediction> out;
  for (const auto& row : paper_rows()) {
    out.push_back({row, predict_step(hw, paper_step(row, LayoutKind::dense_tp, m)),
                   predict_step(hw, paper_step(row, LayoutKind::naive_tp, m)),
                   predict_step(hw, paper_step(row, LayoutKind::btp, m))});
  }
  return out;
}

}  // namespace boostlm::plan
