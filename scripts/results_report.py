#!/usr/bin/env python3
"""Turns the JSON that scripts/results.sh saved into PNG plots (gnuplot) and the generated part of
docs/results.md, which it rewrites between <!-- results:begin --> and <!-- results:end --> (appending a
"## Results" section when the markers are missing). Standard library only.

    scripts/results_report.py --results results --page docs/results.md
"""
import argparse
import glob
import json
import os
import re
import subprocess
import sys

BEGIN, END = "<!-- results:begin -->", "<!-- results:end -->"
LAYOUTS = ("dense-tp", "naive-tp", "btp")
SMOOTH = 20  # steps averaged in the plotted training loss
# The targets: btp's per-step speed-up at TP 2 (60m/130m fp32), boostlm over PyTorch.
GOAL_OVER_NAIVE, GOAL_OVER_DENSE = 1.3, 1.6
GOAL_TORCH = {"fp32": 2.0, "bf16": 3.0}
GOAL_MFU = {"fp32": 0.85, "bf16": 0.75}  # one process, 60m and 130m
GOAL_TP_BF16_MFU = 0.70  # btp at TP 2, 60m bf16
GOAL_MEMORY_CASE, GOAL_MEMORY_CUT = ("cola", "bf16"), 0.30  # peak, against the "before" build


def load(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def find(results, name):
    return next((r for r in results if r.get("variant", r.get("layout")) == name), None)


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def gnuplot(script, directory):
    subprocess.run(["gnuplot"], input=script, text=True, check=True, cwd=directory)


def kinds_text(tp_comm):
    short = {"all_reduce": "AR", "all_gather": "AG", "all_reduce_max": "ARmax",
             "reduce_scatter": "RS", "broadcast": "BC"}
    return ", ".join(f"{short.get(k, k)} {v['calls']} / {v['bytes'] / 1e6:.1f}"
                     for k, v in tp_comm.items()) or "-"


# ---------------------------------------------------------------------------------------------
# Sections
# ---------------------------------------------------------------------------------------------

def layout_runs(results_dir):
    """bench layouts results, fp32 before bf16, small shapes first."""
    runs = [load(p) for p in glob.glob(os.path.join(results_dir, "layouts-*.json"))]
    size = lambda j: (j["precision"] != "fp32", float(re.sub(r"[^0-9.]", "", j["shape"]) or 0))
    return sorted(runs, key=size)


def run_title(j):
    return f"{j['shape']} {j['precision']}, TP {j['tp']}, batch {j['batch']} x {j['seq_len']}"


def layouts_section(runs, images):
    out = ["### Layouts: dense-tp vs naive-tp vs btp",
           "",
           "`boostlm bench layouts`: full training steps (forward, backward, gradient norm, AdamW), "
           "the configurations interleaved, median of the timed steps. *×btp*: step time over "
           "btp's (above 1: slower than btp). *comm*: time inside TP collectives, including "
           "waiting for the other rank; *compute*: the rest, *of which GEMM* inside GEMM calls (rank "
           "0). *Collectives*: calls / MB per step "
           "and rank by kind (AR all-reduce, AG all-gather). *Peak*: the heap's high-water mark "
           "over the configuration's first step (weights, gradients, AdamW moments, activations, "
           "workspace), per rank. MFU: model FLOPs over the summed measured GEMM peak of the ranks.",
           ""]
    if "layouts" in images:
        out += [f"![step time relative to btp]({images['layouts']})", ""]
    for j in runs:
        btp = find(j["results"], "btp")
        out += [f"**{run_title(j)}** ({j['low_rank']} for the low-rank layouts; GEMM peak "
                f"{j['peak_gflops_per_rank']:.0f} GFLOP/s per rank)", ""]
        rows = []
        for r in j["results"]:
            rel = f"{r['step_ms'] / btp['step_ms']:.2f}" if btp else "-"
            gemm_ms = r.get("phase_ms", {}).get("gemm")
            rows.append([f"`{r['variant']}`", r["arch"], f"{r['step_ms']:.0f}", rel,
                         f"{r['tokens_per_s']:.0f}", f"{100 * r['mfu']:.1f}%",
                         f"{r['comm_ms']:.0f}", f"{r['compute_ms']:.0f}",
                         f"{gemm_ms:.0f}" if gemm_ms is not None else "-",
                         f"{r['tp_bytes'] / 1e6:.1f}", kinds_text(r["tp_comm"]),
                         f"{r['peak_mb']:.0f}"])
        out += [table(["variant", "model", "step ms", "×btp", "tokens/s", "MFU", "comm ms",
                       "compute ms", "of which GEMM", "TP MB", "collectives", "peak MB"], rows),
                ""]
    if "breakdown" in images:
        out += [f"![communication and compute per step]({images['breakdown']})", ""]
    return out


def lax_section(runs):
    """naive-tp and btp for CoLA and LaX, one bench layouts run each, back to back."""
    first = next(iter(runs.values()))
    out = ["### LaX and CoLA under naive-tp and btp",
           "",
           f"`boostlm bench layouts --low-rank cola|lax --variants naive-tp btp` ({run_title(first)}), "
           "the two runs back to back. Under btp LaX's gate and LayerNorm work on the replicated "
           "latents after the A all-reduce, so its collectives are CoLA's; under naive-tp the latent "
           "is split over r and each crossing needs its gathered neighbour and the norm's row sums "
           "(SPEC-style counts in docs/models.md's LaX section). *naive/btp*: naive-tp's step time over "
           "btp's of the same model.",
           ""]
    rows = []
    for arch, j in runs.items():
        btp = find(j["results"], "btp")
        for r in j["results"]:
            rel = f"{r['step_ms'] / btp['step_ms']:.2f}" if btp else "-"
            rows.append([arch, f"`{r['variant']}`", f"{r['step_ms']:.0f}", rel,
                         f"{r['tokens_per_s']:.0f}", f"{r['comm_ms']:.0f}",
                         f"{r['compute_ms']:.0f}", f"{r['tp_bytes'] / 1e6:.1f}",
                         kinds_text(r["tp_comm"]), f"{r['peak_mb']:.0f}"])
    out += [table(["model", "variant", "step ms", "naive/btp", "tokens/s", "comm ms", "compute ms",
                   "TP MB", "collectives", "peak MB"], rows), ""]
    return out


def ablations_section(runs):
    """One table per shape from the ablation runs of that shape (a large shape runs its
    configurations in several runs; a configuration in more than one is listed once)."""
    by_shape = {}
    for j in runs:
        by_shape.setdefault(run_title(j), []).append(j)
    out = ["### Ablations: BOOST's switches",
           "",
           "`boostlm bench ablations`. *block ms*: forward + backward of one transformer block; "
           "*kept*: activations kept from a block's forward to its backward; *checkpoint "
           "efficiency*: activation memory saved over the model per ms of extra step time (the "
           "paper's ΔMemory/ΔTime), against the same layout without recomputation in the same run.",
           ""]
    for title, group in by_shape.items():
        rows, seen = [], set()
        for j in group:
            for r in j["results"]:
                if r["variant"] in seen:
                    continue
                seen.add(r["variant"])
                ckpt = "-"
                if r["recompute"] != "none":
                    ckpt = f"{r['checkpoint_mb_per_ms']:.2f}" if r["checkpoint_mb_per_ms"] > 0 \
                        else "n/a (not slower)"
                rows.append([f"`{r['variant']}`", f"{r['step_ms']:.0f}",
                             f"{r['block_us'] / 1e3:.1f}", f"{r['kept_mb_per_block']:.2f}",
                             f"{r['peak_mb']:.0f}", ckpt])
        runs_note = f" ({len(group)} runs)" if len(group) > 1 else ""
        out += [f"**{title}**{runs_note}", "",
                table(["variant", "step ms", "block ms", "kept MB/block", "peak MB",
                       "checkpoint MB/ms"], rows), ""]
    return out


def pipeline_section(j):
    rows = []
    for r in j["rows"]:
        rows.append([str(r["micro_batches"]), f"{r['pipeline_ms']:.1f}",
                     " / ".join(f"{c:.1f}" for c in r["stage_compute_ms"]),
                     f"{100 * r['bubble_fraction']:.1f}%", f"{100 * r['bubble_fraction_1f1b']:.1f}%",
                     f"{r['tokens_per_s']:.0f}",
                     f"{r['first_stage_send_bytes'] / 1e6:.2f}" +
                     (" (= formula)" if r["p2p_as_formula"] else " (differs!)")])
    stages = ", ".join(f"[{a}, {b})" for a, b in j["stage_layers"])
    return ["### Pipeline parallelism: the 1F1B bubble",
            "",
            f"`boostlm bench pipeline`, {j['shape']} {j['arch']} with a {j['vocab_size']}-token "
            f"vocabulary, {j['precision']}, micro-batch {j['batch']}×{j['seq_len']}, "
            f"TP {j['tp']} × PP {j['pp']} (layers {stages}), median of {j['steps']} steps. "
            "*Bubble*: the part of the pipeline's time (its longest stage's) a stage spends not "
            "computing, averaged over the stages, next to 1F1B's (p−1)/(m+p−1); *sent*: what the "
            "first stage sends per step (each micro-batch's residual), checked on every rank "
            "against the formula.",
            "",
            table(["micro-batches", "pipeline ms", "compute ms per stage", "bubble", "1F1B",
                   "tokens/s", "sent MB"], rows), ""]


def gemm_section(j):
    rows = {}
    for r in j["rows"]:
        rows.setdefault(r["projection"], {})[(r["layout"], r["factor"])] = r
    cell = lambda r: (f"{r['m']}×{r['n']}×{r['k']}: {100 * r['fp32_of_peak']:.0f}% / "
                      f"{100 * r['bf16_of_peak']:.0f}%")
    body = [[f"`{p}`"] + [cell(v[(lay, f)]) for lay in ("naive-tp", "btp") for f in "AB"]
            for p, v in rows.items()]
    pct = lambda b: f"**{100 * b['fp32_of_peak']:.0f}% / {100 * b['bf16_of_peak']:.0f}%**"
    body.append(["all of a block", pct(j["block"]["naive-tp"]), "(A and B)",
                 pct(j["block"]["btp"]), "(A and B)"])
    return ["### GEMM shapes per rank",
            "",
            f"`boostlm bench gemm`, {j['shape']} ({j['arch']}), TP {j['tp']}, {j['tokens']} "
            f"tokens, {j['ranks']} ranks measuring at once (one core each). Each cell: M×N×K of "
            "the forward GEMM on one rank, then its rate as a fraction of this machine's measured "
            f"peak (the fastest n³ GEMM of n = 512, 1024, 2048: fp32 "
            f"{j['peak_gflops']['fp32']:.0f}, bf16 "
            f"{j['peak_gflops']['bf16']:.0f} GFLOP/s per rank), fp32 / bf16. naive-tp splits the "
            "latent (d → r/t → d); btp keeps it whole (d/t → r → d/t).",
            "",
            table(["projection", "naive-tp A", "naive-tp B", "btp A", "btp B"], body), ""]


def torch_mfu(r, results_dir):
    """PyTorch's fastest step as an MFU: the model FLOPs per step (from boostlm's bench JSON of
    the same rounds: its MFU × its step × the run's peak) over PyTorch's step at the same peak.
    1 / this is the most any step could be ahead of PyTorch's (one at 100% MFU)."""
    shape = r.get("shape", "60m")
    benches = [load(p)["results"][0] for p in glob.glob(os.path.join(
        results_dir, f"boostlm-{shape}-{r['arch']}-{r['precision']}-*.json"))]
    benches = [b for b in benches if b.get("mfu") and b.get("peak_gflops")]
    if not benches:
        return None
    gflop = benches[0]["mfu"] * benches[0]["step_ms"] / 1e3 * benches[0]["peak_gflops"]
    peak = max(b["peak_gflops"] for b in benches)
    return gflop / (r["torch_min_step_ms"] / 1e3 * peak)


def torch_section(j, results_dir):
    mfu = {(r["arch"], r["precision"]): torch_mfu(r, results_dir) for r in j["results"]}
    pct = lambda m: f"{100 * m:.0f}%" if m else "?"
    most = lambda m: f"{1 / m:.2f}×" if m else "?"
    rows = [[f"{r['arch']}", r["precision"],
             f"{r['torch_min_step_ms']:.0f} / {r['torch_step_ms']:.0f}",
             f"{r['boostlm_min_step_ms']:.0f} / {r['boostlm_step_ms']:.0f}",
             f"{r['batch'] * r['seq_len'] / r['torch_min_step_ms'] * 1e3:.0f}",
             f"{r['batch'] * r['seq_len'] / r['boostlm_min_step_ms'] * 1e3:.0f}",
             f"**{r['speedup']:.2f}×**", f"{r['speedup_median']:.2f}×",
             pct(mfu[(r["arch"], r["precision"])]), most(mfu[(r["arch"], r["precision"])])]
            for r in j["results"]]
    env = j["results"][0]["torch"] if j["results"] else {}
    first = j["results"][0] if j["results"] else {"batch": "?", "seq_len": "?"}
    return ["### boostlm vs PyTorch, one process",
            "",
            f"The same training step (zero gradients, forward, backward, clip to norm 1, AdamW) "
            f"on the same model, batch {first['batch']} × {first['seq_len']}, random tokens, two "
            f"threads each: PyTorch {env.get('torch', '?')} (`tools/torch/boostlm_torch.py "
            f"train-bench`, OpenBLAS {env.get('openblas_core', '?')} for fp32, oneDNN for bf16 "
            "autocast) and boostlm (`boostlm bench step`), run alternately, in "
            f"{first.get('rounds', 1)} rounds of {first.get('steps', '?')} timed steps each "
            "after one warm-up. Step times are fastest / median (the median of the less disturbed "
            "round). Other work on the machine can slow single steps several-fold (two OpenMP "
            "programs on two cores wait for each other), so tokens/s and the speed-up use the "
            "fastest step of each, the one least disturbed; the speed-up of the medians is shown "
            "too. Every round's numbers are in `results/torch-vs-boostlm-*.json`. *PyTorch "
            "MFU*: PyTorch's fastest step as a fraction of the machine's peak (the model FLOPs "
            "per step from boostlm's bench of the same rounds, the peak the fastest n³ GEMM "
            "they measured); *ceiling*: 1 / that, the speed-up a step at 100% MFU would have, "
            "which bounds what any implementation can show against this PyTorch on this "
            "machine.",
            "",
            table(["model", "precision", "PyTorch ms", "boostlm ms", "PyTorch tokens/s",
                   "boostlm tokens/s", "speed-up", "of medians", "PyTorch MFU", "ceiling"],
                  rows), ""]


def read_curve(path):
    rows = [json.loads(line) for line in open(path, encoding="utf-8") if line.strip()]
    return rows


def parameters_m(results_dir, name):
    """The parameter count `boostlm train` printed on its first line."""
    path = os.path.join(results_dir, f"curve-{name}.log")
    if not os.path.exists(path):
        return "?"
    match = re.search(r"([0-9.]+)M parameters", open(path, encoding="utf-8").read())
    return f"{match.group(1)}M" if match else "?"


def curves_section(curves, images, results_dir):
    rows = []
    for name, metrics in curves.items():
        val = [m for m in metrics if "val_loss" in m]
        last = metrics[-1]
        rows.append([name, parameters_m(results_dir, name), len(metrics),
                     f"{last['tokens_seen'] / 1e6:.2f}M",
                     f"{val[-1]['val_loss']:.3f}" if val else "-",
                     f"{min(v['val_loss'] for v in val):.3f}" if val else "-"])
    first = next(iter(curves.values()))
    tokens_per_step = first[0]["tokens_seen"] // max(1, first[0]["step"]) if first else "?"
    shape = next(iter(curves)).split("-")[0]
    out = ["### Dense, SVD, CoLA and LaX: validation loss",
           "",
           f"`configs/{shape}-dense.json`, `{shape}-svd.json`, `{shape}-cola.json` and "
           f"`{shape}-lax.json` (the low-rank three at the same ranks; LaX with its Kronecker "
           "gate and σ) trained from the same seed on the prepared corpus "
           "(`scripts/fetch_corpus.sh`: Brown + King James Bible, 8192-token BPE, the presets' "
           "vocabulary cut to it; `--quick` uses a generated text) with the same schedule "
           f"({tokens_per_step} tokens per step, bf16, learning rate 2e-3 cosine to 2e-4, see the "
           "commands below), one process. Validation: the first windows of val.bin. The "
           "comparison is of the architectures at equal steps and tokens, at a scale far below "
           "the paper's compute-matched runs: it says whether each family trains, and in which "
           "order they start, not which wins at 1B.",
           ""]
    if "curves" in images:
        out += [f"![validation loss by family]({images['curves']})", ""]
    out += [table(["model", "parameters", "steps", "tokens", "final val loss", "best val loss"],
                  rows), ""]
    return out


FAMILIES = ("gemm", "gemm_operands", "attention", "bf16_round", "cross_entropy", "activation",
            "optimizer", "rmsnorm", "rope", "embedding", "other")


def step_section(steps, before):
    """bench step: MFU per model and precision, then ms per kernel family (before / after)."""
    out = ["### One process: MFU, memory and where the time goes",
           "",
           "`boostlm bench step`, one process on both cores, batch 8 × 256, median of 3 steps after "
           "one warm-up. **MFU** is model FLOPs per second (6·N per token plus causal attention) "
           "over the fastest GEMM this run measured (n³ products, measured again before each "
           "row: *peak*); **MFU-now** divides each step by a 1024³ GEMM timed just before it, "
           "which cancels the machine's drift (its speed changes by up to 2× over tens of "
           "seconds) and is the figure the targets are read from. *peak MB* is the heap's "
           "high-water mark over the run: weights, gradients, AdamW moments, activations and "
           "scratch.",
           ""]
    rows = []
    for shape, j in steps:
        for r in j["results"]:
            rows.append([shape, r["arch"], r["precision"], f"{r['step_ms']:.0f}",
                         f"{r['tokens_per_s']:.0f}", f"{100 * r['mfu']:.1f}%",
                         f"{r['peak_gflops']:.0f}",
                         f"**{100 * r['mfu_probe']:.1f}%**" if "mfu_probe" in r else "-",
                         f"{r.get('peak_mb', float('nan')):.0f}"])
    out += [table(["shape", "model", "precision", "step ms", "tokens/s", "MFU", "peak GFLOP/s",
                   "MFU-now", "peak MB"], rows), ""]
    for shape, j in steps:
        if not all("phases_ms" in r for r in j["results"]):
            continue
        old = {(r["arch"], r["precision"]): r for r in before.get(shape, {}).get("results", [])}
        header = ["ms per step"] + [f"{r['arch']} {r['precision']}" for r in j["results"]]
        body = []
        for family in FAMILIES + ("step",):
            row = [f"`{family}`" if family != "step" else "**step**"]
            for r in j["results"]:
                get = lambda x: x["step_ms"] if family == "step" else x["phases_ms"].get(family)
                now, was = get(r), (get(old[(r["arch"], r["precision"])])
                                    if (r["arch"], r["precision"]) in old else None)
                cell = "-" if now is None else f"{now:.0f}"
                if was is not None:
                    cell = f"{was:.0f} → {cell}"
                row.append(cell)
            body.append(row)
        title = f"{shape}: ms per step in each kernel family"
        if old:
            title += (f" (before → after; before: `{before[shape].get('commit', '?')}`, the same "
                      "command run before this round's kernel changes, some minutes earlier on a "
                      "machine whose speed drifts: the fp32 `gemm` row, whose code did not "
                      "change, shows by how much; read the bf16 rows against it)")
        out += [f"**{title}.** `gemm` is the GEMMs' own time; `gemm_operands` is their bf16 "
                "operands prepared inside the call (rounding, and transposing a transposed first "
                "operand); `bf16_round` the roundings done outside GEMMs; `other` what no kernel "
                "family claims (residual adds, copies, the loop itself).", "",
                table(header, body), ""]
    return out


def goals_section(runs, torch, steps=(), before=None, results_dir=None):
    rows, bounds = [], []
    for j in runs:
        if j["precision"] != "fp32" or j["tp"] != 2:
            continue
        res = j["results"]
        btp, naive, dense = (find(res, n) for n in LAYOUTS[::-1])
        if btp and naive:
            x = naive["step_ms"] / btp["step_ms"]
            rows.append([f"btp ≥ {GOAL_OVER_NAIVE}× faster than naive-tp, {j['shape']} fp32 TP 2",
                         f"{x:.2f}×", "met" if x >= GOAL_OVER_NAIVE else "**not met**"])
        if btp and dense:
            x = dense["step_ms"] / btp["step_ms"]
            rows.append([f"btp ≥ {GOAL_OVER_DENSE}× faster than dense-tp, {j['shape']} fp32 TP 2",
                         f"{x:.2f}×", "met" if x >= GOAL_OVER_DENSE else "**not met**"])
            if "model_gflop_per_step" in btp:
                bounds.append(f"{j['shape']} {dense['model_gflop_per_step'] / btp['model_gflop_per_step']:.2f}×")
    for j in runs:
        btp = find(j["results"], "btp")
        if j["precision"] == "bf16" and j["tp"] == 2 and btp and "mfu_now" in btp:
            x = btp["mfu_now"]
            rows.append([f"btp MFU-now ≥ {100 * GOAL_TP_BF16_MFU:.0f}%, {j['shape']} bf16 TP 2",
                         f"{100 * x:.1f}%", "met" if x >= GOAL_TP_BF16_MFU else "**not met**"])
    for shape, j in steps:
        for r in j["results"]:
            goal, mfu = GOAL_MFU[r["precision"]], r.get("mfu_probe")
            if mfu is None:
                continue
            rows.append([f"MFU-now ≥ {100 * goal:.0f}%, one process, {shape} {r['arch']} "
                         f"{r['precision']}", f"{100 * mfu:.1f}%",
                         "met" if mfu >= goal else "**not met**"])
        # Peak memory against the saved earlier build's, same command.
        old = {(r["arch"], r["precision"]): r
               for r in (before or {}).get(shape, {}).get("results", [])}
        for r in j["results"]:
            was = old.get((r["arch"], r["precision"]), {}).get("peak_mb")
            if (r["arch"], r["precision"]) != GOAL_MEMORY_CASE or not was or "peak_mb" not in r:
                continue
            cut = 1 - r["peak_mb"] / was
            rows.append([f"peak memory ≥ {100 * GOAL_MEMORY_CUT:.0f}% below "
                         f"`{before[shape].get('commit', '?')}`'s, one process, {shape} "
                         f"{r['arch']} {r['precision']}",
                         f"{was:.0f} → {r['peak_mb']:.0f} MB: −{100 * cut:.1f}%",
                         "met" if cut >= GOAL_MEMORY_CUT else "**not met**"])
    if torch:
        for r in torch["results"]:
            goal = GOAL_TORCH[r["precision"]]
            # The ceiling: the speed-up of a step at 100% MFU against this PyTorch step.
            m = torch_mfu(r, results_dir) if results_dir else None
            verdict = "met" if r["speedup"] >= goal else "**not met**"
            if m and r["speedup"] < goal and goal > 1 / m:
                verdict += " (above the ceiling)"
            rows.append([f"boostlm ≥ {goal}× PyTorch throughput, {r['arch']} {r['precision']}",
                         f"{r['speedup']:.2f}×" + (f" (ceiling {1 / m:.2f}×)" if m else ""),
                         verdict])
    if not rows:
        return []
    out = ["### Against the targets", "", table(["target", "measured", ""], rows), ""]
    if bounds:
        out += ["The dense model's training step has " + " and ".join(bounds) + " the model "
                "FLOPs of the CoLA model's (`model_gflop_per_step` in the JSON): the "
                "32000-token LM head, the same in both, is most of CoLA's FLOPs at these sizes. "
                "That ratio is how much faster btp can be than dense-tp when both run their GEMMs "
                "equally well, so a 1.6× target needs btp to use the cores better than dense-tp "
                "does, not only to communicate less. On one shared-memory machine communication "
                "is cheap, which also narrows btp's margin over naive-tp to what naive-tp spends "
                "beyond it in computation (attention over all heads, replicated norms and "
                "activations) and in moving 4× the bytes.", ""]
    return out


# ---------------------------------------------------------------------------------------------
# Plots
# ---------------------------------------------------------------------------------------------

def plot_layouts(runs, directory):
    names = [j for j in runs if all(find(j["results"], n) for n in LAYOUTS)]
    if not names:
        return None
    top = 0
    with open(os.path.join(directory, "layouts.dat"), "w", encoding="utf-8") as f:
        f.write("# run " + " ".join(LAYOUTS) + "\n")
        for j in names:
            btp = find(j["results"], "btp")["step_ms"]
            ratios = [find(j["results"], n)["step_ms"] / btp for n in LAYOUTS]
            top = max(top, *ratios)
            f.write(f"\"{j['shape']} {j['precision']}\" " +
                    " ".join(f"{x:.3f}" for x in ratios) + "\n")
    # Clustered histogram: cluster k is centred at x = k, its 3 bars 1/(3 + gap) apart.
    gnuplot(f"""
set terminal pngcairo size 900,480 font ",11"
set output "layouts.png"
set title "Step time at TP 2 relative to btp (lower is faster)"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set boxwidth 0.9
set ylabel "step time / btp step time"
set yrange [0:{top * 1.12:.2f}]
set xrange [-0.6:{len(names) - 0.4}]
set grid ytics
set key outside bottom center horizontal
set linetype 1 lc rgb "#7f7f7f"
set linetype 2 lc rgb "#d62728"
set linetype 3 lc rgb "#1f77b4"
plot "layouts.dat" using 2:xtic(1) title "dense-tp (dense model)", \\
     "" using 3 title "naive-tp (CoLA)", \\
     "" using 4 title "btp (CoLA)", \\
     "" using ($0-0.25):2:(sprintf("%.2f", $2)) with labels offset 0,0.7 notitle, \\
     "" using 0:3:(sprintf("%.2f", $3)) with labels offset 0,0.7 notitle, \\
     "" using ($0+0.25):4:(sprintf("%.2f", $4)) with labels offset 0,0.7 notitle
""", directory)
    return "layouts.png"


def plot_breakdown(runs, directory):
    j = next((j for j in runs if j["precision"] == "fp32"), None)
    if not j:
        return None
    with open(os.path.join(directory, "breakdown.dat"), "w", encoding="utf-8") as f:
        f.write("# variant compute comm\n")
        for r in j["results"]:
            f.write(f"\"{r['variant']}\" {r['compute_ms']:.1f} {r['comm_ms']:.1f}\n")
    gnuplot(f"""
set terminal pngcairo size 900,480 font ",11"
set output "breakdown.png"
set title "{j['shape']} {j['precision']}, TP {j['tp']}: time per training step"
set style data histograms
set style histogram rowstacked
set style fill solid 0.85 border -1
set boxwidth 0.7
set ylabel "ms per step"
set yrange [0:*]
set grid ytics
set xtics rotate by -25
set xrange [-0.6:{len(j["results"]) - 0.4}]
set key top right
set linetype 1 lc rgb "#1f77b4"
set linetype 2 lc rgb "#ff7f0e"
plot "breakdown.dat" using 2:xtic(1) title "compute", "" using 3 title "TP communication"
""", directory)
    return "breakdown.png"


def plot_curves(curves, directory):
    """The loss curves, drawn by `boostlm plot` (the same code a user plots a run with)."""
    if not curves:
        return None
    boostlm = os.environ.get("BOOSTLM", os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                     "..", "build", "boostlm"))
    command = [boostlm, "plot", "--panels", "loss", "--smooth", str(SMOOTH),
               "--title", "Dense, SVD, CoLA and LaX: loss",
               "-o", os.path.join(directory, "curves.png")]
    for name in curves:
        command += [os.path.join(directory, f"curve-{name}.jsonl"), "--label", name]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return "curves.png"


# ---------------------------------------------------------------------------------------------

PARTS = ("layouts", "gemm", "ablations", "torch", "pipeline", "curves", "step", "lax")


def machine_section(results_dir):
    path = os.path.join(results_dir, "machine.json")
    if not os.path.exists(path):
        return []
    m = load(path)
    isa = ", ".join(m.get("isa", []))
    no_amx = "" if "amx_bf16" in m.get("isa", []) else ", no AMX"
    rows = []
    for name in PARTS:
        p = m.get("parts", {}).get(name)
        if p:
            rows.append([name, p["started"], p.get("finished", "?"), f"`{p['commit']}`",
                         f"{p['load_start']:.1f}", f"{p.get('load_end', float('nan')):.1f}"])
    return ["*Generated by `scripts/results.sh`; rerun it, or a part of it (`--layouts`, "
            "`--gemm`, `--ablations`, `--torch`, `--pipeline`, `--curves`, `--step`, `--lax`), to "
            "refresh.*",
            "",
            f"**Machine:** {m['cpu']}, {m['cpus']} CPUs ({m['threads_per_core']} thread per "
            f"core; {isa}{no_amx}), {m['memory_gib']} GiB, {m['os']}. TP 2 means two MPI ranks "
            "of one core each on this one machine; one-process runs use both cores.",
            "",
            f"**Read the ratios, not the absolute times.** The machine is shared with other work "
            f"(the 1-minute load averages below are on {m['cpus']} CPUs; anything above "
            f"{m['cpus']} means the benchmarks waited for the cores), so absolute times vary "
            "from run to run by tens of percent. Configurations compared in one table ran "
            "interleaved in the same run, which is what makes their ratios meaningful.",
            "",
            table(["part", "started", "finished", "commit", "load at start", "load at end"], rows),
            ""]


def commands_section(results_dir):
    lines = []
    for name in PARTS:
        path = os.path.join(results_dir, f"commands-{name}.txt")
        if os.path.exists(path):
            lines += [l.rstrip("\n")[2:] for l in open(path, encoding="utf-8")
                      if l.startswith("+ ")]
    if not lines:
        return []
    lines = [re.sub(r"/tmp/boostlm_results\.\w+", "$TMP", l) for l in lines]
    lines = [re.sub(r"^(\S*/)?build/boostlm", "./build/boostlm", l) for l in lines]
    return ["### Commands", "", "```sh", *lines, "```", ""]


def render(results_dir, readme, quick):
    readme_dir = os.path.dirname(os.path.abspath(readme)) if readme != "none" else results_dir
    rel = lambda name: os.path.relpath(os.path.join(results_dir, name), readme_dir)
    runs = layout_runs(results_dir)
    images = {}
    if (p := plot_layouts(runs, results_dir)):
        images["layouts"] = rel(p)
    if (p := plot_breakdown(runs, results_dir)):
        images["breakdown"] = rel(p)
    curves = {}
    for arch in ("dense", "svd", "cola", "lax"):
        for path in sorted(glob.glob(os.path.join(results_dir, f"curve-*-{arch}.jsonl"))):
            curves[os.path.basename(path)[len("curve-"):-len(".jsonl")]] = read_curve(path)
    if curves and (p := plot_curves(curves, results_dir)):
        images["curves"] = rel(p)

    torch_files = sorted(glob.glob(os.path.join(results_dir, "torch-vs-boostlm-*.json")))
    torch = load(torch_files[0]) if torch_files else None
    section = [BEGIN, ""]
    if quick:
        section += ["*(`--quick`: tiny shapes and a few steps, to check the script; these "
                    "numbers mean nothing.)*", ""]
    section += machine_section(results_dir)
    size = lambda p: float(re.sub(r"[^0-9.]", "", os.path.basename(p).split("-")[1]) or 0)
    step_files = sorted((p for p in glob.glob(os.path.join(results_dir, "step-*.json"))
                         if not p.endswith("-before.json")), key=size)
    steps = [(os.path.basename(p)[5:-5], load(p)) for p in step_files]
    before = {os.path.basename(p)[5:-12]: load(p)
              for p in glob.glob(os.path.join(results_dir, "step-*-before.json"))}
    section += goals_section(runs, torch, steps, before, results_dir)
    if runs:
        section += layouts_section(runs, images)
    ablation_files = sorted(glob.glob(os.path.join(results_dir, "ablations-*.json")),
                            key=lambda p: (int(re.sub(r"\D", "", os.path.basename(p).split("-")[1])
                                               or 0), p))
    if ablation_files:
        section += ablations_section([load(p) for p in ablation_files])
    for path in sorted(glob.glob(os.path.join(results_dir, "gemm-*.json"))):
        section += gemm_section(load(path))
    if steps:
        section += step_section(steps, before)
    if torch:
        section += torch_section(torch, results_dir)
    for path in sorted(glob.glob(os.path.join(results_dir, "pipeline-*.json"))):
        section += pipeline_section(load(path))
    lax = {a: load(p) for a in ("cola", "lax")
           if os.path.exists(p := os.path.join(results_dir, f"lax-layouts-{a}.json"))}
    if lax:
        section += lax_section(lax)
    if curves:
        section += curves_section(curves, images, results_dir)
    section += commands_section(results_dir)
    section += [END]
    text = "\n".join(section)

    if readme == "none":
        print(text)
        return
    with open(readme, encoding="utf-8") as f:
        content = f.read()
    if BEGIN in content and END in content:
        start, end = content.index(BEGIN), content.index(END) + len(END)
        content = content[:start] + text + content[end:]
    else:
        content = content.rstrip("\n") + "\n\n## Results\n\n" + text + "\n"
    with open(readme, "w", encoding="utf-8") as f:
        f.write(content)
    print(f"results_report: wrote {readme} and {', '.join(images.values()) or 'no plots'}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--results", default="results", help="directory of results.sh's JSON")
    p.add_argument("--page", "--readme", dest="readme", default="docs/results.md",
                   help='file to rewrite ("none": print); --readme is its old name')
    p.add_argument("--quick", action="store_true", help="mark the section as a --quick run")
    args = p.parse_args()
    render(os.path.abspath(args.results), args.readme, args.quick)


if __name__ == "__main__":
    sys.exit(main())
