#!/usr/bin/env python3
"""A whole training step on one GPU in ttt and in PyTorch, side by side: tokens/s and peak device
memory (docs/benchmarks.md "GPU training").

    python3 tests/bench/compare_torch_train_gpu.py --ttt build-gpu/ttt --fla /path/to/fla \
        [--model lm|mqar] [--dtype float32|bfloat16] [--variants eager,fla,compile] \
        [--repeats 5] [--recompute 0,6] [--bypass-guard]

--model lm: the 125M-class language model of experiments/benchmark_lm_gpu.yaml (d_model 768, 12
gated DeltaNet blocks, vocabulary 32000, sequence 2048, batch 8). --model mqar: the MQAR model of
experiments/benchmark_train_gpu.yaml (d_model 32, 2 blocks, V 64, L 64, batch 32), for each of
its presets that PyTorch runs here (--presets).

ttt: `ttt run` of the experiment with train.device=cuda (and the dtype), which times its own
steps (the benchmark's train_step measure: the fastest and the median of --repeats steps after a
warm-up step) and reports the device pool's high-water mark (gpu_peak_mb: parameters, gradients,
AdamW moments, the step's tensors and the forms' workspace at their most at once;
gpu_reserved_mb: what the pool held from the driver).

PyTorch: the same model, ttt.torch_model's twin (python/ttt/torch_model.py, the model of
src/train/seqmodel.h), from the same initial parameters: a first `ttt run` on the CPU with a
batch of one short sequence dumps the model's parameters with their names and layouts and its
resolved configuration (the benchmark's `dump: true`), and the twin is built from them. Its mixer
layer is, per variant:
  eager    the twin's own chunkwise layer in PyTorch operations;
  fla      FLA's Triton kernel (chunk_gated_delta_rule for the delta rule with a scalar gate,
           chunk_delta_rule without one, chunk_gla with a gate per key, chunk_simple_gla with a
           scalar gate on linear attention), FLA imported from --fla (none of its code is part
           of ttt);
  compile  the fla variant with torch.compile on the step's forward and loss (where FLA's
           functions break the graph, torch.compile runs them eagerly between its graphs).
A step is zero_grad, forward, cross-entropy, backward, clip_grad_norm_ and torch.optim.AdamW
(foreach; weight decay on the parameters ttt decays), on random tokens of the same shape (their
values do not change the work). bfloat16: the forward under torch.autocast (bf16 products, fp32
weights), as ttt's train.dtype: bfloat16. Times are wall clock between torch.cuda.synchronize()
calls: the fastest and the median of --repeats steps after --warmup steps (compilation and
Triton's autotuning happen in those). Peak memory: torch.cuda.max_memory_allocated (and
max_memory_reserved) over the timed steps, the statistics reset after the model and optimizer
exist and one step has run, so that both sides count parameters, gradients and moments and the
step's transient memory.

FLA's gated backward refuses to run on Hopper with Triton < 3.7.1 (its dβ and dg are wrong
there); --bypass-guard lets it run for timing only (its results are not used here): as
tests/bench/compare_fla_gpu.py does.

Also printed: the loss of ttt's dump (the CPU step on the tiny batch) and of the twin on the same
parameters and batch in float64 on the CPU, so that the table is known to compare the same model
(their relative difference is ttt's float32 rounding through the blocks: measured 2e-8 to 5e-8
for the MQAR models' presets and 1.0e-7 for the language model, on the 2-core machine of
docs/benchmarks.md).
"""
import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")


def load_twin():
    """python/ttt/torch_model.py by its path (the package's __init__ would load libttt.so)."""
    path = os.path.join(ROOT, "python", "ttt", "torch_model.py")
    spec = importlib.util.spec_from_file_location("ttt_torch_model", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


twin = load_twin()

MODELS = {
    # experiment file, sets for the timed GPU run, sets for the tiny CPU dump
    "lm": ("experiments/benchmark_lm_gpu.yaml",
           ["task.seq_len=[2048]", "task.pairs=64"],
           ["task.seq_len=[16]", "task.pairs=4", "train.batch=1"]),
    "mqar": ("experiments/benchmark_train_gpu.yaml", [],
             ["train.batch=1"]),
}

# ---------------------------------------------------------------- ttt


def ttt_run(a, yaml, sets, out):
    cmd = [a.ttt, "run", os.path.join(ROOT, yaml), "--out", out, "--quiet"]
    for s in sets:
        cmd += ["--set", s]
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit("compare_torch_train_gpu: %s failed:\n%s" % (" ".join(cmd), r.stderr))
    rows = []
    with open(os.path.join(out, "metrics.jsonl")) as f:
        for line in f:
            rec = json.loads(line)
            if rec.get("measure") == "train_step":
                rows.append(rec)
    return rows


def ttt_timings(a, yaml, sets, wd, recompute=0):
    """{preset: the train_step row} of the GPU run (train.recompute: that many blocks)."""
    sets = sets + ["train.device=cuda", f"train.dtype={a.dtype}", f"task.repeats={a.repeats}"]
    if recompute:
        sets = sets + [f"train.recompute={recompute}"]
    rows = ttt_run(a, yaml, sets, os.path.join(wd, f"gpu{recompute}"))
    return {r["preset"]: r for r in rows}


def ttt_dumps(a, yaml, sets, wd):
    """[(preset, params, meta, tokens, labels, loss)] from the CPU dump of every point."""
    out = os.path.join(wd, "dump")
    rows = ttt_run(a, yaml, sets + ["task.dump=true", "task.repeats=1", "train.device=cpu"], out)
    res = []
    for i, r in enumerate(rows):
        L = int(r["seq_len"])
        path = os.path.join(out, f"train_step_point{int(r.get('point', i))}_L{L}.safetensors")
        dump, meta = twin.read_safetensors(path)
        params = {n[6:]: v for n, v in dump.items() if n.startswith("param.")}
        res.append((r["preset"], params, meta, dump["tokens"].astype(np.int64),
                    dump["labels"].astype(np.int64), float(dump["loss"])))
        os.unlink(path)  # the LM's is a gigabyte
    return res

# ---------------------------------------------------------------- PyTorch


def fla_layer(fla_ops, cfg):
    """The twin's layer call (q, k, v (B, H, T, D), β (B, H, T), log α (B, H, T) or
    (B, H, T, D) or None, chunk) through FLA's kernel for the twin's layer, or None when FLA has
    none for it (RoPE, when the layer has it, is applied by the twin before the call). FLA takes
    (B, T, H, D) and scales q itself: scale 1 (the twin scaled q)."""
    delta = cfg.layer is twin.delta_chunk
    linear = cfg.layer is twin.la_chunk
    if not (delta or linear) or cfg.ratio:
        return None

    def bt(x):
        return None if x is None else x.transpose(1, 2).contiguous()

    def call(q, k, v, beta, la, C):
        q, k, v, beta, la = bt(q), bt(k), bt(v), bt(beta), bt(la)
        # FLA's kernels take q, k, v and β in one dtype (its products would not compile for a
        # float32 q beside a bf16 v, as the twin's norms leave them under autocast) and the
        # log-gate in float32
        dt = v.dtype
        if torch.is_autocast_enabled():
            dt = (torch.get_autocast_dtype("cuda") if hasattr(torch, "get_autocast_dtype")
                  else torch.get_autocast_gpu_dtype())
        q, k, v, beta = q.to(dt), k.to(dt), v.to(dt), beta.to(dt)
        la = None if la is None else la.float()
        if delta and la is not None:
            o, _ = fla_ops["gated_delta"](q, k, v, la, beta, scale=1.0)
        elif delta:
            o, _ = fla_ops["delta"](q, k, v, beta, scale=1.0)
        elif la is not None and la.dim() == 4:
            o, _ = fla_ops["gla"](q, k, v * beta[..., None], la, scale=1.0)
        else:
            o, _ = fla_ops["simple_gla"](q, k, v * beta[..., None], la, scale=1.0)
        return o.transpose(1, 2)
    return call


def load_fla(path, bypass):
    sys.path.insert(0, os.path.abspath(path))
    import importlib
    ops = {}
    for name, mod, fn in (("gated_delta", "fla.ops.gated_delta_rule", "chunk_gated_delta_rule"),
                          ("delta", "fla.ops.delta_rule", "chunk_delta_rule"),
                          ("gla", "fla.ops.gla", "chunk_gla"),
                          ("simple_gla", "fla.ops.simple_gla", "chunk_simple_gla")):
        ops[name] = getattr(importlib.import_module(mod), fn)
    note = ""
    if bypass:
        import fla.ops.common.chunk_o as co
        if hasattr(co, "TRITON_ABOVE_3_7_1") and not co.TRITON_ABOVE_3_7_1:
            co.TRITON_ABOVE_3_7_1 = True
            note = "FLA's gated backward guard bypassed for timing (its dβ/dg are wrong on " \
                   "this Triton)"
    import fla
    return ops, "fla %s%s" % (getattr(fla, "__version__", "?"), "; " + note if note else "")


def time_torch(a, cfg, params, meta, B, L, V, layer, compiled):
    """(best s, median s, max_memory_allocated, max_memory_reserved) of the twin's step."""
    dev = torch.device("cuda")
    P = {n: torch.tensor(v, device=dev, requires_grad=True) for n, v in params.items()}
    names = list(P)
    flags = meta["param_decay"]
    decay = [flags[i] == "1" for i in range(len(names))]
    groups = [{"params": [P[n] for n, d in zip(names, decay) if d],
               "weight_decay": float(meta["train.weight_decay"])},
              {"params": [P[n] for n, d in zip(names, decay) if not d], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=float(meta["train.lr"]), foreach=True)
    plist = list(P.values())
    clip = float(meta["train.clip"])
    if layer is not None:
        cfg.layer = layer
    gen = torch.Generator(device=dev).manual_seed(0)
    tokens = torch.randint(0, V, (B, L), device=dev, generator=gen)
    labels = torch.randint(0, V, (B, L), device=dev, generator=gen)
    bf16 = a.dtype == "bfloat16"

    def fwd(tok, lab):
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            return twin.forward_loss(cfg, P, tok, lab)

    f = torch.compile(fwd) if compiled else fwd

    def step():
        opt.zero_grad(set_to_none=True)
        loss = f(tokens, labels)
        loss.backward()
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(plist, clip)
        opt.step()

    for _ in range(a.warmup):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    secs = []
    for _ in range(a.repeats):
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        secs.append(time.perf_counter() - t0)
    return (min(secs), float(np.median(secs)), torch.cuda.max_memory_allocated(),
            torch.cuda.max_memory_reserved())


def twin_loss64(cfg, params, tokens, labels):
    """The twin's loss in float64 on the CPU, on the dump's parameters and batch."""
    default_device("cpu")
    try:
        P = {n: torch.tensor(v, dtype=torch.float64) for n, v in params.items()}
        return float(twin.forward_loss(cfg, P, torch.from_numpy(tokens),
                                       torch.from_numpy(labels)))
    finally:
        default_device("cuda")


def default_device(dev):
    """Where torch's factory functions make tensors (the twin's masks and constants): the GPU
    for the timed steps. torch.set_default_device is torch 2's; without it, only the CPU."""
    if hasattr(torch, "set_default_device") and (dev == "cpu" or torch.cuda.is_available()):
        torch.set_default_device(dev)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ttt", default="build-gpu/ttt", help="the ttt program (built with CUDA)")
    ap.add_argument("--fla", help="folder holding FLA's `fla` package (variants fla, compile)")
    ap.add_argument("--model", default="lm", choices=sorted(MODELS))
    ap.add_argument("--presets", default="deltanet,gated_deltanet,gla,retnet,mamba2",
                    help="--model mqar: the presets to compare (of the experiment's sweep)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--variants", default="eager,fla,compile",
                    help="PyTorch variants: eager (the twin's own layer), fla, compile")
    ap.add_argument("--repeats", type=int, default=5, help="timed steps, each side")
    ap.add_argument("--warmup", type=int, default=2, help="PyTorch steps before timing")
    ap.add_argument("--recompute", default="0",
                    help="ttt runs with these train.recompute values (blocks recomputed in the "
                         "backward, docs/training.md), one row each; vs_ttt against the first")
    ap.add_argument("--bypass-guard", action="store_true",
                    help="let FLA's gated backward run on Triton < 3.7.1 (timing only)")
    ap.add_argument("--no-ttt-check", action="store_true",
                    help="skip the twin's float64 loss on the dump (slow for the LM on the CPU)")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("compare_torch_train_gpu: no CUDA device for PyTorch; nothing to compare")
        return 77
    variants = a.variants.split(",")
    default_device("cuda")
    fla_ops, fla_note = None, "FLA not loaded"
    if any(v in ("fla", "compile") for v in variants):
        if not a.fla:
            raise SystemExit("compare_torch_train_gpu: variants fla and compile need --fla PATH")
        fla_ops, fla_note = load_fla(a.fla, a.bypass_guard)
    yaml, gpu_sets, dump_sets = MODELS[a.model]
    ver = subprocess.run([a.ttt, "--version"], capture_output=True, text=True).stdout.strip()
    print(f"# {torch.cuda.get_device_name()}; torch {torch.__version__} (CUDA "
          f"{torch.version.cuda}); {fla_note}; ttt {ver}")
    print(f"# command: python3 {' '.join(sys.argv)}")
    print(f"# {a.model}: {yaml} {' '.join('--set ' + s for s in gpu_sets)}; dtype {a.dtype}; "
          f"fastest and median of {a.repeats} steps")
    with tempfile.TemporaryDirectory() as wd:
        t0 = time.time()
        dumps = ttt_dumps(a, yaml, dump_sets, wd)
        t1 = time.time()
        recs = [int(x) for x in a.recompute.split(",")]
        runs = [(n, ttt_timings(a, yaml, gpu_sets, wd, n)) for n in recs]
        timings = runs[0][1]
        t2 = time.time()
        print(f"# ttt: the CPU dump took {t1 - t0:.1f} s, the GPU run {t2 - t1:.1f} s")
        cols = ["model", "side", "tok/s", "tok/s_med", "s/step", "peak_MiB", "reserved_MiB",
                "vs_ttt"]
        print(" ".join(f"{c:>13}" if i else f"{c:<28}" for i, c in enumerate(cols)))
        for preset, params, meta, tok, lab, loss in dumps:
            if a.model == "mqar" and preset not in a.presets.split(","):
                continue
            r = timings[preset]
            B, L, V = int(r["batch"]), int(r["seq_len"]), int(r["vocab"])
            ntok = B * L
            cfg = twin.Config(meta)
            label = f"{preset} {a.model}"
            if not a.no_ttt_check:
                l64 = twin_loss64(cfg, params, tok, lab)
                print(f"# {label}: the dump's loss {loss:.9g}, the twin's (float64, CPU) "
                      f"{l64:.9g}: {abs(loss - l64) / abs(l64):.1e} relative")
            for n, tm in runs:
                rn = tm[preset]
                row = [label, f"ttt rec {n}" if n else "ttt", f"{rn['tokens_per_s']:.4g}",
                       f"{rn['tokens_per_s_median']:.4g}", f"{rn['seconds']:.4g}",
                       f"{rn.get('gpu_peak_mb', float('nan')):.0f}",
                       f"{rn.get('gpu_reserved_mb', float('nan')):.0f}",
                       f"{r['seconds'] / rn['seconds']:.2f}x"]
                print(" ".join(f"{str(c):>13}" if i else f"{str(c):<28}"
                               for i, c in enumerate(row)), flush=True)
            for v in variants:
                cfg = twin.Config(meta)  # with the twin's own layer
                layer = None
                if v in ("fla", "compile"):
                    layer = fla_layer(fla_ops, cfg)
                    if layer is None:
                        print(f"{label:<28} {'torch ' + v:>13} (FLA has no kernel for this layer)")
                        continue
                try:
                    best, med, peak, res = time_torch(a, cfg, params, meta, B, L, V, layer,
                                                      v == "compile")
                except Exception as e:  # a refusal (FLA's head width, compile) is the result
                    lines = [l.strip() for l in str(e).splitlines() if l.strip()]
                    print(f"{label:<28} {'torch ' + v:>13} refused: "
                          f"{' | '.join(lines[:6])[:600] if lines else type(e).__name__}")
                    torch.cuda.empty_cache()
                    continue
                torch.cuda.empty_cache()  # the variant's tensors are gone with its call
                row = [label, "torch " + v, f"{ntok / best:.4g}", f"{ntok / med:.4g}",
                       f"{best:.4g}", f"{peak / 2**20:.0f}", f"{res / 2**20:.0f}",
                       f"{best / r['seconds']:.2f}x"]
                print(" ".join(f"{str(c):>13}" if i else f"{str(c):<28}"
                               for i, c in enumerate(row)), flush=True)
    print("# vs_ttt: PyTorch's (or that ttt run's) fastest step time / the first ttt run's (> 1: "
          "the first ttt run faster); ttt rec N: train.recompute N; peak_MiB: "
          "ttt's device pool high-water mark, PyTorch's max_memory_allocated")
    return 0


if __name__ == "__main__":
    sys.exit(main())
