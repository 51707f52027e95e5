// What the CUDA tests share: device arrays moved by named upload/download calls, the skip when no
// GPU is visible, random inputs, and element-wise comparisons with stated tolerances.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/rng.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device.h"

namespace boostlm::cuda::testing {

// A device allocation of n Ts, freed with the object.
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t n) : n_(n) {
    if (n_ > 0) BOOSTLM_CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&data_), n_ * sizeof(T)));
  }
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) { upload(host); }
  ~DeviceArray() {
    if (data_) cudaFree(data_);
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  T* get() { return data_; }
  size_t size() const { return n_; }
  void upload(const std::vector<T>& host) {
    EXPECT_EQ(host.size(), n_);
    if (n_ > 0)
      BOOSTLM_CHECK_CUDA(cudaMemcpy(data_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice));
  }
  // Waits for the device (cudaMemcpy is synchronous with the legacy default stream; the tests
  // synchronise their stream before downloading).
  std::vector<T> download() const {
    std::vector<T> host(n_);
    if (n_ > 0)
      BOOSTLM_CHECK_CUDA(cudaMemcpy(host.data(), data_, n_ * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }

 private:
  T* data_ = nullptr;
  size_t n_ = 0;
};

// A fixture whose tests skip, with the reason, where no GPU is visible; each test gets a stream.
class DeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (cuda_visible_devices(&why) == 0) GTEST_SKIP() << "no GPU: " << why;
    BOOSTLM_CHECK_CUDA(cudaStreamCreate(&stream));
  }
  void TearDown() override {
    if (stream) cudaStreamDestroy(stream);
  }
  void sync() { BOOSTLM_CHECK_CUDA(cudaStreamSynchronize(stream)); }
  cudaStream_t stream = nullptr;
};

inline std::vector<float> random_floats(int64_t n, uint64_t seed, float scale = 1.0f) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = scale * rng.normal();
  return v;
}

// |actual − expected| <= atol + rtol·|expected| for every element; names the first that is not.
inline ::testing::AssertionResult all_near(const std::vector<float>& actual,
                                           const std::vector<float>& expected, double atol,
                                           double rtol) {
  if (actual.size() != expected.size())
    return ::testing::AssertionFailure() << "sizes " << actual.size() << " vs " << expected.size();
  for (size_t i = 0; i < actual.size(); ++i) {
    const double diff = std::abs(static_cast<double>(actual[i]) - expected[i]);
    if (!(diff <= atol + rtol * std::abs(static_cast<double>(expected[i]))))
      return ::testing::AssertionFailure() << "element " << i << ": " << actual[i] << " vs "
                                           << expected[i] << " (diff " << diff << ")";
  }
  return ::testing::AssertionSuccess();
}

// bf16 values at most `ulps` units in the last place apart (both finite, as bit patterns on one
// side of zero; ±0 count as equal). The fp32 values a GPU and a CPU round differ by a few fp32
// ulps, so their roundings agree but where one falls next to a rounding boundary: 1 bf16 ulp.
inline ::testing::AssertionResult all_within_bf16_ulps(const std::vector<bf16_t>& actual,
                                                       const std::vector<bf16_t>& expected,
                                                       int ulps = 1) {
  if (actual.size() != expected.size())
    return ::testing::AssertionFailure() << "sizes " << actual.size() << " vs " << expected.size();
  auto ordered = [](bf16_t b) {  // a monotone integer for the bf16 value
    return (b & 0x8000u) ? -static_cast<int>(b & 0x7fffu) : static_cast<int>(b);
  };
  for (size_t i = 0; i < actual.size(); ++i)
    if (std::abs(ordered(actual[i]) - ordered(expected[i])) > ulps)
      return ::testing::AssertionFailure()
             << "element " << i << ": " << bf16_to_float(actual[i]) << " vs "
             << bf16_to_float(expected[i]) << " (more than " << ulps << " bf16 ulp apart)";
  return ::testing::AssertionSuccess();
}

inline std::vector<bf16_t> rounded(const std::vector<float>& v) {
  std::vector<bf16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = float_to_bf16(v[i]);
  return out;
}

// Shapes for the row kernels' tests (row stride D + pad): each block size of launch.h's
// kRowBlockSizes (128, 256, 512, 1024, and 1024 with several columns per thread), odd widths,
// padded strides, and many rows for dγ's chunks.
struct RowShape {
  int64_t rows, D, pad;
};
inline constexpr RowShape kRowShapes[] = {{1, 1, 0},     {3, 7, 5},    {17, 100, 3}, {5, 513, 0},
                                          {4, 1500, 11}, {2, 4099, 1}, {300, 64, 2}, {1000, 33, 0}};

// ‖x − y‖ / ‖y‖ in double (‖x − y‖ where y is all zeros).
inline double relative_error(const std::vector<float>& x, const std::vector<float>& y) {
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    num += (static_cast<double>(x[i]) - y[i]) * (static_cast<double>(x[i]) - y[i]);
    den += static_cast<double>(y[i]) * y[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

}  // namespace boostlm::cuda::testing
