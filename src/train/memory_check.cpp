#include "train/memory_check.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "comm/mpi_runtime.h"
#include "core/error.h"
#include "kernels/cross_entropy.h"
#include "plan/memory.h"
#include "plan/step_model.h"

namespace boostlm {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::string gib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, bytes < 10 * kGiB ? "%.2f GiB" : "%.0f GiB", bytes / kGiB);
  return buf;
}

// A number of bytes from a one-line file (cgroup v2 memory.max / memory.current); -1 when the
// file is absent or says "max".
double read_bytes_file(const char* path) {
  std::ifstream in(path);
  std::string word;
  if (!(in >> word) || word == "max") return -1;
  char* end = nullptr;
  const double value = std::strtod(word.c_str(), &end);
  return end == word.c_str() ? -1 : value;
}

double mem_available_bytes() {
  std::ifstream in("/proc/meminfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("MemAvailable:", 0) != 0) continue;
    std::istringstream words(line.substr(13));
    double kib = 0;
    if (words >> kib) return kib * 1024.0;
  }
  return 0;
}

}  // namespace

RankMemoryNeed estimate_rank_memory(const TrainOptions& o, const ModelConfig& config,
                                    LayoutKind layout, int64_t train_tokens) {
  plan::StepConfig c;
  c.layout = layout;
  c.config = config;
  c.options = o.block;
  c.tp = o.grid.tp;
  c.pp = o.grid.pp;
  c.dp = o.grid.dp;
  c.micro_batch = o.batch_size;
  c.micro_batches = o.grad_accum;
  c.seq_len = o.seq_len;
  c.precision = o.precision;
  c.zero1 = o.zero == 1;
  c.device_attention_scratch = false;  // host memory: the dS tiles live on a GPU
  c.logits_chunk_elements = kHostLogitsChunkElements;
  RankMemoryNeed need;
  for (int stage = 0; stage < c.pp; ++stage) {
    // This CPU engine keeps activations in fp32 whatever the compute precision.
    const plan::MemoryEstimate m = plan::rank_memory(c, stage, 4.0);
    const double state = m.weights + m.grads + m.optimizer + m.weights_bf16;
    if (state + m.activations + m.workspace + m.checkpoint_staging > need.total() - need.data) {
      need.model_state = state;
      need.activations = m.activations + m.workspace;
      need.checkpoint = m.checkpoint_staging;  // the rank's shard, staged for its save
    }
  }
  need.data = static_cast<double>(train_tokens) * 4;
  return need;
}

double available_memory_bytes() {
  double available = mem_available_bytes();
  const double limit = read_bytes_file("/sys/fs/cgroup/memory.max");
  const double used = read_bytes_file("/sys/fs/cgroup/memory.current");
  if (limit > 0 && used >= 0) {
    const double left = std::max(0.0, limit - used);
    available = available > 0 ? std::min(available, left) : left;
  }
  return available;
}

int ranks_on_this_machine() {
  return std::max(1, mpi_local_size());  // MPI's own split, however the ranks were started
}

void check_memory_fits(const RankMemoryNeed& need, int local_ranks, double available,
                       const TrainOptions& o) {
  if (available <= 0 || need.total() * local_ranks <= available) return;
  std::string advice = "a smaller --batch-size";
  if (o.block.recompute != Recompute::block) advice += ", --recompute block";
  if (o.zero == 0 && o.grid.dp > 1) advice += ", --zero 1";
  advice += ", more --tp or --pp ranks (on more machines), or a smaller model";
  throw error("this run needs about ", gib(need.total()), " per rank (model state ",
              gib(need.model_state), ", activations ", gib(need.activations),
              ", checkpoint staging ", gib(need.checkpoint), ", tokens ", gib(need.data), "), ",
              local_ranks, local_ranks == 1 ? " rank" : " ranks", " on this machine need ",
              gib(need.total() * local_ranks), ", and it has ", gib(available), " available. Try ",
              advice);
}

}  // namespace boostlm
