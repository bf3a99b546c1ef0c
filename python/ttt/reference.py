"""The float64 reference: each preset family's recurrent definition (docs/math.md §4), token by
token (block by block for mini-batch layers), written once for numpy and torch.

With numpy inputs the result is numpy float64; with torch float64 tensors it is differentiable by
torch.autograd, which is what gradcheck checks and what the library's float32 backward is
compared with (docs/python.md "The float64 reference"). These loops are slow by design: they
are the definition, not a fast path.
"""
import numpy as np

# The presets' tuples as the reference evaluates them (layers/layer_presets.c, docs/math.md §4).
# tests/test_reference.py compares each with the library's own layer, so a drift fails there.
PRESETS = {
    "linear_attention": dict(family="linear", lr=1.0, decay=1.0),
    "retnet": dict(family="linear", lr=1.0, decay=0.96875),
    "mamba2": dict(family="linear", lr=1.0, decay=0.97),
    "gla": dict(family="linear", lr=1.0, decay=0.97),
    "deltanet": dict(family="delta", lr=1.0, decay=1.0, decay_placement="coupled"),
    "gated_deltanet": dict(family="delta", lr=1.0, decay=0.99, decay_placement="coupled"),
    # KDA: the same tuple, its log_alpha (B, T, H, d_k) one gate per key dimension (docs/math.md
    # §4.5): S_t = (I - beta_t k_t^T k_t) Diag(alpha_t) S_{t-1} + beta_t k_t^T v_t
    "kda": dict(family="delta", lr=1.0, decay=0.99, decay_placement="coupled"),
    # Gated DeltaProduct: the same tuple taking n_h delta steps per token on n_h key/value pairs
    # (docs/math.md §4.7); k, v and beta are (B, n_h·T, H, ·), the gate (B, T, H) applies once
    # per token before its steps
    "deltaproduct": dict(family="deltaproduct", lr=1.0, decay=0.99, decay_placement="coupled",
                         steps_per_token=2),
    # Log-linear attention (docs/math.md §4.8): Λ = levels fast weights on the Fenwick schedule,
    # q (B, T, H, Λ·d_k) the levels' queries side by side (λ_t^ℓ q_t), or q (B, T, H, d_k) with
    # level_scales λ (B, T, H, Λ); the state (B, H, Λ·d_k, d_v) level after level
    "loglinear_mamba2": dict(family="loglinear_linear", lr=1.0, decay=0.97, levels=12),
    "loglinear_gdn": dict(family="loglinear_delta", lr=1.0, decay=0.99,
                          decay_placement="coupled", levels=12),
    # MesaNet (docs/math.md §3.11): per token the exact ridge regression over the past,
    # o_t = q_t (H_t + lam I)^-1 G_t with H_t = a H + b k^T k, G_t = a G + b k^T v; the state is
    # [W, H, G] (W = (H + lam I)^-1 G, the weights the layer reads). cg_steps > 0: x_t =
    # (H_t + lam I)^-T q_t by that many conjugate-gradient steps from 0 (the cg form), or from
    # q_t/(diag H_t + lam) with cg_start="jacobi"; 0: exact
    "mesanet": dict(family="mesa", lr=1.0, decay=0.99, lam=1.0, cg_steps=0, cg_start="zero"),
    "titans": dict(family="titans", lr=0.1, decay=0.99, momentum=0.9, mini_batch=16),
    "ttt_linear": dict(family="ttt_linear", lr=1.0, mini_batch=16),
    "lact": dict(family="lact", lr=1.0, decay=1.0, mini_batch=2048, momentum=0.0,
                 ns_steps=5, renormalize=True),
}

_LN_EPS = 1e-6      # docs/math.md §2: LN without affine part, biased variance, eps 1e-6
_RENORM_EPS = 1e-5  # docs/math.md §3.5
_NS_EPS = 1e-7      # docs/math.md §3.4
_MUON = (3.4445, -4.7750, 2.0315)


class _Xp:
    """The few array operations the recurrences need, for numpy or torch."""

    def __init__(self, like):
        self.torch = type(like).__module__.startswith("torch")
        if self.torch:
            import torch
            self.t = torch
        self.like = like

    def asarray(self, x):
        if x is None:
            return None
        if self.torch:
            if type(x).__module__.startswith("torch"):
                return x.to(self.t.float64)
            return self.t.as_tensor(np.asarray(x, dtype=np.float64))
        return np.asarray(x.detach().cpu().numpy() if hasattr(x, "detach") else x, np.float64)

    def zeros(self, shape):
        return self.t.zeros(shape, dtype=self.t.float64) if self.torch else np.zeros(shape)

    def ones(self, shape):
        return self.t.ones(shape, dtype=self.t.float64) if self.torch else np.ones(shape)

    def stack(self, xs, axis):
        return self.t.stack(xs, dim=axis) if self.torch else np.stack(xs, axis=axis)

    def exp(self, x):
        return self.t.exp(x) if self.torch else np.exp(x)

    def sqrt(self, x):
        return self.t.sqrt(x) if self.torch else np.sqrt(x)

    def einsum(self, eq, *xs):
        return self.t.einsum(eq, *xs) if self.torch else np.einsum(eq, *xs)

    def norm_sq(self, x, axis):
        return (x * x).sum(axis) if not self.torch else (x * x).sum(dim=axis)

    def mean(self, x, axis):
        return x.mean(axis, keepdims=True) if not self.torch else x.mean(dim=axis, keepdim=True)

    def swap(self, x):
        return x.transpose(-1, -2) if self.torch else np.swapaxes(x, -1, -2)

    def solve(self, A, b):
        """x with A x = b for a batch of matrices A (..., n, n) and vectors b (..., n)."""
        if self.torch:
            return self.t.linalg.solve(A, b)
        return np.linalg.solve(A, b[..., None])[..., 0]

    def solve_mat(self, A, B):
        """X with A X = B for batches of matrices."""
        return self.t.linalg.solve(A, B) if self.torch else np.linalg.solve(A, B)

    def where(self, c, a, b):
        if self.torch:
            t = self.t
            return t.where(c, t.as_tensor(a, dtype=t.float64), t.as_tensor(b, dtype=t.float64))
        return np.where(c, a, b)

    def sigmoid(self, x):
        return self.t.sigmoid(x) if self.torch else 1.0 / (1.0 + np.exp(-x))


def _ln(xp, u):
    """LN without affine part and its backward operator (docs/math.md §2)."""
    mu = xp.mean(u, -1)
    c = u - mu
    r = 1.0 / xp.sqrt(xp.mean(c * c, -1) + _LN_EPS)
    xh = c * r

    def back(d):
        return r * (d - xp.mean(d, -1) - xh * xp.mean(d * xh, -1))
    return xh, back


def _newton_schulz(xp, A, steps):
    """NS(A) with Muon's quintic, per (b, h) matrix (docs/math.md §3.4)."""
    tr = A.shape[-2] > A.shape[-1]
    X = xp.swap(A) if tr else A
    nrm = xp.sqrt(xp.norm_sq(X.reshape(X.shape[:-2] + (-1,)), -1))[..., None, None]
    X = X / (nrm + _NS_EPS)
    a, b, c = _MUON
    for _ in range(steps):
        P = X @ xp.swap(X)
        X = a * X + (b * P + c * (P @ P)) @ X
    return xp.swap(X) if tr else X


def reference(preset, q, k, v, beta=None, log_alpha=None, eta=None, initial_state=None,
              scale=None, level_scales=None, **params):
    """(o, final_state) of `preset` in float64, in the (B, T, H, D) layout of ttt.Layer.

    "rwkv7" is the generalized delta rule (DPLR) of RWKV-7 and takes a=, b= (B, T, H, d_k) and
    log_alpha = log w (B, T, H, d_k) (docs/math.md "RWKV-7"; _rwkv7_reference).

    beta is the delta-rule step (beta = lr * eta); eta the per-token learning rate; log_alpha
    (B, T, H) or, for gla and kda, (B, T, H, d_k) per-token log retentions (None: the constant decay).
    deltaproduct: k, v, beta and eta have n_h rows per token, (B, n_h·T, H, ·) (steps_per_token,
    2 unless given).
    initial_state: one array or a sequence in the order of Layer.state_info (None: zeros; the
    models with random initial weights, ttt_linear and lact, need it given). params override the
    preset's lr, decay, decay_placement, momentum, mini_batch, steps_per_token. final_state is
    one array when the state is one tensor, else a tuple, as ttt.Layer returns it. scale: the query scale, d_k^-0.5
    when None (FLA's, and ttt.Layer's).
    loglinear_mamba2, loglinear_gdn: q (B, T, H, levels·d_k), every level's query, or q
    (B, T, H, d_k) with level_scales λ (B, T, H, levels), which gives level ℓ the query λ^ℓ q;
    the state is (B, H, levels·d_k, d_v); params may set levels."""
    if preset == "rwkv7":
        return _rwkv7_reference(q, k, v, beta=beta, log_alpha=log_alpha, eta=eta,
                                initial_state=initial_state, scale=scale, **params)
    if preset not in PRESETS:
        raise ValueError("ttt.reference: no float64 reference for preset '%s' (have: %s)"
                         % (preset, ", ".join(list(PRESETS) + ["rwkv7"])))
    cfg = dict(PRESETS[preset])
    for key, val in params.items():
        if key not in cfg and key not in ("decay_placement",):
            raise ValueError("ttt.reference: %s has no parameter '%s' (have: %s)"
                             % (preset, key, ", ".join(k for k in cfg if k != "family")))
        cfg[key] = val
    xp = _Xp(q)
    q, k, v = xp.asarray(q), xp.asarray(k), xp.asarray(v)
    fam = cfg["family"]
    if fam.startswith("loglinear"):
        nl = int(cfg["levels"])
        if level_scales is not None:
            lam = xp.asarray(level_scales)
            if tuple(lam.shape) != tuple(q.shape[:3]) + (nl,):
                raise ValueError("ttt.reference: level_scales of %s take shape %s (B, T, H, "
                                 "levels); got %s" % (preset, tuple(q.shape[:3]) + (nl,),
                                                      tuple(lam.shape)))
            q = (lam[..., :, None] * q[..., None, :]).reshape(tuple(q.shape[:3]) + (-1,))
        if q.shape[-1] != nl * k.shape[-1]:
            raise ValueError("ttt.reference: %s with levels %d takes q of %d columns (levels · "
                             "d_k) or level_scales; got %d" % (preset, nl, nl * k.shape[-1],
                                                               q.shape[-1]))
        d_k = k.shape[-1]
        B, T, H = q.shape[:3]
    elif level_scales is not None:
        raise ValueError("ttt.reference: level_scales is for the loglinear presets")
    else:
        B, T, H, d_k = q.shape
    if beta is not None and eta is not None:
        raise ValueError("ttt.reference: give beta or eta, not both (beta = lr * eta)")
    lr = float(cfg["lr"])
    Tk = k.shape[1]  # T, or n_h·T for deltaproduct's pairs
    step = xp.asarray(beta) if beta is not None else (
        lr * xp.asarray(eta) if eta is not None else lr * xp.ones((B, Tk, H)))
    alpha = None if log_alpha is None else xp.exp(xp.asarray(log_alpha))
    if initial_state is not None and not isinstance(initial_state, (list, tuple)):
        initial_state = [initial_state]
    init = None if initial_state is None else [None if s is None else xp.asarray(s)
                                                for s in initial_state]
    qs = q * (d_k ** -0.5 if scale is None else scale)
    if fam.startswith("loglinear"):
        o, st = _loglinear(xp, cfg, fam == "loglinear_delta", qs, k, v, step, alpha, init)
    elif fam in ("linear", "delta"):
        o, st = _linear(xp, cfg, fam, qs, k, v, step, alpha, init)
    elif fam == "deltaproduct":
        o, st = _deltaproduct(xp, cfg, qs, k, v, step, alpha, init)
    elif fam == "mesa":
        o, st = _mesa(xp, cfg, qs, k, v, step, alpha, init)
    elif fam == "titans":
        o, st = _titans(xp, cfg, qs, k, v, step, alpha, init)
    elif fam == "ttt_linear":
        if alpha is not None:
            raise ValueError("ttt.reference: ttt_linear has no forget gate")
        o, st = _ttt_linear(xp, cfg, qs, k, v, step, init)
    else:
        o, st = _lact(xp, cfg, qs, k, v, step, alpha, init)
    return o, (st[0] if len(st) == 1 else tuple(st))


def _first(init, i, xp, shape):
    if init is None or len(init) <= i or init[i] is None:
        return xp.zeros(shape)
    return init[i]


def _linear(xp, cfg, fam, q, k, v, step, alpha, init):
    """Linear attention (dot loss) and the delta rule (squared loss), sgd, b = 1."""
    B, T, H, d_k = q.shape
    S = _first(init, 0, xp, (B, H, d_k, v.shape[-1]))
    coupled = cfg.get("decay_placement", "decoupled") == "coupled"
    outs = []
    for t in range(T):
        if alpha is None:
            a = cfg["decay"]
        elif alpha.ndim == 4:
            a = alpha[:, t][..., None]          # (B, H, d_k, 1): one retention per row of S
        else:
            a = alpha[:, t][..., None, None]
        kt, vt, bt = k[:, t], v[:, t], step[:, t][..., None, None]
        if fam == "linear":
            S = a * S + bt * xp.einsum("bhk,bhv->bhkv", kt, vt)
        else:
            Sd = a * S if coupled else S
            err = xp.einsum("bhk,bhkv->bhv", kt, Sd) - vt
            S = (a * S) - bt * xp.einsum("bhk,bhv->bhkv", kt, err)
        outs.append(xp.einsum("bhk,bhkv->bhv", q[:, t], S))
    return xp.stack(outs, 1), [S]


def _deltaproduct(xp, cfg, q, k, v, step, alpha, init):
    """Gated DeltaProduct (docs/math.md §4.7): per token the gate once, then n_h delta steps on
    the token's pairs (rows n_h·t … n_h·t + n_h − 1 of k, v and the steps), then the read-out."""
    B, T, H, d_k = q.shape
    nh = int(cfg["steps_per_token"])
    if k.shape[:3] != (B, nh * T, H) or v.shape[:3] != (B, nh * T, H):
        raise ValueError("ttt.reference: deltaproduct with steps_per_token %d takes k, v of "
                         "(B, %d·T, H, d) = %s; got %s, %s"
                         % (nh, nh, (B, nh * T, H), tuple(k.shape), tuple(v.shape)))
    if alpha is not None and alpha.ndim == 4:
        raise ValueError("ttt.reference: deltaproduct takes one gate per token (B, T, H)")
    S = _first(init, 0, xp, (B, H, d_k, v.shape[-1]))
    outs = []
    for t in range(T):
        S = (cfg["decay"] if alpha is None else alpha[:, t][..., None, None]) * S
        for j in range(nh):
            r = t * nh + j
            kt, vt, bt = k[:, r], v[:, r], step[:, r][..., None, None]
            err = xp.einsum("bhk,bhkv->bhv", kt, S) - vt
            S = S - bt * xp.einsum("bhk,bhv->bhkv", kt, err)
        outs.append(xp.einsum("bhk,bhkv->bhv", q[:, t], S))
    return xp.stack(outs, 1), [S]


def _fenwick_target(p, nl):
    """The level that levels 0 … m − 1 merge into before token p (0: none), docs/math.md §4.8."""
    if p <= 0 or nl <= 1:
        return 0
    tz = (p & -p).bit_length() - 1
    return min(tz + 1, nl - 1)


def _loglinear(xp, cfg, delta, q, k, v, step, alpha, init):
    """Log-linear attention (docs/math.md §4.8), token by token from position 0: the Fenwick
    merge, the rule's step on every level (the delta rule's transition on each, the write into
    level 0; linear attention decays the others), the read-out Σ_ℓ q^ℓ S^ℓ."""
    B, T, H = q.shape[:3]
    d_k, d_v = k.shape[-1], v.shape[-1]
    nl = int(cfg["levels"])
    if alpha is not None and alpha.ndim == 4:
        raise ValueError("ttt.reference: log-linear attention takes one gate per token (B, T, H)")
    S0 = _first(init, 0, xp, (B, H, nl * d_k, d_v))
    S = [S0[:, :, l * d_k:(l + 1) * d_k] for l in range(nl)]
    outs = []
    for t in range(T):
        m = _fenwick_target(t, nl)
        if m:
            S[m] = sum(S[1:m + 1], S[0])
            for l in range(m):
                S[l] = xp.zeros((B, H, d_k, d_v))
        a = cfg["decay"] if alpha is None else alpha[:, t][..., None, None]
        kt, vt, bt = k[:, t], v[:, t], step[:, t][..., None, None]
        for l in range(nl):
            Sd = a * S[l]
            if delta:
                e = (vt if l == 0 else 0.0) - xp.einsum("bhk,bhkv->bhv", kt, Sd)
                S[l] = Sd + bt * xp.einsum("bhk,bhv->bhkv", kt, e)
            else:
                S[l] = Sd + (bt * xp.einsum("bhk,bhv->bhkv", kt, vt) if l == 0 else 0.0)
        qt = q[:, t]
        outs.append(sum(xp.einsum("bhk,bhkv->bhv", qt[..., l * d_k:(l + 1) * d_k], S[l])
                        for l in range(nl)))
    Sf = xp.t.cat(S, dim=2) if xp.torch else np.concatenate(S, axis=2)
    return xp.stack(outs, 1), [Sf]


def _mesa(xp, cfg, q, k, v, step, alpha, init):
    """MesaNet (docs/math.md §3.11): H_t = a_t H + b_t k^T k, G_t = a_t G + b_t k^T v,
    x_t = (H_t + lam I)^-T q_t (exactly, or by cg_steps conjugate-gradient steps from 0 or,
    with cg_start="jacobi", from q_t/(diag H_t + lam)),
    o_t = x_t^T G_t; the final state [W_T, H_T, G_T] with W_T = (H_T + lam I)^-1 G_T."""
    B, T, H, d_k = q.shape
    d_v = v.shape[-1]
    Hs = _first(init, 1, xp, (B, H, d_k, d_k))
    Gs = _first(init, 2, xp, (B, H, d_k, d_v))
    lam = float(cfg["lam"])
    steps = int(cfg["cg_steps"])
    eye = xp.asarray(np.eye(d_k))
    outs = []
    for t in range(T):
        a = cfg["decay"] if alpha is None else alpha[:, t][..., None, None]
        kt, vt, bt = k[:, t], v[:, t], step[:, t][..., None, None]
        Hs = a * Hs + bt * xp.einsum("bhi,bhj->bhij", kt, kt)
        Gs = a * Gs + bt * xp.einsum("bhi,bhj->bhij", kt, vt)
        A = xp.swap(Hs + lam * eye)
        x0 = None
        if cfg["cg_start"] == "jacobi":
            x0 = q[:, t] / xp.einsum("bhii->bhi", A)
        x = _cg(xp, A, q[:, t], steps, x0) if steps > 0 else xp.solve(A, q[:, t])
        outs.append(xp.einsum("bhk,bhkv->bhv", x, Gs))
    W = xp.solve_mat(Hs + lam * eye, Gs)
    return xp.stack(outs, 1), [W, Hs, Gs]


def _cg(xp, A, b, steps, x0=None):
    """steps conjugate-gradient steps on A x = b from x0 (None: 0), batched over (B, H); a
    sequence whose residual is exactly 0 stops moving (its step is 0)."""
    x = b * 0.0 if x0 is None else x0
    r = b - xp.einsum("bhij,bhj->bhi", A, x)
    p = r + 0.0
    delta = (r * r).sum(-1)
    for _ in range(steps):
        Ap = xp.einsum("bhij,bhj->bhi", A, p)
        pAp = (p * Ap).sum(-1)
        live = delta > 0
        alpha = xp.where(live, delta / xp.where(live, pAp, 1.0), 0.0)
        x = x + alpha[..., None] * p
        r = r - alpha[..., None] * Ap
        dn = (r * r).sum(-1)
        p = r + xp.where(live, dn / xp.where(live, delta, 1.0), 0.0)[..., None] * p
        delta = dn
    return x


def _titans(xp, cfg, q, k, v, step, alpha, init):
    """Momentum per token, gradients at the chunk start, decoupled decay (docs/math.md §5.6)."""
    B, T, H, d_k = q.shape
    d_v = v.shape[-1]
    S = _first(init, 0, xp, (B, H, d_k, d_v))
    M = _first(init, 1, xp, (B, H, d_k, d_v))
    mu, b = cfg["momentum"], int(cfg["mini_batch"])
    outs = []
    for t0 in range(0, T, b):
        S0 = S
        for t in range(t0, min(t0 + b, T)):
            a = cfg["decay"] if alpha is None else alpha[:, t][..., None, None]
            kt = k[:, t]
            e = xp.einsum("bhk,bhkv->bhv", kt, S0) - v[:, t]
            g = step[:, t][..., None, None] * xp.einsum("bhk,bhv->bhkv", kt, e)
            M = mu * M - g             # step = lr * eta: theta is inside g
            S = a * S + M
            outs.append(xp.einsum("bhk,bhkv->bhv", q[:, t], S))
    return xp.stack(outs, 1), [S, M]


def _ttt_linear(xp, cfg, q, k, v, step, init):
    """TTT-Linear, primal mini-batch GD with tau_i = 1/(i + 1) (docs/math.md §5.4)."""
    B, T, H, d = q.shape
    if init is None or init[0] is None or len(init) < 2 or init[1] is None:
        raise ValueError("ttt.reference: ttt_linear starts from random weights; pass "
                         "initial_state=(W, b) (Layer.initial_state gives the library's)")
    W, bias = init[0], init[1]
    bsz = int(cfg["mini_batch"])
    outs = []
    for t0 in range(0, T, bsz):
        n = min(bsz, T - t0)
        K, V, Q = k[:, t0:t0 + n], v[:, t0:t0 + n], q[:, t0:t0 + n]     # (B, n, H, d)
        U = xp.einsum("bnhk,bhkj->bnhj", K, W) + bias[:, None]
        xh, back = _ln(xp, U)
        G = back(K + xh - V)                                            # dl/du per token
        for i in range(n):
            # W_i = W_0 - sum_{j<=i} tau_i lr_j k_j^T g_j
            w = step[:, t0:t0 + i + 1] / (i + 1)                         # (B, i+1, H)
            Gi = G[:, :i + 1] * w[..., None]
            Wi = W - xp.einsum("bnhk,bnhj->bhkj", K[:, :i + 1], Gi)
            bi = bias - Gi.sum(1) if not xp.torch else bias - Gi.sum(dim=1)
            ui = xp.einsum("bhk,bhkj->bhj", Q[:, i], Wi) + bi
            outs.append(Q[:, i] + _ln(xp, ui)[0])
        W, bias = Wi, bi
    return xp.stack(outs, 1), [W, bias]


def _silu(xp, x):
    return x * xp.sigmoid(x)


def _lact(xp, cfg, q, k, v, step, alpha, init):
    """LaCT: SwiGLU, dot loss, one large_batch step with Muon per block, apply_then_update,
    per-column renormalization to the initial norms (docs/math.md §3.5, §5.7)."""
    B, T, H, d_k = q.shape
    if init is None or len(init) < 3 or any(x is None for x in init[:3]):
        raise ValueError("ttt.reference: lact starts from random weights; pass initial_state "
                         "(W0, W1, W2, …) (Layer.initial_state gives the library's)")
    if cfg["momentum"] != 0.0:
        raise ValueError("ttt.reference: lact's reference keeps no momentum (momentum = 0)")
    W0, W1, W2 = init[0], init[1], init[2]
    # optimizer state: the initial column norms of each weight (docs/math.md §3.5)
    if len(init) >= 6 and all(x is not None for x in init[3:6]):
        N = list(init[3:6])
    else:
        N = [xp.sqrt(xp.norm_sq(W, -2)) for W in (W0, W1, W2)]
    bsz = int(cfg["mini_batch"])
    outs = []
    for t0 in range(0, T, bsz):
        n = min(bsz, T - t0)
        K, V, Q = k[:, t0:t0 + n], v[:, t0:t0 + n], q[:, t0:t0 + n]
        hq = xp.einsum("bnhk,bhkj->bnhj", Q, W0)
        uq = xp.einsum("bnhk,bhkj->bnhj", Q, W2)
        outs.append(xp.einsum("bnhj,bhjv->bnhv", _silu(xp, hq) * uq, W1))
        if alpha is None:
            a_blk = cfg["decay"] ** n
            wts = step[:, t0:t0 + n] * xp.asarray(
                np.array([cfg["decay"] ** (n - 1 - i) for i in range(n)]))[None, :, None]
        else:
            la = alpha[:, t0:t0 + n]
            lg = xp.t.log(la) if xp.torch else np.log(la)
            cs = lg.cumsum(1) if not xp.torch else lg.cumsum(dim=1)
            tot = cs[:, -1:]
            wts = step[:, t0:t0 + n] * xp.exp(tot - cs)
            a_blk = xp.exp(tot[:, 0])[..., None, None]
        Hh = xp.einsum("bnhk,bhkj->bnhj", K, W0)
        Uu = xp.einsum("bnhk,bhkj->bnhj", K, W2)
        sg = xp.sigmoid(Hh)
        A = _silu(xp, Hh) * Uu
        E = -V * wts[..., None]                          # dot loss: dl/dz = -v
        G1 = xp.einsum("bnhj,bnhv->bhjv", A, E)
        Dl = xp.einsum("bnhv,bhjv->bnhj", E, W1)
        G2 = xp.einsum("bnhk,bnhj->bhkj", K, Dl * _silu(xp, Hh))
        G0 = xp.einsum("bnhk,bnhj->bhkj", K, Dl * Uu * sg * (1 + Hh * (1 - sg)))
        new = []
        for W, G, Nw in ((W0, G0, N[0]), (W1, G1, N[1]), (W2, G2, N[2])):
            Wn = a_blk * W - cfg["lr"] * _newton_schulz(xp, G, int(cfg["ns_steps"]))
            if cfg["renormalize"]:
                cn = xp.sqrt(xp.norm_sq(Wn, -2))[..., None, :]
                Wn = Wn / (cn + _RENORM_EPS) * Nw[..., None, :]
            new.append(Wn)
        W0, W1, W2 = new
    o = xp.t.cat(outs, dim=1) if xp.torch else np.concatenate(outs, axis=1)
    return o, [W0, W1, W2] + N


__all__ = ["reference", "path_attention", "PRESETS"]


def _rwkv7_reference(q, k, v, a=None, b=None, beta=None, log_alpha=None, eta=None,
                     initial_state=None, scale=None, **params):
    """RWKV-7's generalized delta rule (DPLR, docs/math.md "RWKV-7"), one token at a time:
        u_t = a_t S_{t-1},  S_t = Diag(w_t) S_{t-1} + b_t^T u_t + k_t^T v_t,  o_t = q_t S_t,
    S (B, H, d_k, d_v), w_t = exp(log_alpha_t) with log_alpha (B, T, H, d_k) (None: w = 1).
    a, b (B, T, H, d_k) are required: RWKV-7 takes a = -kappa_hat, b = kappa_hat * alpha."""
    if a is None or b is None:
        raise ValueError("ttt.reference('rwkv7'): give a and b (B, T, H, d_k): the removal "
                         "direction and its rates (RWKV-7: a = -kappa_hat, b = kappa_hat * alpha)")
    extra = [n for n, x in (("beta", beta), ("eta", eta)) if x is not None] + list(params)
    if extra:
        raise ValueError("ttt.reference('rwkv7'): takes q, k, v, a, b, log_alpha, "
                         "initial_state, scale; not %s" % ", ".join(extra))
    xp = _Xp(q)
    q, k, v, a, b = (xp.asarray(x) for x in (q, k, v, a, b))
    B, T, H, d_k = q.shape
    w = None if log_alpha is None else xp.exp(xp.asarray(log_alpha))
    if initial_state is not None and isinstance(initial_state, (list, tuple)):
        initial_state = initial_state[0]
    S = xp.zeros((B, H, d_k, v.shape[-1])) if initial_state is None else xp.asarray(initial_state)
    qs = q * (d_k ** -0.5 if scale is None else scale)
    outs = []
    for t in range(T):
        u = xp.einsum("bhk,bhkv->bhv", a[:, t], S)
        Sd = S if w is None else w[:, t][..., None] * S
        S = Sd + xp.einsum("bhk,bhv->bhkv", b[:, t], u) + xp.einsum("bhk,bhv->bhkv", k[:, t],
                                                                    v[:, t])
        outs.append(xp.einsum("bhk,bhkv->bhv", qs[:, t], S))
    return xp.stack(outs, 1), S


def path_attention(q, k, v, w, beta, scale=None, log_f=None):
    """PaTH attention (docs/math.md "PaTH attention") in float64: softmax attention whose score
    of query i and key j <= i is q_i H_i H_{i-1} ... H_{j+1} k_j^T, with H_t = I - beta_t w_t^T w_t
    (rows are tokens, docs/math.md section 0), so

        o_i = sum_{j <= i} softmax_j(scale * q_i H_i ... H_{j+1} k_j^T) v_j.

    q, k, v, w (B, T, H, D), w's rows unit vectors as the mixer makes them (any w is evaluated);
    beta (B, T, H), in (0, 2) in the mixer; scale D^-1/2 when None. log_f (B, T, H): the optional
    forget gate (PaTH-FoX; the mixer's model.gate: scalar), whose bias G_i - G_j (G the prefix
    sum of log f) is added to the score before the scale, as FLA does. Returns o (B, T, H, D).

    Written as a decoder would run it, independently of the C mixer (which carries each query
    back over the keys): the keys seen so far are kept transformed, and token i first applies its
    own H_i to every earlier key (k_j <- k_j H_i), then appends k_i untransformed and reads them
    all. Works on numpy arrays and on torch float64 tensors (differentiable)."""
    xp = _Xp(q)
    q, k, v, w, beta = (xp.asarray(x) for x in (q, k, v, w, beta))
    B, T, H, D = q.shape
    if tuple(k.shape) != (B, T, H, D) or tuple(w.shape) != (B, T, H, D) or \
            tuple(v.shape[:3]) != (B, T, H) or tuple(beta.shape) != (B, T, H):
        raise ValueError("ttt.reference.path_attention: q, k, w (B, T, H, D), v (B, T, H, d_v) "
                         "and beta (B, T, H); got q %s, k %s, v %s, w %s, beta %s"
                         % tuple(tuple(x.shape) for x in (q, k, v, w, beta)))
    s = D ** -0.5 if scale is None else scale
    G = None
    if log_f is not None:
        lf = xp.asarray(log_f)
        if tuple(lf.shape) != (B, T, H):
            raise ValueError("ttt.reference.path_attention: log_f (B, T, H) = %s; got %s"
                             % ((B, T, H), tuple(lf.shape)))
        G = lf.cumsum(1) if not xp.torch else lf.cumsum(dim=1)
    keys = []   # the transformed keys k_j H_{j+1} ... H_i, each (B, H, D)
    outs = []
    for i in range(T):
        wi, bi = w[:, i], beta[:, i]
        keys = [kj - (bi * (kj * wi).sum(-1))[..., None] * wi for kj in keys]
        keys.append(k[:, i])
        K = xp.stack(keys, 2)                                # (B, H, i + 1, D)
        a = xp.einsum("bhd,bhjd->bhj", q[:, i], K)          # (B, H, i + 1)
        if G is not None:  # + G_i - G_j
            Gj = G[:, :i + 1].transpose(0, 2, 1) if not xp.torch else G[:, :i + 1].transpose(1, 2)
            a = a + G[:, i][..., None] - Gj
        a = s * a
        a = a - (a.max(-1, keepdim=True)[0] if xp.torch else a.max(-1, keepdims=True))
        p = xp.exp(a)
        p = p / p.sum(-1)[..., None]
        outs.append(xp.einsum("bhj,bjhd->bhd", p, v[:, :i + 1]))
    return xp.stack(outs, 1)
