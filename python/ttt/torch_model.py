"""ttt's sequence model in PyTorch: load a `ttt export` file as a torch.nn.Module whose forward
gives the logits ttt computes (docs/python.md "Loading an export in PyTorch").

    import torch, ttt.torch_model
    model = ttt.torch_model.load("model.safetensors")       # float32, on the CPU
    logits = model(torch.tensor([[1, 5, 3, 7]]))             # (B, T) ids -> (B, T, vocab)

The module's parameters carry the export's names and layouts (`model.state_dict()` has exactly
the file's tensors: `layers.0.mixer.wq.weight` (out, in) as torch.nn.Linear keeps it); the
architecture is rebuilt from the file's metadata `ttt.config` (the run's resolved configuration,
the point `ttt.point` of it). The same functions are the PyTorch twin of the parity benchmarks
(tests/bench/compare_torch_train.py, compare_torch_steps.py; docs/training.md "Training parity
with PyTorch"), which build the model from a dump's flat model.* / layer.* values:

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
                fox mixer: o = softmax(q kᵀ / sqrt(D) + G_i − G_j, causal) v,
                           G = cumsum(logsigmoid(h W_f + b_f))      (docs/math.md §4.2)
                mamba / lru mixers (no q, k, v): o = Mamba(1)'s block or the LRU on h,
                           token by token (mixer_mamba, mixer_lru; docs/math.md §8)
                o = RMSNorm_D(o) · g_o  (out_norm);  o = o ⊙ SiLU(h W_g)  (out_gate)
                x = x + o W_o;  x = x + gelu_tanh(norm2(x) W1) W2  (mlp > 0)
    logits = norm(x) · W_head

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
    TTT-Linear (docs/math.md §1, §2, §5.4): the dual form per mini-batch.
    Titans (docs/math.md §3.3, §5.6): momentum with per-token steps, token by token.
    LaCT (docs/math.md §3.5, §5.7): the SwiGLU model, one large_batch step per block.
self_check() holds each against a token-by-token loop of its recurrence in float64. A value of
the configuration the module does not implement, or an option it does not know, is refused by
name (ValueError): nothing is approximated.

torch is imported by this module only; `import ttt` does not need it.
"""
import json
import math
import struct

import numpy as np
import torch
import torch.nn.functional as F

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


def momentum_loop(q, k, v, beta, la, W0, bs, mu, nesterov, squared):
    """The linear model trained by momentum with per-token steps and gradients at each block's
    start (Titans, docs/math.md §3.3, §5.6), token by token: for token t of a block of bs tokens
    starting at S_0, with β = θ η and α = e^{log α} (decoupled: the gradient does not see it),
        g_t = β_t k_tᵀ (k_t S_0 − v_t)   (squared loss; −β_t k_tᵀ v_t for the dot loss)
        M_t = μ M_{t−1} − g_t,  S_t = α_t S_{t−1} + M_t  (nesterov: α_t S_{t−1} + μ M_t − g_t)
        o_t = q_t S_t.
    M starts at zero, S at W0 (H, D, D); log α None, (B, H, T) or (B, H, T, D) (per key
    dimension: Diag(α_t) S)."""
    B, H, T, D = q.shape
    S = W0[None].expand(B, H, D, D)
    M = torch.zeros_like(S)
    out = []
    for t in range(T):
        if t % bs == 0:
            S0 = S
        kt, vt = k[:, :, t, None, :], v[:, :, t, None, :]         # (B, H, 1, D)
        e = kt @ S0 - vt if squared else -vt
        g = beta[:, :, t, None, None] * kt.transpose(-1, -2) @ e
        M = mu * M - g
        if la is not None:
            a = la[:, :, t].exp()
            S = (a[..., None, None] if a.dim() == 2 else a[..., None]) * S
        S = S + (mu * M - g if nesterov else M)
        out.append((q[:, :, t, None, :] @ S).squeeze(-2))
    return torch.stack(out, 2)


def newton_schulz(A, coeffs, steps):
    """NS(A) per matrix of A (..., r, c) (docs/math.md §3.4): X = A / (‖A‖_F + 1e-7), transposed
    when r > c; `steps` times P = X Xᵀ, X ← a X + (b P + c P²) X; transposed back."""
    X = A / (A.pow(2).sum((-2, -1), keepdim=True).sqrt() + 1e-7)
    tall = A.shape[-2] > A.shape[-1]
    if tall:
        X = X.transpose(-1, -2)
    for i in range(steps):
        a, b, c = coeffs[min(i, len(coeffs) - 1)]
        P = X @ X.transpose(-1, -2)
        X = a * X + (b * P + c * (P @ P)) @ X
    return X.transpose(-1, -2) if tall else X


def swiglu(W, x):
    """LaCT's fast-weight model (docs/math.md §2): f(W; x) = (silu(x W0) ⊙ (x W2)) W1."""
    return (F.silu(x @ W[0]) * (x @ W[2])) @ W[1]


def large_batch_loop(cfg, q, k, v, eta, la, W0):
    """LaCT (docs/math.md §1 apply_then_update, §3.5, §5.7), block by block: every token of a
    block of b tokens reads the block-start weights, o = f(W; q); then one large_batch step with
    the block gradient G = Σ_i w_i ∇_W ℓ(f(W; k_i), v_i), w_i = η_i Π_{i<j<n} α_j:
        M ← μ M + G (μ > 0),  U = NS(M or G) (muon) or M or G,  W ← A W − θ U  (A = Π α_j,
        θ/n with position_scale inverse),  then each channel (column, or row) of W rescaled to
        its norm in W_0 (channels that start at zero left alone).
    The SwiGLU gradient with h = k W0, u = k W2, a = silu(h) ⊙ u, E = diag(w) ∂ℓ/∂z
    (−v for the dot loss, a W1 − v for the squared loss): G_W1 = aᵀ E, Δ = E W1ᵀ,
    G_W2 = kᵀ (Δ ⊙ silu(h)), G_W0 = kᵀ (Δ ⊙ u ⊙ silu'(h)). W0: three (H, D, D), one per head."""
    B, H, T, D = q.shape
    W = [w[None].expand(B, H, D, D) for w in W0]
    cols = cfg.renorm == "columns"
    target = [w.pow(2).sum(-2 if cols else -1).sqrt() for w in W]   # (B, H, D)
    M = [torch.zeros_like(w) for w in W]
    dot = cfg.fam[1] == "dot"
    outs = []
    for t0 in range(0, T, cfg.mini_batch):
        t1 = min(t0 + cfg.mini_batch, T)
        n = t1 - t0
        outs.append(swiglu(W, q[:, :, t0:t1]))
        kb, vb = k[:, :, t0:t1], v[:, :, t0:t1]
        w = eta[:, :, t0:t1] if eta is not None else q.new_ones(B, H, n)
        decay = None
        if la is not None:
            c = la[:, :, t0:t1].cumsum(-1)
            w = w * (c[..., -1:] - c).exp()
            decay = c[..., -1].exp()[..., None, None]                # (B, H, 1, 1)
        hh, uu = kb @ W[0], kb @ W[2]
        sh = F.silu(hh)
        a = sh * uu
        E = w[..., None] * (-vb if dot else a @ W[1] - vb)
        dl = E @ W[1].transpose(-1, -2)
        sg = torch.sigmoid(hh)
        G = [kb.transpose(-1, -2) @ (dl * uu * sg * (1 + hh * (1 - sg))),
             a.transpose(-1, -2) @ E, kb.transpose(-1, -2) @ (dl * sh)]
        theta = cfg.theta / n if cfg.inverse else cfg.theta
        for i in range(3):
            U = G[i]
            if cfg.mu > 0:
                M[i] = cfg.mu * M[i] + G[i]
                U = M[i]
            if cfg.muon:
                U = newton_schulz(U, *cfg.ns)
            Wn = (W[i] if decay is None else decay * W[i]) - theta * U
            if cfg.renorm:
                nrm = Wn.pow(2).sum(-2 if cols else -1).sqrt()
                f = torch.where(target[i] > 0, target[i] / (nrm + 1e-5), torch.ones_like(nrm))
                Wn = Wn * (f[..., None, :] if cols else f[..., :, None])
            W[i] = Wn
    return torch.cat(outs, 2)


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


# Newton–Schulz's (a, b, c) per step (docs/math.md §3.4): step i uses entry min(i, len − 1)
NS_COEFFS = {
    "muon": [(3.4445, -4.7750, 2.0315)],
    "lact": [(4.0848, -6.8946, 2.9270), (3.9505, -6.3029, 2.6377), (3.7418, -5.5913, 2.3037),
             (2.8769, -3.1427, 1.2046), (2.8366, -3.0525, 1.2012)],
    "cubic": [(1.5, -0.5, 0.0)],
}

# Every model.* / layer.* key of the dump's metadata the twin knows, with the values it
# implements (None: any value). A key it does not know — an option added to ttt after this twin
# was written — is refused whatever its value: the twin must be taught what it means first.
KNOWN = {
    "model.mixer": ("ttt", "softmax", "fox", "mamba", "lru"), "model.d_model": None, "model.layers": None,
    "model.heads": None, "model.head_dim": None, "model.mlp": None, "model.norm": ("rms", "layer"),
    "model.norm_eps": None, "model.positions": ("none", "learned", "rope"), "model.max_len": None,
    "model.conv": None, "model.act": ("silu", "none"), "model.qk_norm": ("true", "false"), "model.eta": ("true", "false", "dt"),
    "model.gate": ("none", "constant", "scalar", "vector", "multiscale"),
    "model.out_norm": ("true", "false"), "model.out_gate": ("true", "false"),
    "model.learn_init": ("true", "false"), "model.init_std": None, "model.dt_min": None,
    "model.dt_max": None, "model.rope_base": None,
}
# the options only one mixer reads (its own table in src/train/mixers/NAME.c), all implemented
KNOWN_MIXER = {
    "fox": {"model.fgate_bias": None},
    "mamba": {"model.mamba_state": None, "model.mamba_expand": None, "model.mamba_dt_rank": None,
              "model.mamba_conv": None},
    "lru": {"model.lru_state": None, "model.lru_r_min": None, "model.lru_r_max": None,
            "model.lru_max_phase": None},
}
KNOWN_TTT = {
    "layer.preset": None, "layer.form": None, "layer.chunk": None,
    "layer.model": ("linear", "ttt_linear", "swiglu"), "layer.loss": ("dot", "squared", "recon"),
    "layer.mini_batch": None, "layer.order": ("update_then_apply", "apply_then_update"),
    "layer.steps": None, "layer.position_scale": ("none", "inverse"),
    "layer.optimizer.name": ("sgd", "momentum", "large_batch"),
    "layer.optimizer.momentum": None, "layer.optimizer.nesterov": ("false", "true"),
    "layer.optimizer.muon": ("false", "true"), "layer.optimizer.coefficients": tuple(NS_COEFFS),
    "layer.optimizer.steps": None, "layer.optimizer.renormalize": ("false", "true"),
    "layer.optimizer.renormalize_axis": ("columns", "rows"),
    "layer.optimizer.decay_placement": None, "layer.optimizer.lr": None,
    "layer.optimizer.decay": None, "layer.optimizer.l2": ("0.0", "0"), "layer.scale": None,
    "layer.rope": ("false", "true"), "layer.rope_base": None,
    "layer.normalize": ("none", "ratio"), "layer.feature_map": ("elu1",), "layer.features": None,
    "layer.feature_seed": None, "layer.feature_gate": ("false",),
    "layer.steps_per_token": ("1",), "layer.levels": ("1",),
}


def decays(name, shape):
    """The twin's own rule for AdamW's weight decay (docs/training.md "Training parity with
    PyTorch"): the matrices that multiply activations (embedding, positions, projections, head)
    decay; convolution kernels, norm gains, biases, gate constants (a_log, 2-D in Mamba(1)) and
    the learned initial fast weights do not. Checked against the flags in the dump, so that a
    change of ttt's groups fails the comparison rather than being copied."""
    return len(shape) == 2 and ".conv_" not in name and ".w0_" not in name and \
        not name.endswith(".a_log")


class Config:
    """The resolved `model.*` / `layer.*` values from the dump's metadata; refuses what the
    PyTorch side does not implement."""

    def __init__(self, meta):
        self.meta = meta
        bad = []
        self.mixer = meta.get("model.mixer", "ttt")
        known = dict(KNOWN, **(KNOWN_TTT if self.mixer == "ttt" else {}),
                     **KNOWN_MIXER.get(self.mixer, {}))
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
        if self.mixer == "mamba":                # src/train/mixers/mamba.c parse()
            self.mamba_state = int(meta["model.mamba_state"])
            r = int(meta["model.mamba_dt_rank"])
            self.mamba_dt_rank = r if r > 0 else (self.d + 15) // 16
            self.mamba_conv = int(meta["model.mamba_conv"])
        if self.mixer == "lru":                  # src/train/mixers/lru.c parse()
            n = int(meta["model.lru_state"])
            self.lru_state = n if n > 0 else self.d
        if self.mixer == "ttt":
            self.theta = float(meta["resolved.theta"])
            self.scale = float(meta["layer.scale"])
            self.decay = float(meta["layer.optimizer.decay"])
            self.chunk = int(meta["resolved.chunk"]) or 16
            fam = self.fam = (meta["layer.model"], meta["layer.loss"])
            gated = self.gate in ("scalar", "vector", "multiscale", "constant") or \
                self.decay != 1.0
            self.learn_init = meta["model.learn_init"] == "true"
            self.mini_batch = int(meta["layer.mini_batch"])
            self.inverse = meta["layer.position_scale"] == "inverse"
            self.optimizer = meta["layer.optimizer.name"]
            if (meta["layer.order"] == "apply_then_update") != (self.optimizer == "large_batch"):
                bad.append(f"layer.order = {meta['layer.order']} with the "
                           f"{self.optimizer} optimizer (apply_then_update with large_batch "
                           f"only here)")
            if (fam[0] == "swiglu") != (self.optimizer == "large_batch"):
                bad.append(f"layer.model = {fam[0]} with the {self.optimizer} optimizer (swiglu "
                           f"with large_batch only here)")
            if self.optimizer == "large_batch":
                self.layer = "large_batch"
                o = lambda n: meta["layer.optimizer." + n]  # noqa: E731
                self.mu = float(o("momentum"))
                self.muon = o("muon") == "true"
                self.ns = (NS_COEFFS[o("coefficients")], int(o("steps")))
                self.renorm = None if o("renormalize") == "false" else o("renormalize_axis")
                if fam[1] not in ("dot", "squared"):
                    bad.append(f"layer.loss = {fam[1]} with swiglu (dot or squared here)")
                if meta["layer.steps"] != "per_block":
                    bad.append(f"layer.steps = {meta['layer.steps']} with large_batch "
                               f"(per_block here)")
                if self.gate == "vector":
                    bad.append("model.gate = vector with large_batch (a decay per token here)")
                if gated and meta["layer.optimizer.decay_placement"] != "decoupled":
                    bad.append("a gated large_batch layer with decay_placement = "
                               f"{meta['layer.optimizer.decay_placement']} (decoupled only here)")
                if self.ratio:
                    bad.append("layer.normalize = ratio with large_batch")
                if not self.learn_init:
                    bad.append("model.learn_init = false with swiglu (its initial weights come "
                               "from the layer's own stream, not from the parameters)")
            elif self.optimizer == "momentum":
                self.layer = "momentum"
                self.mu = float(meta["layer.optimizer.momentum"])
                self.nesterov = meta["layer.optimizer.nesterov"] == "true"
                if fam not in (("linear", "squared"), ("linear", "dot")):
                    bad.append(f"layer model/loss = {fam[0]}/{fam[1]} with the momentum "
                               f"optimizer (linear/squared or linear/dot here)")
                if meta["layer.steps"] != "per_token" and self.mini_batch != 1:
                    bad.append(f"layer.steps = {meta['layer.steps']} with the momentum optimizer "
                               f"and mini_batch {self.mini_batch} (per_token here)")
                if gated and meta["layer.optimizer.decay_placement"] != "decoupled":
                    bad.append("a gated momentum layer with decay_placement = "
                               f"{meta['layer.optimizer.decay_placement']} (decoupled only here)")
                if self.inverse:
                    bad.append("layer.position_scale = inverse with the momentum optimizer")
                if self.ratio:
                    bad.append("layer.normalize = ratio with the momentum optimizer")
            elif fam[0] == "linear":
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
                               "come from the layer's own stream, not from the parameters)")
            elif self.optimizer in ("momentum", "large_batch"):
                pass
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
            raise ValueError("ttt.torch_model: not implemented in PyTorch: " + "; ".join(bad))

    def describe(self):
        if self.mixer != "ttt":
            return self.mixer
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
    eta = None
    if cfg.eta == "true":                        # β = θ · sigmoid(h W_η + b_η)
        eta = torch.sigmoid(h @ p("mixer.w_eta") + p("mixer.b_eta")).transpose(1, 2)  # (B, H, T)
    elif cfg.eta == "dt":                        # β = θ · dt (Mamba2's x_t Δ_t write)
        eta = dt.transpose(1, 2)
    beta = q.new_full((B, H, T), cfg.theta) if eta is None else cfg.theta * eta
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
    if cfg.layer == "large_batch":               # LaCT: θ after Newton–Schulz, not in β
        return large_batch_loop(cfg, q, k, v, eta, la,
                                [p(f"mixer.w0_{i}") for i in range(3)])
    if cfg.layer == "momentum":                  # Titans: W0 learned per head, or zeros
        W0 = p("mixer.w0_0") if cfg.learn_init else q.new_zeros(H, cfg.D, cfg.D)
        return momentum_loop(q, k, v, beta, la, W0, cfg.mini_batch, cfg.mu, cfg.nesterov,
                             cfg.fam[1] == "squared")
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


def mixer_fox(cfg, p, h, q, k, v, T):
    """Forgetting attention (src/train/mixers/fox.c, docs/math.md §4.2): causal softmax attention
    whose score of key j at query i carries the log of the forget gates between them,
    Σ_{r=j+1}^{i} log f_r = G_i − G_j with G the prefix sum of log f = logsigmoid(h W_f + b_f)
    (one gate per token and head)."""
    if cfg.positions == "rope":
        q, k = rope(q, cfg.model_rope_base), rope(k, cfg.model_rope_base)
    G = F.logsigmoid(h @ p("mixer.w_f") + p("mixer.b_f")).transpose(1, 2).cumsum(-1)  # (B, H, T)
    s = (q @ k.transpose(-1, -2)) / math.sqrt(cfg.D) + G[..., :, None] - G[..., None, :]
    s = s.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), -math.inf)
    return torch.softmax(s, -1) @ v


def mixer_mamba(cfg, p, h):
    """Mamba(1)'s block up to its output projection (src/train/mixers/mamba.c, docs/math.md §8.2),
    (B, T, d_inner): [x | z] = h W_in, x ← SiLU(conv_K(x) + b), [δ | B | C] = x W_x,
    Δ = softplus(δ W_dt + b_dt), A = −exp(A_log) (d_inner, N); per channel i and state n,
    token by token,  s_t[i, n] = exp(Δ_t[i] A[i, n]) s_{t−1}[i, n] + Δ_t[i] B_t[n] x_t[i],
    y_t[i] = Σ_n C_t[n] s_t[i, n] + D[i] x_t[i];  the output is y ⊙ SiLU(z)."""
    N, r = cfg.mamba_state, cfg.mamba_dt_rank
    xz = h @ p("mixer.w_in")
    di = xz.shape[-1] // 2
    x, z = xz[..., :di], xz[..., di:]
    x = F.silu(conv_causal(x, p("mixer.conv_w")) + p("mixer.conv_b"))
    xd = x @ p("mixer.w_x")                                          # (B, T, r + 2N)
    dt = F.softplus(xd[..., :r] @ p("mixer.w_dt") + p("mixer.dt_bias"))  # (B, T, d_inner)
    Bt, Ct = xd[..., r:r + N], xd[..., r + N:r + 2 * N]             # (B, T, N) each
    A = -p("mixer.a_log").exp()                                      # (d_inner, N)
    S = x.new_zeros(x.shape[0], di, N)
    ys = []
    for t in range(x.shape[1]):
        S = (dt[:, t, :, None] * A).exp() * S + \
            (dt[:, t] * x[:, t])[..., None] * Bt[:, t, None, :]
        ys.append((S * Ct[:, t, None, :]).sum(-1))
    y = torch.stack(ys, 1) + p("mixer.d") * x
    return y * F.silu(z)


def mixer_lru(cfg, p, h):
    """The Linear Recurrent Unit (src/train/mixers/lru.c, layers/diagonal/diagonal.h,
    docs/math.md §8.1), (B, T, d): u = h W_B as [Re | Im] halves of n complex entries,
    λ = exp(−exp ν + i exp θ), γ = sqrt(1 − |λ|²), s_t = λ s_{t−1} + γ u_t (complex, token by
    token), y = [Re s | Im s] W_C + D ⊙ h, output GELU(y) (tanh form). λ and γ are computed in
    float64 from the stored ν, θ and then rounded to the compute dtype, as ttt does."""
    n = cfg.lru_state
    u = h @ p("mixer.w_b")                                           # (B, T, 2n)
    rad = torch.exp(-torch.exp(p("mixer.nu_log").double()))
    phi = torch.exp(p("mixer.theta_log").double())
    lr, li = (rad * torch.cos(phi)).to(h.dtype), (rad * torch.sin(phi)).to(h.dtype)
    g = torch.sqrt(torch.clamp(1 - rad * rad, min=0)).to(h.dtype)
    sr = si = u.new_zeros(u.shape[0], n)
    states = []
    for t in range(u.shape[1]):
        ur, ui = u[:, t, :n], u[:, t, n:]
        sr, si = lr * sr - li * si + g * ur, lr * si + li * sr + g * ui
        states.append(torch.cat([sr, si], -1))
    y = torch.stack(states, 1) @ p("mixer.w_c") + p("mixer.d") * h
    return F.gelu(y, approximate="tanh")


def forward_logits(cfg, P, tokens):
    """The logits (B, T, V) of token ids (B, T) (int64), with P the parameters by their ttt
    names in ttt's layouts ((in, out) for products: x W)."""
    B, T = tokens.shape
    H, D = cfg.H, cfg.D
    x = F.embedding(tokens, P["embed"])
    if cfg.positions == "learned":
        x = x + P["pos"][:T]
    for l in range(cfg.layers):
        p = lambda n: P[f"layer{l}.{n}"]  # noqa: E731
        h = norm(cfg, P, f"layer{l}.norm1", x)
        if cfg.mixer in ("mamba", "lru"):        # no q, k, v: the mixer maps h itself
            o = (mixer_mamba if cfg.mixer == "mamba" else mixer_lru)(cfg, p, h)
            o = o.reshape(B, T, H, D).transpose(1, 2)                # (B, H, T, D)
        else:
            qkv = []
            for n in "qkv":
                y = h @ p(f"mixer.w{n}")
                if cfg.conv > 0:
                    y = conv_causal(y, p(f"mixer.conv_{n}"))
                if cfg.act == "silu":
                    y = F.silu(y)
                qkv.append(y.reshape(B, T, H, D).transpose(1, 2))  # (B, H, T, D)
            q, k, v = qkv
            if cfg.qk_norm:
                q = q * torch.rsqrt(q.pow(2).sum(-1, keepdim=True) + 1e-6)
                k = k * torch.rsqrt(k.pow(2).sum(-1, keepdim=True) + 1e-6)
            if cfg.mixer == "ttt":
                o = mixer_ttt(cfg, p, h, q, k, v, T)                # (B, H, T, D)
            elif cfg.mixer == "fox":
                o = mixer_fox(cfg, p, h, q, k, v, T)
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
    return norm(cfg, P, "norm_f", x) @ P["head"]


def forward_loss(cfg, P, tokens, labels):
    """Mean cross-entropy over the labelled positions (label −1: not scored)."""
    logits = forward_logits(cfg, P, tokens)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                           ignore_index=-1)

# ---------------------------------------------------------------- loading an export

_DTYPES = {"F32": "<f4", "F64": "<f8", "F16": "<f2", "I64": "<i8", "I32": "<i4"}
FORMAT = "ttt-export-1"


def read_safetensors(path):
    """({name: numpy array}, metadata) of a .safetensors file (the format of
    src/results/safetensors.h: an 8-byte little-endian header length, a JSON header, the data).
    BF16 is widened to float32 (its bits are float32's upper half)."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError(f"{path}: not a safetensors file (shorter than its 8-byte header length)")
    n = struct.unpack("<Q", raw[:8])[0]
    if n > len(raw) - 8:
        raise ValueError(f"{path}: header length {n} exceeds the file ({len(raw)} bytes)")
    header = json.loads(raw[8:8 + n])
    data = memoryview(raw)[8 + n:]
    meta = header.pop("__metadata__", {}) or {}
    out = {}
    for name, h in header.items():
        a, b = h["data_offsets"]
        if h["dtype"] == "BF16":
            u = np.frombuffer(data[a:b], dtype="<u2").astype(np.uint32) << 16
            arr = u.view(np.float32)
        elif h["dtype"] in _DTYPES:
            arr = np.frombuffer(data[a:b], dtype=_DTYPES[h["dtype"]])
        else:
            raise ValueError(f"{path}: tensor '{name}' has dtype {h['dtype']} (expected one of "
                             f"{', '.join(_DTYPES)}, BF16)")
        if arr.size != int(np.prod(h["shape"], dtype=np.int64)):
            raise ValueError(f"{path}: tensor '{name}': data_offsets [{a}, {b}] do not match "
                             f"shape {tuple(h['shape'])} of {h['dtype']}")
        out[name] = arr.reshape(h["shape"])
    return out, meta


def write_safetensors(path, tensors, metadata=None):
    """Write {name: array} as float32 (what `ttt logits` and `ttt apply` read)."""
    header, blobs, off = {}, [], 0
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name, a in tensors.items():
        a = np.ascontiguousarray(np.asarray(a, dtype="<f4"))
        header[name] = {"dtype": "F32", "shape": list(a.shape),
                        "data_offsets": [off, off + a.nbytes]}
        off += a.nbytes
        blobs.append(a.tobytes())
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def _scalar(text):
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        return text[1:-1]
    return text


def _block(lines, start, indent):
    """The lines of the block nested under lines[start - 1] (deeper than `indent`) and the index
    after it."""
    end = start
    while end < len(lines) and (not lines[end].strip() or
                                len(lines[end]) - len(lines[end].lstrip()) > indent):
        end += 1
    return lines[start:end], end


def _flat_map(lines, prefix, out, where):
    """A block map of scalars and nested block maps, as prefix + "a.b" → value (the resolved
    configuration's `model:` and `layer:`, which ttt writes one key per line)."""
    i = 0
    lines = [ln for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]
    while i < len(lines):
        ln = lines[i]
        ind = len(ln) - len(ln.lstrip())
        key, sep, val = ln.strip().partition(":")
        if not sep or key.startswith("- "):
            raise ValueError(f"ttt.torch_model: {where}: cannot read '{ln.strip()}' of "
                             f"{prefix.rstrip('.')} (expected 'key: value')")
        val = val.strip()
        if val:
            if val.startswith(("{", "[")) and val not in ("{}", "[]"):
                raise ValueError(f"ttt.torch_model: {where}: {prefix}{key} = {val}: a flow "
                                 f"collection where the resolved configuration has scalars")
            if val not in ("{}", "[]"):
                out[prefix + key] = _scalar(val)
            i += 1
        else:
            sub, i = _block(lines, i + 1, ind)
            _flat_map(sub, prefix + key + ".", out, where)
    return out


def _top_sections(lines, indent):
    """{key: (value text, its block lines)} of a block map whose keys sit at `indent`."""
    out, i = {}, 0
    while i < len(lines):
        ln = lines[i]
        if not ln.strip() or ln.lstrip().startswith("#"):
            i += 1
            continue
        key, _, val = ln.strip().partition(":")
        sub, i = _block(lines, i + 1, len(ln) - len(ln.lstrip()))
        out[key] = (val.strip(), sub)
    return out


def config_values(config_yaml, point=0, where="ttt.config"):
    """The flat model.* and layer.* values of a point of a resolved configuration
    (config.resolved.yaml, the export's `ttt.config`): the top-level sections, or those of
    entry `point` of `resolved:` when the run swept."""
    lines = config_yaml.splitlines()
    top = _top_sections(lines, 0)
    if "resolved" in top:                    # a sweep: every point's full configuration
        items, cur = [], None
        for ln in top["resolved"][1]:
            if ln.lstrip().startswith("- "):
                cur = [ln.replace("- ", "  ", 1)]
                items.append(cur)
            elif cur is not None:
                cur.append(ln)
        if not 0 <= point < len(items):
            raise ValueError(f"ttt.torch_model: {where}: point {point} is not among the "
                             f"{len(items)} points of `resolved:`")
        entry = _top_sections(items[point], len(items[point][0]) - len(items[point][0].lstrip()))
        if "config" not in entry:
            raise ValueError(f"ttt.torch_model: {where}: point {point} of `resolved:` has no "
                             f"`config:`")
        sub = entry["config"][1]
        top = _top_sections(sub, len(sub[0]) - len(sub[0].lstrip()) if sub else 0)
    out = {}
    for sec in ("task", "model", "layer"):
        if sec not in top:
            if sec == "layer":
                continue
            raise ValueError(f"ttt.torch_model: {where}: no `{sec}:` section")
        val, sub = top[sec]
        if val and val != "{}":
            raise ValueError(f"ttt.torch_model: {where}: `{sec}: {val}`: expected the resolved "
                             f"block form (one key per line)")
        _flat_map(sub, sec + ".", out, where)
    return out


def _resolve(values):
    """The values a dump records as resolved.* (src/tasks/bench_dump.c), from the configuration:
    the head width (0 = d_model / heads), the write strength θ = layer.optimizer.lr."""
    v = dict(values)
    D = int(v["model.head_dim"])
    width = int(v["model.d_model"])
    if v.get("model.mixer") == "mamba":      # d_inner = mamba_expand · d_model over the heads
        width *= int(v["model.mamba_expand"])
    v["resolved.head_dim"] = str(D if D > 0 else width // int(v["model.heads"]))
    if v.get("model.mixer", "ttt") == "ttt":
        v["resolved.theta"] = v.get("layer.optimizer.lr", "1")
        v["resolved.chunk"] = v.get("layer.chunk", "0")
    return v


class _Node(torch.nn.Module):
    """A container along an exported name's path ("layers" → "0" → "mixer" → "wq");
    model.layers[0] is model.layers.get_submodule("0")."""

    def __getitem__(self, i):
        return self.get_submodule(str(i))


class TTTModel(torch.nn.Module):
    """ttt's sequence model with the parameters of an export, by the export's names and in its
    layouts. forward(tokens (B, T) int64) → logits (B, T, vocab) in the parameters' dtype
    (model.double() computes in float64)."""

    def __init__(self, cfg, tensors, layouts, sources):
        super().__init__()
        self.cfg = cfg
        self._sources = {}                 # export name → (ttt name, layout)
        for name, arr in tensors.items():
            node, parts = self, name.split(".")
            for part in parts[:-1]:
                if not hasattr(node, part):
                    node.add_module(part, _Node())
                node = getattr(node, part)
            node.register_parameter(parts[-1], torch.nn.Parameter(torch.from_numpy(
                np.array(arr, dtype=np.float32))))
            self._sources[name] = (sources[name], layouts[name])

    def ttt_parameters(self):
        """{ttt name: tensor in ttt's layout} (products (in, out): a transposed view)."""
        P = dict(self.named_parameters())
        return {src: (P[name].t() if lay == "linear" else P[name])
                for name, (src, lay) in self._sources.items()}

    def forward(self, tokens):
        if tokens.dim() != 2:
            raise ValueError(f"ttt.torch_model: tokens must be (B, T) ids, not "
                             f"{tuple(tokens.shape)}")
        return forward_logits(self.cfg, self.ttt_parameters(), tokens.long())


def load(path):
    """The model of a `ttt export` file as a TTTModel (float32, CPU). Raises ValueError naming
    the option when the configuration holds something this module does not implement, and when
    the file is not an export of a token model."""
    tensors, meta = read_safetensors(path)
    if meta.get("ttt.format") != FORMAT:
        raise ValueError(f"ttt.torch_model: {path}: metadata ttt.format is "
                         f"{meta.get('ttt.format')!r}; expected '{FORMAT}' (a `ttt export` file)")
    if "ttt.config" not in meta:
        raise ValueError(f"ttt.torch_model: {path}: no ttt.config in the metadata")
    values = config_values(meta["ttt.config"], int(meta.get("ttt.point", "0")),
                           f"{path}: ttt.config")
    if "embed.weight" not in tensors:
        raise ValueError(f"ttt.torch_model: {path}: task.kind = {values.get('task.kind')}: the "
                         f"model reads vectors, not token ids (no embed.weight); only token "
                         f"models (mqar, lm) are implemented")
    model_layer = {k: v for k, v in values.items() if k.startswith(("model.", "layer."))}
    cfg = Config(_resolve(model_layer))
    layouts, sources = {}, {}
    for name in tensors:
        lay, src = meta.get("ttt." + name), meta.get("ttt.source." + name)
        if lay not in ("linear", "bias", "as_is") or not src:
            raise ValueError(f"ttt.torch_model: {path}: tensor '{name}' has no layout "
                             f"(ttt.{name}) or ttt name (ttt.source.{name}) in the metadata")
        layouts[name], sources[name] = lay, src
    model = TTTModel(cfg, tensors, layouts, sources)
    # every parameter the model reads must be in the file, and every tensor of the file used
    P = {n: t.detach() for n, t in model.ttt_parameters().items()}
    seen = set()

    class Watch(dict):
        def __getitem__(self, k):
            if k not in self:
                raise ValueError(f"ttt.torch_model: {path}: the configuration needs parameter "
                                 f"'{k}', which the file does not have")
            seen.add(k)
            return dict.__getitem__(self, k)
    with torch.no_grad():
        forward_logits(cfg, Watch(P), torch.zeros(1, 1, dtype=torch.long))
    unused = sorted(set(P) - seen)
    if unused:
        raise ValueError(f"ttt.torch_model: {path}: the configuration does not use "
                         f"{', '.join(unused)}: the file and its ttt.config disagree")
    return model
