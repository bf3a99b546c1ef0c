#!/usr/bin/env python3
"""ttt's KDA and Gated DeltaProduct layers against flash-linear-attention's (FLA's) naive
reference implementations of those rules on the same inputs, on the CPU (docs/math.md §4.5
"KDA" and §4.7 "Gated DeltaProduct", where the measured numbers are); and ttt's generalized
delta rule (DPLR, RWKV-7's rule) against FLA's naive DPLR recurrence and chunk form
(docs/math.md "RWKV-7"; compare_rwkv7 below).

    python3 tests/bench/compare_fla_naive.py --fla /path/to/fla-checkout
        [--rules kda,deltaproduct,rwkv7] [--shapes "2,256,4,64;1,1024,2,128"] [--tol 1e-5]

--fla is the folder that holds FLA's `fla` package; its file fla/ops/kda/naive.py is loaded by
path (no Triton or GPU needed; it imports torch and einops). None of FLA's code is part of ttt.

For each shape (B, T, H, D = d_k = d_v) and input case, the same float32 inputs go to
  * FLA's naive_recurrent_kda (token by token, float32) and naive_chunk_kda (chunks of 64,
    float32; only when T is a multiple of 64),
  * ttt.Layer("kda") with form recurrent, chunkwise, generic and auto (float32),
  * ttt.reference("kda") (the float64 recurrence),
with FLA's conventions: q, k, v (B, T, H, D), k L2-normalized, β = sigmoid (B, T, H), the gate
g = log α per key dimension (B, T, H, D) as FLA's KDA layer makes it (−exp(A_log)·softplus(x +
dt_bias)), q scaled by D^−1/2, a random initial state. Errors are max|a − b| / max|b| over the
output o and over the final state S. The run fails (exit 1) when any float32 path differs from
FLA's naive recurrence or from the float64 recurrence by more than --tol (FLA's chunk form on
the reset case excepted: it returns NaN there, and the table says so), or when a perturbed
ttt run (one gate of one token moved by 0.1) stays within --tol of FLA's: the comparison must
be able to see a wrong gate.

Gated DeltaProduct (--rules deltaproduct): FLA's fla/ops/gated_delta_product/naive.py,
naive_recurrent_gated_delta_product (token by token, float32; its chunk_ref.py calls FLA's
Triton kernels and does not run on the CPU), against ttt.Layer("deltaproduct") with form
recurrent, chunkwise, generic and auto (float32) and ttt.reference("deltaproduct") (float64), for
n_h = 2 and 3 pairs per token (--householder). FLA's conventions: q (B, T, H, D), k and v
(B, n_h·T, H, D) with pair j of token t at row n_h·t + j, k L2-normalized, β = 2·sigmoid
(B, n_h·T, H) (its layer's allow_neg_eigval default: β up to 2), the gate g = log α per token
(B, T, H) as FLA's layer makes it (−exp(A_log)·softplus(x + dt_bias)), a random initial state.
FLA's naive function takes a `scale` argument that it does not apply, so q goes in already
multiplied by D^−1/2 and ttt runs with scale D^−1/2 on the unscaled q. Cases: random gates,
weak gates (× 1e-3) and hard resets (log α = −inf on 2 % of the tokens; FLA's naive recurrence
defines them: exp(−inf) = 0). Same errors, bound and control (one token's gate moved by 0.1 must
be seen) as for KDA.
"""
import argparse
import importlib.util
import math
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

import ttt  # noqa: E402


def load_naive(fla_root, rule="kda"):
    sub = {"kda": ("kda",), "deltaproduct": ("gated_delta_product",)}[rule]
    path = os.path.join(fla_root, "fla", "ops", *sub, "naive.py")
    if not os.path.isfile(path):
        sys.exit("compare_fla_naive: %s not found (--fla is the folder holding FLA's fla/)" % path)
    spec = importlib.util.spec_from_file_location("fla_%s_naive" % rule, path)
    mod = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(mod)
    except ImportError as e:  # FLA's naive KDA imports einops
        sys.exit("compare_fla_naive: %s needs %s (install it, or leave the rule out with "
                 "--rules)" % (path, e.name or e))
    return mod


def make_inputs(B, T, H, D, case, seed):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, T, H, D, generator=g)
    k = torch.nn.functional.normalize(torch.randn(B, T, H, D, generator=g), dim=-1)
    v = torch.randn(B, T, H, D, generator=g)
    beta = torch.sigmoid(torch.randn(B, T, H, generator=g))
    # FLA's KDA gate: -exp(A_log) softplus(f + dt_bias), A ~ U[1, 16], dt log-uniform [1e-3, 0.1]
    A = torch.empty(H).uniform_(1, 16, generator=g)
    dt = torch.exp(torch.rand(H * D, generator=g) * (math.log(0.1) - math.log(1e-3))
                   + math.log(1e-3))
    dt_bias = (dt + torch.log(-torch.expm1(-dt))).view(H, D)
    f = torch.randn(B, T, H, D, generator=g)
    la = -A[:, None] * torch.nn.functional.softplus(f + dt_bias)
    if case == "weak gates":
        la = la * 1e-3
    elif case == "resets":  # log alpha = -inf on 2 % of the (token, key) pairs: hard resets
        la = la.masked_fill(torch.rand(la.shape, generator=g) < 0.02, -math.inf)
    S0 = 0.1 * torch.randn(B, H, D, D, generator=g)
    return dict(q=q, k=k, v=v, beta=beta, g=la.contiguous(), S0=S0)


def rel(a, b):
    a = torch.as_tensor(np.asarray(a), dtype=torch.float64)
    b = torch.as_tensor(np.asarray(b), dtype=torch.float64)
    return float((a - b).abs().max() / b.abs().max())


def run_ttt(x, form, la=None):
    D = x["q"].shape[-1]
    L = ttt.Layer("kda", scale=D ** -0.5, form=form)
    o, S = L.forward(x["q"].numpy(), x["k"].numpy(), x["v"].numpy(), beta=x["beta"].numpy(),
                     log_alpha=(x["g"] if la is None else la).numpy(),
                     initial_state=[x["S0"].numpy()])
    return o, S[0]


def make_dp_inputs(B, T, H, D, nh, case, seed):
    """Gated DeltaProduct's inputs in FLA's conventions (the header)."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, T, H, D, generator=g)
    k = torch.nn.functional.normalize(torch.randn(B, nh * T, H, D, generator=g), dim=-1)
    v = torch.randn(B, nh * T, H, D, generator=g)
    beta = 2 * torch.sigmoid(torch.randn(B, nh * T, H, generator=g))
    A = torch.empty(H).uniform_(1, 16, generator=g)
    dt = torch.exp(torch.rand(H, generator=g) * (math.log(0.1) - math.log(1e-3))
                   + math.log(1e-3))
    dt_bias = dt + torch.log(-torch.expm1(-dt))
    f = torch.randn(B, T, H, generator=g)
    la = -A * torch.nn.functional.softplus(f + dt_bias)
    if case == "weak gates":
        la = la * 1e-3
    elif case == "resets":
        la = la.masked_fill(torch.rand(la.shape, generator=g) < 0.02, -math.inf)
    S0 = 0.1 * torch.randn(B, H, D, D, generator=g)
    return dict(q=q, k=k, v=v, beta=beta, g=la.contiguous(), S0=S0)


def run_ttt_dp(x, form, nh, la=None):
    D = x["q"].shape[-1]
    L = ttt.Layer("deltaproduct", scale=D ** -0.5, form=form)
    if L.steps_per_token(D) != nh:
        sys.exit("compare_fla_naive: the deltaproduct preset takes %d pairs per token; "
                 "--householder %d needs a layer with steps_per_token %d"
                 % (L.steps_per_token(D), nh, nh))
    o, S = L.forward(x["q"].numpy(), x["k"].numpy(), x["v"].numpy(), beta=x["beta"].numpy(),
                     log_alpha=(x["g"] if la is None else la).numpy(),
                     initial_state=[x["S0"].numpy()])
    return o, S[0]


def compare_deltaproduct(args, naive):
    """The Gated DeltaProduct rows of the table; returns the count of rows out of bounds."""
    bad = 0
    for nh in (int(n) for n in args.householder.split(",") if n):
        for shape in [s for s in args.shapes.split(";") if s]:
            B, T, H, D = (int(v) for v in shape.split(","))
            for case in args.cases.split(","):
                x = make_dp_inputs(B, T, H, D, nh, case, args.seed)
                o_fr, S_fr = naive.naive_recurrent_gated_delta_product(
                    x["q"] * D ** -0.5, x["k"], x["v"], x["g"], x["beta"], D ** -0.5, None,
                    initial_state=x["S0"].clone(), output_final_state=True,
                    num_householder=nh)
                o64, S64 = ttt.reference("deltaproduct", x["q"].double(), x["k"].double(),
                                         x["v"].double(), beta=x["beta"].double(),
                                         log_alpha=x["g"].double(),
                                         initial_state=[x["S0"].double()], scale=D ** -0.5,
                                         steps_per_token=nh)
                rows = [("FLA naive_recurrent_gated_delta_product", o_fr, S_fr)]
                for form in ("recurrent", "chunkwise", "generic", "auto"):
                    if nh != 2:  # the preset's n_h; others only through the float64 reference
                        break
                    o, S = run_ttt_dp(x, form, nh)
                    rows.append(("ttt deltaproduct, form %s" % form, o, S))
                rows.append(("ttt.reference (float64)", o64, S64))
                for name, o, S in rows:
                    e = (rel(o, o_fr), rel(S, S_fr), rel(o, o64), rel(S, S64))
                    fail = not all(v <= args.tol for v in e)
                    bad += fail
                    print("| %d, %d, %d, %d, n_h %d | %s | %s | %.2e | %.2e | %.2e | %.2e |%s"
                          % (B, T, H, D, nh, case, name, *e, " FAIL" if fail else ""))
                if nh != 2:
                    continue
                la = x["g"].clone()
                la[0, T // 2, 0] = la[0, T // 2, 0] - 0.1 if math.isfinite(
                    la[0, T // 2, 0]) else 0.0
                o_p, S_p = run_ttt_dp(x, "recurrent", nh, la)
                seen = max(rel(o_p, o_fr), rel(S_p, S_fr)) > args.tol
                bad += not seen
                print("| %d, %d, %d, %d, n_h %d | %s | ttt, one gate moved by 0.1 (must differ) "
                      "| %.2e | %.2e | | |%s" % (B, T, H, D, nh, case, rel(o_p, o_fr),
                                                 rel(S_p, S_fr), "" if seen else " NOT SEEN"))
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fla", required=True, help="folder holding FLA's fla/ package")
    ap.add_argument("--rules", default="kda,deltaproduct,rwkv7",
                    help="which comparisons: kda, deltaproduct, rwkv7 (comma-separated)")
    ap.add_argument("--shapes", default="2,256,4,64;1,1024,2,128",
                    help="B,T,H,D;... (D = d_k = d_v)")
    ap.add_argument("--cases", default="random,weak gates,resets")
    ap.add_argument("--householder", default="2,3",
                    help="n_h of the deltaproduct rows (ttt's layer at the preset's 2; other "
                         "values compare the float64 reference alone)")
    ap.add_argument("--tol", type=float, default=1e-5)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rules = [r for r in args.rules.split(",") if r]
    for r in rules:
        if r not in ("kda", "deltaproduct", "rwkv7"):
            sys.exit("compare_fla_naive: --rules %s: expected kda, deltaproduct or rwkv7" % r)
    torch.set_num_threads(1)
    bad = compare_rwkv7(args) if "rwkv7" in rules else 0
    if "kda" not in rules and "deltaproduct" not in rules:
        if bad:
            sys.exit("compare_fla_naive: %d rows out of bounds (tol %g)" % (bad, args.tol))
        return
    print("| B, T, H, D | case | path | o vs FLA recurrent | S vs FLA recurrent | o vs float64 "
          "| S vs float64 |")
    print("|---|---|---|---|---|---|---|")
    if "deltaproduct" in rules:
        bad += compare_deltaproduct(args, load_naive(args.fla, "deltaproduct"))
    if "kda" in rules:
        bad += compare_kda(args, load_naive(args.fla, "kda"))
    sys.stdout.flush()
    if bad:
        sys.exit("compare_fla_naive: %d rows out of bounds (tol %g)" % (bad, args.tol))


def compare_kda(args, naive):
    """The KDA rows of the table; returns the count of rows out of bounds."""
    bad = 0
    for shape in [s for s in args.shapes.split(";") if s]:
        B, T, H, D = (int(v) for v in shape.split(","))
        for case in args.cases.split(","):
            x = make_inputs(B, T, H, D, case, args.seed)
            o_fr, S_fr = naive.naive_recurrent_kda(x["q"], x["k"], x["v"], x["g"], x["beta"],
                                                   scale=D ** -0.5, initial_state=x["S0"],
                                                   output_final_state=True)
            o64, S64 = ttt.reference("kda", x["q"].double(), x["k"].double(), x["v"].double(),
                                     beta=x["beta"].double(), log_alpha=x["g"].double(),
                                     initial_state=[x["S0"].double()], scale=D ** -0.5)
            rows = [("FLA naive_recurrent_kda", o_fr, S_fr)]
            if T % 64 == 0:
                o_fc, S_fc = naive.naive_chunk_kda(x["q"], x["k"], x["v"], x["g"], x["beta"],
                                                   scale=D ** -0.5, initial_state=x["S0"],
                                                   output_final_state=True)
                rows.append(("FLA naive_chunk_kda", o_fc, S_fc))
            for form in ("recurrent", "chunkwise", "generic", "auto"):
                o, S = run_ttt(x, form)
                rows.append(("ttt kda, form %s" % form, o, S))
            for name, o, S in rows:
                e = (rel(o, o_fr), rel(S, S_fr), rel(o, o64), rel(S, S64))
                note = ""
                if name == "FLA naive_chunk_kda" and case == "resets" and any(map(math.isnan, e)):
                    # its chunk form takes exp(g_i - g_j) of cumulative gates: -inf - -inf is
                    # NaN, so it does not define hard resets; shown, not counted
                    note = " (FLA's chunk form: NaN at log alpha = -inf)"
                else:
                    fail = not all(v <= args.tol for v in e)  # NaN fails
                    bad += fail
                    note = " FAIL" if fail else ""
                print("| %d, %d, %d, %d | %s | %s | %.2e | %.2e | %.2e | %.2e |%s"
                      % (B, T, H, D, case, name, *e, note))
            # a wrong gate must be seen: token T/2, key 0 of head 0, moved by 0.1
            la = x["g"].clone()
            la[0, T // 2, 0, 0] = la[0, T // 2, 0, 0] - 0.1 if math.isfinite(
                la[0, T // 2, 0, 0]) else 0.0
            o_p, S_p = run_ttt(x, "recurrent", la)
            ep = max(rel(o_p, o_fr), rel(S_p, S_fr))
            seen = ep > args.tol
            bad += not seen
            print("| %d, %d, %d, %d | %s | ttt, one gate moved by 0.1 (must differ) | %.2e | "
                  "%.2e | | |%s" % (B, T, H, D, case, rel(o_p, o_fr), rel(S_p, S_fr),
                                    "" if seen else " NOT SEEN"))
    return bad


# ---- RWKV-7's generalized delta rule (DPLR), docs/math.md "RWKV-7" ----
#
# FLA's naive DPLR (fla/ops/generalized_delta_rule/dplr/naive.py, loaded by path like KDA's)
# takes q, k, v, alpha, beta, gk in (B, H, T, D) and scales q by D^-1/2 itself; its recurrence
# S = S * exp(gk) + k^T v + beta (alpha^T S) is ttt's S_t = Diag(w_t) S_{t-1} + b_t^T (a_t
# S_{t-1}) + k_t^T v_t with a = alpha, b = beta, log w = gk. The inputs are RWKV-7's: a = -kappa
# (unit rows), b = kappa * alpha with alpha = sigmoid(.), log w = -e^-1/2 sigmoid(.) as FLA's
# RWKV-7 layer makes them; cases "rwkv7" (those), "weak decays" (log w times 1e-3) and "resets"
# (2 % of log w at -inf). ttt.dplr gets q already scaled. Paths: FLA's dplr_recurrence (float32),
# FLA's dplr_chunkwise (chunks of 32, float32; T a multiple of 32; NaN at -inf gates: shown, not
# counted), ttt.dplr (float32, the C recurrent kernel and its chunkwise form at C = 32), against
# FLA's recurrence and the float64
# ttt.reference("rwkv7"). A b moved by 0.1 on one token must be seen. Gradients: see
# compare_rwkv7_grads.

def load_dplr_naive(fla_root):
    path = os.path.join(fla_root, "fla", "ops", "generalized_delta_rule", "dplr", "naive.py")
    if not os.path.isfile(path):
        sys.exit("compare_fla_naive: %s not found (--fla is the folder holding FLA's fla/)" % path)
    spec = importlib.util.spec_from_file_location("fla_dplr_naive", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def dplr_inputs(B, T, H, D, case, seed):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, H, T, D, generator=g) for _ in range(3))
    kap = torch.nn.functional.normalize(torch.randn(B, H, T, D, generator=g), dim=-1)
    alpha = torch.sigmoid(torch.randn(B, H, T, D, generator=g))
    gk = -math.exp(-0.5) * torch.sigmoid(torch.randn(B, H, T, D, generator=g) - 2.0)
    if case == "weak decays":
        gk = gk * 1e-3
    elif case == "resets":
        gk = gk.masked_fill(torch.rand(gk.shape, generator=g) < 0.02, -math.inf)
    S0 = 0.1 * torch.randn(B, H, D, D, generator=g)
    return dict(q=q, k=k, v=v, a=-kap, b=kap * alpha, gk=gk.contiguous(), S0=S0)


def _bthd(x):
    """(B, H, T, D) torch -> (B, T, H, D) numpy float32, contiguous."""
    return np.ascontiguousarray(x.transpose(1, 2).numpy(), dtype=np.float32)


def run_ttt_dplr(x, b=None, chunk=0):
    D = x["q"].shape[-1]
    o, S = ttt.dplr(_bthd(x["q"] * D ** -0.5), _bthd(x["k"]), _bthd(x["v"]), _bthd(x["a"]),
                    _bthd(x["b"] if b is None else b), _bthd(x["gk"]),
                    initial_state=x["S0"].numpy(), chunk=chunk)
    return np.ascontiguousarray(o.transpose(0, 2, 1, 3)), S  # o back to (B, H, T, D)


DPLR_NAMES = ("q", "k", "v", "a", "b", "gk", "S0")
DPLR_TTT = {"q": "q", "k": "k", "v": "v", "a": "a", "b": "b", "gk": "log_w", "S0": "initial_state"}


def compare_rwkv7_grads(naive, x, B, T, H, D, case, args):
    """The gradients of sum(c_o * o) + sum(c_s * S) for all seven inputs: torch's autograd through
    FLA's dplr_recurrence (float32) and through ttt.reference("rwkv7") (float64) against
    ttt.dplr_backward (float32; the recurrence's backward and the chunkwise form's at C = 32), the
    largest error over the seven inputs, each max|a - b| / max|b|. A gradient taken at a b moved
    by 0.1 on one token must differ from FLA's by more than --tol."""
    g = torch.Generator().manual_seed(args.seed + 7)
    c_o = torch.randn(B, H, T, D, generator=g)
    c_s = torch.randn(B, H, D, D, generator=g)
    leaves = {n: x[n].clone().float().requires_grad_() for n in DPLR_NAMES}
    o_f, S_f = naive.dplr_recurrence(leaves["q"], leaves["k"], leaves["v"], leaves["a"],
                                     leaves["b"], leaves["gk"], initial_state=leaves["S0"])
    g_fla = torch.autograd.grad((c_o * o_f).sum() + (c_s * S_f).sum(),
                                [leaves[n] for n in DPLR_NAMES])
    g_fla = dict(zip(DPLR_NAMES, (t.detach().numpy() for t in g_fla)))
    # float64: the reference on (B, T, H, D) leaves, q scaled as FLA's naive scales it
    l64 = {n: (x[n].double() if n == "S0" else x[n].double().transpose(1, 2).contiguous())
           .requires_grad_() for n in DPLR_NAMES}
    o64, S64 = ttt.reference("rwkv7", l64["q"] * D ** -0.5, l64["k"], l64["v"], a=l64["a"],
                             b=l64["b"], log_alpha=l64["gk"], initial_state=l64["S0"],
                             scale=1.0)
    g64 = torch.autograd.grad((c_o.double().transpose(1, 2) * o64).sum()
                              + (c_s.double() * S64).sum(), [l64[n] for n in DPLR_NAMES])
    g64 = {n: (t.detach().numpy() if n == "S0" else t.detach().transpose(1, 2).numpy())
           for n, t in zip(DPLR_NAMES, g64)}

    def ttt_grads(chunk, b=None):
        gr = ttt.dplr_backward(_bthd(c_o), _bthd(x["q"] * D ** -0.5), _bthd(x["k"]),
                               _bthd(x["v"]), _bthd(x["a"]), _bthd(x["b"] if b is None else b),
                               _bthd(x["gk"]), initial_state=x["S0"].numpy(),
                               d_state=c_s.numpy(), chunk=chunk)
        out = {}
        for n in DPLR_NAMES:
            t = gr[DPLR_TTT[n]]
            out[n] = t if n == "S0" else t.transpose(0, 2, 1, 3)
        out["q"] = out["q"] * D ** -0.5  # ttt's q is FLA's q times D^-1/2
        return out

    def worst(got, want):
        errs = []
        for n in DPLR_NAMES:
            w = np.asarray(want[n], np.float64)
            fin = np.isfinite(w)
            errs.append((float(np.abs(np.asarray(got[n], np.float64)[fin] - w[fin]).max()
                               / np.abs(w[fin]).max()), n))
        return max(errs)

    bad = 0
    rows = [("FLA dplr_recurrence autograd (float32)", g_fla)]
    for chunk in (0, 32):
        rows.append(("ttt.dplr_backward (%s)" % ("recurrence" if not chunk else
                                                 "chunkwise, C = 32"), ttt_grads(chunk)))
    for name, gr in rows:
        (ef, nf), (e64, n64) = worst(gr, g_fla), worst(gr, g64)
        fail = not (ef <= args.tol and e64 <= args.tol)
        bad += fail
        print("| %d, %d, %d, %d | %s | gradients: %s | %.2e (d%s) | | %.2e (d%s) | |%s"
              % (B, T, H, D, case, name, ef, nf, e64, n64, " FAIL" if fail else ""))
    b = x["b"].clone()
    b[0, 0, T // 2] = b[0, 0, T // 2] - 0.1 * x["a"][0, 0, T // 2]
    ec, nc = worst(ttt_grads(32, b), g_fla)
    seen = ec > args.tol
    bad += not seen
    print("| %d, %d, %d, %d | %s | gradients: ttt chunkwise, one token's alpha moved by 0.1 "
          "(must differ) | %.2e (d%s) | | | |%s" % (B, T, H, D, case, ec, nc,
                                                   "" if seen else " NOT SEEN"))
    return bad


def compare_rwkv7(args):
    naive = load_dplr_naive(args.fla)
    bad = 0
    print("RWKV-7 / DPLR (q scaled by D^-1/2 as FLA's naive does; max|a - b| / max|b|)\n")
    print("| B, T, H, D | case | path | o vs FLA recurrence | S vs FLA recurrence | o vs float64 "
          "| S vs float64 |")
    print("|---|---|---|---|---|---|---|")
    for shape in [s for s in args.shapes.split(";") if s]:
        B, T, H, D = (int(v) for v in shape.split(","))
        for case in args.cases.replace("weak gates", "weak decays").split(","):
            x = dplr_inputs(B, T, H, D, case, args.seed)
            o_fr, S_fr = naive.dplr_recurrence(x["q"], x["k"], x["v"], x["a"], x["b"], x["gk"],
                                               initial_state=x["S0"].clone())
            o64, S64 = ttt.reference("rwkv7", *(_bthd(x[n] * (D ** -0.5 if n == "q" else 1))
                                                for n in ("q", "k", "v")),
                                     a=_bthd(x["a"]), b=_bthd(x["b"]), log_alpha=_bthd(x["gk"]),
                                     initial_state=x["S0"].numpy(), scale=1.0)
            o64 = o64.transpose(0, 2, 1, 3)
            rows = [("FLA dplr_recurrence", o_fr, S_fr)]
            if T % 32 == 0:
                o_fc, S_fc = naive.dplr_chunkwise(x["q"], x["k"], x["v"], x["a"], x["b"],
                                                  x["gk"], initial_state=x["S0"].clone(),
                                                  chunk_size=32)
                rows.append(("FLA dplr_chunkwise", o_fc, S_fc))
            o, S = run_ttt_dplr(x)
            rows.append(("ttt.dplr (recurrent kernel)", o, S))
            o, S = run_ttt_dplr(x, chunk=32)
            rows.append(("ttt.dplr (chunkwise, C = 32)", o, S))
            for name, o_, S_ in rows:
                e = (rel(o_, o_fr), rel(S_, S_fr), rel(o_, o64), rel(S_, S64))
                if name == "FLA dplr_chunkwise" and case == "resets" and any(map(math.isnan, e)):
                    note = " (FLA's chunk form: NaN at log w = -inf)"
                else:
                    fail = not all(v <= args.tol for v in e)
                    bad += fail
                    note = " FAIL" if fail else ""
                print("| %d, %d, %d, %d | %s | %s | %.2e | %.2e | %.2e | %.2e |%s"
                      % (B, T, H, D, case, name, *e, note))
            bad += compare_rwkv7_grads(naive, x, B, T, H, D, case, args)
            b = x["b"].clone()
            b[0, 0, T // 2] = b[0, 0, T // 2] - 0.1 * x["a"][0, 0, T // 2]
            o_p, S_p = run_ttt_dplr(x, b)
            seen = max(rel(o_p, o_fr), rel(S_p, S_fr)) > args.tol
            bad += not seen
            print("| %d, %d, %d, %d | %s | ttt, one token's alpha moved by 0.1 (must differ) | "
                  "%.2e | %.2e | | |%s" % (B, T, H, D, case, rel(o_p, o_fr), rel(S_p, S_fr),
                                           "" if seen else " NOT SEEN"))
    print()
    sys.stdout.flush()
    return bad


if __name__ == "__main__":
    main()
