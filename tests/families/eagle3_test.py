#!/usr/bin/env python3
"""EAGLE-3 heads for a Llama 3 target, against llama.cpp's draft-eagle3.

A random-weight Llama 3-shaped target with the real Llama 3 vocabulary, and
an EAGLE-3 head for it in llama.cpp's draft-eagle3 layout (eagle3: fc over
three target layers' inputs, one decoder layer, a reduced draft vocabulary
mapped by d2t), both written by llama.cpp's own gguf-py
(tests/families/gguf_py_models.py). Then:
  - `splitspec eval eagle3` and bench/llamacpp_eagle3.cpp (llama.cpp's
    draft-eagle3 path on its prebuilt libllama) draft after the same prompts:
    the same next token and drafts, the draft logits within test-backend-ops'
    NMSE (over the draft vocabulary; both are -inf outside it);
  - local and server `eagle3` give the target alone's greedy tokens;
  - a planted pair (the target's next token a fixed permutation of the
    current one; the head passing its token through and mapping it by that
    permutation through d2t) is accepted whole, here and over the wire, where
    the server sends the three layers' rows in half precision.

  eagle3_test.py --bin BUILD/bin --llamacpp BUILD/llamacpp --material BUILD/test-material

Exits 77 (skipped) naming what is missing when llama.cpp's material or NumPy
is absent (scripts/setup.sh, scripts/setup_test_material.sh).
"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from families_test import N_NEW, PROMPTS, Runner, arguments, gguf_py_material, serving, write_ids  # noqa: E402
from quant_files_test import NMSE_BAR  # noqa: E402


def nmse_finite(reference, other, vocab):
    """The largest NMSE over rows of the entries the reference holds finite,
    and whether the other is finite exactly there."""
    import numpy
    r = numpy.fromfile(reference, dtype=numpy.float32).reshape(-1, vocab).astype(numpy.float64)
    o = numpy.fromfile(other, dtype=numpy.float32).reshape(-1, vocab).astype(numpy.float64)
    if r.shape != o.shape:
        return float("inf"), False
    finite = numpy.isfinite(r)
    worst = max(float(((o[i][finite[i]] - r[i][finite[i]]) ** 2).sum() / (r[i][finite[i]] ** 2).sum())
                for i in range(len(r)))
    return worst, bool((finite == numpy.isfinite(o)).all())


def main():
    p = arguments()
    p.add_argument("--prompts", type=int, default=8)
    a = p.parse_args()
    gguf_py, vocab = gguf_py_material(a, "llama-bpe")
    from gguf_py_models import write_eagle3, write_llama3

    with tempfile.TemporaryDirectory() as work:
        r = Runner(a, work)
        r.build_driver()
        driver = r.build_llama_program("llamacpp_eagle3.cpp", "c++")
        target, head = os.path.join(work, "llama3.gguf"), os.path.join(work, "eagle3.gguf")
        shape, _, _ = write_llama3(target, vocab, gguf_py, seed=1)
        write_eagle3(head, vocab, gguf_py, shape["hidden"], seed=2)
        prompt_ids = [json.loads(r.run([r.splitspec, "tokenize", "--target", target, "--text", t, "--json"]))["ids"]
                      for t in PROMPTS[:a.prompts]]

        # The head against llama.cpp's draft-eagle3 path.
        gamma = 4
        ids_txt, ids_jsonl = write_ids(work, prompt_ids)
        theirs_bin, ours_bin = os.path.join(work, "llama.bin"), os.path.join(work, "ours.bin")
        theirs = [json.loads(x) for x in r.run([driver, r.bins, target, head, str(gamma), ids_txt, theirs_bin]).splitlines()]
        ours = [json.loads(x) for x in r.run([r.splitspec, "eval", "eagle3", "--target", target, "--head", head,
                                              "--ids-file", ids_jsonl, "--out", ours_bin, "--gamma", str(gamma),
                                              "--threads", "1"]).splitlines()]
        same = sum(o == t for o, t in zip(ours, theirs))
        r.check(same == len(theirs), f"eagle3 drafts as llama.cpp's draft-eagle3: {same}/{len(theirs)} prompts alike")
        worst, masked = nmse_finite(theirs_bin, ours_bin, 128256)
        r.check(masked, "eagle3 logits finite exactly on the draft vocabulary, as llama.cpp's")
        r.check(worst <= NMSE_BAR, f"eagle3 logits within test-backend-ops' {NMSE_BAR} of llama.cpp's: worst {worst:.2e}")
        print(f"eagle3 vs llama.cpp's draft-eagle3: next token and {gamma} drafts alike on {same}/{len(theirs)} "
              f"prompts; draft logits' worst NMSE {worst:.2e}", flush=True)

        # Refused in one clear line: no head, and a head of another target.
        for args, want in ((["--drafter", "eagle3"], "option head"),
                           (["--drafter", "eagle3", "--drafter-option", "head=" + target], "not an EAGLE-3 head")):
            bad = subprocess.run([r.splitspec, "generate", "--target", target, *args, "--prompt", "hi",
                                  "--max-new-tokens", "2"], capture_output=True, text=True, timeout=300)
            r.check(bad.returncode == 1 and want in bad.stderr and bad.stderr.count("\n") == 1,
                    f"eagle3 {args[-1]}: one clear error, got {bad.returncode} {bad.stderr!r}")

        # Every mode gives the target alone's tokens.
        prompt = PROMPTS[2]
        option = ["--drafter", "eagle3", "--drafter-option", "head=" + head]
        tree = ["--drafter-option", "width=3"]
        alone = r.ours(target, prompt=prompt)["output_ids"]
        r.check(r.ours(target, *option, prompt=prompt)["output_ids"] == alone, "local eagle3: the target's tokens")
        r.check(r.ours(target, *option, *tree, prompt=prompt)["output_ids"] == alone, "local eagle3 tree: the target's tokens")
        with serving(r, target) as remote:
            for extra in ([], tree):
                cmd = [r.splitspec, "generate", *remote, *option, *extra, "--prompt", prompt, "--max-new-tokens",
                       str(N_NEW), "--ignore-eos", "--json", "--threads", "1"]
                out = json.loads(r.run(cmd).strip().splitlines()[-1])
                r.check(out["output_ids"] == alone, f"server eagle3 {extra}: the target's tokens")
            # Sampled: its q crosses the wire with the drafts.
            cmd = [r.splitspec, "generate", *remote, *option, "--prompt", prompt, "--max-new-tokens", "8",
                   "--temperature", "1.0", "--seed", "3", "--json", "--threads", "1"]
            r.check(len(json.loads(r.run(cmd).strip().splitlines()[-1])["output_ids"]) == 8, "server eagle3, sampled")

        # Planted: accepted whole.
        ptarget, phead = os.path.join(work, "llama3-planted.gguf"), os.path.join(work, "eagle3-planted.gguf")
        shape, perm, embed = write_llama3(ptarget, vocab, gguf_py, seed=3, planted=True)
        write_eagle3(phead, vocab, gguf_py, shape["hidden"], seed=4, planted=(perm, embed))
        option = ["--drafter", "eagle3", "--drafter-option", "head=" + phead]
        alone = r.ours(ptarget, prompt=prompt)["output_ids"]
        local = r.ours(ptarget, *option, prompt=prompt)
        with serving(r, ptarget) as remote:
            cmd = [r.splitspec, "generate", *remote, *option, "--prompt", prompt, "--max-new-tokens", str(N_NEW),
                   "--ignore-eos", "--json", "--threads", "1"]
            edge = json.loads(r.run(cmd).strip().splitlines()[-1])
        for where, res in (("local", local), ("server", edge)):
            st = res["stats"]
            r.check(res["output_ids"] == alone, f"planted eagle3, {where}: the target's tokens")
            r.check(st["acceptance_rate"] > 0.9, f"planted eagle3, {where}: acceptance {st['acceptance_rate']}")
            print(f"planted eagle3, {where}: acceptance {st['acceptance_rate']:.2f}, tau {st['tau']:.2f}, "
                  f"layer rows {st.get('verdict_hidden_bytes', 0) / max(st['rounds'], 1):.0f} bytes a round, "
                  f"head {st['drafter_counters'].get('eagle3_head_bytes', 0) / 2**20:.1f} MiB", flush=True)
        # A tree of three branches at the first draft keeps its first whole.
        planted_tree = r.ours(ptarget, *option, *tree, prompt=prompt)
        r.check(planted_tree["output_ids"] == alone and planted_tree["stats"]["tau"] == local["stats"]["tau"],
                f"planted eagle3 tree: the target's tokens at the chain's tau ({planted_tree['stats']['tau']})")
        print(f"{r.checks - len(r.failures)} passed, {len(r.failures)} failed")
        return 1 if r.failures else 0


if __name__ == "__main__":
    sys.exit(main())
