#!/usr/bin/env python3
"""ttt's CUDA forms against flash-linear-attention (FLA) on one GPU, side by side
(docs/benchmarks.md "GPU").

    python3 tests/bench/compare_fla_gpu.py --fla /path/to/fla-checkout [--shapes 8,4096,16,128]
        [--dtypes bf16,fp32] [--rules gated_delta,delta,gla] [--out FILE]

FLA is imported from the folder given (the folder that holds its `fla` package); none of its code
is part of ttt. Both libraries get the same input tensors. Times are CUDA-event times of the
median of --repeats calls, each after --warmup calls (Triton compiles and autotunes during the
first calls of each shape: those are never timed). forward: the call under torch.no_grad();
forward+backward: the call and the backward of sum(o·d_o) + sum(S·d_S) into every input.
Errors: relative RMS against a float64 recurrence computed by torch on the same (bf16-rounded)
inputs, on --error-shape (and on the timed shapes with --errors-on-timed, which is slower).
A library that refuses a case has its refusal printed as its result.
"""
import argparse
import math
import os
import subprocess
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

RULES = {
    # name: (ttt.fla function name, FLA import, gated, gate per key, beta, delta)
    "gated_delta": ("chunk_gated_delta_rule", "fla.ops.gated_delta_rule", True, False, True,
                    True),
    "delta": ("chunk_delta_rule", "fla.ops.delta_rule", False, False, True, True),
    "gla": ("chunk_gla", "fla.ops.gla", True, True, False, False),
    "simple_gla": ("chunk_simple_gla", "fla.ops.simple_gla", True, False, False, False),
}
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


def parse_shapes(text):
    return [tuple(int(x) for x in s.split(",")) for s in text.split(";") if s]


def make_inputs(rule, B, T, H, D, dtype, seed=0):
    _, _, gated, per_key, has_beta, delta = RULES[rule]
    gen = torch.Generator(device="cuda").manual_seed(seed)
    kw = dict(device="cuda", generator=gen)
    q = torch.randn(B, T, H, D, **kw)
    k = torch.randn(B, T, H, D, **kw)
    k = torch.nn.functional.normalize(k, dim=-1) if delta else k / math.sqrt(D)
    v = torch.randn(B, T, H, D, **kw)
    x = dict(q=q.to(dtype), k=k.to(dtype), v=v.to(dtype))
    if gated:
        shape = (B, T, H, D) if per_key else (B, T, H)
        x["g"] = torch.nn.functional.logsigmoid(torch.randn(*shape, **kw) + 4.0)
    if has_beta:
        x["beta"] = torch.sigmoid(torch.randn(B, T, H, **kw))
    x["initial_state"] = 0.1 * torch.randn(B, H, D, D, **kw)
    return x


def call(fn, rule, x, scale):
    _, _, gated, _, has_beta, _ = RULES[rule]
    args = [x["q"], x["k"], x["v"]]
    if gated:
        args.append(x["g"])
    if has_beta:
        args.append(x["beta"])
    return fn(*args, scale=scale, initial_state=x["initial_state"], output_final_state=True)


def reference(rule, x, scale):
    """The recurrence in float64 (docs/math.md §4), token by token, differentiable."""
    _, _, gated, per_key, has_beta, delta = RULES[rule]
    q, k, v = x["q"].double(), x["k"].double(), x["v"].double()
    S = x["initial_state"].double()
    out = []
    for t in range(q.shape[1]):
        if gated:
            a = torch.exp(x["g"][:, t].double())
            S = S * (a[..., None] if per_key else a[..., None, None])
        w = v[:, t] if not has_beta else x["beta"][:, t].double()[..., None] * v[:, t]
        if delta:
            w = w - x["beta"][:, t].double()[..., None] * torch.einsum("bhk,bhkv->bhv",
                                                                      k[:, t], S)
        S = S + torch.einsum("bhk,bhv->bhkv", k[:, t], w)
        out.append(scale * torch.einsum("bhk,bhkv->bhv", q[:, t], S))
    return torch.stack(out, 1), S


def rel_rms(a, b):
    a, b = a.double(), b.double()
    return (torch.linalg.vector_norm(a - b) / torch.linalg.vector_norm(b)).item()


def leaves(x):
    return {k: t.detach().clone().requires_grad_(True) for k, t in x.items()}


def grads_of(fn, rule, x, scale, d_o, d_S):
    y = leaves(x)
    o, S = call(fn, rule, y, scale)
    loss = (o.float() * d_o.float()).sum() + (S.float() * d_S).sum()
    names = list(y)
    g = torch.autograd.grad(loss, [y[n] for n in names], allow_unused=True)
    return o.detach(), S.detach(), dict(zip(names, g))


def errors(fn, rule, x, scale):
    """{quantity: relative RMS against float64}, or a refusal string."""
    gen = torch.Generator(device="cuda").manual_seed(11)
    d_o = torch.randn(x["v"].shape, device="cuda", generator=gen).to(x["v"].dtype)
    d_S = torch.randn(x["initial_state"].shape, device="cuda", generator=gen)
    y = leaves({k: t.double() for k, t in x.items()})
    ro, rS = reference(rule, y, scale)
    names = list(y)
    rg = torch.autograd.grad((ro * d_o.double()).sum() + (rS * d_S.double()).sum(),
                             [y[n] for n in names])
    out = {}
    try:
        o, S = call(fn, rule, x, scale)
        out["o"], out["S"] = rel_rms(o, ro), rel_rms(S, rS)
    except Exception as e:  # a refusal is the library's result
        return "forward refused: %s" % str(e).splitlines()[0][:120]
    try:
        _, _, g = grads_of(fn, rule, x, scale, d_o, d_S)
        for n, want in zip(names, rg):
            if g.get(n) is not None:
                out["d" + n if n != "initial_state" else "dh0"] = rel_rms(g[n], want)
    except Exception as e:
        out["backward"] = "refused: %s" % str(e).splitlines()[0][:120]
    return out


def timed(f, warmup, repeats):
    for _ in range(warmup):
        f()
    torch.cuda.synchronize()
    ts = []
    for _ in range(repeats):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        f()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    ts.sort()
    return ts[len(ts) // 2]


def timed_graph(f, warmup, repeats):
    """f captured once in a CUDA graph (after warm-up calls on a side stream, which also run
    Triton's autotuning), then the graph's replays timed as `timed` times calls: the kernels
    alone, without the host's work before each launch."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(max(warmup, 1)):
            f()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        f()
    return timed(g.replay, warmup, repeats)


def time_case(fn, rule, x, scale, warmup, repeats, timer=timed):
    res = {}

    def fwd():
        with torch.no_grad():
            call(fn, rule, x, scale)
    try:
        res["fwd"] = timer(fwd, warmup, repeats)
    except Exception as e:
        res["fwd"] = "refused: %s" % str(e).splitlines()[0][:100]
        return res
    y = leaves(x)
    d_o = torch.randn_like(x["v"])
    d_S = torch.randn_like(x["initial_state"])

    def fb():
        o, S = call(fn, rule, y, scale)
        torch.autograd.backward([o, S], [d_o, d_S])
    try:
        res["fwdbwd"] = timer(fb, warmup, repeats)
    except Exception as e:
        res["fwdbwd"] = "refused: %s" % str(e).splitlines()[0][:100]
    return res


def versions(fla_path):
    import triton
    import fla
    out = {"torch": torch.__version__, "triton": triton.__version__,
           "fla": getattr(fla, "__version__", "?"), "gpu": torch.cuda.get_device_name(),
           "cuda (torch)": torch.version.cuda}
    try:
        out["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version",
                                        "--format=csv,noheader"], capture_output=True,
                                       text=True, timeout=20).stdout.strip()
    except Exception:
        out["driver"] = "?"
    desc = os.path.join(fla_path, "FLA_VERSION")
    if os.path.exists(desc):
        out["fla"] += " (" + open(desc).read().strip() + ")"
    return out


def fmt(v):
    if isinstance(v, float):
        return "%.3f" % v if v >= 0.01 else "%.2e" % v
    return str(v)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fla", required=True, help="folder holding FLA's `fla` package")
    ap.add_argument("--shapes", default="1,4096,8,128;8,4096,16,128;8,4096,32,128;"
                                        "1,32768,16,128", help="B,T,H,D;…")
    ap.add_argument("--dtypes", default="bf16,fp32")
    ap.add_argument("--rules", default="gated_delta,delta,gla")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--error-shape", default="1,512,4,64")
    ap.add_argument("--errors-on-timed", action="store_true")
    ap.add_argument("--no-errors", action="store_true")
    ap.add_argument("--bypass-guard", action="store_true",
                    help="time FLA's gated backward on Hopper with Triton < 3.7.1, which FLA "
                         "refuses because it computes wrong dβ/dg there (timing only)")
    ap.add_argument("--graphs", action="store_true",
                    help="time each call captured in a CUDA graph (the kernels alone), beside "
                         "the synchronized eager calls")
    ap.add_argument("--out", help="also write the tables to this file")
    a = ap.parse_args()
    sys.path.insert(0, os.path.abspath(a.fla))
    import importlib
    import ttt.fla
    import ttt.cuda
    lines = []

    def say(s=""):
        print(s, flush=True)
        lines.append(s)

    say("# ttt against FLA on %s" % torch.cuda.get_device_name())
    say()
    for k, v in versions(a.fla).items():
        say("- %s: %s" % (k, v))
    say("- ttt: %s; %s" % (ttt.__version__, ttt.cuda.describe()))
    say()
    rules = a.rules.split(",")
    dtypes = a.dtypes.split(",")
    libs = {}
    for r in rules:
        mod = importlib.import_module(RULES[r][1])
        libs[r] = {"ttt": getattr(ttt.fla, RULES[r][0]), "fla": getattr(mod, RULES[r][0])}
    guard_note = ""
    if a.bypass_guard:
        import fla.ops.common.chunk_o as co
        if hasattr(co, "TRITON_ABOVE_3_7_1") and not co.TRITON_ABOVE_3_7_1:
            co.TRITON_ABOVE_3_7_1 = True
            guard_note = " (FLA's gated backward: guard bypassed for timing; its dβ/dg are " \
                         "wrong on this Triton, see the error table)"
    if not a.no_errors:
        shapes = parse_shapes(a.error_shape) + (parse_shapes(a.shapes) if a.errors_on_timed
                                                else [])
        say("## Relative RMS error against float64 (same bf16-rounded inputs)")
        say()
        say("| rule | dtype | (B, T, H, D) | library | " +
            " | ".join(["o", "S", "dq", "dk", "dv", "dg", "dbeta", "dh0"]) + " |")
        say("|---|---|---|---|" + "---|" * 8)
        for r in rules:
            for dt in dtypes:
                for shp in shapes:
                    B, T, H, D = shp
                    x = make_inputs(r, B, T, H, D, DTYPES[dt])
                    for name, fn in libs[r].items():
                        t0 = time.time()
                        e = errors(fn, r, x, D ** -0.5)
                        if isinstance(e, str):
                            cells = [e] + [""] * 7
                        else:
                            cells = [fmt(e.get(k, "")) for k in
                                     ["o", "S", "dq", "dk", "dv", "dg", "dbeta", "dh0"]]
                            if "backward" in e:
                                cells[2] = e["backward"]
                        say("| %s | %s | %s | %s | %s |" % (r, dt, shp, name,
                                                            " | ".join(cells)))
                        del t0
        say()
    say("## Time (ms, median of %d after %d warm-up calls)%s" % (a.repeats, a.warmup,
                                                                guard_note))
    say()
    say("| rule | dtype | (B, T, H, D) | timing | ttt fwd | FLA fwd | fwd ratio | ttt fwd+bwd | "
        "FLA fwd+bwd | fwd+bwd ratio |")
    say("|---|---|---|---|---|---|---|---|---|---|")
    timers = [("eager", timed)] + ([("CUDA graph", timed_graph)] if a.graphs else [])
    for r in rules:
        for dt in dtypes:
            for shp, (tname, timer) in [(s_, t_) for s_ in parse_shapes(a.shapes)
                                        for t_ in timers]:
                B, T, H, D = shp
                x = make_inputs(r, B, T, H, D, DTYPES[dt])
                res = {n: time_case(fn, r, x, D ** -0.5, a.warmup, a.repeats, timer)
                       for n, fn in libs[r].items()}

                def ratio(key):
                    t, f = res["ttt"].get(key), res["fla"].get(key)
                    return "%.2f" % (t / f) if isinstance(t, float) and \
                        isinstance(f, float) else "–"
                say("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                    r, dt, shp, tname, fmt(res["ttt"].get("fwd")), fmt(res["fla"].get("fwd")),
                    ratio("fwd"), fmt(res["ttt"].get("fwdbwd", "–")),
                    fmt(res["fla"].get("fwdbwd", "–")), ratio("fwdbwd")))
                del x
                torch.cuda.empty_cache()
    if a.out:
        with open(a.out, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
