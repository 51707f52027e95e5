// `boostlm plan`: the performance model of plan/step_model.h, for a model on a cluster.
//
//   boostlm plan --model 7b --arch cola --hardware a100-80g --gpus 16 [--global-batch 64]
//       every (layout, TP, PP, DP, micro-batch, recomputation, ZeRO-1) that can run, ranked by
//       predicted step time, with the breakdown and whether it fits in memory
//   boostlm plan --paper [--hardware a100-80g]
//       the paper's A100 runs (SPEC §5) next to the model's predictions
//   boostlm plan --measured bench.json [--hardware this-machine]
//       a `boostlm bench layouts --json` result next to the model's prediction for the same runs
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/checks.h"
#include "cli/commands.h"
#include "core/error.h"
#include "plan/enumerate.h"
#include "plan/models.h"
#include "plan/paper.h"

namespace boostlm::cli {
namespace {

using plan::StepPrediction;

struct PlanOptions {
  std::string model, arch = "cola", hardware, precision = "bf16", json_path, measured;
  std::vector<std::string> layouts, recompute;
  int gpus = 1, tp = 0, pp = 0, top = 20, overlap_chunks = 1;
  // 0: computed when the command runs (global batch 4 sequences per device, the paper's
  // micro-batch; sequence length the model's max_seq_len).
  int64_t global_batch = 0, seq_len = 0, micro_batch = 0, paper_micro_batches = 1;
  bool paper = false, with_dense = false, no_zero = false;
};

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
// The default global batch per device: the paper's micro-batch (SPEC §5), one per DP rank at the
// largest DP size, so that every split of the devices has a batch to divide.
constexpr int64_t kSequencesPerDevice = 4;

std::string options_text(const plan::StepConfig& c) {
  std::string s = to_string(c.options.recompute);
  if (layout_traits(c.layout).hidden_sharded_residual && !c.options.online_norm) s += ",sync-norm";
  if (!c.options.grouping) s += ",ungrouped";
  if (c.options.overlap_chunks > 1) s += ",overlap" + std::to_string(c.options.overlap_chunks);
  return s;
}

void print_header() {
  std::printf("%3s %-9s %3s %3s %3s %8s %-8s %4s %8s %9s %5s | %8s %8s %7s %7s %7s %6s | %7s %4s\n",
              "#", "layout", "TP", "PP", "DP", "mb x m", "recomp", "zero", "step_s", "tokens/s",
              "MFU", "compute", "TP comm", "PP p2p", "bubble", "DP exp", "optim", "mem GiB",
              "fits");
}

void print_row(int rank, const plan::StepConfig& c, const StepPrediction& p) {
  const std::string mb = std::to_string(c.micro_batch) + "x" + std::to_string(c.micro_batches);
  std::printf(
      "%3d %-9s %3d %3d %3d %8s %-8s %4s %8.3f %9.0f %4.0f%% | %8.3f %8.3f %7.3f %7.3f %7.3f "
      "%6.3f | %7.1f %4s\n",
      rank, to_string(c.layout).c_str(), c.tp, c.pp, c.dp, mb.c_str(), options_text(c).c_str(),
      c.zero1 ? "yes" : "-", p.step_s, p.tokens_per_s, 100 * p.mfu, p.compute_s(),
      p.micro_batches.comm, p.pp_comm_s, p.bubble_s, p.dp_exposed_s, p.optimizer_s,
      p.memory.total() / kGiB, p.memory.fits() ? "yes" : "NO");
}

nlohmann::json to_json(const plan::StepConfig& c, const StepPrediction& p) {
  return {{"layout", to_string(c.layout)},
          {"arch", to_string(c.config.arch)},
          {"tp", c.tp},
          {"pp", c.pp},
          {"dp", c.dp},
          {"micro_batch", c.micro_batch},
          {"micro_batches", c.micro_batches},
          {"recompute", to_string(c.options.recompute)},
          {"zero1", c.zero1},
          {"step_s", p.step_s},
          {"tokens_per_s", p.tokens_per_s},
          {"mfu", p.mfu},
          {"gemm_s", p.micro_batches.gemm},
          {"attention_s", p.micro_batches.attention},
          {"elementwise_s", p.micro_batches.elementwise},
          {"tp_comm_s", p.micro_batches.comm},
          {"pp_comm_s", p.pp_comm_s},
          {"bubble_s", p.bubble_s},
          {"dp_exposed_s", p.dp_exposed_s},
          {"dp_comm_s", p.dp_comm_s},
          {"optimizer_s", p.optimizer_s},
          {"gemm_utilisation", p.gemm_utilisation},
          {"memory_bytes", p.memory.total()},
          {"activation_bytes", p.memory.activations},
          {"checkpoint_staging_bytes", p.memory.checkpoint_staging},  // host memory
          {"fits", p.memory.fits()},
          {"links", {{"tp", p.tp_link}, {"dp", p.dp_link}, {"pp", p.pp_link}}}};
}

void write_json(const std::string& path, const nlohmann::json& j) {
  if (path.empty()) return;
  std::ofstream out(path);
  if (!out) throw error("cannot write ", path);
  out << j.dump(2) << "\n";
}

std::vector<LayoutKind> chosen_layouts(const PlanOptions& o, const ModelConfig& model) {
  std::vector<LayoutKind> out;
  for (const auto& name : o.layouts) out.push_back(parse_layout(name));
  if (!out.empty()) return out;
  if (!model.low_rank()) return layouts_for(false);
  out = layouts_for(true);
  if (o.with_dense) {
    const std::vector<LayoutKind> dense = layouts_for(false);
    out.insert(out.begin(), dense.begin(), dense.end());
  }
  return out;
}

void run_search(const PlanOptions& o) {
  if (o.model.empty()) throw error("plan: --model is required (or --paper, --measured)");
  const plan::Hardware hw = plan::load_hardware(o.hardware.empty() ? "a100-80g" : o.hardware);
  plan::SearchSpace s;
  s.config = plan::find_model(o.model, parse_arch(o.arch));
  s.dense_config = plan::dense_counterpart(o.model, s.config);
  s.layouts = chosen_layouts(o, s.config);
  s.gpus = o.gpus;
  s.global_batch = o.global_batch > 0 ? o.global_batch : kSequencesPerDevice * o.gpus;
  s.seq_len = o.seq_len > 0 ? o.seq_len : s.config.max_seq_len;
  s.precision = parse_dtype(o.precision);
  s.tp = o.tp;
  s.pp = o.pp;
  s.micro_batch = o.micro_batch;
  s.try_zero1 = !o.no_zero;
  s.overlap_chunks = o.overlap_chunks;
  if (!o.recompute.empty()) {
    s.recompute.clear();
    for (const auto& r : o.recompute) s.recompute.push_back(parse_recompute(r));
  }
  const auto found = plan::enumerate_plans(hw, s);
  std::printf("%s (%s) on %d x %s (%d per node): global batch %ld x %ld tokens, %s\n",
              o.model.c_str(), to_string(s.config.arch).c_str(), o.gpus, hw.name.c_str(),
              hw.devices_per_node, s.global_batch, s.seq_len, o.precision.c_str());
  std::printf(
      "seconds per step; compute = GEMM + attention + element-wise of all micro-batches on "
      "the slowest stage; TP comm blocking, DP exp = DP reduction not hidden by backward\n\n");
  if (s.seq_len > s.config.max_seq_len)
    std::printf("note: the model's max_seq_len is %ld; to train at %ld, raise it in the config\n\n",
                s.config.max_seq_len, s.seq_len);
  if (found.empty()) {
    std::printf("no layout can run this (check divisibility of heads, d_ff, ranks, batch)\n");
    return;
  }
  print_header();
  nlohmann::json out = nlohmann::json::array();
  int shown = 0, fitting = 0;
  for (size_t i = 0; i < found.size(); ++i) {
    const auto& [c, p] = found[i];
    fitting += p.memory.fits();
    if (shown < o.top) {
      print_row(static_cast<int>(i + 1), c, p);
      ++shown;
    }
    out.push_back(to_json(c, p));
  }
  std::printf("\n%zu configurations, %d fit in %.0f GiB per device", found.size(), fitting,
              hw.device.memory_bytes / kGiB);
  if (shown < static_cast<int>(found.size())) std::printf(" (first %d shown; --top)", shown);
  std::printf("\n");
  const auto best = std::find_if(found.begin(), found.end(), [](const plan::Candidate& c) {
    return c.prediction.memory.fits();
  });
  if (best != found.end())
    std::printf("fastest that fits: %s TP %d PP %d DP %d, micro-batch %ld x %ld, recompute %s%s\n",
                to_string(best->config.layout).c_str(), best->config.tp, best->config.pp,
                best->config.dp, best->config.micro_batch, best->config.micro_batches,
                to_string(best->config.options.recompute).c_str(),
                best->config.zero1 ? ", ZeRO-1" : "");
  write_json(o.json_path, out);
}

double ratio_error(double predicted, double paper) {
  return 100.0 * (predicted / paper - 1.0);
}

void run_paper(const PlanOptions& o) {
  const plan::Hardware hw = plan::load_hardware(o.hardware.empty() ? "a100-80g" : o.hardware);
  const auto rows = plan::predict_paper(hw, o.paper_micro_batches);
  std::printf(
      "BOOST paper (SPEC §5) vs the model on %s: bf16, micro-batch 4, seq 4096, "
      "%ld micro-batch(es) per iteration; ratios to btp\n\n",
      hw.name.c_str(), o.paper_micro_batches);
  std::printf("%-5s %-5s | %-22s | %-22s | %-21s | %-14s | %-5s %-5s\n", "", "", "dense-tp / btp",
              "naive-tp / btp", "model s", "paper s", "GEMM%", "fits");
  std::printf("%-5s %-5s | %6s %6s %8s | %6s %6s %8s | %-21s | %-14s | %-5s %-5s\n", "model",
              "TPxPP", "paper", "model", "error", "paper", "model", "error", "dense / naive / btp",
              "d / n / b", "n/b", "d/n/b");
  nlohmann::json out = nlohmann::json::array();
  for (const auto& r : rows) {
    const double pd = r.row.dense_s / r.row.btp_s, pn = r.row.naive_s / r.row.btp_s;
    const double md = r.dense.step_s / r.btp.step_s, mn = r.naive.step_s / r.btp.step_s;
    const std::string tpp = std::to_string(r.row.tp) + "x" + std::to_string(r.row.pp);
    std::printf(
        "%-5s %-5s | %6.2f %6.2f %+7.1f%% | %6.2f %6.2f %+7.1f%% | %5.2f / %5.2f / %5.2f "
        "| %4.2f/%4.2f/%4.2f | %2.0f/%2.0f %s/%s/%s\n",
        r.row.name.c_str(), tpp.c_str(), pd, md, ratio_error(md, pd), pn, mn, ratio_error(mn, pn),
        r.dense.step_s, r.naive.step_s, r.btp.step_s, r.row.dense_s, r.row.naive_s, r.row.btp_s,
        100 * r.naive.gemm_utilisation, 100 * r.btp.gemm_utilisation,
        r.dense.memory.fits() ? "y" : "N", r.naive.memory.fits() ? "y" : "N",
        r.btp.memory.fits() ? "y" : "N");
    out.push_back({{"model", r.row.name},
                   {"tp", r.row.tp},
                   {"pp", r.row.pp},
                   {"paper", {r.row.dense_s, r.row.naive_s, r.row.btp_s}},
                   {"predicted", {r.dense.step_s, r.naive.step_s, r.btp.step_s}},
                   {"dense_over_btp", {pd, md}},
                   {"naive_over_btp", {pn, mn}}});
  }
  write_json(o.json_path, out);
}

// A `boostlm bench layouts --json` result next to the model's prediction for the same runs.
void run_measured(const PlanOptions& o) {
  std::ifstream in(o.measured);
  if (!in) throw error("cannot read ", o.measured);
  const nlohmann::json bench = nlohmann::json::parse(in);
  const plan::Hardware hw = plan::load_hardware(o.hardware.empty() ? "this-machine" : o.hardware);
  const std::string shape = bench.at("shape");
  const int tp = bench.at("tp");
  std::printf("%s, %s, batch %ld x seq %ld, TP %d on %s\n\n", shape.c_str(),
              bench.at("precision").get<std::string>().c_str(), bench.at("batch").get<int64_t>(),
              bench.at("seq_len").get<int64_t>(), tp, hw.name.c_str());
  std::printf("%-22s %12s %12s %8s | %8s %8s %8s %8s %8s\n", "variant", "measured_ms",
              "predicted_ms", "error", "gemm", "attn", "eltwise", "TP comm", "optim");
  nlohmann::json out = nlohmann::json::array();
  for (const auto& r : bench.at("results")) {
    plan::StepConfig c;
    c.layout = parse_layout(r.at("layout"));
    // BOOST's switches, where the result names them (older results ran the defaults).
    c.options.online_norm = r.value("rmsnorm", "online") == "online";
    c.options.grouping = r.value("grouping", "on") == "on";
    c.options.recompute = parse_recompute(r.value("recompute", "none"));
    c.options.overlap_chunks = r.value("overlap_chunks", 1);
    const Arch arch = parse_arch(r.at("arch"));
    c.config = plan::find_model(shape, arch);
    // A config file names one architecture; dense-tp ran the dense model of its shape.
    if (arch == Arch::dense) c.config = plan::dense_counterpart(shape, c.config);
    c.tp = tp;
    c.micro_batch = bench.at("batch");
    c.seq_len = bench.at("seq_len");
    c.precision = parse_dtype(bench.at("precision"));
    StepPrediction p = plan::predict_step(hw, c);
    if (r.value("compute_only", false)) {  // the floor: its TP all-reduces were skipped
      p.step_s -= p.micro_batches.comm;
      p.micro_batches.comm = 0;
    }
    const double measured = r.at("step_ms");
    std::printf("%-22s %12.1f %12.1f %+7.1f%% | %8.1f %8.1f %8.1f %8.1f %8.1f\n",
                r.value("variant", to_string(c.layout)).c_str(), measured, p.step_s * 1e3,
                100 * (p.step_s * 1e3 / measured - 1), p.micro_batches.gemm * 1e3,
                p.micro_batches.attention * 1e3, p.micro_batches.elementwise * 1e3,
                p.micro_batches.comm * 1e3, p.optimizer_s * 1e3);
    out.push_back({{"variant", r.value("variant", to_string(c.layout))},
                   {"layout", to_string(c.layout)},
                   {"link_rate", bench.value("link_rate", "local")},
                   {"measured_ms", measured},
                   {"predicted_ms", p.step_s * 1e3},
                   {"predicted_tp_comm_ms", p.micro_batches.comm * 1e3},
                   {"measured_comm_ms", r.value("comm_ms", 0.0)},
                   {"measured_comm_hidden_ms", r.value("comm_hidden_ms", 0.0)},
                   {"overlap_chunks", c.options.overlap_chunks},
                   {"compute_only", r.value("compute_only", false)}});
  }
  write_json(o.json_path, out);
}

}  // namespace

void add_plan(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "plan", "predict step time and memory of every layout on a cluster, and rank them");
  auto o = std::make_shared<PlanOptions>();
  cmd->add_option("--model,-m,--config,-c", o->model,
                  "config file, preset by shape (60m … 7b, with --arch) or whole name (60m-cola), "
                  "or paper shape (1b, 3b, 7b, 13b, 30b)");
  cmd->add_option("--arch", o->arch, "dense, svd, cola or lax")
      ->check(CLI::IsMember({"dense", "svd", "cola", "lax"}));
  cmd->add_option("--hardware", o->hardware,
                  "hardware name (hardware/<name>.json) or file; default a100-80g "
                  "(this-machine with --measured)");
  cmd->add_option("--gpus,-g", o->gpus, "devices in all")->check(at_least(1));
  computed_default(cmd->add_option("--global-batch,-B", o->global_batch,
                                   "sequences per step (default: 4 per device, the paper's "
                                   "micro-batch)"))
      ->check(at_least(1));
  computed_default(cmd->add_option("--seq-len,-t", o->seq_len,
                                   "tokens per sequence (default: the model's max_seq_len)"))
      ->check(at_least(1));
  cmd->add_option("--precision", o->precision,
                  "bf16 or fp32 (bf16: how GPU clusters train, as the paper's runs did; train's "
                  "default is fp32, the reference on CPUs)")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  cmd->add_option("--layouts", o->layouts, "only these layouts")
      ->check(CLI::IsMember(layout_names()));
  cmd->add_flag("--with-dense", o->with_dense,
                "also rank dense-tp on the dense model of this shape");
  computed_default(cmd->add_option("--tp", o->tp, "only this TP size (default: every size)"))
      ->check(at_least(1));
  computed_default(cmd->add_option("--pp", o->pp, "only this PP size (default: every size)"))
      ->check(at_least(1));
  computed_default(cmd->add_option("--micro-batch", o->micro_batch,
                                   "only this micro-batch size in sequences (default: every size)"))
      ->check(at_least(1));
  cmd->add_option("--recompute", o->recompute, "only these recomputation modes")
      ->check(CLI::IsMember({"none", "lowrank", "block"}));
  cmd->add_flag("--no-zero", o->no_zero, "do not consider ZeRO-1");
  cmd->add_option("--tp-overlap-chunks", o->overlap_chunks,
                  "model --tp-overlap with this many chunks per micro-batch (1: off)")
      ->check(at_least(1));
  cmd->add_option("--top", o->top, "rows to print")->check(at_least(1));
  cmd->add_option("--json", o->json_path, "also write every row as JSON");
  cmd->add_flag("--paper", o->paper, "compare with the paper's A100 measurements (SPEC §5)");
  cmd->add_option("--paper-micro-batches", o->paper_micro_batches,
                  "micro-batches per iteration assumed for the paper's runs")
      ->check(at_least(1));
  cmd->add_option("--measured", o->measured,
                  "a `bench layouts --json` result to compare with (this machine)")
      ->check(CLI::ExistingFile);
  cmd->callback([o] {
    if (o->paper)
      run_paper(*o);
    else if (!o->measured.empty())
      run_measured(*o);
    else
      run_search(*o);
  });
}

}  // namespace boostlm::cli
