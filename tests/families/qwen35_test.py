#!/usr/bin/env python3
"""Qwen3.5 (qwen35), gated delta-rule layers and gated attention, against llama.cpp.

A random-weight Qwen3.5 in small real proportions (tests/families/
gguf_py_models.py: three delta-rule layers to one of attention, value heads
twice the key heads, RoPE on a quarter of a head, an MTP block past the
decoder) with the real Qwen3.5 vocabulary, written by llama.cpp's own gguf-py,
F32; then quantized by llama.cpp's quantizer to Q8_0 and Q4_K_M. Each file:
  - loads in llama.cpp's libllama and in SplitSpec; the prompts tokenize to
    the same ids in both;
  - gives logits near llama.cpp's exact path's (F32 KV cache, no flash
    attention) at every position of each prompt and its greedy continuation:
    mean NMSE (test-backend-ops' measure) no larger than llama.cpp's own
    default path's, and the greedy choice agreeing position by position at
    least as often, or departing only at ties within that default path's
    own error (quant_files_test.check_file).
The same model written as the Hugging Face directory llama.cpp's converter
would turn into the file (gguf_py_models.write_qwen35_hf) gives the file's
logits. Then, on the F32 target, every mode gives the target alone's greedy
tokens:
local and server verification with a Qwen3.5 draft (itself recurrent, so
both sides roll back), prompt lookup, and a token tree, the target also
streamed from its file under a memory budget; and a sampled tree crosses the
wire.

  qwen35_test.py --bin BUILD/bin --llamacpp BUILD/llamacpp --material BUILD/test-material

Exits 77 (skipped) naming what is missing when llama.cpp's material or NumPy
is absent (scripts/setup.sh, scripts/setup_test_material.sh).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from families_test import (N_NEW, PROMPTS, Runner, arguments, gguf_py_material, gguf_token_count,  # noqa: E402
                           serving, write_ids)
from quant_files_test import files_against_llamacpp, head_drafts_alike, nmse_rows  # noqa: E402

MIXES = ["q8_0", "q4_k_m"]


def main():
    p = arguments()
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--new", type=int, default=16)
    p.add_argument("--free-running", action="store_true")
    a = p.parse_args()
    gguf_py, vocab = gguf_py_material(a, "qwen35")
    from gguf_py_models import write_qwen35, write_qwen35_hf

    with tempfile.TemporaryDirectory() as work:
        r = Runner(a, work)
        r.build_driver()
        target = os.path.join(work, "qwen35-f32.gguf")
        shape = write_qwen35(target, vocab, gguf_py, seed=1)
        print("shape:", json.dumps(shape), flush=True)
        prompt_ids = files_against_llamacpp(r, work, "qwen35", target, PROMPTS[:a.prompts], MIXES, a.new)

        # The same model as the Hugging Face directory llama.cpp's converter
        # would turn into this file: its logits are the file's (A through
        # log and exp is all that may differ, in the last bit).
        hf_dir = os.path.join(work, "qwen35-hf")
        write_qwen35_hf(hf_dir, target, gguf_py)
        _, ids_jsonl = write_ids(work, prompt_ids)
        logits = {}
        for name, model in (("gguf", target), ("hf", hf_dir)):
            logits[name] = os.path.join(work, f"logits-{name}.bin")
            r.run([r.splitspec, "eval", "logits", "--target", model, "--ids-file", ids_jsonl, "--out", logits[name],
                   "--threads", "1"])
        worst = nmse_rows(logits["gguf"], logits["hf"], gguf_token_count(target))
        r.check(worst <= 1e-9, f"the Hugging Face directory's logits are the GGUF file's: worst NMSE {worst:.2e}")
        print(f"Hugging Face directory vs the GGUF file: worst NMSE {worst:.2e}", flush=True)
        shutil.rmtree(hf_dir)

        # The MTP block against llama.cpp's draft-mtp path: the same prompts,
        # the target's hidden rows fed alike, GAMMA greedy drafts.
        mtp_driver = r.build_llama_program("llamacpp_mtp.cpp", "c++")
        gamma = 4
        write_ids(work, prompt_ids)
        head_drafts_alike(r, work, "mtp", lambda ids, out: [mtp_driver, r.bins, target, str(gamma), ids, out],
                          lambda ids, out: [r.splitspec, "eval", "mtp", "--target", target, "--ids-file", ids, "--out",
                                            out, "--gamma", str(gamma), "--threads", "1"],
                          gguf_token_count(target))

        # Every mode gives the target alone's tokens. The draft is a Qwen3.5
        # too (two layers, another seed): its own states roll back as well.
        draft = os.path.join(work, "qwen35-draft.gguf")
        write_qwen35(draft, vocab, gguf_py, seed=2, shape=dict(layers=4, nextn=0))
        prompt = "The robot arm moves to the left. The robot arm moves to the left. The robot arm"
        alone = r.ours(target, prompt=prompt)["output_ids"]
        # The target as its own draft is accepted whole: verification then
        # commits every row, and the draft's cache rolls back only the bonus.
        for args in (["--draft", draft, "--drafter", "model"], ["--draft", draft, "--drafter", "model-tree"],
                     ["--drafter", "pld"], ["--drafter", "mtp"], ["--drafter", "mtp", "--drafter-option", "width=3"],
                     # More rows than the state window (16): each may be where a rollback lands.
                     ["--drafter", "mtp", "--gamma", "20"],
                     # The target streamed from its file under a third of its size.
                     ["--memory-budget", "30%", "--draft", draft, "--drafter", "model"],
                     ["--memory-budget", "30%", "--drafter", "mtp"],
                     ["--draft", target, "--drafter", "model"]):
            got = r.ours(target, *args, prompt=prompt)
            r.check(got["output_ids"] == alone, f"local {' '.join(args)}: {got['output_ids']} vs {alone}")
            if "--memory-budget" in args:
                r.check(got["stats"]["weight_bytes_read"] > 0, f"{' '.join(args)}: the target's weights were streamed")
            print(f"local {' '.join(os.path.basename(a) for a in args)}: tau {got['stats']['tau']:.2f}", flush=True)
        r.check(got["stats"]["tau"] > 4.5, f"the target as its own draft: tau {got['stats']['tau']}")
        # A prompt past the local verifier's prefill chunk (256 tokens): the
        # block still reads every position's row.
        long_prompt = " ".join([prompt] * 24)
        got = r.ours(target, "--drafter", "mtp", prompt=long_prompt)
        r.check(got["output_ids"] == r.ours(target, prompt=long_prompt)["output_ids"] and
                len(got["prompt_ids"]) > 256,
                f"local mtp on a prompt of {len(got['prompt_ids'])} tokens: the target's tokens")
        with serving(r, target) as remote:
            for args in (["--draft", draft, "--drafter", "model"], ["--draft", draft, "--drafter", "model-tree"],
                         ["--drafter", "pld"], ["--drafter", "mtp"], ["--drafter", "mtp", "--drafter-option", "width=3"]):
                cmd = [r.splitspec, "generate", *remote, *args, "--prompt", prompt, "--max-new-tokens", str(N_NEW),
                       "--ignore-eos", "--json", "--threads", "1"]
                out = json.loads(r.run(cmd).strip().splitlines()[-1])
                r.check(out["output_ids"] == alone, f"server {args[-1]}: {out['output_ids']} vs {alone}")
                print(f"server {args[-1]}: tau {out['stats']['tau']:.2f}", flush=True)
            cmd = [r.splitspec, "generate", *remote, "--draft", draft, "--drafter", "model-tree", "--prompt", prompt,
                   "--max-new-tokens", "8", "--temperature", "1.0", "--seed", "3", "--json", "--threads", "1"]
            out = json.loads(r.run(cmd).strip().splitlines()[-1])
            r.check(len(out["output_ids"]) == 8, "a sampled tree over the wire")
        # A file without an MTP block is refused in one clear line.
        bad = subprocess.run([r.splitspec, "generate", "--target", draft, "--drafter", "mtp", "--prompt", "hi",
                              "--max-new-tokens", "2"], capture_output=True, text=True, timeout=300)
        r.check(bad.returncode == 1 and "no MTP block" in bad.stderr and bad.stderr.count("\n") == 1,
                f"mtp on a file without an MTP block: one clear error, got {bad.returncode} {bad.stderr!r}")

        # The model's own MTP block, planted to predict what the target does
        # (gguf_py_models.write_qwen35(planted=True)): its drafts are
        # accepted, here and over the wire, where the server sends the
        # hidden rows it reads in half precision.
        planted = os.path.join(work, "qwen35-planted.gguf")
        write_qwen35(planted, vocab, gguf_py, seed=3, planted=True)
        alone = r.ours(planted, prompt=prompt)["output_ids"]
        local = r.ours(planted, "--drafter", "mtp", prompt=prompt)
        r.check(local["output_ids"] == alone, "planted mtp, local: the target's tokens")
        # A tree of three branches at the first draft keeps its first whole.
        tree = r.ours(planted, "--drafter", "mtp", "--drafter-option", "width=3", prompt=prompt)
        r.check(tree["output_ids"] == alone and tree["stats"]["tau"] == local["stats"]["tau"],
                f"planted mtp tree: the target's tokens at the chain's tau ({tree['stats']['tau']})")
        with serving(r, planted) as remote:
            cmd = [r.splitspec, "generate", *remote, "--drafter", "mtp", "--prompt", prompt, "--max-new-tokens",
                   str(N_NEW), "--ignore-eos", "--json", "--threads", "1"]
            edge = json.loads(r.run(cmd).strip().splitlines()[-1])
        r.check(edge["output_ids"] == alone, "planted mtp, server: the target's tokens")
        # A shortlist ranked by the target's own outputs (in-sample, as a
        # corpus of its own text would rank them): the block's drafts from
        # those rows alone are still accepted, and the bytes it holds shrink.
        ranking = os.path.join(work, "ranking.json")
        with open(ranking, "w") as f:
            json.dump(list(dict.fromkeys(alone)), f)
        k = len(set(alone))
        short = ["--drafter", "mtp", "--drafter-option", f"shortlist={k}", "--drafter-option", f"ranking={ranking}"]
        listed = r.ours(planted, *short, prompt=prompt)
        r.check(listed["output_ids"] == alone, "planted mtp with a shortlist: the target's tokens")
        r.check(listed["stats"]["acceptance_rate"] > 0.9, f"shortlist acceptance {listed['stats']['acceptance_rate']}")
        full_bytes = local["stats"]["drafter_counters"]["mtp_head_bytes"]
        short_bytes = listed["stats"]["drafter_counters"]["mtp_head_bytes"]
        r.check(short_bytes < full_bytes / 10, f"a shortlist of {k} holds {short_bytes} bytes, the full head {full_bytes}")
        print(f"planted mtp, shortlist of {k}: acceptance {listed['stats']['acceptance_rate']:.2f}, "
              f"{short_bytes / 2**20:.2f} MiB vs {full_bytes / 2**20:.1f} MiB", flush=True)
        with serving(r, planted) as remote:
            cmd = [r.splitspec, "generate", *remote, *short, "--prompt", prompt, "--max-new-tokens", str(N_NEW),
                   "--ignore-eos", "--json", "--threads", "1"]
            out = json.loads(r.run(cmd).strip().splitlines()[-1])
            # bench edge-cloud carries the heads, options after a mode (a file
            # there is named from the working directory).
            prompts = os.path.join(work, "prompts.jsonl")
            with open(prompts, "w") as f:
                f.write(json.dumps({"turns": [prompt]}) + "\n")
            modes = ["cloud-ar", "server+mtp", f"server+mtp/shortlist={k}/ranking=ranking.json"]
            bench = subprocess.run([r.splitspec, "bench", "edge-cloud", "--server", remote[1], "--draft", planted,
                                    "--prompts", prompts, "--num-prompts", "1", "--max-new-tokens", "12",
                                    "--delays-ms", "0", "--threads", "1", "--modes", ",".join(modes), "--json"],
                                   capture_output=True, text=True, cwd=work, timeout=300,
                                   env=dict(os.environ, OMP_NUM_THREADS="1"))
            r.check(bench.returncode == 0, f"bench edge-cloud with the heads: {bench.stderr[-500:]}")
            if bench.returncode == 0:
                row = json.loads(bench.stdout)["rows"][0]
                for m in modes[1:]:
                    r.check(row[m]["tokens"] == 12 and row[m]["acceptance_rate"] > 0.9, f"bench edge-cloud {m}: {row[m]}")
                print("bench edge-cloud: " + ", ".join(f"{m} acceptance {row[m]['acceptance_rate']:.2f}, draft "
                                                       f"{row[m]['draft_ms_per_forward']:.2f} ms a forward"
                                                       for m in modes[1:]), flush=True)
        r.check(out["output_ids"] == alone and out["stats"]["acceptance_rate"] > 0.9,
                f"planted mtp with a shortlist, server: the target's tokens, acceptance {out['stats']['acceptance_rate']}")
        # eval shortlist ranks a corpus with the Qwen3.5 vocabulary and
        # measures a held-out text's share in the first K.
        corpus, text = os.path.join(work, "corpus.txt"), os.path.join(work, "text.txt")
        with open(corpus, "w") as f:
            f.write("the robot arm moves\nthe robot arm moves to the left\n" * 3)
        with open(text, "w") as f:
            f.write("the robot arm\n")
        ev = json.loads(r.run([r.splitspec, "eval", "shortlist", "--target", planted, "--corpus", corpus, "--text", text,
                               "--k", "1,1000", "--out", ranking, "--json"]).strip().splitlines()[-1])
        cover = {row["k"]: row["coverage"] for row in ev["shortlists"]}
        r.check(cover[1000] == 1.0 and 0 < cover[1] < 1 and len(json.load(open(ranking))) == ev["ranked_tokens"],
                f"eval shortlist: {ev}")
        for where, out in (("local", local), ("server", edge)):
            st = out["stats"]
            r.check(st["acceptance_rate"] > 0.9, f"planted mtp, {where}: acceptance {st['acceptance_rate']}")
            print(f"planted mtp, {where}: acceptance {st['acceptance_rate']:.2f}, tau {st['tau']:.2f}, "
                  f"hidden rows {st.get('verdict_hidden_bytes', 0) / max(st['rounds'], 1):.0f} bytes a round, "
                  f"head {st['drafter_counters'].get('mtp_head_bytes', 0) / 2**20:.1f} MiB", flush=True)
        print(f"{r.checks - len(r.failures)} passed, {len(r.failures)} failed")
        return 1 if r.failures else 0


if __name__ == "__main__":
    sys.exit(main())
