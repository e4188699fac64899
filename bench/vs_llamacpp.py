#!/usr/bin/env python3
"""SplitSpec against llama.cpp: the measurements behind bench/vs_llamacpp.sh
(which installs llama.cpp and builds its driver, then runs this).

Every comparison runs one process at a time, in ABBA order (ours, theirs,
theirs, ours, repeated), and reports ratios with 95% bootstrap intervals
over the paired samples. Writes a Markdown report and the raw JSON.
"""
import argparse
import json
import math
import os
import random
import statistics
import subprocess
import sys
import time

TYPES = ["f32", "f16", "bf16", "q8_0", "q4_0"]


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def run(cmd, env=None, check=True):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if check and p.returncode != 0:
        raise RuntimeError(" ".join(cmd) + "\n" + p.stderr[-3000:])
    return p.stdout


def json_lines(text):
    return [json.loads(l) for l in text.splitlines() if l.strip().startswith("{")]


def bootstrap_ratio(num, den, reps=2000, seed=1):
    """Ratio of means sum(num)/sum(den) over paired samples, with a 95% interval."""
    assert len(num) == len(den) and num
    rng = random.Random(seed)
    n = len(num)
    est = sum(num) / sum(den)
    boots = []
    for _ in range(reps):
        idx = [rng.randrange(n) for _ in range(n)]
        boots.append(sum(num[i] for i in idx) / sum(den[i] for i in idx))
    boots.sort()
    return est, boots[int(0.025 * reps)], boots[int(0.975 * reps) - 1]


def md_table(header, rows):
    """A markdown table and the blank line after it."""
    return (["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] +
            ["| " + " | ".join(row) + " |" for row in rows] + [""])


def fmt_ratio(r):
    return f"{r[0]:.2f}x ({r[1]:.2f}-{r[2]:.2f})"


class Bench:
    def __init__(self, a):
        self.a = a
        self.ss = a.splitspec
        self.work = a.work
        os.makedirs(self.work, exist_ok=True)
        self.env = dict(os.environ)
        self.env.pop("OMP_NUM_THREADS", None)
        # Our compute threads spin between parallel regions, as llama.cpp's
        # thread pool does (splitspec bench sets this itself; generate does not).
        self.env.setdefault("OMP_WAIT_POLICY", "ACTIVE")
        self.report = {"args": vars(a)}

    # ---- models ---------------------------------------------------------
    def model(self, name, t):
        """(our directory, GGUF path) of model `name` at type `t`, converted once."""
        d = os.path.join(self.work, f"{name}-{t}")
        g = d + ".gguf"
        if not os.path.exists(os.path.join(d, "model.safetensors")):
            src = self.source(name)
            run([self.ss, "convert", "--target", src, "--dtype", t, "--out", d])
        if not os.path.exists(g):
            run([self.ss, "convert", "--target", d, "--to-gguf", g])
        return d, g

    def source(self, name):
        if name == "demo-target":
            return "models/demo-target"
        if name == "demo-draft":
            return "models/demo-draft"
        d = os.path.join(self.work, "bench-50m-src")
        if not os.path.exists(os.path.join(d, "model.safetensors")):
            run([self.ss, "convert", "--random-init", "configs/bench-50m.json", "--tokenizer", "models/demo-target",
                 "--out", d])
        return d

    # ---- prompts --------------------------------------------------------
    def prompts(self, per_category, tokenizer_dir, max_tokens):
        by_cat = {}
        with open(self.a.prompts) as f:
            for line in f:
                j = json.loads(line)
                by_cat.setdefault(j["category"], []).append(j["turns"][0])
        out = []
        for cat in sorted(by_cat):
            for text in by_cat[cat][:per_category]:
                ids = json.loads(run([self.ss, "tokenize", "--target", tokenizer_dir, "--text", text, "--json"]))["ids"]
                if len(ids) > max_tokens:
                    ids = ids[:1] + ids[len(ids) - (max_tokens - 1):]
                out.append((cat, text, ids))
        return out

    def write_prompts(self, prompts, name):
        p = os.path.join(self.work, name)
        with open(p + ".ids", "w") as f:
            for _, _, ids in prompts:
                f.write(",".join(map(str, ids)) + "\n")
        with open(p + ".jsonl", "w") as f:
            for _, _, ids in prompts:
                f.write(json.dumps({"prompt_ids": ids}) + "\n")
        return p + ".ids", p + ".jsonl"

    # ---- the two sides --------------------------------------------------
    def llama(self, *args):
        return run([self.a.llama, self.a.bins, *map(str, args)])

    def ours_forward(self, d, threads, ctx, ks, secs):
        j = json.loads(run([self.ss, "bench", "forward", "--target", d, "--threads", str(threads), "--contexts", str(ctx),
                            "--new-tokens", ",".join(map(str, ks)), "--min-seconds", str(secs), "--json"], env=self.env))
        return {r["new_tokens"]: r["ms"] for r in j["rows"]}, j

    def llama_forward(self, g, threads, ctx, ks, secs):
        j = json.loads(self.llama(g, "forward", threads, ctx, ",".join(map(str, ks)), secs))
        return {r["new_tokens"]: r["ms"] for r in j["rows"]}, j

    def ours_generate(self, target, jsonl, threads, n_new, extra):
        # Every prompt must come back: a refused one fails the run (exit 1)
        # rather than shifting the pairing of results.
        out = run([self.ss, "generate", "--target", target, "--prompts-file", jsonl, "--max-new-tokens", str(n_new),
                   "--ignore-eos", "--json", "--threads", str(threads), *extra], env=self.env)
        res = sorted(json_lines(out), key=lambda r: r["index"])
        if [r["index"] for r in res] != list(range(len(res))):
            raise RuntimeError(f"generate returned indices {[r['index'] for r in res]}")
        return res

    def llama_greedy(self, g, threads, n_new, ids_file):
        return json_lines(self.llama(g, "greedy-file", threads, n_new, ids_file))

    def llama_js(self, g, draft_g, mode, threads, n_new, ids_file):
        # ES modules resolve packages from the script's own directory up, so
        # the script runs from beside the installed node_modules.
        script = os.path.join(os.path.dirname(os.path.abspath(self.a.node_modules)), "llamacpp_spec.mjs")
        if not os.path.exists(script) or os.path.getmtime(script) < os.path.getmtime("bench/llamacpp_spec.mjs"):
            with open("bench/llamacpp_spec.mjs") as src, open(script, "w") as dst:
                dst.write(src.read())
        out = run(["node", script, g, draft_g or "-", mode, str(threads), str(n_new), ids_file], env=self.env)
        return json_lines(out)

    # ---- sections -------------------------------------------------------
    def info(self):
        _, g = self.model("demo-target", "f16")
        j = json.loads(self.llama(g, "info"))
        self.report["llama_cpp"] = {"node_llama_cpp": self.a.nlc_version, **j}
        log("llama.cpp", j["llama_version"], j["system_info"])

    def tokenization(self):
        d, g = self.model("demo-target", "f16")
        texts = []
        with open(self.a.prompts) as f:
            for line in f:
                texts.append(json.loads(line)["turns"][0])
        texts = texts[:: max(1, len(texts) // 20)][:20]
        same = 0
        for t in texts:
            ours = json.loads(run([self.ss, "tokenize", "--target", d, "--text", t, "--json"]))["ids"]
            theirs = json.loads(self.llama(g, "tokenize", t))["ids"]
            same += ours == theirs
        self.report["tokenization"] = {"prompts": len(texts), "identical": same}
        log(f"tokenization: {same}/{len(texts)} identical")

    def exactness(self):
        rows = []
        for name in self.a.models:
            prompts = self.prompts(1 if self.a.quick else 3, "models/demo-target", 96)
            ids_file, jsonl = self.write_prompts(prompts, f"exact-{name}")
            for t in TYPES:
                d, g = self.model(name, t)
                ours = self.ours_generate(d, jsonl, 1, self.a.exact_tokens, [])
                theirs = self.llama_greedy(g, 1, self.a.exact_tokens, ids_file)
                same = sum(o["output_ids"] == l["output_ids"] for o, l in zip(ours, theirs))
                agree = []
                for o, l in zip(ours, theirs):
                    k = 0
                    while k < len(l["output_ids"]) and o["output_ids"][k] == l["output_ids"][k]:
                        k += 1
                    agree.append(k)
                rows.append({"model": name, "type": t, "prompts": len(prompts), "identical": same,
                             "mean_agreeing_prefix": statistics.mean(agree), "tokens": self.a.exact_tokens})
                log(f"exactness {name} {t}: {same}/{len(prompts)} identical")
        self.report["exactness"] = rows

    def forwards(self):
        rows = []
        ks = [1, 5, 8]
        for name in self.a.models:
            for t in TYPES:
                d, g = self.model(name, t)
                for threads in self.a.threads:
                    ours, theirs, meta_o, meta_l = {k: [] for k in ks}, {k: [] for k in ks}, None, None
                    for block in range(self.a.blocks):
                        for side in ["o", "l", "l", "o"]:
                            if side == "o":
                                r, meta_o = self.ours_forward(d, threads, 128, ks, self.a.seconds)
                                for k in ks:
                                    ours[k].append(r[k])
                            else:
                                r, meta_l = self.llama_forward(g, threads, 128, ks, self.a.seconds)
                                for k in ks:
                                    theirs[k].append(r[k])
                    row = {"model": name, "type": t, "threads": threads,
                           "ours_ms": {k: statistics.median(v) for k, v in ours.items()},
                           "llama_ms": {k: statistics.median(v) for k, v in theirs.items()},
                           "speedup_1": bootstrap_ratio(theirs[1], ours[1]),
                           "ours_k_over_1": {k: statistics.median(ours[k]) / statistics.median(ours[1]) for k in ks},
                           "llama_k_over_1": {k: statistics.median(theirs[k]) / statistics.median(theirs[1]) for k in ks},
                           "bandwidth_bound_ms": meta_o["bandwidth_bound_ms"],
                           "weight_bytes": meta_o["weight_bytes"],
                           "kernels": meta_o.get("kernels"),
                           "ours_peak_rss": meta_o["peak_rss_bytes"], "ours_kv_bytes": meta_o["kv_cache_bytes"],
                           "llama_peak_rss": meta_l["peak_rss_kb"] * 1024}
                    row["ours_over_bound"] = row["ours_ms"][1] / row["bandwidth_bound_ms"]
                    rows.append(row)
                    log(f"forward {name} {t} t{threads}: ours {row['ours_ms'][1]:.3f} ms, llama.cpp "
                        f"{row['llama_ms'][1]:.3f} ms, speedup {fmt_ratio(row['speedup_1'])}, k8/k1 ours "
                        f"{row['ours_k_over_1'][8]:.2f} llama {row['llama_k_over_1'][8]:.2f}, bound x{row['ours_over_bound']:.2f}")
        self.report["forwards"] = rows

    def end_to_end(self):
        rows = []
        prompts = self.prompts(1 if self.a.quick else 3, "models/demo-target", 256)
        ids_file, jsonl = self.write_prompts(prompts, "e2e")
        n_new = self.a.new_tokens
        for t in self.a.e2e_types:
            target, tg = self.model("demo-target", t)
            draft, dg = self.model("demo-draft", t)
            for f in ["recurrent_drafter.safetensors", "recurrent_drafter.json"]:
                if not os.path.exists(os.path.join(target, f)):
                    os.link(os.path.join("models/demo-target", f), os.path.join(target, f))
            for threads in self.a.threads:
                ours_modes = {
                    "local-ar": [],
                    "local-sd": ["--draft", draft, "--drafter", "model", "--gamma", "4"],
                    "local-tree": ["--draft", draft, "--drafter", "model-tree"],
                    "recurrent": ["--drafter", "recurrent"],
                }
                theirs_modes = ["plain (C)", "plain (JS)", "draft model (JS)", "input lookup (JS)"]
                ms = {m: [[] for _ in prompts] for m in list(ours_modes) + theirs_modes}
                outputs = {}
                for block in range(self.a.blocks):
                    for side in ["o", "l", "l", "o"]:
                        if side == "o":
                            for m, extra in ours_modes.items():
                                res = self.ours_generate(target, jsonl, threads, n_new, extra)
                                for i, r in enumerate(res):
                                    ms[m][i].append(r["stats"]["wall_ms"])
                                outputs[m] = [r["output_ids"] for r in res]
                        else:
                            res = self.llama_greedy(tg, threads, n_new, ids_file)
                            for i, r in enumerate(res):
                                ms["plain (C)"][i].append(r["ms"])
                            outputs["plain (C)"] = [r["output_ids"] for r in res]
                            for m, mode in [("plain (JS)", "none"), ("draft model (JS)", "draft"),
                                            ("input lookup (JS)", "lookup")]:
                                res = self.llama_js(tg, dg, mode, threads, n_new, ids_file)
                                for i, r in enumerate(res):
                                    ms[m][i].append(r["ms"])
                                outputs[m] = [r["output_ids"] for r in res]
                base = [statistics.median(v) for v in ms["plain (C)"]]
                ar = [statistics.median(v) for v in ms["local-ar"]]
                table = []
                for m in ms:
                    mine = [statistics.median(v) for v in ms[m]]
                    table.append({
                        "mode": m, "system": "splitspec" if m in ours_modes else "llama.cpp",
                        "ms_per_token": sum(mine) / (n_new * len(prompts)),
                        "vs_llama_plain": bootstrap_ratio(base, mine),
                        "vs_ours_ar": bootstrap_ratio(ar, mine),
                        "same_as_llama_plain": sum(a == b for a, b in zip(outputs[m], outputs["plain (C)"])),
                        "same_as_ours_ar": sum(a == b for a, b in zip(outputs[m], outputs["local-ar"])),
                    })
                rows.append({"type": t, "threads": threads, "prompts": len(prompts), "new_tokens": n_new, "rows": table})
                for r in table:
                    log(f"e2e {t} t{threads} {r['mode']}: {r['ms_per_token']:.3f} ms/token, vs llama.cpp plain "
                        f"{fmt_ratio(r['vs_llama_plain'])}")
        self.report["end_to_end"] = rows

    def streamed(self):
        prompts = self.prompts(1 if self.a.quick else 2, "models/demo-target", 256)
        _, jsonl = self.write_prompts(prompts, "streamed")
        ms = {}
        for block in range(self.a.blocks):
            for t in ["f32", "q4_0", "q4_0", "f32"]:
                d, _ = self.model("demo-target", t)
                for mode, extra in [("Std", ["--no-pipeline"]), ("local-tree", ["--draft", self.model("demo-draft", t)[0],
                                                                                  "--drafter", "model-tree"])]:
                    res = self.ours_generate(d, jsonl, 1, 64, ["--memory-budget", "25%", *extra])
                    ms.setdefault((t, mode), []).append(sum(r["stats"]["wall_ms"] for r in res) /
                                                        sum(r["stats"]["new_tokens"] for r in res))
        rows = []
        for mode in ["Std", "local-tree"]:
            f32, q4 = ms[("f32", mode)], ms[("q4_0", mode)]
            rows.append({"mode": mode, "f32_ms_per_token": statistics.median(f32),
                         "q4_0_ms_per_token": statistics.median(q4), "speedup": bootstrap_ratio(f32, q4)})
            log(f"streamed 25% {mode}: f32 {statistics.median(f32):.2f} ms/token, q4_0 {statistics.median(q4):.2f}")
        self.report["streamed"] = rows

    def billion(self):
        """Issue 45's 1B-class section: a random model in Llama 3.2 1B's shape
        (configs/bench-1b.json) with Llama 3's real vocabulary. F16 is written
        by our convert; Q8_0, Q4_0, Q4_K_M (and Q5_K_M) by llama.cpp's own
        quantizer (llama_model_quantize through the driver). Both programs read
        the same GGUF files. Per type and thread count, ABBA: 1..8-token
        forwards at context 128 (every row's logits, as a verification), and
        prefills of 128 and 512 tokens (the last row's logits), with peak RSS."""
        vocab = os.path.join(os.path.dirname(os.path.abspath(self.a.node_modules)), "src", "models",
                             "ggml-vocab-llama-bpe.gguf")
        f16 = os.path.join(self.work, "bench-1b-f16.gguf")
        if not os.path.exists(f16):
            run([self.ss, "convert", "--random-init", "configs/bench-1b.json", "--tokenizer", vocab, "--dtype", "f16",
                 "--to-gguf", f16])
        files = {"f16": f16}
        for t in self.a.billion_types:
            if t != "f16":
                files[t] = os.path.join(self.work, f"bench-1b-lq-{t}.gguf")
                if not os.path.exists(files[t]):
                    self.llama(f16, "quantize", files[t], t, 2)
        ks = list(range(1, 9))
        prefills = self.a.prefill
        rows = []
        for t in self.a.billion_types:
            g = files[t]
            for threads in self.a.threads:
                samples = {side: {k: [] for k in ks} for side in "ol"}
                p99 = {side: {k: [] for k in ks} for side in "ol"}
                pre = {side: {n: [] for n in prefills} for side in "ol"}
                meta = {}
                for block in range(self.a.blocks):
                    for side in ["o", "l", "l", "o"]:
                        if side == "o":
                            j = json.loads(run([self.ss, "bench", "forward", "--target", g, "--threads", str(threads),
                                                "--contexts", "128", "--new-tokens", ",".join(map(str, ks)),
                                                "--min-seconds", str(self.a.seconds), "--json"], env=self.env))
                            jp = json.loads(run([self.ss, "bench", "forward", "--target", g, "--threads", str(threads),
                                                 "--contexts", "0", "--new-tokens", ",".join(map(str, prefills)),
                                                 "--last-logits", "--warmup", "0", "--min-samples", "1",
                                                 "--min-seconds", "0", "--json"], env=self.env))
                        else:
                            j = json.loads(self.llama(g, "forward", threads, 128, ",".join(map(str, ks)), self.a.seconds))
                            jp = json.loads(self.llama(g, "prefill", threads, 0, ",".join(map(str, prefills)), 0, 0, 1))
                        meta[side] = j
                        for r in j["rows"]:
                            samples[side][r["new_tokens"]].append(r["ms"])
                            p99[side][r["new_tokens"]].append(r["ms_p99"])
                        for r in jp["rows"]:
                            pre[side][r["new_tokens"]].append(r["ms"])
                med = {side: {k: statistics.median(v) for k, v in samples[side].items()} for side in "ol"}
                o = meta["o"]
                row = {"type": t, "threads": threads, "ours_ms": med["o"], "llama_ms": med["l"],
                       "speedup_1": bootstrap_ratio(samples["l"][1], samples["o"][1]),
                       "speedup_5": bootstrap_ratio(samples["l"][5], samples["o"][5]),
                       "ours_p99_1": max(p99["o"][1]), "llama_p99_1": max(p99["l"][1]),
                       "ours_k_over_1": {k: med["o"][k] / med["o"][1] for k in ks},
                       "llama_k_over_1": {k: med["l"][k] / med["l"][1] for k in ks},
                       "bandwidth_bound_ms": o["bandwidth_bound_ms"], "read_bandwidth_gbs": o["read_bandwidth_gbs"],
                       "weight_bytes": o["weight_bytes"], "kv_bytes": o["kv_cache_bytes"],
                       "ours_peak_rss": o["peak_rss_bytes"], "llama_peak_rss": meta["l"]["peak_rss_kb"] * 1024,
                       "prefill_tokens_per_s": {n: {"ours": n * 1e3 / statistics.median(pre["o"][n]),
                                                    "llama": n * 1e3 / statistics.median(pre["l"][n])} for n in prefills}}
                row["ours_over_bound"] = med["o"][1] / row["bandwidth_bound_ms"]
                row["rss_over_weights_kv_mb"] = (row["ours_peak_rss"] - row["weight_bytes"] - row["kv_bytes"]) / 1e6
                rows.append(row)
                log(f"1B {t} t{threads}: ours {med['o'][1]:.1f} ms, llama.cpp {med['l'][1]:.1f} ms, speedup "
                    f"{fmt_ratio(row['speedup_1'])}, k5/k1 ours {row['ours_k_over_1'][5]:.2f} llama "
                    f"{row['llama_k_over_1'][5]:.2f}, bound x{row['ours_over_bound']:.2f}, prefill "
                    + ", ".join(f"{n}: {v['ours']:.1f} vs {v['llama']:.1f} tok/s" for n, v in row["prefill_tokens_per_s"].items()))
        self.report["billion"] = rows

    # ---- report ---------------------------------------------------------
    def markdown(self):
        r = self.report
        lines = [f"# SplitSpec against llama.cpp ({time.strftime('%Y-%m-%d')})", ""]
        lc = r.get("llama_cpp", {})
        lines += [f"llama.cpp {lc.get('llama_version')} from node-llama-cpp {lc.get('node_llama_cpp')}; its CPU features: "
                  f"`{lc.get('system_info', '').strip()}`. Machine: {self.a.machine}. "
                  "Ratios are llama.cpp's time over ours (above 1: we are faster), 95% bootstrap intervals over the "
                  "ABBA-paired samples.", ""]
        if "tokenization" in r:
            t = r["tokenization"]
            lines += [f"**Tokenization:** identical ids in {t['identical']} of {t['prompts']} Spec-Bench prompts.", ""]
        if "exactness" in r:
            lines += ["## Exactness (greedy, same prompt ids, 1 thread)", ""]
            lines += md_table(["model", "type", "identical outputs", "mean agreeing prefix (tokens)"],
                              [[e["model"], e["type"], f"{e['identical']}/{e['prompts']}",
                                f"{e['mean_agreeing_prefix']:.1f} of {e['tokens']}"] for e in r["exactness"]])
        if "forwards" in r:
            lines += ["## Forward passes (context 128)", ""]
            lines += md_table(
                ["model", "type", "threads", "ours 1-token ms", "llama.cpp 1-token ms", "speedup", "ours / bandwidth bound",
                 "ours k=5, k=8 over k=1", "llama.cpp k=5, k=8 over k=1", "peak RSS ours / llama.cpp (weights)"],
                [[f["model"], f["type"], str(f["threads"]), f"{f['ours_ms'][1]:.3f}", f"{f['llama_ms'][1]:.3f}",
                  fmt_ratio(f["speedup_1"]), f"{f['ours_over_bound']:.2f}x",
                  f"{f['ours_k_over_1'][5]:.2f}, {f['ours_k_over_1'][8]:.2f}",
                  f"{f['llama_k_over_1'][5]:.2f}, {f['llama_k_over_1'][8]:.2f}",
                  f"{f['ours_peak_rss'] / 1e6:.0f} / {f['llama_peak_rss'] / 1e6:.0f} MB ({f['weight_bytes'] / 1e6:.0f} MB)"]
                 for f in r["forwards"]])
        for e in r.get("end_to_end", []):
            lines += [f"## End to end: demo pair at {e['type']}, {e['threads']} thread(s), {e['prompts']} Spec-Bench "
                      f"prompts x {e['new_tokens']} tokens, greedy", ""]
            lines += md_table(
                ["system", "mode", "ms/token", "speedup over llama.cpp plain (C)", "over our local-ar",
                 "outputs identical to llama.cpp plain", "to our local-ar"],
                [[row["system"], row["mode"], f"{row['ms_per_token']:.3f}", fmt_ratio(row["vs_llama_plain"]),
                  fmt_ratio(row["vs_ours_ar"]), f"{row['same_as_llama_plain']}/{e['prompts']}",
                  f"{row['same_as_ours_ar']}/{e['prompts']}"] for row in e["rows"]])
        if "billion" in r:
            lines += ["## 1B-class model (Llama 3.2 1B's shape, Llama 3 vocabulary; context 128)", "",
                      "The same GGUF files in both programs: F16 written by our convert, the rest by llama.cpp's own "
                      "quantizer. Forwards ask for every row's logits (a verification); prefills for the last row's. "
                      "The bound is the weights' bytes over the read bandwidth `bench forward` measures in the same "
                      "run. RSS over weights + KV: what our peak RSS holds beyond them.", ""]
            lines += md_table(
                ["type", "threads", "ours 1-token ms (p99)", "llama.cpp 1-token ms (p99)", "speedup k=1", "speedup k=5",
                 "ours / bound", "ours k=2..8 over k=1", "llama.cpp k=5 over k=1", "prefill 128 / 512 tok/s ours",
                 "llama.cpp", "peak RSS ours / llama.cpp", "ours over weights + KV"],
                [[x["type"], str(x["threads"]), f"{x['ours_ms'][1]:.1f} ({x['ours_p99_1']:.1f})",
                  f"{x['llama_ms'][1]:.1f} ({x['llama_p99_1']:.1f})", fmt_ratio(x["speedup_1"]),
                  fmt_ratio(x["speedup_5"]), f"{x['ours_over_bound']:.2f}x",
                  " ".join(f"{x['ours_k_over_1'][k]:.2f}" for k in range(2, 9)), f"{x['llama_k_over_1'][5]:.2f}",
                  " / ".join(f"{v['ours']:.1f}" for v in x["prefill_tokens_per_s"].values()),
                  " / ".join(f"{v['llama']:.1f}" for v in x["prefill_tokens_per_s"].values()),
                  f"{x['ours_peak_rss'] / 1e6:.0f} / {x['llama_peak_rss'] / 1e6:.0f} MB",
                  f"{x['rss_over_weights_kv_mb']:.0f} MB"] for x in r["billion"]])
        if "streamed" in r:
            lines += ["## Streamed target at a 25% budget: Q4_0 against F32 (demo target, 1 thread)", ""]
            lines += md_table(["mode", "F32 ms/token", "Q4_0 ms/token", "Q4_0 speedup"],
                              [[x["mode"], f"{x['f32_ms_per_token']:.2f}", f"{x['q4_0_ms_per_token']:.2f}",
                                fmt_ratio(x["speedup"])] for x in r["streamed"]])
        return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--splitspec", required=True)
    p.add_argument("--llama", required=True)
    p.add_argument("--bins", required=True)
    p.add_argument("--node-modules", required=True)
    p.add_argument("--nlc-version", default=os.environ.get("NLC_VERSION", "3.22.1"))
    p.add_argument("--work", default="build/vs_llamacpp")
    p.add_argument("--prompts", default="../shared/prompts/spec_bench.jsonl")
    p.add_argument("--threads", default="1,2", type=lambda s: [int(x) for x in s.split(",")])
    p.add_argument("--e2e-types", default="q8_0,q4_0", type=lambda s: s.split(","))
    p.add_argument("--models", default="bench-50m,demo-target", type=lambda s: s.split(","),
                   help="models of the exactness and forward sections")
    p.add_argument("--blocks", type=int, default=2, help="ABBA blocks per comparison")
    p.add_argument("--seconds", type=float, default=0.5, help="per forward row and run")
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--exact-tokens", type=int, default=64)
    p.add_argument("--sections", default="info,tokenization,exactness,forwards,end_to_end,streamed,billion")
    p.add_argument("--billion-types", default="f16,q8_0,q4_0,q4_k_m", type=lambda s: s.split(","),
                   help="types of the 1B-class section (q5_k_m too, if wanted)")
    p.add_argument("--prefill", default="128,512", type=lambda s: [int(x) for x in s.split(",")],
                   help="prefill lengths of the 1B-class section")
    p.add_argument("--quick", action="store_true", help="fewer prompts and blocks: a smoke run")
    p.add_argument("--merge", action="store_true", help="add to the report at --out instead of replacing it")
    p.add_argument("--machine", default=os.environ.get("MACHINE", "this machine"))
    p.add_argument("--out", default="bench/results/vs_llamacpp.md")
    a = p.parse_args()
    if a.quick:
        a.blocks, a.seconds, a.new_tokens = 1, 0.2, 32
    if not os.path.exists(a.prompts):
        sys.exit(f"vs_llamacpp: {a.prompts} not found (give --prompts FILE.jsonl in Spec-Bench's format)")
    b = Bench(a)
    if a.merge and os.path.exists(os.path.splitext(a.out)[0] + ".json"):
        # Sections run in separate sittings land in one report; rows of the
        # same section are kept from earlier runs for other models.
        with open(os.path.splitext(a.out)[0] + ".json") as f:
            old = json.load(f)
        for key, value in old.items():
            if key != "args":
                b.report[key] = value
        for row in b.report.get("forwards", []) + b.report.get("billion", []):  # JSON made the k keys strings
            for field in ["ours_ms", "llama_ms", "ours_k_over_1", "llama_k_over_1"]:
                row[field] = {int(k): v for k, v in row[field].items()}
    # The report's header names llama.cpp's version and CPU features, so
    # every run asks for them, whatever its sections.
    sections = a.sections.split(",")
    if "info" not in sections:
        sections.insert(0, "info")
    for s in sections:
        before = b.report.get(s.replace("info", "llama_cpp"))
        getattr(b, s)()
        if a.merge and isinstance(before, list) and s in ("exactness", "forwards"):
            kept = [r for r in before if r["model"] not in a.models]
            b.report[s] = kept + b.report[s]
    md = b.markdown()
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        f.write(md + "\n")
    with open(os.path.splitext(a.out)[0] + ".json", "w") as f:
        json.dump(b.report, f, indent=1, default=str)
    print(md)


if __name__ == "__main__":
    main()
