#!/usr/bin/env python3
"""ttt's log-linear attention (docs/math.md §4.8, presets loglinear_mamba2 and loglinear_gdn)
against the naive references of flash-linear-attention (FLA) and of the paper's authors, on the
same inputs, on the CPU.

    python3 tests/bench/compare_loglinear.py [--fla /path/to/fla-checkout]
        [--hattention /path/to/log-linear-attention-checkout]
        [--shapes "2,256,4,64;1,1024,2,64"] [--tol 1e-5]

--fla is the folder that holds FLA's `fla` package: fla/ops/log_linear_attn/naive.py
(naive_log_linear_attn: log-linear Mamba-2 as one T×T matrix, the hierarchical mask of every
level times the gates' segment sums; it imports numpy and torch) is loaded by path.
--hattention is the authors' repository (github.com/HanGuo97/log-linear-attention):
hattention/recurrent.py (hattention_recurrent: the Fenwick states token by token, log-linear
Mamba-2 and log-linear Gated DeltaNet; it imports einops and jaxtyping) and hattention/base.py
are loaded by path, without the package's __init__ (which imports transformers). Either may be
left out. None of their code is part of ttt.

For each shape (B, T, H, D = d_k = d_v) and case, Λ = ⌈log₂ T⌉ + 1 levels (the references' own
count), the same float32 inputs — q, k (unit rows for the delta rule), v, log α = g per token
(B, T, H) from −exp(A_log)·softplus(x + dt_bias) as the layers make it, the levels' weights
λ = softplus(·) (B, T, H, Λ), β = sigmoid (B, T, H) for the delta rule — go to
  * FLA's naive_log_linear_attn (log-linear Mamba-2, float32; no β, so ttt gets β = 1), and the
    authors' hattention_recurrent with HStruct.MAMBA2 and HStruct.GDELTA (float32);
  * ttt.Layer(preset, levels=Λ, scale=1) with form recurrent, chunkwise (C = 16; for log-linear
    Mamba-2 and Gated DeltaNet) and auto (float32), q given as the levels' queries λ^ℓ q side by side
    (B, T, H, Λ·D);
  * ttt.reference(preset) (the float64 Fenwick recurrence).
Errors are max|a − b| / max|b| over the output o and, where the reference returns it, the final
state S (the authors' (B, H, D, D, Λ) states against ttt's (B, H, Λ·D, D)). The run fails
(exit 1) when a float32 path differs from a reference or from float64 by more than --tol, or
when the control — ttt with levels 1 and 2 of every query exchanged, a token read from the
wrong bucket — stays within --tol of the reference. Cases: random gates, weak gates (× 1e-3),
hard resets (log α = −inf on 2 % of the tokens: the authors' recurrence multiplies by
α = exp(−inf) = 0; FLA's naive form takes differences of cumulative sums, which are NaN there,
and the table says so).
"""
import argparse
import importlib.util
import math
import os
import sys
import types

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

import ttt  # noqa: E402


def load_path(name, path, what):
    if not os.path.isfile(path):
        sys.exit("compare_loglinear: %s not found (%s)" % (path, what))
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    try:
        spec.loader.exec_module(mod)
    except ImportError as e:
        sys.exit("compare_loglinear: %s needs %s (install it, or leave that reference out)"
                 % (path, e.name or e))
    return mod


def load_fla(root):
    return load_path("fla_log_linear_naive",
                     os.path.join(root, "fla", "ops", "log_linear_attn", "naive.py"),
                     "--fla is the folder holding FLA's fla/")


def load_hattention(root):
    """hattention.base and hattention.recurrent by path, under a bare package of that name."""
    pkg = types.ModuleType("hattention")
    pkg.__path__ = [os.path.join(root, "hattention")]
    sys.modules["hattention"] = pkg
    what = "--hattention is the authors' repository, holding hattention/"
    load_path("hattention.base", os.path.join(root, "hattention", "base.py"), what)
    return load_path("hattention.recurrent", os.path.join(root, "hattention", "recurrent.py"),
                     what)


def make_inputs(B, T, H, D, nl, case, seed):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, T, H, D, generator=g)
    k = torch.randn(B, T, H, D, generator=g)
    v = torch.randn(B, T, H, D, generator=g)
    beta = torch.sigmoid(torch.randn(B, T, H, generator=g))
    A = torch.empty(H).uniform_(1, 16, generator=g)  # Mamba-2's A = exp(A_log) in [1, 16]
    dt = torch.exp(torch.rand(H, generator=g) * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3))
    dt_bias = dt + torch.log(-torch.expm1(-dt))
    la = -A * torch.nn.functional.softplus(torch.randn(B, T, H, generator=g) + dt_bias)
    if case == "weak gates":
        la = la * 1e-3
    elif case == "resets":
        la = la.masked_fill(torch.rand(la.shape, generator=g) < 0.02, -math.inf)
    lam = torch.nn.functional.softplus(torch.randn(B, T, H, nl, generator=g))
    return dict(q=q, k=k, k_unit=torch.nn.functional.normalize(k, dim=-1), v=v, beta=beta,
                g=la.contiguous(), lam=lam)


def per_level(q, lam):
    """(B, T, H, Λ·D): level ℓ's query λ^ℓ q in columns ℓ·D … (ℓ + 1)·D − 1."""
    return (lam[..., :, None] * q[..., None, :]).reshape(q.shape[:3] + (-1,))


def rel(a, b):
    a = torch.as_tensor(np.asarray(a), dtype=torch.float64)
    b = torch.as_tensor(np.asarray(b), dtype=torch.float64)
    d = (a - b).abs().max() / b.abs().max()
    return float(d) if torch.isfinite(d) else math.nan


def ttt_state(S, nl, D):
    """ttt's (B, H, Λ·D, D) levels as the authors' (B, H, D, D, Λ)."""
    S = torch.as_tensor(np.asarray(S))
    B, H = S.shape[:2]
    return S.reshape(B, H, nl, D, D).permute(0, 1, 3, 4, 2)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fla", help="folder holding FLA's fla/ package")
    ap.add_argument("--hattention", help="the authors' log-linear-attention repository")
    ap.add_argument("--shapes", default="2,256,4,64;1,1024,2,64",
                    help="B,T,H,D;... (D = d_k = d_v)")
    ap.add_argument("--cases", default="random,weak gates,resets")
    ap.add_argument("--tol", type=float, default=1e-5)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if not args.fla and not args.hattention:
        sys.exit("compare_loglinear: give --fla, --hattention or both")
    fla = load_fla(args.fla) if args.fla else None
    hat = load_hattention(args.hattention) if args.hattention else None
    torch.set_num_threads(1)
    bad = 0
    print("| B, T, H, D | Λ | rule | case | path | o vs reference | S vs reference "
          "| o vs float64 |")
    print("|---|---|---|---|---|---|---|---|")
    for si, shape in enumerate(s for s in args.shapes.split(";") if s):
        B, T, H, D = (int(x) for x in shape.split(","))
        nl = math.ceil(math.log2(T)) + 1
        for ci, case in enumerate(c for c in args.cases.split(",") if c):
            x = make_inputs(B, T, H, D, nl, case, args.seed + 100 * si + ci)
            for preset in ("loglinear_mamba2", "loglinear_gdn"):
                delta = preset == "loglinear_gdn"
                k = x["k_unit"] if delta else x["k"]
                beta = x["beta"] if delta else torch.ones(B, T, H)
                qq = per_level(x["q"], x["lam"])
                o64, S64 = ttt.reference(preset, qq.double(), k.double(), x["v"].double(),
                                         beta=beta.double(), log_alpha=x["g"].double(),
                                         levels=nl, scale=1.0)
                refs = []  # (name, o, S in the authors' layout or None)
                if fla is not None and not delta:
                    o = fla.naive_log_linear_attn(x["q"], k, x["v"], x["g"], x["lam"])
                    refs.append(("FLA naive_log_linear_attn", o, None))
                if hat is not None:
                    st = hat.HStruct.GDELTA if delta else hat.HStruct.MAMBA2
                    o, S = hat.hattention_recurrent(x["q"], k, x["v"], torch.exp(x["g"]),
                                                    beta if delta else None, x["lam"], base=2,
                                                    htype=hat.HType.WEAK, hstruct=st)
                    refs.append(("authors' hattention_recurrent", o, S.states))
                paths = []
                for form in ("recurrent", "chunkwise", "auto"):
                    L = ttt.Layer(preset, levels=nl, scale=1.0, form=form)
                    o, S = L.forward(qq.numpy(), k.numpy(), x["v"].numpy(), beta=beta.numpy(),
                                     log_alpha=x["g"].numpy())
                    paths.append(("ttt.Layer %s" % form, o, S[0]))
                paths.append(("ttt.reference (float64)", o64, S64))
                for rname, ro, rS in refs:
                    fla_nan = rname.startswith("FLA") and case == "resets"
                    for pname, o, S in paths:
                        eo = rel(o, ro)
                        es = rel(ttt_state(S, nl, D), rS) if rS is not None else None
                        e64 = rel(o, o64)
                        ok = (fla_nan or (eo <= args.tol and (es is None or es <= args.tol))) \
                            and e64 <= args.tol
                        bad += not ok
                        print("| %d, %d, %d, %d | %d | %s | %s | %s vs %s | %s | %s | %.1e |%s"
                              % (B, T, H, D, nl, preset, case, pname, rname,
                                 "NaN (reference)" if fla_nan and math.isnan(eo) else "%.1e" % eo,
                                 "—" if es is None else "%.1e" % es, e64,
                                 "" if ok else " OUT OF BOUNDS"))
                    if not fla_nan:
                        # control: levels 1 and 2 of every query exchanged
                        qs = qq.reshape(B, T, H, nl, D).clone()
                        qs[..., [1, 2], :] = qs[..., [2, 1], :]
                        L = ttt.Layer(preset, levels=nl, scale=1.0)
                        o, _ = L.forward(qs.reshape(B, T, H, nl * D).numpy(), k.numpy(),
                                         x["v"].numpy(), beta=beta.numpy(),
                                         log_alpha=x["g"].numpy())
                        w = rel(o, ro)
                        seen = w > args.tol
                        bad += not seen
                        print("| %d, %d, %d, %d | %d | %s | %s | control (levels 1, 2 "
                              "exchanged) vs %s | %.1e | — | — |%s"
                              % (B, T, H, D, nl, preset, case, rname, w,
                                 "" if seen else " UNSEEN"))
                sys.stdout.flush()
    if bad:
        sys.exit("compare_loglinear: %d rows out of bounds (tol %g)" % (bad, args.tol))


if __name__ == "__main__":
    main()
