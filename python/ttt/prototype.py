"""Inner optimizers written in Python, for trying a rule before writing it in C (docs/python.md
"Prototyping an inner optimizer").

`run` is a float64 numpy driver for the linear fast weight S (d_k, d_v) with the dot or squared
loss, mini-batches and per-token gates and rates, following the generic driver's rule
(docs/math.md §1): inside a block every gradient is taken at the block's first weights, token i
reads the weights one optimizer step from the block start makes with the decayed prefix gradient
G_i = α_i G_{i−1} + g_i and the prefix retention A_i, and the last token's step starts the next
block. It calls your optimizer once per token from Python: slow (milliseconds per token), meant
for small T while a rule is being designed. The C library's `ttt_optimizers` registry is where a
rule goes once it works (docs/extending.md).
"""
import numpy as np


class SGD:
    """W ← α W − θ G (docs/math.md §3.1): the reference rule the tests compare with C's sgd."""

    def init(self, W):
        return ()

    def step(self, W, G, state, lr, alpha):
        return alpha * W - lr * G, state


class Momentum:
    """M ← μ M − θ G, W ← α W + M (docs/math.md §3.3), without Nesterov."""

    def __init__(self, momentum=0.9):
        self.mu = momentum

    def init(self, W):
        return (np.zeros_like(W),)

    def step(self, W, G, state, lr, alpha):
        M = self.mu * state[0] - lr * G
        return alpha * W + M, (M,)


def run(q, k, v, optimizer, loss="squared", lr=1.0, decay=1.0, mini_batch=1, eta=None,
        log_alpha=None, initial_state=None, scale=None):
    """(o, S, optimizer state) for the linear model trained by `optimizer` (float64 numpy).

    optimizer: an object with init(W) -> state and step(W, G, state, lr, alpha) -> (W, state),
    where W and G are (B, H, d_k, d_v), alpha (B, H, 1, 1) the retention to apply (the prefix
    retention inside a block), lr the block learning rate θ; or a function step(W, G, lr,
    alpha) -> W for a stateless rule. q, k: (B, T, H, d_k); v: (B, T, H, d_v); eta and
    log_alpha: (B, T, H) or None (1 and the constant `decay`); initial_state: S (B, H, d_k, d_v)
    or None (zeros); scale: the query scale, d_k^-0.5 when None (as ttt.Layer). Decay is
    decoupled: gradients are taken before it (docs/math.md §3.2)."""
    if loss not in ("dot", "squared"):
        raise ValueError("ttt.prototype.run: loss must be 'dot' or 'squared', got %r" % (loss,))
    if not hasattr(optimizer, "step"):
        fn = optimizer

        class _Stateless:
            def init(self, W):
                return ()

            def step(self, W, G, state, lr, alpha):
                return fn(W, G, lr, alpha), state
        optimizer = _Stateless()
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    B, T, H, d_k = q.shape
    d_v = v.shape[-1]
    scale = d_k ** -0.5 if scale is None else scale
    eta = np.ones((B, T, H)) if eta is None else np.asarray(eta, np.float64)
    la = (np.full((B, T, H), np.log(decay)) if log_alpha is None else
          np.asarray(log_alpha, np.float64))
    S = np.zeros((B, H, d_k, d_v)) if initial_state is None else \
        np.array(initial_state, np.float64)
    state = optimizer.init(S)
    o = np.empty((B, T, H, d_v))
    for t0 in range(0, T, mini_batch):
        S0, st0 = S, state
        G = np.zeros_like(S0)
        logA = np.zeros((B, H))
        for t in range(t0, min(t0 + mini_batch, T)):
            kt, vt = k[:, t], v[:, t]
            delta = -vt if loss == "dot" else np.einsum("bhk,bhkv->bhv", kt, S0) - vt
            g = eta[:, t][..., None, None] * np.einsum("bhk,bhv->bhkv", kt, delta)
            a = np.exp(la[:, t])
            G = a[..., None, None] * G + g
            logA = logA + la[:, t]
            S, state = optimizer.step(S0, G, st0, lr, np.exp(logA)[..., None, None])
            o[:, t] = scale * np.einsum("bhk,bhkv->bhv", q[:, t], S)
    return o, S, state


__all__ = ["run", "SGD", "Momentum"]
