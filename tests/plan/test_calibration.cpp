// The calibration fits recover known parameters from synthetic measurements, and the hardware
// files load (the shipped ones, and errors that name the bad field).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "plan/calibration.h"
#include "plan/cost.h"

namespace boostlm::plan {
namespace {

TEST(PlanCalibration, GemmFitRecoversTheCurve) {
  const GemmCurve truth{50e9, 1.0, 96};
  const double overhead = 20e-6;
  std::vector<GemmSample> samples;
  for (int64_t m : {256, 2048})
    for (int64_t n : {64, 128, 256, 512, 1024, 2048})
      for (int64_t k : {64, 256, 1024}) {
        const double s = 2.0 * m * n * k / (truth.peak_flops * gemm_efficiency(truth, m, n, k));
        samples.push_back({m, n, k, s + overhead});
      }
  const GemmFit fit = fit_gemm_curve(samples);
  EXPECT_NEAR(fit.curve.half_dim, 96, 8);  // the grid's step
  EXPECT_NEAR(fit.curve.peak_flops / truth.peak_flops, 1.0, 0.05);
  EXPECT_NEAR(fit.overhead_s, overhead, 5e-6);
  EXPECT_LT(fit.rms_relative_error, 0.02);
}

TEST(PlanCalibration, LineFitIsAlphaBeta) {
  std::vector<double> bytes, seconds;
  for (double b = 1e3; b < 1e8; b *= 4) {
    bytes.push_back(b);
    seconds.push_back(3e-6 + b / 8e9);
  }
  const LineFit fit = fit_line(bytes, seconds);
  EXPECT_NEAR(fit.fixed, 3e-6, 1e-9);
  EXPECT_NEAR(1 / fit.per_unit, 8e9, 1e3);
  EXPECT_LT(fit.rms_relative_error, 1e-9);
}

TEST(PlanCalibration, LinkIsLatencyAndTheGeometricMeanBandwidth) {
  // 2 µs latency; 1 and 4 MB at 8 GB/s, 16 MB at 2 GB/s (out of cache).
  const std::vector<double> bytes = {1e3, 1e6, 4e6, 16e6};
  const std::vector<double> seconds = {2e-6, 2e-6 + 1e6 / 8e9, 2e-6 + 4e6 / 8e9, 2e-6 + 16e6 / 2e9};
  double spread = 0;
  const Link l = fit_link(bytes, seconds, 1e6, spread);
  EXPECT_DOUBLE_EQ(l.alpha_s, 2e-6);
  EXPECT_NEAR(l.bandwidth, std::cbrt(8e9 * 8e9 * 2e9), 1e3);
  EXPECT_GT(spread, 0.5);
}

TEST(PlanCalibration, AttentionFitGoesThroughBothPoints) {
  const double E = 0.6, h = 40;
  auto eff = [&](double hd) { return E * hd / (hd + h); };
  const auto [e_max, half] = fit_attention(64, eff(64), 128, eff(128));
  EXPECT_NEAR(e_max, E, 1e-9);
  EXPECT_NEAR(half, h, 1e-6);
  // Noise that would need a negative half dimension gives a flat curve through the better point.
  const auto [flat, zero] = fit_attention(64, 0.5, 128, 0.4);
  EXPECT_EQ(zero, 0.0);
  EXPECT_DOUBLE_EQ(flat, 0.5);
}

TEST(PlanHardware, ShippedFilesLoad) {
  for (const char* name : {"a100-80g", "h100-sxm", "h200"}) {
    const Hardware h = load_hardware(name);
    EXPECT_EQ(h.name, name);
    EXPECT_EQ(h.devices_per_node, 8);
    EXPECT_FALSE(h.sources.empty()) << name << ": the numbers must say where they come from";
    EXPECT_GT(h.device.curve(DType::bf16).peak_flops, 1e14);
  }
  const Hardware a100 = load_hardware("a100-80g");
  EXPECT_DOUBLE_EQ(a100.device.curve(DType::bf16).peak_flops, 312e12);
  EXPECT_DOUBLE_EQ(a100.intra_node.bandwidth, 300e9);
  EXPECT_DOUBLE_EQ(a100.inter_node.bandwidth, 25e9);
}

// hardware/this-machine.json is what `boostlm calibrate` wrote here: a CPU node whose ranks share
// its cores, a solo device for a rank alone, and the CPU backend's fp32 activations.
TEST(PlanHardware, ThisMachineIsACalibratedCpu) {
  const Hardware h = load_hardware("this-machine");
  EXPECT_TRUE(h.solo_device.has_value());
  EXPECT_TRUE(h.activations_fp32);
  EXPECT_GE(h.devices_per_node, 1);
  EXPECT_GT(h.intra_node.bandwidth, 0.0);
}

TEST(PlanHardware, RoundTripsThroughJson) {
  const Hardware h = load_hardware("a100-80g");
  const Hardware back = Hardware::from_json(h.to_json());
  EXPECT_EQ(back.to_json(), h.to_json());
}

TEST(PlanHardware, BadFilesNameTheField) {
  nlohmann::json j = load_hardware("a100-80g").to_json();
  j["device"]["gemm"]["bf16"]["max_efficiency"] = 1.5;
  try {
    Hardware::from_json(j);
    FAIL() << "an efficiency above 1 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("device.gemm.bf16.max_efficiency"), std::string::npos)
        << e.what();
  }
  // The engine's description: a count of attention backward products, and booleans.
  auto refused = [](const nlohmann::json& file, const std::string& field) {
    try {
      Hardware::from_json(file);
      ADD_FAILURE() << field << ": accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  };
  j = load_hardware("h200").to_json();
  j["device"]["attention"]["backward_products"] = 0;
  refused(j, "device.attention.backward_products");
  j = load_hardware("h200").to_json();
  j["attention_fp32"] = "no";
  refused(j, "attention_fp32");
  j = load_hardware("h200").to_json();
  j["activations_fp32"] = 1;
  refused(j, "activations_fp32");
  j = load_hardware("a100-80g").to_json();
  j["links"].erase("inter_node");
  EXPECT_THROW(Hardware::from_json(j), Error);
  EXPECT_THROW(load_hardware("no-such-cluster"), Error);
  EXPECT_THROW(Hardware::from_json(nlohmann::json::object()), Error);
}

}  // namespace
}  // namespace boostlm::plan
