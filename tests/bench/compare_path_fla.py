#!/usr/bin/env python3
"""ttt's float64 PaTH attention (ttt.reference.path_attention, docs/math.md "PaTH attention")
against flash-linear-attention's (FLA's) naive PaTH reference on the same inputs, on the CPU.

    python3 tests/bench/compare_path_fla.py --fla /path/to/fla-checkout
        [--shapes "2,100,2,16;1,200,2,64"] [--tol 1e-5]

--fla is the folder that holds FLA's `fla` package; its file fla/ops/path_attn/naive.py is loaded
by path (no Triton or GPU needed; it imports torch and einops: Debian's python3-torch with
/usr/bin/python3, einops on PYTHONPATH). None of FLA's code is part of ttt.

FLA's function takes q, k, v, w (B, T, H, D), beta (B, T, H), the log forget gate g (B, T, H;
zeros: PaTH without its optional forget gate, FLA's layer's default; or logsigmoid of normal
draws, PaTH-FoX, the mixer's model.gate: scalar), the scale and a chunk size (64); it works in float32 (it casts its inputs), builds the
scores chunk by chunk with the UT transform of the Householder factors and pads T to a multiple
of 64. ttt's reference carries the transformed keys token by token in float64 (a decoder's
order). The same float32 inputs go to both: q, k, v normal, w unit rows, beta uniform in the
case's range (FLA's own test draws [1.5, 2]; the mixer's β = 2 sigmoid(·) covers (0, 2)), scale
D^-1/2. Shapes cover T below one chunk, across several chunks with a partial last one, and D up
to 64.

Error: max|ttt − fla| / max|fla| over the outputs. The run fails (exit 1) when an error exceeds
--tol, or when a control stays within 10·tol of FLA's: the reference evaluated with each
token's Householder factor moved to the next token (w_t, beta_t used as w_{t+1}, beta_{t+1}: the
index convention off by one), and with the product's order reversed (H_{j+1} … H_i instead of
H_i … H_{j+1}; T <= 64) must both be seen; with the forget gate, the second control adds the
gate's bias after the scale instead of before it (FoX's convention; FLA scales it).
"""
import argparse
import importlib.util
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def load_fla(fla_root):
    path = os.path.join(fla_root, "fla", "ops", "path_attn", "naive.py")
    if not os.path.isfile(path):
        sys.exit("compare_path_fla: %s not found (--fla is the folder holding FLA's fla/)" % path)
    try:
        return load(path, "fla_path_naive")
    except ImportError as e:
        sys.exit("compare_path_fla: %s needs %s (put it on PYTHONPATH)" % (path, e.name or e))


def reversed_order(ref, q, k, v, w, beta, scale):
    """The control with the product reversed: q_i H_{j+1} ... H_i k_j^T, in float64."""
    B, T, H, D = q.shape
    o = np.zeros_like(v, dtype=np.float64)
    for b in range(B):
        for h in range(H):
            s = np.full((T, T), -np.inf)
            for i in range(T):
                P = np.eye(D)
                for j in range(i, -1, -1):
                    s[i, j] = scale * q[b, i, h] @ P @ k[b, j, h]
                    wj = w[b, j, h].astype(np.float64)
                    P = (np.eye(D) - beta[b, j, h] * np.outer(wj, wj)) @ P
            p = np.exp(s - s.max(1, keepdims=True))
            p /= p.sum(1, keepdims=True)
            o[b, :, h] = p @ v[b, :, h]
    return o


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fla", required=True, help="folder holding FLA's fla/ package")
    ap.add_argument("--shapes", default="2,50,2,16;1,200,2,32;1,300,1,64",
                    help="B,T,H,D;... (default: %(default)s)")
    ap.add_argument("--tol", type=float, default=1e-5)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    import torch  # after argparse, so --help works without torch
    torch.set_num_threads(1)
    fla = load_fla(a.fla)
    ref = load(os.path.join(HERE, "..", "..", "python", "ttt", "reference.py"), "ttt_reference")
    cases = [("beta in (0, 2)", 0.0, 2.0, False),
             ("beta in [1.5, 2] (FLA's test)", 1.5, 2.0, False),
             ("beta in (0, 0.1)", 0.0, 0.1, False),
             ("beta in (0, 2), forget gate", 0.0, 2.0, True)]
    fail = 0
    print("| B, T, H, D | case | ttt float64 vs FLA naive | control: index + 1 | "
          "control: reversed (gated: the gate unscaled) |")
    print("|---|---|---|---|---|")
    for si, shape in enumerate(a.shapes.split(";")):
        B, T, H, D = (int(x) for x in shape.split(","))
        for ci, (name, lo, hi, gated) in enumerate(cases):
            g = np.random.default_rng(a.seed + 100 * si + ci)
            f = np.float32
            q = g.standard_normal((B, T, H, D)).astype(f)
            k = g.standard_normal((B, T, H, D)).astype(f)
            v = g.standard_normal((B, T, H, D)).astype(f)
            w = g.standard_normal((B, T, H, D))
            w = (w / np.linalg.norm(w, axis=-1, keepdims=True)).astype(f)
            beta = g.uniform(lo, hi, (B, T, H)).astype(f)
            scale = D ** -0.5
            lf = None
            if gated:  # log f = logsigmoid(z), z ~ N(2, 1): f mostly near 0.9
                z = g.standard_normal((B, T, H)) + 2.0
                lf = (-np.logaddexp(0.0, -z)).astype(f)
            tq = [torch.from_numpy(x) for x in (q, k, v, w, beta)]
            gt = torch.zeros(B, T, H) if lf is None else torch.from_numpy(lf)
            o_fla = fla.naive_path_attn(*tq, gt, scale).double().numpy()
            o_ref = ref.path_attention(q, k, v, w, beta, scale=scale, log_f=lf)
            err = float(np.abs(o_ref - o_fla).max() / np.abs(o_fla).max())
            # controls: the factors one token late; the product reversed
            w1 = np.concatenate([np.zeros_like(w[:, :1]), w[:, :-1]], 1)
            b1 = np.concatenate([np.zeros_like(beta[:, :1]), beta[:, :-1]], 1)
            o_c1 = ref.path_attention(q, k, v, w1, b1, scale=scale, log_f=lf)
            c1 = float(np.abs(o_c1 - o_fla).max() / np.abs(o_fla).max())
            c2 = float("nan")
            if lf is not None:  # the gate's bias outside the scale (the fox mixer's convention)
                o_c2 = ref.path_attention(q, k, v, w, beta, scale=scale, log_f=lf / scale)
                c2 = float(np.abs(o_c2 - o_fla).max() / np.abs(o_fla).max())
            elif T <= 64:  # the explicit products cost O(T^2 D^3)
                o_c2 = reversed_order(ref, q, k, v, w, beta, scale)
                c2 = float(np.abs(o_c2 - o_fla).max() / np.abs(o_fla).max())
            ok = err <= a.tol and c1 > 10 * a.tol and (np.isnan(c2) or c2 > 10 * a.tol)
            fail |= not ok
            print("| %d, %d, %d, %d | %s | %.2e%s | %.2e | %s |"
                  % (B, T, H, D, name, err, "" if ok else " FAIL", c1,
                     "%.2e" % c2 if not np.isnan(c2) else "–"))
    print("tolerance %.0e relative: %s" % (a.tol, "FAILED" if fail else "passed"))
    return 1 if fail else 0


if __name__ == "__main__":
    sys.exit(main())
