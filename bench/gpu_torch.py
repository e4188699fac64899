#!/usr/bin/env python3
"""Hugging Face transformers' Llama on the same GPU, for bench/results/gpu_vs_torch.md.

Random bf16 weights in the Llama-3.2-1B (and, given time, Llama-3.1-8B) shape,
a static KV cache holding --context tokens, then the median of --repeats
forwards of 1 token (a decode step) and of 5 and 17 rows (what a verification
of a draft costs), eager and under torch.compile(mode="reduce-overhead")
(the compile time reported). The cache is written at the same positions each
time, as splitspec-gpu-bench's runs are. Runs where PyTorch, CUDA and
transformers are (the GPU machine's image); writes JSON.

  python3 bench/gpu_torch.py --json OUT.json [--shapes 1b,8b] [--budget-s 150]
"""
import argparse
import json
import sys
import time

SHAPES = {
    "1b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
               num_key_value_heads=8, head_dim=64, tie_word_embeddings=True),
    "8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
               num_key_value_heads=8, head_dim=128, tie_word_embeddings=False),
}


def static_cache(transformers, config, length, device, dtype):
    """A StaticCache, across the constructor's signatures of transformers 4.4x-5.x."""
    attempts = [
        dict(config=config, max_cache_len=length),
        dict(config=config, max_batch_size=1, max_cache_len=length, device=device, dtype=dtype),
        dict(config=config, batch_size=1, max_cache_len=length, device=device, dtype=dtype),
    ]
    errors = []
    for kw in attempts:
        try:
            return transformers.StaticCache(**kw)
        except TypeError as e:
            errors.append(str(e))
    raise RuntimeError("StaticCache: no known constructor fits: " + " | ".join(errors))


def timed(torch, fn, repeats):
    """Median and spread of `repeats` runs (CUDA events), after 5 warm-ups."""
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    ms = []
    for _ in range(repeats):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ms.append(a.elapsed_time(b))
    ms.sort()
    q = lambda p: ms[int(p * (len(ms) - 1) + 0.5)]
    return dict(median_ms=q(0.5), p10_ms=q(0.1), p90_ms=q(0.9), n=len(ms))


def run_shape(torch, transformers, name, args, out):
    cfg = transformers.LlamaConfig(vocab_size=128256, rope_theta=500000.0, rms_norm_eps=1e-5,
                                   max_position_embeddings=4096, torch_dtype="bfloat16", **SHAPES[name])
    device = torch.device("cuda")
    t0 = time.time()
    torch.manual_seed(0)
    with torch.device(device):
        torch.set_default_dtype(torch.bfloat16)
        model = transformers.LlamaForCausalLM(cfg).eval()
        torch.set_default_dtype(torch.float32)
    made_s = time.time() - t0
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    P = args.context
    cache = static_cache(transformers, cfg, P + 64, device, torch.bfloat16)
    ids = torch.randint(0, cfg.vocab_size, (1, P), device=device)
    with torch.no_grad():
        model(ids, cache_position=torch.arange(P, device=device), past_key_values=cache, use_cache=True)

    def forward_at(rows):
        tok = torch.randint(0, cfg.vocab_size, (1, rows), device=device)
        pos = torch.arange(P, P + rows, device=device)

        def f():
            with torch.no_grad():
                return model(tok, position_ids=pos.unsqueeze(0), cache_position=pos, past_key_values=cache,
                             use_cache=True, return_dict=False)[0]
        return f

    r = dict(shape=name, weight_bytes=weight_bytes, make_s=made_s, context=P, torch=torch.__version__,
             transformers=transformers.__version__, eager={}, compiled={})
    for rows in (1, 5, 17):
        r["eager"][str(rows)] = timed(torch, forward_at(rows), args.repeats)
        print(f"{name} eager {rows} rows: {r['eager'][str(rows)]['median_ms']:.3f} ms", flush=True)
    # reduce-overhead: CUDA graphs of the compiled forward, one shape (a decode step).
    try:
        compiled = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)
        tok = torch.randint(0, cfg.vocab_size, (1, 1), device=device)
        pos = torch.arange(P, P + 1, device=device)

        def step():
            with torch.no_grad():
                return compiled(tok, position_ids=pos.unsqueeze(0), cache_position=pos, past_key_values=cache,
                                use_cache=True, return_dict=False)[0]
        t0 = time.time()
        step()
        torch.cuda.synchronize()
        r["compile_s"] = time.time() - t0
        r["compiled"]["1"] = timed(torch, step, args.repeats)
        print(f"{name} compiled 1 row: {r['compiled']['1']['median_ms']:.3f} ms (compile {r['compile_s']:.1f} s)",
              flush=True)
    except Exception as e:  # reported, not fatal: the eager numbers stand
        r["compile_error"] = f"{type(e).__name__}: {e}"[:2000]
        print(f"{name}: torch.compile failed: {r['compile_error']}", flush=True)
    out["shapes"].append(r)
    del model, cache
    torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", required=True)
    ap.add_argument("--shapes", default="1b,8b")
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=50)
    ap.add_argument("--budget-s", type=float, default=150, help="shapes after the first start only within this")
    args = ap.parse_args()
    try:
        import torch
        import transformers
    except ImportError as e:
        print(f"gpu_torch: {e}: run where PyTorch and transformers are (the GPU machine)", file=sys.stderr)
        return 77
    if not torch.cuda.is_available():
        print("gpu_torch: no CUDA device", file=sys.stderr)
        return 77
    out = dict(device=torch.cuda.get_device_name(0), shapes=[])
    start = time.time()
    for i, name in enumerate(args.shapes.split(",")):
        if i > 0 and time.time() - start > args.budget_s / 2:
            out.setdefault("skipped", []).append(name)
            print(f"gpu_torch: {name} skipped: the budget is half spent", flush=True)
            continue
        try:
            run_shape(torch, transformers, name, args, out)
        except Exception as e:
            out.setdefault("errors", {})[name] = f"{type(e).__name__}: {e}"[:2000]
            print(f"gpu_torch: {name}: {out['errors'][name]}", flush=True)
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
