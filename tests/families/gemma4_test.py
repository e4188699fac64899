#!/usr/bin/env python3
"""Gemma 4 (gemma4) and its assistant (gemma4-assistant) against llama.cpp.

A random-weight Gemma 4 in small E2B-like proportions (tests/families/
gguf_py_models.py: local and global layers of different head sizes and
key-value heads, proportional RoPE on the global ones, layers sharing the
keys and values of earlier ones, per-layer inputs, a global layer whose
value is its key, output scales, soft-capped logits) with the real Gemma 4
vocabulary, written by llama.cpp's own gguf-py; then quantized by llama.cpp's
quantizer to Q8_0 and Q4_K_M. Each file:
  - loads in llama.cpp's libllama and in SplitSpec; the prompts tokenize to
    the same ids in both;
  - gives logits near llama.cpp's exact path's (F32 KV cache, no flash
    attention) at every position of each prompt and its greedy
    continuation: mean NMSE no larger than llama.cpp's own default path's,
    and the greedy choice agreeing at least as often (quant_files_test).
Then the assistant against llama.cpp's draft path over shared memory (the
same drafts, logits within test-backend-ops' NMSE), every mode giving the
target alone's tokens, and a planted assistant's acceptance.

  gemma4_test.py --bin BUILD/bin --llamacpp BUILD/llamacpp --material BUILD/test-material

Exits 77 (skipped) naming what is missing when llama.cpp's material or NumPy
is absent (scripts/setup.sh, scripts/setup_test_material.sh).
"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from families_test import (N_NEW, PROMPTS, Runner, arguments, gguf_py_material, gguf_token_count,  # noqa: E402
                           serving, write_ids)
from quant_files_test import files_against_llamacpp, head_drafts_alike  # noqa: E402

MIXES = ["q8_0", "q4_k_m"]


def main():
    p = arguments()
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--new", type=int, default=16)
    p.add_argument("--free-running", action="store_true")
    p.add_argument("--skip-quantized", action="store_true")
    a = p.parse_args()
    gguf_py, vocab = gguf_py_material(a, "gemma-4")
    from gguf_py_models import write_gemma4, write_gemma4_assistant

    with tempfile.TemporaryDirectory() as work:
        r = Runner(a, work)
        r.build_driver()
        target = os.path.join(work, "gemma4-f32.gguf")
        shape, _, _ = write_gemma4(target, vocab, gguf_py, seed=1)
        print("shape:", json.dumps(shape), flush=True)
        prompt_ids = files_against_llamacpp(r, work, "gemma4", target, PROMPTS[:a.prompts],
                                            [] if a.skip_quantized else MIXES, a.new)

        # The assistant against llama.cpp's draft path over shared memory:
        # the same prompts, GAMMA greedy drafts at the next token's position.
        assistant = os.path.join(work, "gemma4-assistant.gguf")
        write_gemma4_assistant(assistant, vocab, gguf_py, shape, seed=4)
        driver = r.build_llama_program("llamacpp_assistant.cpp", "c++")
        gamma = 4
        write_ids(work, prompt_ids)
        head_drafts_alike(r, work, "assistant",
                          lambda ids, out: [driver, r.bins, target, assistant, str(gamma), ids, out],
                          lambda ids, out: [r.splitspec, "eval", "assistant", "--target", target, "--head", assistant,
                                            "--ids-file", ids, "--out", out, "--gamma", str(gamma), "--threads", "1"],
                          gguf_token_count(target))

        # Every mode gives the target alone's tokens: a Gemma 4 draft (its
        # own shared keys and per-layer inputs roll back too), prompt lookup,
        # and the assistant, chained and as a tree.
        draft = os.path.join(work, "gemma4-draft.gguf")
        write_gemma4(draft, vocab, gguf_py, seed=2, shape=dict(layers=4, shared=0, k_eq_v=()))
        prompt = "The robot arm moves to the left. The robot arm moves to the left. The robot arm"
        alone = r.ours(target, prompt=prompt)["output_ids"]
        head = ["--drafter-option", f"head={assistant}"]
        for args in (["--draft", draft, "--drafter", "model"], ["--draft", draft, "--drafter", "model-tree"],
                     ["--drafter", "pld"], ["--drafter", "assistant", *head],
                     ["--drafter", "assistant", *head, "--drafter-option", "width=3"],
                     ["--drafter", "assistant", *head, "--gamma", "8"],
                     # Streamed from its file under a third of its size, per-layer inputs included.
                     ["--memory-budget", "30%", "--drafter", "assistant", *head],
                     ["--draft", target, "--drafter", "model"]):
            got = r.ours(target, *args, prompt=prompt)
            r.check(got["output_ids"] == alone, f"local {' '.join(args)}: {got['output_ids']} vs {alone}")
            if "--memory-budget" in args:
                r.check(got["stats"]["weight_bytes_read"] > 0, f"{' '.join(args)}: the target's weights were streamed")
            shown = " ".join(args).replace(" ".join(head), "").replace("  ", " ")
            print(f"local {shown}: tau {got['stats']['tau']:.2f}", flush=True)
        # A prompt past the local verifier's prefill chunk (256 tokens): the
        # assistant still gets every position's keys.
        long_prompt = " ".join([prompt] * 24)
        long_alone = r.ours(target, prompt=long_prompt)["output_ids"]
        got = r.ours(target, "--drafter", "assistant", *head, prompt=long_prompt)
        r.check(got["output_ids"] == long_alone and len(got["prompt_ids"]) > 256,
                f"local assistant on a prompt of {len(got['prompt_ids'])} tokens: the target's tokens")
        with serving(r, target) as remote:
            for args in (["--draft", draft, "--drafter", "model"], ["--drafter", "pld"]):
                cmd = [r.splitspec, "generate", *remote, *args, "--prompt", prompt, "--max-new-tokens", str(N_NEW),
                       "--ignore-eos", "--json", "--threads", "1"]
                out = json.loads(r.run(cmd).strip().splitlines()[-1])
                r.check(out["output_ids"] == alone, f"server {args[-1]}: {out['output_ids']} vs {alone}")
                print(f"server {args[-1]}: tau {out['stats']['tau']:.2f}", flush=True)
            # The assistant reads the target's keys, which a server keeps: refused at connect, in one line.
            bad = subprocess.run([r.splitspec, "generate", *remote, "--drafter", "assistant", *head, "--prompt", "hi",
                                  "--max-new-tokens", "2"], capture_output=True, text=True, timeout=300)
            r.check(bad.returncode == 1 and "keys and values" in bad.stderr and bad.stderr.count("\n") == 1,
                    f"assistant against a server: one clear error, got {bad.returncode} {bad.stderr!r}")

        # The assistant planted to predict what a planted target does
        # (write_gemma4(planted=True)): its drafts are accepted.
        planted = os.path.join(work, "gemma4-planted.gguf")
        pshape, perm, embed = write_gemma4(planted, vocab, gguf_py, seed=3, planted=True)
        planted_as = os.path.join(work, "gemma4-planted-assistant.gguf")
        write_gemma4_assistant(planted_as, vocab, gguf_py, pshape, seed=5, planted=(perm, embed))
        alone = r.ours(planted, prompt=prompt)["output_ids"]
        head = ["--drafter", "assistant", "--drafter-option", f"head={planted_as}"]
        chain = r.ours(planted, *head, prompt=prompt)
        st = chain["stats"]
        r.check(chain["output_ids"] == alone, "planted assistant: the target's tokens")
        r.check(st["acceptance_rate"] > 0.9, f"planted assistant: acceptance {st['acceptance_rate']}")
        kv_bytes = st["drafter_counters"].get("target_kv_bytes_f16", 0)
        r.check(kv_bytes > 0, "the assistant counts the target's key rows it reads")
        print(f"planted assistant: acceptance {st['acceptance_rate']:.2f}, tau {st['tau']:.2f}, "
              f"assistant {st['drafter_counters'].get('assistant_bytes', 0) / 2**20:.1f} MiB, the target's keys "
              f"{kv_bytes / max(st['rounds'], 1):.0f} bytes a round in half precision "
              f"({kv_bytes:.0f} in {st['rounds']} rounds, the prompt's included)", flush=True)
        # A tree of three branches at the first draft keeps its first whole.
        tree = r.ours(planted, *head, "--drafter-option", "width=3", prompt=prompt)
        r.check(tree["output_ids"] == alone and tree["stats"]["tau"] == st["tau"],
                f"planted assistant tree: the target's tokens at the chain's tau ({tree['stats']['tau']})")
        print(f"{r.checks - len(r.failures)} passed, {len(r.failures)} failed")
        return 1 if r.failures else 0


if __name__ == "__main__":
    sys.exit(main())
