#!/usr/bin/env python3
"""bench/results/gpu_*.md from one scripts/gpu_check.sh run's files.

  python3 bench/gpu_report.py RESULTS_DIR [--out bench/results]

Writes gpu_exactness.md (the test stages, the families' numerics against the
CPU, the end-to-end modes), gpu_speed.md (splitspec-gpu-bench speed against
the bandwidth bound and the issue's goals) and gpu_vs_torch.md (against
transformers on the same GPU), each headed by the commit and device the run
measured. Nothing is written for a stage that left no file.
"""
import argparse
import json
import os
import sys


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def header(summary):
    lines = [l for l in summary.splitlines() if l.strip()]
    return "\n".join(["Measured by `scripts/gpu_check.sh`: " + lines[0].lstrip("# ") if lines else "", "",
                      lines[1] if len(lines) > 1 else "", ""])


def gtest_lines(j, name):
    if not j:
        return [f"- {name}: no results"]
    out = []
    for suite in j["testsuites"]:
        for t in suite["testsuite"]:
            state = "skipped" if t.get("result") == "SKIPPED" else ("FAILED" if t.get("failures") else "passed")
            out.append(f"- `{suite['name']}.{t['name']}`: {state} ({t.get('time', '')})")
            for f in t.get("failures", [])[:3]:
                out.append("  - " + f["failure"].splitlines()[0][:300])
    return out


def exactness(d, summary):
    out = ["# The CUDA backend on a GPU: exactness", "", header(summary)]
    out += ["## Products and invariance (tests/backend/cuda_backend_test.cpp)", ""]
    out += gtest_lines(load(os.path.join(d, "gtest_linear.json")), "linear")
    out += gtest_lines(load(os.path.join(d, "gtest_invariance.json")), "invariance")
    cmp = load(os.path.join(d, "compare.json"))
    if cmp:
        out += ["", "## GPU against CPU (splitspec-gpu-bench compare)", "",
                "Per-position logits NMSE over each prompt and its GPU greedy continuation (llama.cpp's "
                "test-backend-ops threshold for products: 5e-4), and where the two greedy tokens differ.", "",
                "| model | positions | mean NMSE | max NMSE | divergences |", "|---|---|---|---|---|"]
        for c in cmp:
            out.append(f"| {os.path.basename(c['target'])} | {c['positions']} | {c['mean_nmse']:.3g} | "
                       f"{c['max_nmse']:.3g} | {c['divergences']} |")
        for c in cmp:
            for p in c["prompts"]:
                for dv in p["divergences"]:
                    out.append(f"- {os.path.basename(c['target'])}, {p['prompt'][:40]!r}, generated position "
                               f"{dv['position']}: GPU {dv['gpu_token']} (top-2 margin {dv['gpu_top2_margin']:.4g}), "
                               f"CPU {dv['cpu_token']} (margin {dv['cpu_top2_margin']:.4g})")
    e2e = load(os.path.join(d, "e2e.json"))
    if e2e:
        out += ["", "## End to end: a server on the GPU", "",
                "Greedy, 48 tokens, each mode against `splitspec generate --device cuda` alone.", "",
                "| prompt | cloud-ar | edge-sd | edge-fsd | server+lut |", "|---|---|---|---|---|"]
        for p, row in e2e["prompts"].items():
            cells = ["equal" if row[m]["equal"] else "DIFFERS" for m in ("cloud-ar", "edge-sd", "edge-fsd", "server+lut")]
            out.append(f"| {p} | " + " | ".join(cells) + " |")
        dist = e2e.get("distribution")
        if dist:
            out += ["", f"Sampled at temperature {dist['temperature']}: the first token of {dist['samples']} seeded "
                    "generations against the GPU target's own distribution (Pearson): " +
                    ", ".join(f"{m} p = {v['pvalue']:.3g}" for m, v in dist["modes"].items()) +
                    (" (passes: p > 0.001)" if dist.get("passed") else " (FAILS)")]
        out += ["", f"Early verdicts (edge-fsd): {e2e.get('early_verdicts', 0)}, of which "
                f"{e2e.get('early_before_forward_end', 0)} left the server before their round's forward ended "
                f"(median lead {e2e.get('lead_ms_median', float('nan')):.3f} ms, least "
                f"{e2e.get('lead_ms_min', float('nan')):.3f} ms)."]
    return "\n".join(out) + "\n"


def speed(d, summary):
    s = load(os.path.join(d, "speed.json"))
    if not s:
        return None
    out = ["# The CUDA backend on a GPU: speed", "", header(summary),
           f"Device {s['device']}; copy rate {s['copy_rate_gbs']:.0f} GB/s (bytes read plus written); random weights "
           "made on the GPU (BF16, or Q4_K_M by our quantizer); 512 tokens cached; the median of 50 runs after 5.", "",
           "| shape | type | sessions x rows | median ms | p10-p90 ms | x 1-token | x bound | bound ms |",
           "|---|---|---|---|---|---|---|---|"]
    for r in s["results"]:
        out.append(f"| {r['shape']} | {r['type']} | {r['sessions']} x {r['rows']} | {r['median_ms']:.3f} | "
                   f"{r['p10_ms']:.3f}-{r['p90_ms']:.3f} | {r['vs_one_token']:.2f} | "
                   f"{r['median_ms'] / r['bound_ms']:.2f} | {r['bound_ms']:.3f} |")
    def find(shape, type_, sessions, rows):
        return next((r for r in s["results"] if (r["shape"], r["type"], r["sessions"], r["rows"]) ==
                     (shape, type_, sessions, rows)), None)
    goals = []
    def goal(text, ok):
        goals.append(f"- {text}: {'met' if ok else 'NOT met'}")
    one = find("8b", "bf16", 1, 1)
    if one:
        goal(f"8B BF16 1-token within 1.3x the bound ({one['median_ms'] / one['bound_ms']:.2f}x)",
             one["median_ms"] <= 1.3 * one["bound_ms"])
        r17 = find("8b", "bf16", 1, 17)
        if r17: goal(f"8B BF16 17 rows at most 1.15x one ({r17['vs_one_token']:.2f}x)", r17["vs_one_token"] <= 1.15)
    q = find("8b", "q4_k_m", 1, 1)
    if q:
        goal(f"8B Q4_K_M 1-token under 2.0 ms ({q['median_ms']:.3f} ms)", q["median_ms"] < 2.0)
        r17 = find("8b", "q4_k_m", 1, 17)
        if r17: goal(f"8B Q4_K_M 17 rows at most 1.3x one ({r17['vs_one_token']:.2f}x)", r17["vs_one_token"] <= 1.3)
    for t in ("bf16", "q4_k_m"):
        r17 = find("1b", t, 1, 17)
        if r17: goal(f"1B {t} 17 rows at most 1.3x one ({r17['vs_one_token']:.2f}x)", r17["vs_one_token"] <= 1.3)
    for shape in ("1b", "8b"):
        for t in ("bf16", "q4_k_m"):
            a, b = find(shape, t, 32, 6), find(shape, t, 1, 6)
            if a and b:
                goal(f"{shape} {t}: 32 sessions x 5-token drafts at most 2x one session ({a['median_ms'] / b['median_ms']:.2f}x)",
                     a["median_ms"] <= 2 * b["median_ms"])
    out += ["", "## Against the issue's goals", ""] + goals
    return "\n".join(out) + "\n"


def vs_torch(d, summary):
    t, s = load(os.path.join(d, "torch.json")), load(os.path.join(d, "speed.json"))
    if not t:
        return None
    out = ["# The CUDA backend against transformers on the same GPU", "", header(summary),
           f"transformers' LlamaForCausalLM, BF16, static cache of 512 tokens, on {t['device']}: the median of 50 "
           "forwards (CUDA events).", "",
           "| shape | rows | transformers eager ms | compiled (reduce-overhead) ms | ours BF16 ms | ours / compiled |",
           "|---|---|---|---|---|---|"]
    for sh in t["shapes"]:
        for rows in ("1", "5", "17"):
            eager = sh["eager"].get(rows, {}).get("median_ms")
            comp = sh["compiled"].get(rows, {}).get("median_ms")
            ours = next((r["median_ms"] for r in (s or {}).get("results", [])
                         if r["shape"] == sh["shape"] and r["type"] == "bf16" and r["sessions"] == 1
                         and r["rows"] == int(rows)), None)
            fmt = lambda v: f"{v:.3f}" if v is not None else "-"
            ratio = f"{ours / comp:.2f}" if ours and comp else "-"
            out.append(f"| {sh['shape']} | {rows} | {fmt(eager)} | {fmt(comp)} | {fmt(ours)} | {ratio} |")
        if "compile_s" in sh:
            out.append(f"\n{sh['shape']}: torch.compile took {sh['compile_s']:.1f} s (torch {sh['torch']}, "
                       f"transformers {sh['transformers']}).")
        if "compile_error" in sh:
            out.append(f"\n{sh['shape']}: torch.compile failed: {sh['compile_error'][:300]}")
    for name, err in t.get("errors", {}).items():
        out.append(f"\n{name}: {err[:300]}")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    summary = open(os.path.join(a.results, "summary.md")).read() if os.path.exists(
        os.path.join(a.results, "summary.md")) else ""
    for name, text in (("gpu_exactness.md", exactness(a.results, summary)), ("gpu_speed.md", speed(a.results, summary)),
                       ("gpu_vs_torch.md", vs_torch(a.results, summary))):
        if text:
            with open(os.path.join(a.out, name), "w") as f:
                f.write(text)
            print("wrote", os.path.join(a.out, name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
