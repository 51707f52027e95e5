// Per-token log-probabilities of a token sequence (`boostlm eval --text --per-token`): what an
// outside runtime (llama.cpp on an exported GGUF, tools/llama_cpp) is compared with token by token.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/model.h"

namespace boostlm {

// log p(tokens[i + 1] | the window's tokens up to i) for every i < tokens.size() - 1, in
// consecutive windows of seq_len targets (the windows of evaluate_every_token with stride =
// seq_len: each target sees only its window's earlier tokens), by the KV decoder one token at a
// time (fp32, one process). Their mean is minus that evaluation's loss, up to rounding.
std::vector<double> token_log_probs(const Model& model, const std::vector<int32_t>& tokens,
                                    int64_t seq_len);

}  // namespace boostlm
