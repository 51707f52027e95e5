// What `boostlm train` must log as world rank 0's "comm" for one training step, from the closed
// forms of parallel/comm_formulas.h, for shell tests that run the trainer
// (tests/cli/test_cluster.sh).
//
//   boostlm_closed_form_comm CONFIG.json LAYOUT TP PP DP MICRO_BATCH SEQ_LEN MICRO_BATCHES
//                            [OVERLAP_CHUNKS]
//
// prints {"tp": {kind: {"calls", "bytes"}}, "pp": {...}, "dp": {...}} in the metrics' format.
// Rank 0 is TP rank 0 of pipeline stage 0 and DP replica 0. Beside the formulas, a step of the
// trainer (train/trainer.cpp) adds on each group of more than one rank:
//  - TP and PP: Model::grad_sum_squares's one all-reduce of a double (8 bytes) for the gradient
//    norm (over DP only under ZeRO, not tested here: its DP traffic is the reduce-scatter);
//  - DP: GradReducer's bucketed all-reduce, which covers the flat gradient buffer from its first
//    tensor to its last once, in as many calls as it has buckets (train's default 16 MiB);
//  - PP: beside it, the pipeline's sends and receives (pipeline_p2p_comm).
// The last step of a run also evaluates, so tests compare the steps before it.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "comm/communicator.h"
#include "engine/data_parallel.h"
#include "engine/model.h"
#include "model/config.h"
#include "parallel/comm_formulas.h"
#include "plan/workload.h"

namespace {

using namespace boostlm;

nlohmann::json to_json(const CommCounts& counts) {
  nlohmann::json j = nlohmann::json::object();
  for (int k = 0; k < kCollectiveKinds; ++k)
    if (counts.by_kind[k].calls)
      j[to_string(static_cast<Collective>(k))] = {{"calls", counts.by_kind[k].calls},
                                                  {"bytes", counts.by_kind[k].bytes}};
  return j;
}

void add_norm_all_reduce(CommCounts& counts) {
  counts[Collective::all_reduce].calls += 1;
  counts[Collective::all_reduce].bytes += 8;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 9 && argc != 10) {
    std::fprintf(stderr,
                 "usage: %s CONFIG.json LAYOUT TP PP DP MICRO_BATCH SEQ_LEN MICRO_BATCHES "
                 "[OVERLAP_CHUNKS]\n",
                 argv[0]);
    return 2;
  }
  std::ifstream in(argv[1]);
  const ModelConfig config = ModelConfig::from_json(nlohmann::json::parse(in));
  const LayoutKind layout = parse_layout(argv[2]);
  const int tp = std::atoi(argv[3]), pp = std::atoi(argv[4]), dp = std::atoi(argv[5]);
  const int64_t batch = std::atoll(argv[6]), seq_len = std::atoll(argv[7]),
                micro_batches = std::atoll(argv[8]);
  const int64_t tokens = batch * seq_len;

  plan::MicroBatchShape mb;
  mb.layout = layout;
  mb.config = config;
  mb.batch = batch;
  mb.seq_len = seq_len;
  mb.tp = tp;
  const int64_t rows = plan::head_chunk_rows(mb);
  const int64_t head_chunks = (tokens + rows - 1) / rows;

  BlockOptions options;  // train's defaults, and --tp-overlap's chunks when given
  if (argc == 10) options.overlap_chunks = std::atoi(argv[9]);
  CommCounts tp_comm = stage_tp_comm(layout, config, tokens, tp, head_chunks, options, pp,
                                     /*stage=*/0, micro_batches);
  if (tp > 1) add_norm_all_reduce(tp_comm);
  CommCounts pp_comm = pipeline_p2p_comm(layout, config, tokens, tp, pp, /*stage=*/0,
                                         micro_batches, /*backward=*/true);
  if (pp > 1) add_norm_all_reduce(pp_comm);
  CommCounts dp_comm;
  if (dp > 1) {
    if (tp > 1 || pp > 1) {
      std::fprintf(stderr, "DP traffic is computed here for TP 1 and PP 1 only\n");
      return 2;
    }
    Model model(config, DType::f32, layout);
    Communicator self;
    GradReducer reducer(model.params(), config.n_layers, model.grads(), self);
    const auto& entries = model.params().entries();
    dp_comm[Collective::all_reduce].calls = reducer.buckets();
    dp_comm[Collective::all_reduce].bytes =
        (entries.back().offset + entries.back().numel - entries.front().offset) * 4;
  }
  const nlohmann::json out = {
      {"tp", to_json(tp_comm)}, {"pp", to_json(pp_comm)}, {"dp", to_json(dp_comm)}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
