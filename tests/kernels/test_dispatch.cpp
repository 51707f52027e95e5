// The kernel dispatch (kernels/backend.h): the interface's functions reach the kernels only through
// the active KernelTable, so a backend that fills a table runs the whole engine.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/model.h"
#include "kernels/backend.h"
#include "kernels/elementwise.h"
#include "test_util.h"

namespace boostlm {
namespace {

// Every entry of a table that counts its calls and forwards to the CPU backend.
std::map<std::string, int64_t> g_calls;

#define BOOSTLM_COUNTING_KERNEL(ret, function, entry, params, args) \
  ret counting_##entry params {                                     \
    ++g_calls[#entry];                                              \
    return cpu_kernel_table().entry args;                           \
  }
BOOSTLM_KERNEL_LIST(BOOSTLM_COUNTING_KERNEL)
#undef BOOSTLM_COUNTING_KERNEL

const KernelTable& counting_table() {
  static const KernelTable table = [] {
    KernelTable t;
    t.backend = "counting";
#define BOOSTLM_COUNTING_ENTRY(ret, function, entry, params, args) t.entry = &counting_##entry;
    BOOSTLM_KERNEL_LIST(BOOSTLM_COUNTING_ENTRY)
#undef BOOSTLM_COUNTING_ENTRY
    return t;
  }();
  return table;
}

// Puts the CPU table back whatever a test does.
struct RestoreCpuKernels {
  ~RestoreCpuKernels() { use_kernels(cpu_kernel_table()); }
};

TEST(KernelDispatch, TheCpuTableIsCompleteAndActiveByDefault) {
  const char* missing = nullptr;
  EXPECT_EQ(kernel_table_filled(cpu_kernel_table(), &missing), kernel_table_size());
  EXPECT_STREQ(missing, "");
  EXPECT_GE(kernel_table_size(), 60);
  EXPECT_STREQ(active_kernels().backend, "cpu");
}

TEST(KernelDispatch, AnIncompleteTableIsRefusedNamingWhatItLacks) {
  const RestoreCpuKernels restore;
  KernelTable t = cpu_kernel_table();
  t.backend = "partial";
  t.online_norm_unpack_bf16 = nullptr;
  t.concat_columns = nullptr;
  std::string message;
  try {
    use_kernels(t);
  } catch (const Error& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("partial backend implements " + std::to_string(kernel_table_size() - 2) +
                         " of the " + std::to_string(kernel_table_size())),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("online_norm_unpack_bf16"), std::string::npos) << message;
  EXPECT_STREQ(active_kernels().backend, "cpu");  // unchanged
}

TEST(KernelDispatch, TheInterfaceCallsTheActiveTable) {
  const RestoreCpuKernels restore;
  g_calls.clear();
  use_kernels(counting_table());
  const std::vector<float> a{1, 2, 3}, b{10, 20, 30};
  std::vector<float> out(3);
  add(a.data(), b.data(), out.data(), 3);
  EXPECT_EQ(out, (std::vector<float>{11, 22, 33}));
  EXPECT_EQ(g_calls["add"], 1);
  EXPECT_EQ(g_calls.size(), 1u);
}

// A whole training step of each architecture, in fp32 and bf16, under the counting table gives
// the CPU table's loss and gradients bit for bit: the engine reached every kernel it ran through
// the table (a call around it would not be counted, but also could not change the result; the
// counts show the step's kernels all went through it).
TEST(KernelDispatch, AWholeStepRunsThroughTheTable) {
  const RestoreCpuKernels restore;
  for (const Arch arch : {Arch::dense, Arch::svd, Arch::cola, Arch::lax}) {
    for (const DType precision : {DType::f32, DType::bf16}) {
      const ModelConfig c = small_model(arch, /*kv_heads=*/2);
      const auto tokens = random_tokens(14, 64, 1), targets = random_tokens(14, 64, 2);
      auto step = [&](float* loss) {
        Model model(c, precision);
        model.init_weights(5);
        model.grads().zero();
        *loss = model.forward_backward(tokens.data(), targets.data(), 2, 7);
        return std::vector<float>(model.grads().data(),
                                  model.grads().data() + model.grads().size());
      };
      use_kernels(cpu_kernel_table());
      float cpu_loss = 0, counted_loss = 0;
      const auto cpu_grads = step(&cpu_loss);
      g_calls.clear();
      use_kernels(counting_table());
      const auto counted_grads = step(&counted_loss);
      const std::string what = to_string(arch) + " " + to_string(precision);
      EXPECT_EQ(cpu_loss, counted_loss) << what;
      EXPECT_EQ(cpu_grads, counted_grads) << what;
      EXPECT_GT(g_calls["gemm_batched"] + g_calls["gemm"], 0) << what;
      // In bf16 the residual is bf16 (issue 60): the norms' bf16-residual entries.
      EXPECT_GT(g_calls["rmsnorm_forward"] + g_calls["rmsnorm_forward_bf16"] +
                    g_calls["rmsnorm_forward_x16"] + g_calls["rmsnorm_forward_bf16_x16"],
                0)
          << what;
      EXPECT_GT(g_calls["attention_forward_f32"] + g_calls["attention_forward_bf16"], 0) << what;
      EXPECT_GT(g_calls["attention_backward_f32"] + g_calls["attention_backward_bf16"], 0) << what;
      EXPECT_GT(g_calls["embedding_forward"] + g_calls["embedding_shard_forward"], 0) << what;
      if (arch == Arch::lax) {  // LaX's crossing (kernels/lax.h), forward and backward
        for (const char* entry : {"lax_norm_partial_stats", "lax_norm_forward", "lax_norm_apply",
                                  "lax_norm_partial_backward", "lax_norm_backward", "kron_expand",
                                  "kron_factor_backward"})
          EXPECT_GT(g_calls[entry], 0) << what << " " << entry;
      }
    }
  }
}

}  // namespace
}  // namespace boostlm
