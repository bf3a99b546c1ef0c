#!/usr/bin/env python3
"""ttt's MesaNet against flash-linear-attention's (FLA's) naive reference implementation of the
rule on the same inputs, on the CPU (docs/math.md §3.11 "MesaNet", where the measured numbers
are).

    python3 tests/bench/compare_mesa_fla.py --fla /path/to/fla-checkout
        [--shapes "2,256,4,64;1,512,2,128"] [--cg 30] [--tol 1e-5]

--fla is the folder that holds FLA's `fla` package; its file fla/ops/mesa_net/naive.py is loaded
by path (no Triton or GPU needed; it imports torch and einops). None of FLA's code is part of ttt.

For each shape (B, T, H, D = d_k = d_v) and input case the same float32 inputs go to
  * FLA's naive_mesa_net_exact (the statistics token by token, then torch.linalg.solve per token,
    float32) and naive_mesa_net_CG (chunks of 64, --cg conjugate-gradient steps from 0, float32;
    only when T is a multiple of 64),
  * ttt.Layer("mesanet") with form recurrent (the exact solve), cg (--cg steps), chunkwise (the
    same steps a chunk of 16 tokens at a time) and generic (the optimizer's own exact step),
    float32,
  * FLA's naive_mesa_net_decoding_one_step token after token (the step of its decoding path: CG
    from the Jacobi guess q/(diag H + λ), float32) against ttt's cg form with cg_start: jacobi,
  * ttt.reference("mesanet") exact and with --cg steps from 0 and from the Jacobi guess (float64),
with FLA's conventions: q and k L2-normalized (its layer normalizes them in the kernel), v
random, β = sigmoid (B, T, H), the forget gate g = logsigmoid (B, T, H), λ = 1 on every channel
(FLA's initial λ; ttt's λ is one number per layer), q unscaled, a random initial state
(H_0 = B Bᵀ/D positive semidefinite, G_0 random). Errors are max|a − b| / max|b| over the
output o and over the final H and G. FLA's CG divides by (pᵀAp + 1e-5) and by (δ + 1e-5), which
its exact form and ttt's CG do not: the table shows how far that moves it.

The run fails (exit 1) when ttt's exact forms differ from FLA's exact form or from the float64
layer by more than --tol, when ttt's cg or chunkwise form differs from the float64 CG by more
than --tol, or
when a perturbed ttt run (one token's β moved by 0.1) stays within --tol of FLA's: the
comparison must be able to see a wrong input gate.
"""
import argparse
import importlib.util
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

import ttt  # noqa: E402


def load_naive(fla_root):
    path = os.path.join(fla_root, "fla", "ops", "mesa_net", "naive.py")
    if not os.path.isfile(path):
        sys.exit("compare_mesa_fla: %s not found (--fla is the folder holding FLA's fla/)" % path)
    spec = importlib.util.spec_from_file_location("fla_mesa_naive", path)
    mod = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(mod)
    except ImportError as e:  # FLA's naive MesaNet imports einops
        sys.exit("compare_mesa_fla: %s needs %s" % (path, e.name or e))
    return mod


CASES = ("random gates", "weak gates", "strong input")


def make_inputs(B, T, H, D, case, seed):
    g = torch.Generator().manual_seed(seed)
    q = torch.nn.functional.normalize(torch.randn(B, T, H, D, generator=g), dim=-1)
    k = torch.nn.functional.normalize(torch.randn(B, T, H, D, generator=g), dim=-1)
    v = torch.randn(B, T, H, D, generator=g)
    beta = torch.sigmoid(torch.randn(B, T, H, generator=g))
    gate = torch.nn.functional.logsigmoid(torch.randn(B, T, H, generator=g))
    if case == "weak gates":      # windows of ~1000 tokens: H large, the solve ill-conditioned
        gate = gate * 1e-3
    elif case == "strong input":  # β up to 4: larger writes than the sigmoid gives
        beta = 4 * beta
    Bm = torch.randn(B, H, D, D, generator=g) / D
    H0 = Bm @ Bm.transpose(-1, -2)
    G0 = torch.randn(B, H, D, D, generator=g) / D ** 0.5
    return q, k, v, beta, gate, H0, G0


def rel(a, b):
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))


def ttt_run(form, q, k, v, beta, gate, H0, G0, cg, start="zero"):
    lay = ttt.Layer("mesanet", form=form, scale=1.0, cg_steps=cg, cg_start=start,
                    **{"lambda": 1.0})
    W0 = torch.linalg.solve(H0.double() + torch.eye(H0.shape[-1], dtype=torch.float64),
                            G0.double()).float()
    o, st = lay.forward(q.numpy(), k.numpy(), v.numpy(), beta=beta.numpy(),
                        log_alpha=gate.numpy(), initial_state=[W0.numpy(), H0.numpy(),
                                                               G0.numpy()])
    return o, st[1], st[2]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fla", required=True)
    ap.add_argument("--shapes", default="2,256,4,64;1,512,2,128")
    ap.add_argument("--cg", type=int, default=30)
    ap.add_argument("--tol", type=float, default=1e-5)
    a = ap.parse_args()
    naive = load_naive(a.fla)
    torch.set_num_threads(1)
    fails = 0
    print("| B, T, H, D | case | max κ(H+λI) | ttt recurrent vs FLA exact (o / H / G) "
          "| ttt generic vs FLA exact (o) | float64 vs FLA exact (o) "
          "| ttt recurrent vs float64 (o) | ttt cg vs float64 cg (o) "
          "| ttt chunkwise vs float64 cg (o) | FLA CG vs float64 cg (o) | ttt cg vs FLA CG (o) "
          "| ttt cg from Jacobi vs float64 (o) | FLA decoding vs float64 (o) "
          "| perturbed β vs FLA exact (o) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for si, s in enumerate(a.shapes.split(";")):
        B, T, H, D = (int(x) for x in s.split(","))
        for ci, case in enumerate(CASES):
            q, k, v, beta, gate, H0, G0 = make_inputs(B, T, H, D, case, 100 * si + ci)
            lamb = torch.ones(H, D)
            fo, fH, fG = naive.naive_mesa_net_exact(q, k, v, gate, lamb, beta,
                                                    h_kk_init=H0.clone(), h_kv_init=G0.clone())
            fo, fH, fG = fo.numpy(), fH.numpy(), fG.numpy()
            cgo = None
            if T % 64 == 0:
                cgo, _, _ = naive.naive_mesa_net_CG(q, k, v, gate, lamb, beta, 64,
                                                    max_CG_iteration=a.cg,
                                                    h_kk_init=H0.clone(), h_kv_init=G0.clone())
                cgo = cgo.numpy()
            ro, rH, rG = ttt_run("recurrent", q, k, v, beta, gate, H0, G0, a.cg)
            go, _, _ = ttt_run("generic", q, k, v, beta, gate, H0, G0, a.cg)
            co, _, _ = ttt_run("cg", q, k, v, beta, gate, H0, G0, a.cg)
            ko, _, _ = ttt_run("chunkwise", q, k, v, beta, gate, H0, G0, a.cg)
            jo, _, _ = ttt_run("cg", q, k, v, beta, gate, H0, G0, a.cg, "jacobi")
            # FLA's decoding step, token after token, from the same initial state
            hk, hv, dec = H0.clone(), G0.clone(), []
            for t in range(T):
                ot, hk, hv = naive.naive_mesa_net_decoding_one_step(
                    q[:, t], k[:, t], v[:, t], gate[:, t], lamb, beta[:, t], hk, hv,
                    max_CG_iteration=a.cg)
                dec.append(ot)
            do = torch.stack(dec, 1).numpy()
            init = [np.zeros((B, H, D, D)), H0.double().numpy(), G0.double().numpy()]
            kw = dict(beta=beta.double().numpy(), log_alpha=gate.double().numpy(),
                      initial_state=init, scale=1.0, lam=1.0)
            xo, _ = ttt.reference("mesanet", q.double().numpy(), k.double().numpy(),
                                  v.double().numpy(), cg_steps=0, **kw)
            xc, _ = ttt.reference("mesanet", q.double().numpy(), k.double().numpy(),
                                  v.double().numpy(), cg_steps=a.cg, **kw)
            xj, _ = ttt.reference("mesanet", q.double().numpy(), k.double().numpy(),
                                  v.double().numpy(), cg_steps=a.cg, cg_start="jacobi", **kw)
            # κ of H_t + λI over the tokens, in float64
            Hs = H0.double().clone()
            kap = 0.0
            for t in range(T):
                kt = k[:, t].double()
                Hs = gate[:, t].double().exp()[..., None, None] * Hs + \
                    beta[:, t].double()[..., None, None] * kt[..., :, None] * kt[..., None, :]
                A = Hs + torch.eye(D, dtype=torch.float64)
                kap = max(kap, float(torch.linalg.cond(A).max()))
            pb = beta.clone()
            pb[:, T // 2] += 0.1
            po, _, _ = ttt_run("recurrent", q, k, v, pb, gate, H0, G0, a.cg)
            e = dict(rec=(rel(ro, fo), rel(rH, fH), rel(rG, fG)), gen=rel(go, fo),
                     x_f=rel(xo, fo), rec64=rel(ro, xo), cg64=rel(co, xc), ch64=rel(ko, xc),
                     j64=rel(jo, xj), fdec=rel(do, xj),
                     fcg=rel(cgo, xc) if cgo is not None else float("nan"),
                     cgf=rel(co, cgo) if cgo is not None else float("nan"), pert=rel(po, fo))
            bad = (max(e["rec"]) > a.tol or e["gen"] > a.tol or e["rec64"] > a.tol or
                   e["cg64"] > a.tol or e["ch64"] > a.tol or e["j64"] > a.tol or
                   not e["pert"] > a.tol)
            fails += bad
            print("| %d, %d, %d, %d | %s | %.1f | %.1e / %.1e / %.1e | %.1e | %.1e | %.1e | %.1e | "
                  "%.1e | %.1e | %.1e | %.1e | %.1e | %.1e |%s"
                  % (B, T, H, D, case, kap, *e["rec"], e["gen"], e["x_f"], e["rec64"], e["cg64"],
                     e["ch64"], e["fcg"], e["cgf"], e["j64"], e["fdec"], e["pert"],
                     "  FAIL" if bad else ""))
    if fails:
        print("compare_mesa_fla: %d rows beyond --tol %g (or a perturbed run within it)"
              % (fails, a.tol))
        return 1
    print("every row within %g; the perturbed runs beyond it" % a.tol)
    return 0


if __name__ == "__main__":
    sys.exit(main())
