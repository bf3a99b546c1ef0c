#!/usr/bin/python3
"""A full training step of the MQAR model in ttt and in PyTorch autograd, side by side.

For each preset (and chunk size) it runs `ttt run` on a generated experiment with
`task: {kind: benchmark, measure: train_step, dump: true}` (src/tasks/benchmark.c): ttt times its
own training steps (forward, loss, backward, gradient clipping, AdamW; the trainer of
src/train/train.c) and writes the initial parameters, the first batch, its loss and every parameter's
gradient to a .safetensors file. This script then builds the SAME model in PyTorch from that
file (src/train/seqmodel.h; parameter names from src/train/seqmodel.c):

    x = embed[tokens] (+ pos[:T], learned positions)
    per block:  h = norm(x)                                   RMSNorm · g1 (or LayerNorm)
                q, k, v = SiLU(causal depthwise conv_K(h W_q|k|v))      (B, T, H·D)
                q, k = q/sqrt(|q|² + 1e-6), k/...  per head              (qk_norm)
                TTT mixer (model.mixer: ttt):
                  β = θ · sigmoid(h W_η + b_η) (eta: true), θ · dt (eta: dt), else θ
                  log α = −exp(a_log) · dt, dt = softplus(h W_a + dt_bias)  (gate: scalar)
                          logsigmoid(h W_a + b_a) / 16 per key dimension   (gate: vector, GLA)
                          log(1 − 2^(−5−h)) for head h                   (gate: multiscale)
                          log(layer.optimizer.decay) when ≠ 1             (gate: constant/none)
                  o = layer(q, k, v, β, log α) per (sequence, head)       chunkwise, below
                softmax mixer: o = softmax(q kᵀ / sqrt(D), causal) v
                o = RMSNorm_D(o) · g_o  (out_norm);  o = o ⊙ SiLU(h W_g)  (out_gate)
                x = x + o W_o;  x = x + gelu_tanh(norm2(x) W1) W2  (mlp > 0)
    logits = norm(x) · W_head;  loss = mean cross-entropy over the labelled positions

with the layer as a batched chunkwise implementation (all chunks of all sequences and heads at
once where the algorithm allows it):
    linear attention (docs/math.md §5.2): ungated, the state before chunk n is the exclusive
        prefix sum of Kᵀ(β⊙V) over the chunks; O = Q S_n + (Q Kᵀ ⊙ M)(β⊙V), M causal with
        diagonal. Gated (a scalar or a per-key-dimension log α), per chunk G = cumsum(log α),
        A_ij = Σ_c q_ic k_jc e^{G_ic − G_jc} (i ≥ j, the exponent taken pairwise so that strong
        gates cannot overflow), O = (Q⊙e^G) S + A (β⊙V), S ← e^{G_n} ⊙ S + (K⊙e^{G_n − G})ᵀ(β⊙V).
    delta rule, gated or not (§5.3, the WY/UT transform): per chunk, G = cumsum(log α),
        Γ_ij = e^{G_i − G_j} (i ≥ j), A = I + strictly_lower(diag(β) K Kᵀ ⊙ Γ),
        [U | W] = A⁻¹ [β⊙V | β⊙e^G⊙K] (one batched triangular solve for every chunk); then chunk
        by chunk: V' = U − W S, O = (e^G⊙Q) S + (Q Kᵀ ⊙ Γ ⊙ M) V',
        S ← e^{G_n} S + (e^{G_n − G}⊙K)ᵀ V'.
Both are checked at start-up against a token-by-token loop of the recurrence in float64. The
twin is built from the dump's resolved model.* and layer.* values (class Config); a value it
does not implement, or an option it does not know, is refused by name.

Agreement (the script exits 1 if it fails): the loss and every gradient of ttt against PyTorch
in float64 (the same float32 parameters and batch, promoted): per parameter
max|g_ttt − g_64| / max|g_64| ≤ 1e-4, loss |Δ| / loss ≤ 1e-5. The PyTorch float32 gradients are
held to the same bound, so the table shows both sides' float32 rounding against one reference.
Measured: ~1e-6 on both sides (float32 rounding through two blocks).

Timing: the same step in PyTorch — zero_grad, forward, loss, backward, clip_grad_norm_,
torch.optim.AdamW (weight decay on the parameters ttt decays) — with set_threads(n) (compare_torch.py);
ttt with train.threads = train.shards = n (data parallel over the batch), OPENBLAS_NUM_THREADS=1.
Both report the fastest of --repeats steps after a warm-up step, the median step, and the least
process CPU time of a step (over --rounds alternating measurements of the two: min, median of
medians, min) (all threads; with one thread the work itself, which preemption by
other processes on a shared machine does not inflate, while it does inflate wall times).

Run with Debian's interpreter and packages (apt-get install python3-torch python3-numpy):
    /usr/bin/python3 tests/bench/compare_torch_train.py --ttt build/ttt
    /usr/bin/python3 tests/bench/compare_torch_train.py --ttt build/ttt --quick
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_torch import blas_threads_note, cpu_name, read_safetensors, set_threads  # noqa: E402

GRAD_TOL = 1e-4
LOSS_TOL = 1e-5

# read_safetensors and cpu_name come from the forward comparison (compare_torch.py)

# ---------------------------------------------------------------- the layers, (B, H, T, D)


def pad_to_chunks(C, *xs):
    """Zero-pad the T axis (dim 2) to a multiple of C: padded tokens have k = v = 0 and β = 0
    (and log α = 0), so they change neither the state nor the outputs of real tokens."""
    T = xs[0].shape[2]
    p = (-T) % C
    if p == 0:
        return xs
    out = []
    for x in xs:
        if x is None:
            out.append(None)
            continue
        pad = [0, 0] * (x.dim() - 3) + [0, p]
        out.append(F.pad(x, pad))
    return out


def la_chunk(q, k, v, beta, la, C):
    """Linear attention with optional forget gates (update_then_apply):
    S_t = Diag(α_t) S_{t−1} + β_t k_tᵀ v_t, o_t = q_t S_t, with log α None (α = 1), (B, H, T)
    (a scalar per token and head) or (B, H, T, D) (a gate per key dimension, GLA)."""
    B, H, T, D = q.shape
    Dv = v.shape[-1]
    if la is None:
        q, k, v, beta = pad_to_chunks(C, q, k, v, beta)
        N = q.shape[2] // C
        qc, kc = q.reshape(B, H, N, C, D), k.reshape(B, H, N, C, D)
        vc = (v * beta[..., None]).reshape(B, H, N, C, Dv)
        kv = kc.transpose(-1, -2) @ vc                            # (B, H, N, D, Dv)
        S = kv.cumsum(2) - kv                                     # state before each chunk
        mask = torch.ones(C, C, dtype=torch.bool).tril()
        A = (qc @ kc.transpose(-1, -2)).masked_fill(~mask, 0)
        o = qc @ S + A @ vc
        return o.reshape(B, H, N * C, -1)[:, :, :T]
    lg = la if la.dim() == 4 else la[..., None]                   # (B, H, T, 1 or D)
    q, k, v, beta, lg = pad_to_chunks(C, q, k, v, beta, lg)
    N = q.shape[2] // C
    qc, kc = q.reshape(B, H, N, C, D), k.reshape(B, H, N, C, D)
    vc = (v * beta[..., None]).reshape(B, H, N, C, Dv)
    G = lg.reshape(B, H, N, C, lg.shape[-1]).cumsum(3)            # log decay since chunk start
    incl = torch.ones(C, C, dtype=torch.bool).tril()
    # e^{G_i − G_j} for i ≥ j taken pairwise (never e^{−G} alone, which overflows for strong
    # gates): (B, H, N, C, C, 1 or D)
    dec = (G[..., :, None, :] - G[..., None, :, :]).masked_fill(~incl[..., None], -math.inf).exp()
    A = (qc[..., :, None, :] * kc[..., None, :, :] * dec).sum(-1)  # (B, H, N, C, C)
    qg = qc * G.exp()                                              # reads the chunk's start state
    kw = kc * (G[..., -1:, :] - G).exp()                           # writes decayed to its end
    last = G[..., -1, :].exp()                                     # (B, H, N, 1 or D)
    S = q.new_zeros(B, H, D, Dv)
    outs = []
    for n in range(N):
        outs.append(qg[:, :, n] @ S + A[:, :, n] @ vc[:, :, n])
        S = last[:, :, n, :, None] * S + kw[:, :, n].transpose(-1, -2) @ vc[:, :, n]
    return torch.stack(outs, 2).reshape(B, H, N * C, Dv)[:, :, :T]


def delta_chunk(q, k, v, beta, la, C):
    """Delta rule with an optional coupled scalar gate:
    S_t = α_t (I − β_t k_tᵀ k_t) S_{t−1} + β_t k_tᵀ v_t,  o_t = q_t S_t."""
    B, H, T, D = q.shape
    if la is None:
        la = q.new_zeros(B, H, T)
    q, k, v, beta, la = pad_to_chunks(C, q, k, v, beta, la)
    N = q.shape[2] // C
    Dv = v.shape[-1]
    qc, kc, vc = (x.reshape(B, H, N, C, x.shape[-1]) for x in (q, k, v))
    bc = beta.reshape(B, H, N, C, 1)
    G = la.reshape(B, H, N, C).cumsum(-1)                          # log decay since chunk start
    incl = torch.ones(C, C, dtype=torch.bool).tril()
    strict = torch.ones(C, C, dtype=torch.bool).tril(-1)
    Gam = (G[..., :, None] - G[..., None, :]).masked_fill(~incl, -math.inf).exp()
    A = torch.eye(C, dtype=q.dtype) + \
        (bc * (kc @ kc.transpose(-1, -2)) * Gam).masked_fill(~strict, 0)
    eG = G.exp()[..., None]
    UW = torch.linalg.solve_triangular(A, torch.cat([bc * vc, bc * eG * kc], -1), upper=False,
                                       unitriangular=True)
    U, W = UW[..., :Dv], UW[..., Dv:]
    attn = ((qc @ kc.transpose(-1, -2)) * Gam).masked_fill(~incl, 0)
    qg = qc * eG
    last = G[..., -1].exp()                                        # (B, H, N)
    kw = kc * (G[..., -1:] - G).exp()[..., None]
    S = q.new_zeros(B, H, D, Dv)
    outs = []
    for n in range(N):
        Vp = U[:, :, n] - W[:, :, n] @ S
        outs.append(qg[:, :, n] @ S + attn[:, :, n] @ Vp)
        S = last[:, :, n, None, None] * S + kw[:, :, n].transpose(-1, -2) @ Vp
    return torch.stack(outs, 2).reshape(B, H, N * C, Dv)[:, :, :T]


def la_loop(q, k, v, beta, la):
    S = q.new_zeros(*q.shape[:2], q.shape[-1], v.shape[-1])
    out = []
    for t in range(q.shape[2]):
        if la is not None:
            a = la[:, :, t].exp()
            S = S * (a[..., None, None] if a.dim() == 2 else a[..., None])
        S = S + (beta[:, :, t, None] * k[:, :, t])[..., None] * v[:, :, t, None, :]
        out.append((q[:, :, t, None, :] @ S).squeeze(-2))
    return torch.stack(out, 2)


def delta_loop(q, k, v, beta, la):
    S = q.new_zeros(*q.shape[:2], q.shape[-1], v.shape[-1])
    out = []
    for t in range(q.shape[2]):
        if la is not None:
            S = S * la[:, :, t].exp()[..., None, None]
        kt = k[:, :, t, None, :]
        S = S + beta[:, :, t, None, None] * kt.transpose(-1, -2) @ (v[:, :, t, None, :] - kt @ S)
        out.append((q[:, :, t, None, :] @ S).squeeze(-2))
    return torch.stack(out, 2)


TTT_LN_EPS = 1e-6  # the layer norm inside TTT-Linear's fast-weight model (docs/math.md §2)


def ln_plain(h):
    """LN without affine part, biased variance: (x̂, 1/σ)."""
    mu = h.mean(-1, keepdim=True)
    rs = torch.rsqrt((h - mu).pow(2).mean(-1, keepdim=True) + TTT_LN_EPS)
    return (h - mu) * rs, rs


def ttt_linear_dual(q, k, v, beta, W0, b0, bs, inverse):
    """TTT-Linear (docs/math.md §1, §2, §5.4): f(W, b; x) = x + LN(x W + b), loss
    ½‖f(k) − v‖², mini-batch SGD over blocks of bs tokens with every gradient at the block's
    start weights, update_then_apply, token i of a block reading with β/(i + 1) (inverse) or β.
    Dual form per block: dh = LN'(k W + b)ᵀ (f(k) − v), the read-out pre-activation
    z_i = q_i W + b − Σ_{s ≤ i} c_i (q_i·k_s + 1) β_s dh_s (c_i = 1/(i+1) or 1), o_i = q_i + LN(z_i);
    the block's last step becomes the next start. q, k, v (B, H, T, D), beta (B, H, T),
    W0 (H, D, D), b0 (H, D)."""
    B, H, T, D = q.shape
    W = W0[None].expand(B, H, D, D)
    b = b0[None, :, None, :].expand(B, H, 1, D)
    outs = []
    for t0 in range(0, T, bs):
        n = min(bs, T - t0)
        qb, kb, vb = q[:, :, t0:t0 + n], k[:, :, t0:t0 + n], v[:, :, t0:t0 + n]
        xh, rs = ln_plain(kb @ W + b)
        dz = xh + kb - vb                                            # ∂ℓ/∂f
        dh = rs * (dz - dz.mean(-1, keepdim=True) - xh * (dz * xh).mean(-1, keepdim=True))
        g = beta[:, :, t0:t0 + n, None] * dh                         # β_s dh_s
        c = (1.0 / torch.arange(1, n + 1, dtype=q.dtype) if inverse
             else torch.ones(n, dtype=q.dtype))[:, None]             # (n, 1)
        M = torch.ones(n, n, dtype=torch.bool).tril()
        A = (qb @ kb.transpose(-1, -2) + 1).masked_fill(~M, 0)
        z = qb @ W + b - c * (A @ g)
        outs.append(qb + ln_plain(z)[0])
        W = W - c[-1] * kb.transpose(-1, -2) @ g
        b = b - c[-1] * g.sum(-2, keepdim=True)
    return torch.cat(outs, 2)


def ttt_linear_loop(q, k, v, beta, W0, b0, bs, inverse):
    """The same, token by token in the primal form, the inner gradients from autograd."""
    B, H, T, D = q.shape
    out = torch.empty_like(q)
    for bi in range(B):
        for h in range(H):
            W, b = W0[h].clone(), b0[h].clone()
            for t0 in range(0, T, bs):
                n = min(bs, T - t0)
                gW, gb = torch.zeros_like(W), torch.zeros_like(b)
                for i in range(n):
                    t = t0 + i
                    Wr = W.detach().clone().requires_grad_(True)
                    br = b.detach().clone().requires_grad_(True)
                    x = k[bi, h, t]
                    loss = 0.5 * (x + ln_plain(x @ Wr + br)[0] - v[bi, h, t]).pow(2).sum()
                    dW, db = torch.autograd.grad(loss, (Wr, br))
                    gW, gb = gW + beta[bi, h, t] * dW, gb + beta[bi, h, t] * db
                    c = 1.0 / (i + 1) if inverse else 1.0
                    out[bi, h, t] = q[bi, h, t] + ln_plain(q[bi, h, t] @ (W - c * gW)
                                                           + (b - c * gb))[0]
                W, b = W - c * gW, b - c * gb
    return out


def self_check():
    """The chunkwise implementations above against the recurrences, float64, T not a multiple
    of C (padding) and C = 1 and C ≥ T (the two extremes)."""
    g = torch.Generator().manual_seed(0)
    B, H, T, D = 2, 3, 37, 5
    q = torch.randn(B, H, T, D, generator=g, dtype=torch.float64)
    k = F.normalize(torch.randn(B, H, T, D, generator=g, dtype=torch.float64), dim=-1)
    v = torch.randn(B, H, T, D, generator=g, dtype=torch.float64)
    beta = torch.rand(B, H, T, generator=g, dtype=torch.float64)
    la = -0.1 * torch.rand(B, H, T, generator=g, dtype=torch.float64)
    # per key dimension, some strong (α down to e^{−3}: the pairwise exponentials must not
    # overflow)
    lv = -3.0 * torch.rand(B, H, T, D, generator=g, dtype=torch.float64) ** 4
    for C in (1, 8, 64):
        for chunk, loop, gate in ((la_chunk, la_loop, None), (la_chunk, la_loop, la),
                                  (la_chunk, la_loop, lv), (delta_chunk, delta_loop, None),
                                  (delta_chunk, delta_loop, la)):
            err = (chunk(q, k, v, beta, gate, C) - loop(q, k, v, beta, gate)).abs().max().item()
            assert err < 1e-10, f"{chunk.__name__} C={C} gate={gate is not None}: {err}"
    W0 = 0.3 * torch.randn(H, D, D, generator=g, dtype=torch.float64)
    b0 = 0.1 * torch.randn(H, D, generator=g, dtype=torch.float64)
    for bs, inverse in ((1, False), (8, True), (16, False), (64, True)):
        err = (ttt_linear_dual(q, k, v, beta, W0, b0, bs, inverse) -
               ttt_linear_loop(q, k, v, beta, W0, b0, bs, inverse)).abs().max().item()
        assert err < 1e-10, f"ttt_linear_dual bs={bs} inverse={inverse}: {err}"

# ---------------------------------------------------------------- the model


def rmsnorm(x, g, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * g


def conv_causal(x, w):
    """y_t = Σ_{j<K} w_j ⊙ x_{t−j} per channel (zeros before t = 0); x (B, T, C), w (K, C) as
    src/core/ops.c stores it (tap j multiplies x_{t−j})."""
    K, C = w.shape
    y = F.conv1d(F.pad(x.transpose(1, 2), (K - 1, 0)), w.flip(0).t().unsqueeze(1), groups=C)
    return y.transpose(1, 2)


def rope(x, base):
    """RoPE on the last dimension of x (..., T, D), positions 0 … T−1, in the convention of
    src/core/rope.h: interleaved pairs (2i, 2i+1) turned by p·base^(−2i/D), angles in float64."""
    T, D = x.shape[-2], x.shape[-1]
    half = D // 2
    inv = torch.tensor([base ** (-2.0 * i / D) for i in range(half)], dtype=torch.float64)
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
    c, s = torch.cos(ang).to(x.dtype), torch.sin(ang).to(x.dtype)
    a, b = x[..., 0:2 * half:2], x[..., 1:2 * half:2]
    y = x.clone()
    y[..., 0:2 * half:2] = a * c - b * s
    y[..., 1:2 * half:2] = a * s + b * c
    return y


def elu1(x):
    """The positive feature map of normalized linear attention: elu(x) + 1."""
    return torch.where(x > 0, x + 1, torch.exp(torch.clamp(x, max=0)))


# Every model.* / layer.* key of the dump's metadata the twin knows, with the values it
# implements (None: any value). A key it does not know — an option added to ttt after this twin
# was written — is refused whatever its value: the twin must be taught what it means first.
KNOWN = {
    "model.mixer": ("ttt", "softmax"), "model.d_model": None, "model.layers": None,
    "model.heads": None, "model.head_dim": None, "model.mlp": None, "model.norm": ("rms", "layer"),
    "model.norm_eps": None, "model.positions": ("none", "learned", "rope"), "model.max_len": None,
    "model.conv": None, "model.act": ("silu", "none"), "model.qk_norm": ("true", "false"), "model.eta": ("true", "false", "dt"),
    "model.gate": ("none", "constant", "scalar", "vector", "multiscale"),
    "model.out_norm": ("true", "false"), "model.out_gate": ("true", "false"),
    "model.learn_init": ("true", "false"), "model.init_std": None, "model.dt_min": None,
    "model.dt_max": None, "model.rope_base": None,
}
KNOWN_TTT = {
    "layer.preset": None, "layer.form": None, "layer.chunk": None,
    "layer.model": ("linear", "ttt_linear"), "layer.loss": ("dot", "squared", "recon"),
    "layer.mini_batch": None, "layer.order": ("update_then_apply",), "layer.steps": None,
    "layer.position_scale": ("none", "inverse"), "layer.optimizer.name": ("sgd",),
    "layer.optimizer.decay_placement": None, "layer.optimizer.lr": None,
    "layer.optimizer.decay": None, "layer.optimizer.l2": ("0.0", "0"), "layer.scale": None,
    "layer.rope": ("false", "true"), "layer.rope_base": None,
    "layer.normalize": ("none", "ratio"), "layer.feature_map": ("elu1",), "layer.features": None,
    "layer.feature_seed": None, "layer.feature_gate": ("false",),
}


def decays(name, shape):
    """The twin's own rule for AdamW's weight decay (docs/training.md "Training parity with
    PyTorch"): the matrices that multiply activations (embedding, positions, projections, head)
    decay; convolution kernels, norm gains, biases, gate constants and the learned initial fast
    weights do not. Checked against the
    flags in the dump, so that a change of ttt's groups fails the comparison rather than being
    copied."""
    return len(shape) == 2 and ".conv_" not in name and ".w0_" not in name


class Config:
    """The resolved `model.*` / `layer.*` values from the dump's metadata; refuses what the
    PyTorch side does not implement."""

    def __init__(self, meta):
        self.meta = meta
        bad = []
        self.mixer = meta.get("model.mixer", "ttt")
        known = dict(KNOWN, **(KNOWN_TTT if self.mixer == "ttt" else {}))
        for key, val in meta.items():
            if not key.startswith(("model.", "layer.")):
                continue
            if key not in known:
                if self.mixer == "ttt" or key.startswith("model."):
                    bad.append(f"{key} = {val} (an option this twin does not know)")
            elif known[key] is not None and val not in known[key]:
                bad.append(f"{key} = {val} (need {' or '.join(known[key])})")
        self.d = int(meta["model.d_model"])
        self.layers = int(meta["model.layers"])
        self.H = int(meta["model.heads"])
        self.D = int(meta["resolved.head_dim"])
        self.mlp = int(meta["model.mlp"])
        self.layernorm = meta["model.norm"] == "layer"
        self.positions = meta["model.positions"]
        self.conv = int(meta["model.conv"])
        self.act = meta.get("model.act", "silu")
        self.eps = float(meta["model.norm_eps"])
        self.qk_norm = meta["model.qk_norm"] == "true"
        self.eta = meta["model.eta"]
        self.gate = meta["model.gate"]
        self.out_norm = meta["model.out_norm"] == "true"
        self.out_gate = meta["model.out_gate"] == "true"
        self.model_rope_base = float(meta.get("model.rope_base", "10000"))
        self.rope = meta.get("layer.rope", "false") == "true"
        self.rope_base = float(meta.get("layer.rope_base", "10000"))
        self.ratio = meta.get("layer.normalize", "none") == "ratio"
        self.layer = None
        if self.mixer == "ttt":
            self.theta = float(meta["resolved.theta"])
            self.scale = float(meta["layer.scale"])
            self.decay = float(meta["layer.optimizer.decay"])
            self.chunk = int(meta["resolved.chunk"]) or 16
            fam = (meta["layer.model"], meta["layer.loss"])
            gated = self.gate in ("scalar", "vector", "multiscale", "constant") or \
                self.decay != 1.0
            self.learn_init = meta["model.learn_init"] == "true"
            self.mini_batch = int(meta["layer.mini_batch"])
            self.inverse = meta["layer.position_scale"] == "inverse"
            if fam[0] == "linear":
                if self.learn_init:
                    bad.append("model.learn_init = true with the linear model (zeros here)")
                if self.mini_batch != 1 or self.inverse:
                    bad.append("layer.mini_batch ≠ 1 or position_scale inverse with the linear "
                               "model")
            if fam[0] == "ttt_linear":
                self.layer = "ttt_linear"
                if fam[1] not in ("recon", "squared"):
                    bad.append(f"layer.loss = {fam[1]} with ttt_linear (recon or squared here)")
                if gated:
                    bad.append("forget gates with ttt_linear (none here)")
                if not self.learn_init:
                    bad.append("model.learn_init = false with ttt_linear (its initial weights "
                               "come from the layer's own stream, not the dump)")
            elif fam == ("linear", "dot"):
                self.layer = la_chunk
            elif fam == ("linear", "squared"):
                self.layer = delta_chunk
                if self.gate == "vector":
                    bad.append("model.gate = vector with the delta rule (scalar gates only here)")
                if gated and meta["layer.optimizer.decay_placement"] != "coupled":
                    bad.append("a gated delta rule with decay_placement = "
                               f"{meta['layer.optimizer.decay_placement']} (coupled only here)")
            else:
                bad.append(f"layer model/loss = {fam[0]}/{fam[1]}")
        if bad:
            raise SystemExit("compare_torch_train: not implemented on the PyTorch side: " +
                             "; ".join(bad))

    def describe(self):
        if self.mixer == "softmax":
            return "softmax"
        return self.meta.get("layer.preset", "custom")


def norm(cfg, P, name, x):
    """The block norms: RMSNorm or LayerNorm (learned gain, LayerNorm's bias "<name>.b")."""
    if cfg.layernorm:
        return F.layer_norm(x, x.shape[-1:], P[name], P[name + ".b"], cfg.eps)
    return rmsnorm(x, P[name], cfg.eps)


def mixer_ttt(cfg, p, h, q, k, v, T):
    """The TTT mixer's inputs to the layer (src/train/seqmodel.h) and the layer: β, log α."""
    B, H = h.shape[0], cfg.H
    if cfg.scale != 1.0:
        q = q * cfg.scale
    dt = None
    if cfg.gate == "scalar":                     # log α = −exp(a_log) · softplus(h W_a + dt_bias)
        dt = F.softplus(h @ p("mixer.w_a") + p("mixer.dt_bias"))
    if cfg.eta == "true":                        # β = θ · sigmoid(h W_η + b_η)
        beta = cfg.theta * torch.sigmoid(h @ p("mixer.w_eta") + p("mixer.b_eta"))
        beta = beta.transpose(1, 2)                                 # (B, H, T)
    elif cfg.eta == "dt":                        # β = θ · dt (Mamba2's x_t Δ_t write)
        beta = cfg.theta * dt.transpose(1, 2)
    else:
        beta = q.new_full((B, H, T), cfg.theta)
    la = None
    if cfg.gate == "scalar":
        la = (-p("mixer.a_log").exp() * dt).transpose(1, 2)        # (B, H, T)
    elif cfg.gate == "vector":                   # GLA: log α = logsigmoid(h W_a + b_a) / 16
        la = F.logsigmoid(h @ p("mixer.w_a") + p("mixer.b_a")) / 16
        la = la.reshape(B, T, H, cfg.D).transpose(1, 2)             # (B, H, T, D)
    elif cfg.gate == "multiscale":               # RetNet: γ_h = 1 − 2^(−5−h), nothing learned
        g = torch.tensor([math.log1p(-2.0 ** (-5 - i)) for i in range(H)], dtype=q.dtype)
        la = g[None, :, None].expand(B, H, T)
    elif cfg.decay != 1.0:                       # the tuple's constant decay (gate constant/none)
        la = q.new_full((B, H, T), math.log(cfg.decay))
    if cfg.rope:                                 # the layer's RoPE on q and k (rope.h)
        q, k = rope(q, cfg.rope_base), rope(k, cfg.rope_base)
    if cfg.layer == "ttt_linear":                # learned initial fast weights, one set per head
        return ttt_linear_dual(q, k, v, beta, p("mixer.w0_0"), p("mixer.w0_1"), cfg.mini_batch,
                               cfg.inverse)
    if cfg.ratio:                                # normalized: φ = elu+1, o = φ(q) S / (φ(q) z + ε)
        q, k = elu1(q), elu1(k)
        o = cfg.layer(q, k, v, beta, la, cfg.chunk)
        den = cfg.layer(q, k, torch.ones_like(v[..., :1]), beta, la, cfg.chunk)
        return o / (den + 1e-6)
    return cfg.layer(q, k, v, beta, la, cfg.chunk)


def mixer_softmax(cfg, q, k, v, T):
    """Causal softmax attention per head (docs/math.md §4's quadratic baseline)."""
    if cfg.positions == "rope":
        q, k = rope(q, cfg.model_rope_base), rope(k, cfg.model_rope_base)
    s = (q @ k.transpose(-1, -2)) / math.sqrt(cfg.D)
    s = s.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), -math.inf)
    return torch.softmax(s, -1) @ v


def forward_loss(cfg, P, tokens, labels):
    B, T = tokens.shape
    H, D = cfg.H, cfg.D
    x = F.embedding(tokens, P["embed"])
    if cfg.positions == "learned":
        x = x + P["pos"][:T]
    for l in range(cfg.layers):
        p = lambda n: P[f"layer{l}.{n}"]  # noqa: E731
        h = norm(cfg, P, f"layer{l}.norm1", x)
        qkv = []
        for n in "qkv":
            y = h @ p(f"mixer.w{n}")
            if cfg.conv > 0:
                y = conv_causal(y, p(f"mixer.conv_{n}"))
            if cfg.act == "silu":
                y = F.silu(y)
            qkv.append(y.reshape(B, T, H, D).transpose(1, 2))      # (B, H, T, D)
        q, k, v = qkv
        if cfg.qk_norm:
            q = q * torch.rsqrt(q.pow(2).sum(-1, keepdim=True) + 1e-6)
            k = k * torch.rsqrt(k.pow(2).sum(-1, keepdim=True) + 1e-6)
        if cfg.mixer == "ttt":
            o = mixer_ttt(cfg, p, h, q, k, v, T)                    # (B, H, T, D)
        else:
            o = mixer_softmax(cfg, q, k, v, T)
        if cfg.out_norm:
            o = rmsnorm(o, p("mixer.onorm"), cfg.eps)
        o = o.transpose(1, 2).reshape(B, T, H * D)
        if cfg.out_gate:
            o = o * F.silu(h @ p("mixer.w_g"))
        x = x + o @ p("mixer.wo")
        if cfg.mlp > 0:
            u = norm(cfg, P, f"layer{l}.norm2", x)
            x = x + F.gelu(u @ p("mlp.w1"), approximate="tanh") @ p("mlp.w2")
    logits = norm(cfg, P, "norm_f", x) @ P["head"]
    return F.cross_entropy(logits.reshape(B * T, -1), labels.reshape(-1), ignore_index=-1)


def gradients(cfg, params, tokens, labels, dtype):
    P = {n: torch.tensor(a, dtype=dtype, requires_grad=True) for n, a in params.items()}
    loss = forward_loss(cfg, P, tokens, labels)
    loss.backward()
    unused = [n for n, t in P.items() if t.grad is None]
    if unused:
        raise SystemExit(f"compare_torch_train: the twin does not use {', '.join(unused)}")
    return loss.item(), {n: t.grad.double().numpy() for n, t in P.items()}


def rel_err(a, ref):
    den = np.abs(ref).max()
    return float(np.abs(a - ref).max() / (den if den > 0 else 1.0))

# ---------------------------------------------------------------- timing


def time_torch(cfg, params, decay, tokens, labels, meta, threads, repeats):
    set_threads(threads)
    P = {n: torch.tensor(a, requires_grad=True) for n, a in params.items()}
    groups = [{"params": [P[n] for n in P if decay[n]],
               "weight_decay": float(meta["train.weight_decay"])},
              {"params": [P[n] for n in P if not decay[n]], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=float(meta["train.lr"]),
                            betas=(float(meta["train.beta1"]), float(meta["train.beta2"])),
                            eps=float(meta["train.eps"]), foreach=True)
    clip = float(meta["train.clip"])
    plist = list(P.values())

    def step():
        opt.zero_grad(set_to_none=True)
        loss = forward_loss(cfg, P, tokens, labels)
        loss.backward()
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(plist, clip)
        opt.step()

    step()  # warm-up
    secs, cpu = [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        step()
        secs.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return min(secs), float(np.median(secs)), min(cpu)

# ---------------------------------------------------------------- ttt


def layer_section(preset, chunk):
    """The `layer:` of a preset: the chunkwise form with chunk C where the preset has one (the
    linear-attention and delta-rule families); ttt_linear's own form; `softmax` = softmax
    attention."""
    if preset == "softmax":
        return "{mixer: softmax}"
    if preset == "ttt_linear":
        return "{preset: ttt_linear}"
    return f"{{preset: {preset}, form: chunkwise, chunk: {chunk}}}"


def run_ttt(a, wd, preset, chunk):
    y = os.path.join(wd, f"{preset}_{chunk}.yaml")
    out = os.path.join(wd, f"{preset}_{chunk}")
    with open(y, "w") as f:
        f.write(f"""name: compare_torch_train
seed: {a.seed}
task: {{kind: benchmark, measure: train_step, threads: [{a.threads}], repeats: {a.repeats},
        dump: true, seq_len: [{a.seq_len}], vocab: {a.vocab}, pairs: {a.pairs}}}
model: {{d_model: {a.d_model}, layers: {a.layers}, heads: {a.heads}, mlp: 0, conv: 4}}
layer: {layer_section(preset, chunk)}
train: {{batch: {a.batch}, lr: 3e-3, warmup: 50, weight_decay: 0.1, clip: 1.0}}
""")
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    subprocess.run([a.ttt, "run", y, "--out", out, "--quiet"], env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rows = {}
    with open(os.path.join(out, "metrics.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            if r.get("measure") == "train_step":
                rows[int(r["threads"])] = r
    dump, meta = read_safetensors(os.path.join(out, f"train_step_point0_L{a.seq_len}.safetensors"))
    return rows, dump, meta


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ttt", default="build/ttt", help="the ttt program")
    ap.add_argument("--presets", default="linear_attention,deltanet,gated_deltanet",
                    help="presets, and softmax (any of linear_attention, retnet, mamba2, gla, "
                         "deltanet, gated_deltanet, ttt_linear, softmax)")
    ap.add_argument("--chunks", default="16,64", help="chunk sizes C")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--repeats", type=int, default=20, help="timed steps (after one warm-up)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="measure ttt and PyTorch this many times in turn; fastest and least-CPU "
                         "steps over all rounds, median of the rounds' medians")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--d-model", type=int, default=32)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--vocab", type=int, default=64)
    ap.add_argument("--pairs", type=int, default=8)
    ap.add_argument("--quick", action="store_true", help="one chunk size, one thread, 5 steps")
    a = ap.parse_args()
    if a.quick:
        a.chunks, a.threads, a.repeats = "16", "1", 5
    self_check()
    ver = subprocess.run([a.ttt, "--version"], capture_output=True, text=True).stdout.strip()
    print(f"# machine: {cpu_name()}, {os.cpu_count()} cores; torch {torch.__version__}; ttt {ver}")
    print(f"# {blas_threads_note()}")
    print(f"# command: /usr/bin/python3 {' '.join(sys.argv)}")
    print(f"# MQAR model: d_model {a.d_model}, {a.layers} layers, {a.heads} heads, conv 4, no MLP,"
          f" V {a.vocab}, L {a.seq_len}, batch {a.batch} ({a.batch * a.seq_len} tokens/step); "
          f"best (median) of {a.repeats} steps after a warm-up, {a.rounds} round(s)")
    print(f"# grad_err: max over parameters of max|g - g64| / max|g64| (g64: PyTorch float64 "
          f"on the same parameters and batch); tolerance {GRAD_TOL:g}")
    print("# ratio = PyTorch step time / ttt step time (> 1: ttt faster): of the fastest steps "
          "(wall), of the median steps (med), and of the least process CPU time of a step (cpu: "
          "all threads, insensitive to preemption by other processes)")
    print("# ttt_MB: ttt's memory per step (parameters, gradients, AdamW moments, shard "
          "gradients and the arenas' peak: the benchmark's peak_mb)")
    cols = ["preset", "C", "threads", "ttt_tok/s", "torch_tok/s", "ratio", "ttt_med", "torch_med",
            "ratio_med", "ttt_cpu_ms", "torch_cpu_ms", "ratio_cpu", "ttt_MB", "grad_err_ttt",
            "grad_err_torch", "loss_err"]
    print(" ".join(f"{c:>12}" if i else f"{c:<16}" for i, c in enumerate(cols)))
    worst = 0.0
    with tempfile.TemporaryDirectory() as wd:
        for preset in a.presets.split(","):
            for chunk in (int(c) for c in a.chunks.split(",")):
                rows, dump, meta = run_ttt(a, wd, preset, chunk)
                cfg = Config(meta)
                params = {n[6:]: v for n, v in dump.items() if n.startswith("param.")}
                names = list(params)
                decay = {n: meta["param_decay"][i] == "1" for i, n in enumerate(names)}
                tokens = torch.from_numpy(dump["tokens"].astype(np.int64))
                labels = torch.from_numpy(dump["labels"].astype(np.int64))
                set_threads(1)
                loss64, g64 = gradients(cfg, params, tokens, labels, torch.float64)
                loss32, g32 = gradients(cfg, params, tokens, labels, torch.float32)
                e_ttt = max(rel_err(dump["grad." + n].astype(np.float64), g64[n]) for n in names)
                e_pt = max(rel_err(g32[n], g64[n]) for n in names)
                e_loss = abs(float(dump["loss"]) - loss64) / abs(loss64)
                ok = e_ttt <= GRAD_TOL and e_pt <= GRAD_TOL and e_loss <= LOSS_TOL
                worst = max(worst, e_ttt / GRAD_TOL, e_pt / GRAD_TOL, e_loss / LOSS_TOL)
                ntok = a.batch * a.seq_len
                res = {}  # threads -> [ttt best, ttt median, ttt cpu, torch best, median, cpu]
                mem = {}  # threads -> ttt's peak_mb (the largest over rounds)
                for rnd in range(a.rounds):
                    if rnd > 0:
                        rows = run_ttt(a, wd, preset, chunk)[0]
                    for th in (int(t) for t in a.threads.split(",")):
                        r = rows[th]
                        t = [r["seconds"], r["seconds_median"], r["cpu_seconds"],
                             *time_torch(cfg, params, decay, tokens, labels, meta, th, a.repeats)]
                        res.setdefault(th, []).append(t)
                        mem[th] = max(mem.get(th, 0.0), float(r.get("peak_mb", float("nan"))))
                for th, ts in res.items():
                    ts = np.array(ts)  # (rounds, 6): best and cpu: min over rounds; median: median
                    tb, tm, tc, pb, pm, pc = (ts[:, i].min() if i % 3 != 1 else
                                              float(np.median(ts[:, i])) for i in range(6))
                    row = [preset, chunk, th, f"{ntok / tb:.4g}", f"{ntok / pb:.4g}",
                           f"{pb / tb:.2f}x", f"{ntok / tm:.4g}", f"{ntok / pm:.4g}",
                           f"{pm / tm:.2f}x", f"{1e3 * tc:.2f}", f"{1e3 * pc:.2f}",
                           f"{pc / tc:.2f}x", f"{mem[th]:.0f}",
                           f"{e_ttt:.1e}", f"{e_pt:.1e}", f"{e_loss:.1e}" + ("" if ok else " !")]
                    print(" ".join(f"{str(c):>12}" if i else f"{str(c):<16}"
                                   for i, c in enumerate(row)), flush=True)
    ok = worst <= 1.0
    print(f"# agreement: {'ok' if ok else 'FAILED'} (gradients {GRAD_TOL:g}, loss {LOSS_TOL:g} "
          f"relative)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
