#include "bench/pipeline_bench.h"

#include <algorithm>
#include <cstdio>
#include <numeric>

#include "core/error.h"
#include "core/rng.h"
#include "engine/model.h"
#include "engine/pipeline.h"
#include "parallel/comm_formulas.h"
#include "plan/models.h"

namespace boostlm::bench {

namespace {

// One timed step of one micro-batch count.
struct Sample {
  PipelineTimes times;
  CommCounts p2p;
};

}  // namespace

PipelineBenchReport run_pipeline_bench(ProcessGrid& grid, const PipelineBenchOptions& o) {
  if (o.micro_batches.empty()) throw error("bench pipeline: no micro-batch counts");
  for (int64_t m : o.micro_batches)
    if (m < 1) throw error("bench pipeline: micro-batch counts must be positive, not ", m);
  PipelineBenchReport report;
  report.options = o;
  report.grid = grid.shape();
  ModelConfig config = plan::find_model(o.shape, o.arch);
  if (o.vocab_size > 0) config.vocab_size = o.vocab_size;
  config.tied_embeddings = false;  // the embedding is on the first stage, the head on the last
  config.validate();
  report.config = config;
  const int pp = grid.shape().pp, stage = grid.pp_rank();
  for (int s = 0; s < pp; ++s)
    report.stage_layers.push_back(stage_layer_range(config.n_layers, pp, s));

  const int64_t most = *std::max_element(o.micro_batches.begin(), o.micro_batches.end());
  const int64_t N = o.batch * o.seq_len;
  Model model(config, o.precision, o.layout, &grid.tp(), {}, &grid.pp(),
              Pipeline::micro_slots(pp, stage, most));
  model.init_weights(1);
  Pipeline pipeline(model);
  Rng rng(17);
  std::vector<int32_t> tokens(most * N + 1);
  for (auto& t : tokens) t = static_cast<int32_t>(rng.below(config.vocab_size));

  std::vector<std::vector<Sample>> samples(o.micro_batches.size());
  auto run = [&](int64_t m) {
    std::vector<MicroBatch> micro;
    for (int64_t i = 0; i < m; ++i)
      micro.push_back({tokens.data() + i * N, tokens.data() + i * N + 1});
    model.grads().zero();
    grid.world().barrier();  // every stage starts the step together, as after a training step
    const CommCounts before = grid.pp().counts();
    pipeline.forward_backward(micro, o.batch, o.seq_len, 1.0f / static_cast<float>(m));
    Sample s{{}, grid.pp().counts() - before};
    s.times = pipeline.gather_times();
    return s;
  };
  for (int64_t m : o.micro_batches)
    for (int i = 0; i < o.warmup; ++i) run(m);
  // Interleaved: every repetition runs each count once, so drift affects all alike.
  for (int rep = 0; rep < o.steps; ++rep)
    for (size_t k = 0; k < o.micro_batches.size(); ++k)
      samples[k].push_back(run(o.micro_batches[k]));

  for (size_t k = 0; k < o.micro_batches.size(); ++k) {
    const int64_t m = o.micro_batches[k];
    auto& runs = samples[k];
    std::sort(runs.begin(), runs.end(),
              [](const Sample& a, const Sample& b) { return a.times.span_s < b.times.span_s; });
    const Sample& mid = runs[runs.size() / 2];
    PipelineBenchRow row;
    row.micro_batches = m;
    row.span_ms = mid.times.span_s * 1e3;
    for (double c : mid.times.compute_s) row.compute_ms.push_back(c * 1e3);
    row.bubble_fraction = mid.times.bubble_fraction();
    row.one_f_one_b = PipelineTimes::one_f_one_b_fraction(pp, m);
    row.tokens_per_s = static_cast<double>(m * N) / mid.times.span_s;
    row.send_bytes = mid.p2p[Collective::send].bytes;
    row.recv_bytes = mid.p2p[Collective::recv].bytes;
    const CommCounts expected = pipeline_p2p_comm(model.layout(), config, N, grid.shape().tp, pp,
                                                  stage, m, /*backward=*/true, model.compute());
    double ok = 1;
    for (Collective kind : {Collective::send, Collective::recv})
      if (mid.p2p[kind].bytes != expected[kind].bytes ||
          mid.p2p[kind].calls != expected[kind].calls)
        ok = 0;
    grid.world().all_reduce_host(&ok, 1);
    row.p2p_as_formula = ok == grid.shape().world();
    report.rows.push_back(row);
  }
  return report;
}

nlohmann::json to_json(const PipelineBenchReport& r) {
  const auto& o = r.options;
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& row : r.rows)
    rows.push_back({{"micro_batches", row.micro_batches},
                    {"pipeline_ms", row.span_ms},
                    {"stage_compute_ms", row.compute_ms},
                    {"bubble_fraction", row.bubble_fraction},
                    {"bubble_fraction_1f1b", row.one_f_one_b},
                    {"tokens_per_s", row.tokens_per_s},
                    {"first_stage_send_bytes", row.send_bytes},
                    {"first_stage_recv_bytes", row.recv_bytes},
                    {"p2p_as_formula", row.p2p_as_formula}});
  nlohmann::json stages = nlohmann::json::array();
  for (const auto& [first, last] : r.stage_layers) stages.push_back({first, last});
  return {{"shape", o.shape},
          {"arch", to_string(o.arch)},
          {"precision", to_string(o.precision)},
          {"vocab_size", r.config.vocab_size},
          {"batch", o.batch},
          {"seq_len", o.seq_len},
          {"tp", r.grid.tp},
          {"pp", r.grid.pp},
          {"stage_layers", stages},
          {"steps", o.steps},
          {"rows", rows}};
}

void print_pipeline_table(const PipelineBenchReport& r) {
  const auto& o = r.options;
  std::printf("bench pipeline: %s %s, %s, vocab %ld, micro-batch %ldx%ld, tp %d x pp %d, stages",
              o.shape.c_str(), to_string(o.arch).c_str(), to_string(o.precision).c_str(),
              r.config.vocab_size, o.batch, o.seq_len, r.grid.tp, r.grid.pp);
  for (const auto& [first, last] : r.stage_layers) std::printf(" [%ld,%ld)", first, last);
  std::printf(", median of %d\n\n", o.steps);
  std::printf("%6s %12s %10s %10s %12s  %s\n", "m", "pipeline ms", "bubble", "1F1B", "tokens/s",
              "compute ms per stage; p2p of a step on stage 0");
  for (const auto& row : r.rows) {
    std::printf("%6ld %12.1f %9.1f%% %9.1f%% %12.0f  ", row.micro_batches, row.span_ms,
                100 * row.bubble_fraction, 100 * row.one_f_one_b, row.tokens_per_s);
    for (double c : row.compute_ms) std::printf("%.1f ", c);
    std::printf("; sent %.2f MB, received %.2f MB%s\n", row.send_bytes / 1e6, row.recv_bytes / 1e6,
                row.p2p_as_formula ? " (= formula on every rank)" : " (DIFFERS from the formula)");
  }
}

}  // namespace boostlm::bench
