"""The float64 PaTH attention of ttt.reference (docs/math.md "PaTH attention") against the
definition written out with explicit D x D products of its factors, its reductions (beta = 0 is
causal softmax attention; a reflection pair cancels), and torch's gradcheck through it; each
with an input the comparison must reject."""
import numpy as np
import pytest
import torch

from ttt.reference import path_attention


def make(B, T, H, D, seed, lo=0.0, hi=2.0):
    g = np.random.default_rng(seed)
    q, k, v = (g.standard_normal((B, T, H, D)) for _ in range(3))
    w = g.standard_normal((B, T, H, D))
    w /= np.linalg.norm(w, axis=-1, keepdims=True)
    beta = g.uniform(lo, hi, (B, T, H))
    return q, k, v, w, beta


def explicit(q, k, v, w, beta, scale):
    """s_ij = q_i H_i ... H_{j+1} k_j^T with the D x D matrices formed, then the softmax."""
    B, T, H, D = q.shape
    o = np.zeros_like(v)
    for b in range(B):
        for h in range(H):
            s = np.full((T, T), -np.inf)
            for i in range(T):
                P = np.eye(D)  # H_i ... H_{j+1}, grown on the right as j falls
                for j in range(i, -1, -1):
                    s[i, j] = scale * q[b, i, h] @ P @ k[b, j, h]
                    P = P @ (np.eye(D) - beta[b, j, h] * np.outer(w[b, j, h], w[b, j, h]))
            p = np.exp(s - s.max(1, keepdims=True))
            o[b, :, h] = (p / p.sum(1, keepdims=True)) @ v[b, :, h]
    return o


def rel(a, b):
    return float(np.abs(a - b).max() / np.abs(b).max())


@pytest.mark.parametrize("lo,hi", [(0.0, 2.0), (1.9, 2.0)])
def test_reference_equals_the_explicit_products(lo, hi):
    q, k, v, w, beta = make(2, 23, 2, 5, 1, lo, hi)
    want = explicit(q, k, v, w, beta, 0.3)
    assert rel(path_attention(q, k, v, w, beta, scale=0.3), want) < 1e-12
    # one token's factor moved is seen (control)
    beta2 = beta.copy()
    beta2[0, 11, 1] += 0.05
    assert rel(path_attention(q, k, v, w, beta2, scale=0.3), want) > 1e-6


def test_no_factors_is_causal_softmax_attention():
    q, k, v, w, beta = make(1, 17, 2, 4, 2)
    o = path_attention(q, k, v, w, 0 * beta)
    s = np.einsum("bihd,bjhd->bhij", q, k) / 2.0
    s = np.where(np.tril(np.ones((17, 17), bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    assert rel(o, np.einsum("bhij,bjhd->bihd", p, v)) < 1e-12
    assert rel(path_attention(q, k, v, w, beta), np.einsum("bhij,bjhd->bihd", p, v)) > 1e-3


def test_the_forget_gate_is_a_bias_before_the_scale():
    q, k, v, w, beta = make(1, 9, 2, 4, 5)
    lf = -np.log1p(np.exp(-np.random.default_rng(6).normal(1.0, 1.0, (1, 9, 2))))
    G = np.cumsum(lf, 1)
    # with beta = 0 the result is softmax(scale (q k^T + G_i - G_j)) v: FLA scales the gate's
    # bias with the score (the control puts it after the scale, FoX's convention)
    s = (np.einsum("bihd,bjhd->bhij", q, k) + G.transpose(0, 2, 1)[..., :, None]
         - G.transpose(0, 2, 1)[..., None, :]) * 0.5
    s = np.where(np.tril(np.ones((9, 9), bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    want = np.einsum("bhij,bjhd->bihd", p, v)
    assert rel(path_attention(q, k, v, w, 0 * beta, scale=0.5, log_f=lf), want) < 1e-12
    assert rel(path_attention(q, k, v, w, 0 * beta, scale=0.5, log_f=lf / 0.5), want) > 1e-3
    # and the gate reaches the factors' scores too (control: without it)
    assert rel(path_attention(q, k, v, w, beta, scale=0.5, log_f=lf),
               path_attention(q, k, v, w, beta, scale=0.5)) > 1e-3


def test_gradcheck_through_the_reference():
    x = [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in make(1, 6, 1, 3, 3)]
    assert torch.autograd.gradcheck(lambda *a: path_attention(*a, scale=0.5), tuple(x))


def test_bad_shapes_are_named():
    q, k, v, w, beta = make(1, 5, 1, 3, 4)
    with pytest.raises(ValueError, match="beta"):
        path_attention(q, k, v, w, beta[..., None])
