// The interface's functions (src/kernels/*.h), each forwarding to its entry of the active
// KernelTable (kernels/backend.h).
#include <atomic>
#include <string>

#include "core/device.h"
#include "core/error.h"
#include "kernels/activation.h"
#include "kernels/adamw.h"
#include "kernels/attention.h"
#include "kernels/backend.h"
#include "kernels/cross_entropy.h"
#include "kernels/elementwise.h"
#include "kernels/embedding.h"
#include "kernels/gemm.h"
#include "kernels/lax.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"

namespace boostlm {

namespace {
// Null until use_kernels: the CPU backend's table then, the checking one once --device cpu-checked
// was chosen.
const KernelTable* g_active = nullptr;

const KernelTable& active() {
  if (g_active != nullptr) return *g_active;
  return device_memory_checked() ? cpu_checked_kernel_table() : cpu_kernel_table();
}
}  // namespace

const KernelTable& active_kernels() {
  return active();
}

const char* gemm_engine(DType compute) {
  const KernelTable& t = active();
  return t.describe_gemm ? t.describe_gemm(compute) : t.backend;
}

int64_t logits_chunk_elements() {
  const KernelTable& t = active();
  return t.logits_chunk_elements > 0 ? t.logits_chunk_elements : kHostLogitsChunkElements;
}

int gemm_path(DType compute) {
  const KernelTable& t = active();
  return t.gemm_path ? t.gemm_path(compute) : 0;
}

void set_gemm_path(DType compute, int path) {
  const KernelTable& t = active();
  if (t.set_gemm_path) t.set_gemm_path(compute, path);
}

bool gemm_keeps_threads(DType compute) {
  const KernelTable& t = active();
  return t.gemm_keeps_threads != nullptr && t.gemm_keeps_threads(compute);
}

int kernel_table_size() {
  int n = 0;
#define BOOSTLM_COUNT_ENTRY(ret, function, entry, params, args) ++n;
  BOOSTLM_KERNEL_LIST(BOOSTLM_COUNT_ENTRY)
#undef BOOSTLM_COUNT_ENTRY
  return n;
}

int kernel_table_filled(const KernelTable& table, const char** first_missing) {
  int filled = 0;
  const char* missing = "";
#define BOOSTLM_CHECK_ENTRY(ret, function, entry, params, args) \
  if (table.entry != nullptr)                                   \
    ++filled;                                                   \
  else if (*missing == '\0')                                    \
    missing = #entry;
  BOOSTLM_KERNEL_LIST(BOOSTLM_CHECK_ENTRY)
#undef BOOSTLM_CHECK_ENTRY
  if (first_missing != nullptr) *first_missing = missing;
  return filled;
}

void use_kernels(const KernelTable& table) {
  const char* missing = nullptr;
  const int filled = kernel_table_filled(table, &missing);
  if (filled != kernel_table_size())
    throw Error(std::string("the ") + (table.backend ? table.backend : "unnamed") +
                " backend implements " + std::to_string(filled) + " of the " +
                std::to_string(kernel_table_size()) + " kernels (the first missing is " + missing +
                "): it cannot run the engine");
  g_active = &table;
}

bool device_launch_totals(uint64_t* launches, uint64_t* replayed) {
  const KernelTable& table = active_kernels();
  if (!table.counters.read) return false;
  *launches = *replayed = 0;
  for (const DeviceKernelCount& c : table.counters.read()) {
    *launches += c.launches;
    *replayed += c.graph_launches;
  }
  return true;
}

#define BOOSTLM_DISPATCH(ret, function, entry, params, args) \
  ret function params {                                      \
    return active().entry args;                              \
  }
BOOSTLM_KERNEL_LIST(BOOSTLM_DISPATCH)
#undef BOOSTLM_DISPATCH

}  // namespace boostlm
