#include "kernels/cuda/table.h"

#include <algorithm>
#include <type_traits>

#include "core/device.h"
#include "core/error.h"
#include "kernels/cross_entropy.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_allocator.h"
#include "kernels/cuda/event_timer.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/gemm_measure.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/plans.h"
#include "kernels/gemm_counters.h"
#ifdef BOOSTLM_CUDA_EMULATOR
#include "cuda_emulator/counters.h"
#endif

namespace boostlm::cuda {

namespace {

cudaStream_t stream() {
  return buffer_stream();
}

// The engine's GEMMs, each timed with events on the stream (GEMM counters and MFU read real device
// time, not the host's enqueue time); the times are booked when the counters are read.
GemmContext& gemm_context() {
  static GemmContext* context = [] {  // never destroyed: see device_allocator()
    auto* c = new GemmContext();
    c->set_timer(new EventTimer(cuda_event_api()));
    return c;
  }();
  return *context;
}

// Device scratch for one launch, back to the allocator once the launch is enqueued.
class Scratch {
 public:
  Scratch(std::size_t bytes, cudaStream_t s)
      : bytes_(bytes), data_(bytes ? device_allocator().allocate(bytes, s) : nullptr) {}
  ~Scratch() { device_allocator().free(data_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(data_);
  }

 private:
  std::size_t bytes_;
  void* data_;
};

DeviceRopeTable on_device(const RopeTable& t) {
  return {t.cos.data(), t.sin.data(), t.max_pos, t.head_dim};
}

}  // namespace

// The launchers whose arguments are not the interface's plus a stream, adapted to that form; the
// others are cuda::'s own (found through the using-directive when a name is not declared here).
namespace adapted {
using namespace ::boostlm::cuda;

void gemm_batched(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, GemmInput A,
                  GemmInput B, float beta, float* C, int64_t ldc, const GemmBatch& batch,
                  DType compute, cudaStream_t s) {
  cuda::gemm_batched(gemm_context(), ta, tb, M, N, K, alpha, A, B, beta, C, ldc, batch, compute, s);
}
void gemm_batched_bf16_out(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha,
                           GemmInput A, GemmInput B, bf16_t* C, int64_t ldc, const GemmBatch& batch,
                           cudaStream_t s) {
  cuda::gemm_batched_bf16_out(gemm_context(), ta, tb, M, N, K, alpha, A, B, C, ldc, batch, s);
}
void gemm(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, GemmInput A,
          GemmInput B, float beta, float* C, int64_t ldc, DType compute, cudaStream_t s) {
  cuda::gemm(gemm_context(), ta, tb, M, N, K, alpha, A, B, beta, C, ldc, compute, s);
}

template <typename X>
void rmsnorm_backward(const float* dy, int64_t lddy, const X* x, int64_t ldx, const float* gamma,
                      const float* rstd, int64_t rows, int64_t D, float* dx, int64_t lddx,
                      float* dgamma, bool accumulate, bf16_t* dx16, cudaStream_t s) {
  const Scratch w(rmsnorm_backward_workspace_bytes(rows, D), s);
  cuda::rmsnorm_backward(dy, lddy, x, ldx, gamma, rstd, rows, D, dx, lddx, dgamma, accumulate,
                         w.data(), w.bytes(), s, dx16);
}
template <typename X>
void rmsnorm_backward_apply(const float* dy, int64_t lddy, const X* x, int64_t ldx,
                            const float* gamma, const float* rstd, const float* dot, int64_t rows,
                            int64_t D_local, int64_t D_total, float* dx, int64_t lddx,
                            float* dgamma, bool accumulate, cudaStream_t s) {
  const Scratch w(rmsnorm_backward_apply_workspace_bytes(rows, D_local), s);
  cuda::rmsnorm_backward_apply(dy, lddy, x, ldx, gamma, rstd, dot, rows, D_local, D_total, dx, lddx,
                               dgamma, accumulate, w.data(), w.bytes(), s);
}
template <typename G, typename X>
void online_norm_input_backward(const G* g, const X* x, const float* gamma, const float* ds,
                                int64_t rows, int64_t D, float dx_beta, float* dx, float* dgamma,
                                bf16_t* dx16, cudaStream_t s) {
  const Scratch w(online_norm_input_backward_workspace_bytes(rows, D), s);
  cuda::online_norm_input_backward(g, x, gamma, ds, rows, D, dx_beta, dx, dgamma, w.data(),
                                   w.bytes(), s, dx16);
}

void rope_forward(float* x, int64_t ld, int64_t B, int64_t T, int64_t heads, const RopeTable& t,
                  cudaStream_t s) {
  cuda::rope_forward(x, ld, B, T, heads, on_device(t), s);
}
void rope_forward_at(float* x, int64_t ld, int64_t rows, int64_t heads, const RopeTable& t,
                     int64_t first_pos, cudaStream_t s) {
  cuda::rope_forward_at(x, ld, rows, heads, on_device(t), first_pos, s);
}
void rope_forward_bf16(const float* x, int64_t ld, int64_t B, int64_t T, int64_t heads,
                       const RopeTable& t, bf16_t* out, int64_t ldo, cudaStream_t s) {
  cuda::rope_forward_bf16(x, ld, B, T, heads, on_device(t), out, ldo, s);
}
void rope_backward(float* dx, int64_t ld, int64_t B, int64_t T, int64_t heads, const RopeTable& t,
                   cudaStream_t s) {
  cuda::rope_backward(dx, ld, B, T, heads, on_device(t), s);
}
void rope_backward_bf16(const float* dx, int64_t ld, int64_t B, int64_t T, int64_t heads,
                        const RopeTable& t, bf16_t* out, int64_t ldo, cudaStream_t s) {
  cuda::rope_backward_bf16(dx, ld, B, T, heads, on_device(t), out, ldo, s);
}

template <class T>
void attention_backward_on(const AttentionShape& sh, const T* q, int64_t ldq, const T* k,
                           int64_t ldk, const T* v, int64_t ldv, const T* out, int64_t ldo,
                           const float* lse, const float* dout, int64_t lddo, float* dq,
                           int64_t lddq, float* dk, int64_t lddk, float* dv, int64_t lddv,
                           cudaStream_t s) {
  const Scratch w(attention_backward_workspace_bytes(sh, std::is_same_v<T, bf16_t>), s);
  cuda::attention_backward(sh, q, ldq, k, ldk, v, ldv, out, ldo, lse, dout, lddo, dq, lddq, dk,
                           lddk, dv, lddv, w.data(), w.bytes(), s);
}
void attention_backward(const AttentionShape& sh, const float* q, int64_t ldq, const float* k,
                        int64_t ldk, const float* v, int64_t ldv, const float* out, int64_t ldo,
                        const float* lse, const float* dout, int64_t lddo, float* dq, int64_t lddq,
                        float* dk, int64_t lddk, float* dv, int64_t lddv, cudaStream_t s) {
  attention_backward_on(sh, q, ldq, k, ldk, v, ldv, out, ldo, lse, dout, lddo, dq, lddq, dk, lddk,
                        dv, lddv, s);
}
void attention_backward(const AttentionShape& sh, const bf16_t* q, int64_t ldq, const bf16_t* k,
                        int64_t ldk, const bf16_t* v, int64_t ldv, const bf16_t* out, int64_t ldo,
                        const float* lse, const float* dout, int64_t lddo, float* dq, int64_t lddq,
                        float* dk, int64_t lddk, float* dv, int64_t lddv, cudaStream_t s) {
  attention_backward_on(sh, q, ldq, k, ldk, v, ldv, out, ldo, lse, dout, lddo, dq, lddq, dk, lddk,
                        dv, lddv, s);
}

// The values the CPU forms return: computed on the device, downloaded (the stream is waited for).
// (device_download: the device memory's own copy on this stream, core/device.h.)
float mean_loss(const float* losses, int64_t n, cudaStream_t s) {
  const Scratch result(sizeof(float), s);
  cuda::mean_loss(losses, n, result.as<float>(), s);
  float value = 0;
  device_download(&value, result.data(), sizeof value);
  return value;
}
void mean_loss_into(const float* losses, int64_t n, float* result, cudaStream_t s) {
  cuda::mean_loss(losses, n, result, s);
}
double sum_squares(const float* x, int64_t n, cudaStream_t s) {
  const Scratch result(sizeof(double), s), w(sum_squares_workspace_bytes(n), s);
  cuda::sum_squares(x, n, result.as<double>(), w.data(), w.bytes(), s);
  double value = 0;
  device_download(&value, result.data(), sizeof value);
  return value;
}

// One sum per range into a device array (a batch of ranges per pair of launches, the workspace
// reused in stream order), then their sum in range order into *result (device memory).
void sum_squares_ranges_into(const float* x, const std::vector<IndexRange>& ranges, double* result,
                             cudaStream_t s) {
  if (ranges.empty()) {
    BOOSTLM_CHECK_CUDA(cudaMemsetAsync(result, 0, sizeof(double), s));
    return;
  }
  const Scratch results(ranges.size() * sizeof(double), s),
      w(sum_squares_ranges_workspace_bytes(ranges), s);
  cuda::sum_squares_ranges(x, ranges, results.as<double>(), w.data(), w.bytes(), s);
  cuda::sum_values(results.as<double>(), static_cast<int64_t>(ranges.size()), result, s);
}

void sum_values_into(const double* values, int64_t n, double* result, cudaStream_t s) {
  cuda::sum_values(values, n, result, s);
}

// The same, read back: one download for the lot.
double sum_squares_ranges(const float* x, const std::vector<IndexRange>& ranges, cudaStream_t s) {
  if (ranges.empty()) return 0.0;
  const Scratch total(sizeof(double), s);
  sum_squares_ranges_into(x, ranges, total.as<double>(), s);
  double value = 0;
  device_download(&value, total.data(), sizeof value);
  return value;
}

void lax_norm_backward(const float* dz, int64_t lddz, const float* xhat, int64_t ldxhat,
                       const float* rstd, const float* sums, int64_t rows, int64_t r_local,
                       int64_t r_total, const float* weight, float* ds, int64_t ldds,
                       float* dweight, float* dbias, cudaStream_t s) {
  const Scratch w(lax_norm_backward_workspace_bytes(rows, r_local), s);
  cuda::lax_norm_backward(dz, lddz, xhat, ldxhat, rstd, sums, rows, r_local, r_total, weight, ds,
                          ldds, dweight, dbias, w.data(), w.bytes(), s);
}

}  // namespace adapted

namespace {

// ---- Graphs (kernels/graph.h): the buffers' stream captured in global mode, so that any host
// read or synchronisation inside fails the capture; its allocations from a pool of the graph's own
// (caching_allocator.h). GEMMs are not timed with events while capturing (an event recorded in a
// capture cannot be read), and a replay books none.
struct CapturedGraph {
  cudaGraphExec_t exec = nullptr;
  char pool = 0;  // its address keys the allocator's pool
};
CapturedGraph* g_capturing = nullptr;
EventTimer* g_paused_timer = nullptr;

void graph_begin() {
  BOOSTLM_ASSERT_MSG(!g_capturing, "one kernel graph capture at a time");
  g_capturing = new CapturedGraph;
  g_paused_timer = gemm_context().timer();
  gemm_context().set_timer(nullptr);
  device_allocator().begin_pool(&g_capturing->pool);
  BOOSTLM_CHECK_CUDA(cudaStreamBeginCapture(stream(), cudaStreamCaptureModeGlobal));
  t_capturing_graph = true;
}

void* graph_end() {
  CapturedGraph* captured = g_capturing;
  g_capturing = nullptr;
  t_capturing_graph = false;
  device_allocator().end_pool();
  gemm_context().set_timer(g_paused_timer);
  cudaGraph_t graph = nullptr;
  const cudaError_t status = cudaStreamEndCapture(stream(), &graph);
  if (status != cudaSuccess) {
    cudaGetLastError();
    device_allocator().release_pool(&captured->pool);
    delete captured;
    throw error("capturing kernels into a CUDA graph failed: ", cudaGetErrorName(status), " (",
                cudaGetErrorString(status),
                "): something inside read device memory on the host, synchronised or waited on "
                "work outside it; --cuda-graph off runs without graphs");
  }
  const cudaError_t made = cudaGraphInstantiate(&captured->exec, graph, 0);
  BOOSTLM_CHECK_CUDA(cudaGraphDestroy(graph));
  if (made != cudaSuccess) {
    device_allocator().release_pool(&captured->pool);
    delete captured;
    BOOSTLM_CHECK_CUDA(made);
  }
  return captured;
}

void graph_launch(void* graph) {
  BOOSTLM_CHECK_CUDA(cudaGraphLaunch(static_cast<CapturedGraph*>(graph)->exec, stream()));
}

void graph_destroy(void* graph) {
  auto* captured = static_cast<CapturedGraph*>(graph);
  // Its pool's blocks go back only once its last replay has run.
  BOOSTLM_CHECK_CUDA(cudaStreamSynchronize(stream()));
  BOOSTLM_CHECK_CUDA(cudaGraphExecDestroy(captured->exec));
  device_allocator().release_pool(&captured->pool);
  delete captured;
}

#define BOOSTLM_APPEND_STREAM(...) __VA_ARGS__, stream()
#define BOOSTLM_CUDA_KERNEL(ret, function, entry, params, args) \
  ret entry##_on_stream params {                                \
    return adapted::function(BOOSTLM_APPEND_STREAM args);       \
  }
BOOSTLM_KERNEL_LIST(BOOSTLM_CUDA_KERNEL)
#undef BOOSTLM_CUDA_KERNEL
#undef BOOSTLM_APPEND_STREAM

}  // namespace

const KernelTable& kernel_table() {
  static const KernelTable table = [] {
    KernelTable t;
    t.backend = "cuda";
    // The GEMM rate MFU divides by, timed with events on the stream (gemm_measure.h).
    t.measure_gemm_gflops = [](int64_t M, int64_t N, int64_t K, DType compute, int reps) {
      return cuda::measure_gemm_gflops(gemm_context(), M, N, K, compute, reps, stream());
    };
    t.measure_peak_gemm_gflops = [](DType compute) {
      return cuda::measure_peak_gemm_gflops(gemm_context(), compute, stream());
    };
    t.describe_gemm = [](DType compute) {
      return compute == DType::f32 ? "cuBLASLt (fp32, TF32 where --tf32 allows)"
                                   : "cuBLASLt (bf16 inputs, fp32 accumulation)";
    };
#ifdef BOOSTLM_CUDA_EMULATOR
    // The emulated device counts its work (cuda_emulator/counters.h) as it runs: read once
    // everything queued has run.
    t.counters.read = [] {
      BOOSTLM_CHECK_CUDA(cudaDeviceSynchronize());
      std::vector<DeviceKernelCount> rows;
      for (const cuda_emulator::KernelCounters& c : cuda_emulator::kernel_counters())
        rows.push_back({c.kernel, c.launches, c.tensor_flops, c.other_flops, c.bytes_read,
                        c.bytes_written, c.undeclared, c.graph_launches, c.m, c.n, c.k, c.dim});
      return rows;
    };
    t.counters.reset = [] { cuda_emulator::reset_kernel_counters(); };
    t.counters.set_count_only = [](bool on) { cuda_emulator::set_count_only(on); };
#endif
    t.graphs = {graph_begin, graph_end, graph_launch, graph_destroy};
    t.logits_chunk_elements = kDeviceLogitsChunkElements;
#define BOOSTLM_CUDA_ENTRY(ret, function, entry, params, args) t.entry = &entry##_on_stream;
    BOOSTLM_KERNEL_LIST(BOOSTLM_CUDA_ENTRY)
#undef BOOSTLM_CUDA_ENTRY
    return t;
  }();
  return table;
}

void start_backend() {
  cudaStream_t s = nullptr;
  BOOSTLM_CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  set_buffer_stream(s);
  install_device_buffers();
  use_kernels(kernel_table());
  set_gemm_time_collector([] { gemm_context().collect_timings(); });
}

}  // namespace boostlm::cuda
