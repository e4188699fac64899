#!/usr/bin/env python3
"""The early-exit edge-cloud paper's own regimes, emulated on the demo pair
(issue 48): its Table 5 times (T_q, gamma T_p, T_c) for the Jetson Nano and
the RTX 2080 Ti clients of Llama2-7B and Vicuna-7B on an A100, and its Table 8
Unitree Go2 deployment, each run through `splitspec bench regimes` with one
cell: the server's forwards padded to T_q (--emulate-forward-ms T_q:0), the
draft slowed to T_p (--emulate-draft-factor T_p / the draft's own forward
time, measured first), and a netem link of one-way T_c. Tokens and acceptance
are the demo pair's, real; every time is emulated.

Prints, beside the paper's Table 6 / Table 8 figures, the measured AR->SD and
SD->FSD speedups with their intervals, tau, r and T_r, and Table 4's
prediction for both the demo pair's tau and the paper's; then the gamma sweep
of Fig. 4b in the RTX Vicuna-7B regime.

  python3 bench/paper_regimes.py [--build build] [--prompts 4] [--tokens 32] [--out bench/results/paper_regimes.md]
"""
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Table 5 (gamma T_p at gamma 4, T_q, T_c in ms) and the paper's measured
# averages: Table 6 "Average" rows (AR->SD, SD->FSD, tau, r) and Table 8.
REGIMES = [
    {"name": "Table 6: V68m/Llama2-7B, Jetson Nano", "tq": 522, "gamma_tp": 301, "tc": 96,
     "paper": {"ar_sd": 1.35, "sd_fsd": 1.11, "tau": 4.03, "r": 0.3994}},
    {"name": "Table 6: V68m/Llama2-7B, RTX 2080 Ti", "tq": 467, "gamma_tp": 99, "tc": 47,
     "paper": {"ar_sd": 1.94, "sd_fsd": 1.06, "tau": 3.54, "r": 0.0963}},
    {"name": "Table 6: V68m/V7B, Jetson Nano", "tq": 497, "gamma_tp": 334, "tc": 95,
     "paper": {"ar_sd": 0.69, "sd_fsd": 1.04, "tau": 2.15, "r": 0.6561}},
    {"name": "Table 8: Qwen2-VL-2B/7B, Unitree Go2 (Jetson Orin)", "tq": 620, "gamma_tp": 288, "tc": 120,
     "paper": {"ar_sd": 0.90, "sd_fsd": 1.34, "tau": 2.92, "r": 0.5563}},
]
# Table 1's prices ($ per 1M input / output tokens: draft, target) and its
# request: 100 input and 500 output tokens, 1M requests.
PRICES = [
    ("Together AI", "Qwen1.5-0.5B/Qwen1.5-72B", (0.1, 0.1), (0.9, 0.9)),
    ("OpenRouter", "llama-3.1-8b/llama-3.1-405b", (0.02, 0.05), (0.9, 0.9)),
    ("Groq", "llama3-8b-8192/llama3-70b-8192", (0.05, 0.08), (0.59, 0.79)),
    ("OpenRouter", "Qwen-2-VL-7B/Qwen-2-VL-72B", (0.2, 0.2), (0.7, 0.7)),
]
# Fig. 4b: gamma swept on GSM8K, V68m/V7B, RTX client (Table 5's RTX times).
SWEEP = {"name": "Fig. 4b: V68m/V7B, RTX 2080 Ti", "tq": 442, "tp": 102 / 4, "tc": 42, "gammas": [2, 4, 6, 8, 10]}


def run(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return out.stdout


def draft_forward_ms(bin_dir, args):
    """The demo draft's own T_p here: edge-sd's draft time per forward, no emulation."""
    cells = bench(bin_dir, args, tq=1, factor=1, tc=0, gamma=4, modes="cloud-ar,edge-sd")
    return cells[0]["T_p_ms"]


def bench(bin_dir, args, tq, factor, tc, gamma, modes="cloud-ar,edge-sd,edge-fsd"):
    cmd = [os.path.join(bin_dir, "splitspec"), "bench", "regimes", "--json",
           "--target", os.path.join(ROOT, "models/demo-target"), "--draft", os.path.join(ROOT, "models/demo-draft"),
           "--prompts", args.prompts_file, "--num-prompts", str(args.prompts), "--max-new-tokens", str(args.tokens),
           "--forward-ms", f"{tq:g}", "--per-row-ms", "0", "--draft-factors", f"{factor:.3f}",
           "--delays-ms", f"{tc:g}", "--gamma", str(gamma), "--modes", modes, "--threads", "1"]
    return json.loads(run(cmd))["cells"]


def speedup(cell, a, b):
    for s in cell["speedups"]:
        if s["from"] == a and s["to"] == b:
            return s["speedup"], s["ci95"]
    raise KeyError(f"{a}->{b}")


def table4(tq, tp, tc, gamma, tau, r, tr):
    """Per-token latencies of the paper's Table 4: AR, SD, FSD."""
    ar = tq  # 2 T_c once per generation, n T_q
    sd = (2 * tc + gamma * tp + tq) / tau
    fsd = (2 * tc + r * gamma * tp + (1 - r) * tr + tq) / tau
    return ar, sd, fsd


def cost_table(cell):
    """Table 1's API cost per 1M requests (100 input, 500 output tokens) from
    the target forwards per generated token measured in `cell`: the target
    bills an output token per forward; cloud SD also bills the draft for the
    prompt and gamma tokens a round."""
    n_in, n_out = 100, 500
    ar_fwd = cell["cloud-ar"]["target_forwards_per_token"]
    sd_fwd = cell["edge-sd"]["target_forwards_per_token"]
    gamma = 4
    out = ["", "## Cost per 1M requests, Table 1's way, from the forwards per token measured above",
           "", f"Target forwards per generated token: cloud-ar {ar_fwd:.3f}, edge-sd {sd_fwd:.3f} "
           f"(Table 1 assumes 1/tau = 1/2.5 = 0.400). The target bills the prompt and an output token per "
           "forward; cloud SD adds the draft model's prompt and gamma tokens a round.", "",
           "| provider | draft/target | cloud AR | cloud SD | edge-cloud SD |", "|---|---|---|---|---|"]
    for provider, models, (d_in, d_out), (t_in, t_out) in PRICES:
        ar = n_in * t_in + n_out * ar_fwd * t_out
        edge = n_in * t_in + n_out * sd_fwd * t_out
        cloud_sd = edge + n_in * d_in + gamma * n_out * sd_fwd * d_out
        out.append(f"| {provider} | {models} | ${ar:.0f} | ${cloud_sd:.0f} ({100 * (1 - cloud_sd / ar):.0f}% less) | "
                   f"${edge:.0f} ({100 * (1 - edge / ar):.0f}% less) |")
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--prompts-file", default=os.path.join(ROOT, "..", "shared", "prompts", "spec_bench.jsonl"))
    p.add_argument("--prompts", type=int, default=4)
    p.add_argument("--tokens", type=int, default=32)
    p.add_argument("--out", default="")
    args = p.parse_args()
    if not os.path.exists(args.prompts_file):
        sys.exit(f"paper_regimes: no prompts at {args.prompts_file} (../shared/prompts/spec_bench.jsonl)")
    bin_dir = os.path.join(args.build, "bin")
    tp_own = draft_forward_ms(bin_dir, args)
    lines = [
        "# The early-exit edge-cloud paper's regimes, emulated on the demo pair",
        "",
        f"`python3 bench/paper_regimes.py --prompts {args.prompts} --tokens {args.tokens}`: "
        f"{args.prompts} Spec-Bench prompts x {args.tokens} tokens per mode, greedy, ABBA per prompt. "
        "EMULATED: the server's forwards are padded to the paper's T_q (`--emulate-forward-ms T_q:0`), the "
        f"draft's steps slowed from this machine's T_p = {tp_own:.3f} ms to the paper's (`--emulate-draft-factor`), "
        "the link is the netem proxy at one-way T_c; tokens and acceptance are the demo pair's, real.",
        "",
        "| regime | T_q | T_p | T_c | paper AR->SD | ours AR->SD (95% CI) | paper SD->FSD | ours SD->FSD (95% CI) | "
        "paper tau / r | ours tau / r / T_r | Table 4 AR->SD, SD->FSD at our tau, r | at the paper's tau, r |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    first_cell = None
    for reg in REGIMES:
        tp = reg["gamma_tp"] / 4
        factor = tp / tp_own
        cell = bench(bin_dir, args, reg["tq"], factor, reg["tc"], 4)[0]
        first_cell = first_cell or cell
        ar_sd, ar_sd_ci = speedup(cell, "cloud-ar", "edge-sd")
        sd_fsd, sd_fsd_ci = speedup(cell, "edge-sd", "edge-fsd")
        fsd = cell["edge-fsd"]
        tau, r, tr = fsd["tau"], fsd["cache_miss_rate"], fsd["T_r_ms"]
        ar, sd, f = table4(reg["tq"], tp, reg["tc"], 4, tau, r, tr)
        pp = reg["paper"]
        par, psd, pf = table4(reg["tq"], tp, reg["tc"], 4, pp["tau"], pp["r"], 0)
        lines.append(
            f"| {reg['name']} | {reg['tq']} | {tp:.1f} | {reg['tc']} | {pp['ar_sd']:.2f}x | "
            f"{ar_sd:.2f}x ({ar_sd_ci[0]:.2f}-{ar_sd_ci[1]:.2f}) | {pp['sd_fsd']:.2f}x | "
            f"{sd_fsd:.2f}x ({sd_fsd_ci[0]:.2f}-{sd_fsd_ci[1]:.2f}) | {pp['tau']:.2f} / {pp['r']:.2f} | "
            f"{tau:.2f} / {r:.2f} / {tr:.1f} ms | {ar / sd:.2f}x, {sd / f:.2f}x | {par / psd:.2f}x, {psd / pf:.2f}x |")
        print(lines[-1], file=sys.stderr)
    lines += cost_table(first_cell)
    lines += ["", f"## {SWEEP['name']}: gamma sweep (T_q {SWEEP['tq']}, T_p {SWEEP['tp']:.1f}, T_c {SWEEP['tc']} ms)", "",
              "| gamma | AR->SD (95% CI) | SD->FSD (95% CI) | tau | r |", "|---|---|---|---|---|"]
    for gamma in SWEEP["gammas"]:
        cell = bench(bin_dir, args, SWEEP["tq"], SWEEP["tp"] / tp_own, SWEEP["tc"], gamma)[0]
        ar_sd, ar_sd_ci = speedup(cell, "cloud-ar", "edge-sd")
        sd_fsd, sd_fsd_ci = speedup(cell, "edge-sd", "edge-fsd")
        lines.append(f"| {gamma} | {ar_sd:.2f}x ({ar_sd_ci[0]:.2f}-{ar_sd_ci[1]:.2f}) | "
                     f"{sd_fsd:.2f}x ({sd_fsd_ci[0]:.2f}-{sd_fsd_ci[1]:.2f}) | {cell['edge-fsd']['tau']:.2f} | "
                     f"{cell['edge-fsd']['cache_miss_rate']:.2f} |")
        print(lines[-1], file=sys.stderr)
    text = "\n".join(lines) + "\n"
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    print(text)


if __name__ == "__main__":
    main()
