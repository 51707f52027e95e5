#include "plan/hardware.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"

#ifndef BOOSTLM_PLAN_SOURCE_DIR
#define BOOSTLM_PLAN_SOURCE_DIR "."
#endif

namespace boostlm::plan {

namespace {

using nlohmann::json;
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// A required positive number at `key` of `j`; `where` names the object in the message.
double positive(const json& j, const std::string& key, const std::string& where) {
  if (!j.contains(key) || !j.at(key).is_number())
    throw error("hardware: ", where, ".", key, " is missing or not a number");
  const double v = j.at(key).get<double>();
  if (!(v > 0)) throw error("hardware: ", where, ".", key, "=", v, " must be positive");
  return v;
}

double fraction(const json& j, const std::string& key, const std::string& where) {
  const double v = positive(j, key, where);
  if (v > 1) throw error("hardware: ", where, ".", key, "=", v, " is an efficiency: at most 1");
  return v;
}

// An optional boolean at `key` of `j` (top level), `otherwise` when absent.
bool flag(const json& j, const std::string& key, bool otherwise) {
  if (!j.contains(key)) return otherwise;
  if (!j.at(key).is_boolean()) throw error("hardware: ", key, " must be true or false");
  return j.at(key).get<bool>();
}

double non_negative(const json& j, const std::string& key, const std::string& where) {
  const double v = j.value(key, 0.0);
  if (v < 0) throw error("hardware: ", where, ".", key, "=", v, " must not be negative");
  return v;
}

Device device_from_json(const json& j, const std::string& where) {
  Device d;
  d.memory_bytes = positive(j, "memory_gib", where) * kGiB;
  if (!j.contains("gemm") || !j.at("gemm").is_object() || j.at("gemm").empty())
    throw error("hardware: ", where, ".gemm must name at least one precision (fp32, bf16)");
  for (const auto& [name, curve] : j.at("gemm").items()) {
    const std::string at = where + ".gemm." + name;
    GemmCurve c;
    c.peak_flops = positive(curve, "peak_tflops", at) * 1e12;
    c.max_efficiency = fraction(curve, "max_efficiency", at);
    c.half_dim = non_negative(curve, "half_dim", at);
    d.gemm[parse_dtype(name)] = c;
  }
  d.gemm_overhead_s = non_negative(j, "gemm_overhead_us", where) * 1e-6;
  d.memory_bandwidth = positive(j, "memory_gbytes_per_s", where) * 1e9;
  d.elementwise_efficiency = fraction(j, "elementwise_efficiency", where);
  d.kernel_overhead_s = non_negative(j, "kernel_overhead_us", where) * 1e-6;
  d.graph_node_overhead_s = j.contains("graph_node_overhead_us")
                                ? non_negative(j, "graph_node_overhead_us", where) * 1e-6
                                : d.kernel_overhead_s;
  if (!j.contains("attention")) throw error("hardware: ", where, ".attention is missing");
  const json& a = j.at("attention");
  d.attention_max_efficiency = fraction(a, "max_efficiency", where + ".attention");
  d.attention_half_head_dim = non_negative(a, "half_head_dim", where + ".attention");
  d.attention_backward_products = a.contains("backward_products")
                                      ? positive(a, "backward_products", where + ".attention")
                                      : kFusedAttentionBackwardProducts;
  return d;
}

json device_to_json(const Device& d) {
  json gemm = json::object();
  for (const auto& [dtype, c] : d.gemm)
    gemm[to_string(dtype)] = {{"peak_tflops", c.peak_flops / 1e12},
                              {"max_efficiency", c.max_efficiency},
                              {"half_dim", c.half_dim}};
  return {{"memory_gib", d.memory_bytes / kGiB},
          {"gemm", gemm},
          {"gemm_overhead_us", d.gemm_overhead_s * 1e6},
          {"memory_gbytes_per_s", d.memory_bandwidth / 1e9},
          {"elementwise_efficiency", d.elementwise_efficiency},
          {"kernel_overhead_us", d.kernel_overhead_s * 1e6},
          {"graph_node_overhead_us", d.graph_node_overhead_s * 1e6},
          {"attention",
           {{"max_efficiency", d.attention_max_efficiency},
            {"half_head_dim", d.attention_half_head_dim},
            {"backward_products", d.attention_backward_products}}}};
}

Link link_from_json(const json& j, const std::string& where) {
  Link l;
  l.alpha_s = non_negative(j, "alpha_us", where) * 1e-6;
  l.bandwidth = positive(j, "gbytes_per_s", where) * 1e9;
  l.efficiency = fraction(j, "efficiency", where);
  l.shared_by_node = j.value("shared_by_node", false);
  l.overlap_cost_s_per_byte = non_negative(j, "overlap_cost_ns_per_byte", where) * 1e-9;
  if (j.contains("measured")) {
    // [[bytes on the wire per call, microseconds per call], ...], ascending in bytes.
    const json& m = j.at("measured");
    if (!m.is_array()) throw error("hardware: ", where, ".measured must be an array");
    for (const json& point : m) {
      if (!point.is_array() || point.size() != 2 || !point[0].is_number() ||
          !point[1].is_number() || !(point[0].get<double>() > 0) || !(point[1].get<double>() > 0))
        throw error("hardware: ", where,
                    ".measured holds [bytes, microseconds] pairs of positive numbers, not ",
                    point.dump());
      const double bytes = point[0].get<double>();
      if (!l.measured.empty() && bytes <= l.measured.back().first)
        throw error("hardware: ", where, ".measured must ascend in bytes (", bytes, " after ",
                    l.measured.back().first, ")");
      l.measured.emplace_back(bytes, point[1].get<double>() * 1e-6);
    }
  }
  return l;
}

json link_to_json(const Link& l) {
  json j = {{"alpha_us", l.alpha_s * 1e6},
            {"gbytes_per_s", l.bandwidth / 1e9},
            {"efficiency", l.efficiency},
            {"shared_by_node", l.shared_by_node}};
  if (l.overlap_cost_s_per_byte > 0)
    j["overlap_cost_ns_per_byte"] = l.overlap_cost_s_per_byte * 1e9;
  if (!l.measured.empty()) {
    json m = json::array();
    for (const auto& [bytes, seconds] : l.measured) m.push_back({bytes, seconds * 1e6});
    j["measured"] = m;
  }
  return j;
}

}  // namespace

double Link::call_seconds(double wire_bytes) const {
  if (measured.empty()) return alpha_s + wire_bytes / (bandwidth * efficiency);
  const double bytes = wire_bytes / efficiency;
  if (bytes <= measured.front().first) return measured.front().second;  // latency-bound
  if (bytes >= measured.back().first)
    return measured.back().second * bytes / measured.back().first;  // bandwidth-bound
  size_t i = 1;
  while (measured[i].first < bytes) ++i;
  const auto [b0, t0] = measured[i - 1];
  const auto [b1, t1] = measured[i];
  const double f = std::log(bytes / b0) / std::log(b1 / b0);
  return t0 * std::pow(t1 / t0, f);
}

const GemmCurve& Device::curve(DType dtype) const {
  const auto it = gemm.find(dtype);
  if (it == gemm.end())
    throw error("hardware: no GEMM curve for ", to_string(dtype), " (add device.gemm.",
                dtype == DType::bf16 ? "bf16" : "fp32", ")");
  return it->second;
}

Hardware Hardware::from_json(const json& j) {
  Hardware h;
  if (!j.is_object()) throw error("hardware: the file must hold a JSON object");
  h.name = j.value("name", "");
  if (h.name.empty()) throw error("hardware: name is missing");
  h.description = j.value("description", "");
  if (j.contains("sources")) h.sources = j.at("sources").get<std::vector<std::string>>();
  h.devices_per_node = j.value("devices_per_node", 0);
  if (h.devices_per_node < 1) throw error("hardware: devices_per_node must be at least 1");
  if (!j.contains("device")) throw error("hardware: device is missing");
  h.device = device_from_json(j.at("device"), "device");
  if (j.contains("solo_device")) h.solo_device = device_from_json(j.at("solo_device"), "solo");
  if (!j.contains("links")) throw error("hardware: links is missing");
  const json& links = j.at("links");
  if (!links.contains("intra_node") || !links.contains("inter_node"))
    throw error("hardware: links needs intra_node and inter_node");
  h.intra_node = link_from_json(links.at("intra_node"), "links.intra_node");
  h.inter_node = link_from_json(links.at("inter_node"), "links.inter_node");
  h.activations_fp32 = flag(j, "activations_fp32", false);
  h.attention_fp32 = flag(j, "attention_fp32", h.activations_fp32);
  h.collectives_fp32 = flag(j, "collectives_fp32", h.activations_fp32);
  return h;
}

json Hardware::to_json() const {
  json j = {{"name", name},
            {"description", description},
            {"sources", sources},
            {"devices_per_node", devices_per_node},
            {"activations_fp32", activations_fp32},
            {"collectives_fp32", collectives_fp32},
            {"attention_fp32", attention_fp32},
            {"device", device_to_json(device)},
            {"links",
             {{"intra_node", link_to_json(intra_node)}, {"inter_node", link_to_json(inter_node)}}}};
  if (solo_device) j["solo_device"] = device_to_json(*solo_device);
  return j;
}

std::string default_hardware_dir() {
  return std::string(BOOSTLM_PLAN_SOURCE_DIR) + "/hardware";
}

std::vector<std::string> hardware_search_dirs() {
  std::vector<std::string> dirs;
  if (const char* env = std::getenv("BOOSTLM_HARDWARE_DIR")) dirs.emplace_back(env);
  dirs.emplace_back("hardware");
  dirs.push_back(default_hardware_dir());
  return dirs;
}

std::string hardware_path(const std::string& name_or_path) {
  namespace fs = std::filesystem;
  if (name_or_path.find('/') != std::string::npos || name_or_path.ends_with(".json")) {
    if (!fs::exists(name_or_path)) throw error("hardware file ", name_or_path, " does not exist");
    return name_or_path;
  }
  std::string tried;
  for (const auto& dir : hardware_search_dirs()) {
    const std::string path = dir + "/" + name_or_path + ".json";
    if (fs::exists(path)) return path;
    tried += (tried.empty() ? "" : ", ") + dir;
  }
  throw error("no hardware named ", name_or_path, " (looked in ", tried,
              "); `boostlm calibrate` writes this-machine.json");
}

Hardware load_hardware(const std::string& name_or_path) {
  const std::string path = hardware_path(name_or_path);
  std::ifstream in(path);
  if (!in) throw error("cannot read hardware file ", path);
  try {
    return Hardware::from_json(json::parse(in));
  } catch (const json::exception& e) {
    throw error(path, ": ", e.what());
  } catch (const Error& e) {
    throw error(path, ": ", e.what());
  }
}

}  // namespace boostlm::plan
