"""ttt.prototype: an inner optimizer written in Python runs the generic driver's rule, so a rule
prototyped there gives what the C optimizer gives once it is written."""
import numpy as np
import pytest

import ttt
from ttt import prototype as P

EPS = 2.0 ** -24
T_, D_ = 37, 8


def tol(T=T_, d=D_):
    """float32 C against the float64 Python driver, relative to the tensor's scale (docs/hardening.md
    "Portable tolerances"): each step rounds every state entry through a d-term product with the
    key, the rank-1 write and the retention, about d + 3 roundings of at most ε, carried over the
    T steps (retention ≤ 1) as a random walk of deviation ε·√((d + 3)·T); c = 6 covers the
    largest of the ≤ 2·37·8·8 entries (√(2 ln 4736) ≈ 4.1 deviations) with blocks' sums of
    gradients as one more product."""
    return 6 * EPS * np.sqrt((d + 3) * T)


TOL = tol()   # 7.2e-6


def inputs(seed=0, B=1, T=37, H=2, d=8):
    rng = np.random.default_rng(seed)
    unit = lambda x: x / np.linalg.norm(x, axis=-1, keepdims=True)  # noqa: E731
    return dict(q=unit(rng.standard_normal((B, T, H, d))), k=unit(rng.standard_normal((B, T, H,
                                                                                        d))),
                v=rng.standard_normal((B, T, H, d)), eta=rng.uniform(0.2, 1, (B, T, H)),
                log_alpha=rng.uniform(-0.3, -0.01, (B, T, H)))


def rel(a, b):
    return np.abs(a - b).max() / np.abs(b).max()


class Adam:
    """Adam with decoupled decay as docs/math.md §3.6 states it: a rule as a user would write
    it, compared with the library's `adam`."""

    def __init__(self, beta1=0.9, beta2=0.999, eps=1e-8):
        self.b1, self.b2, self.eps = beta1, beta2, eps

    def init(self, W):
        return (np.zeros_like(W), np.zeros_like(W), 0)

    def step(self, W, G, state, lr, alpha):
        m, v, t = state
        m = self.b1 * m + (1 - self.b1) * G
        v = self.b2 * v + (1 - self.b2) * G * G
        t += 1
        mh, vh = m / (1 - self.b1 ** t), v / (1 - self.b2 ** t)
        return alpha * W - lr * mh / (np.sqrt(vh) + self.eps), (m, v, t)


@pytest.mark.parametrize("b", [1, 4])
@pytest.mark.parametrize("loss", ["squared", "dot"])
def test_sgd_and_momentum_equal_the_library(b, loss):
    x = inputs()
    for name, opt, kw in [("sgd", P.SGD(), {}), ("momentum", P.Momentum(0.5),
                                                  {"momentum": 0.5})]:
        o, S, _ = P.run(optimizer=opt, loss=loss, lr=0.5, mini_batch=b, **x)
        L = ttt.Layer(model="linear", loss=loss, optimizer=name, lr=0.5, mini_batch=b, **kw)
        oc, sc = L(**x)
        sc = sc if isinstance(sc, tuple) else (sc,)
        assert rel(oc, o) <= TOL and rel(sc[0], S) <= TOL, (name, b, rel(oc, o))


class Recording(Adam):
    """Adam that keeps the block gradient each block's last token applies (the one whose moments
    the next block starts from)."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def step(self, W, G, state, lr, alpha):
        self.calls.append((np.abs(W).max(), G.copy()))
        return super().step(W, G, state, lr, alpha)


def adam_bounds(x, rec, b, lr, o, S, m, v):
    """Bounds of the float32 library's o, S, m and v against the float64 driver, each relative
    to the tensor's scale, derived from the recorded float64 gradients.

    A block gradient G = Σ_t η_t k_t r_tᵀ, r = Sᵀk − v, over b tokens: the state's own error
    (tol() of max|S|, through the d-term product with a unit key: ≤ √d of it) and the product's
    and the residual's roundings ((d + 2)·ε of |S|ᵀ|k| + |v| ≤ √d·max|S| + max|v|) bound r's
    error by one δr; the outer product and the block sum add (2 + 2b)·ε of their terms. So
    entrywise δG_ij ≤ Σ_t η_t|k_ti|·(δr + (2 + 2b)·ε·(√d·max|S| + max|v|)). Then per block,
    entrywise: δm ≤ β₁δm + (1 − β₁)δG, δv ≤ β₂δv + (1 − β₂)(2|G|δG + δG²) + 2ε·v, and the
    step lr·m̂/(√v̂ + eps) moves by at most lr·(δm̂ + |m̂|·δv̂/(2v̂))/(√v̂ + eps) — its
    conditioning: an entry whose second moment is small amplifies. The state adds the steps'
    errors (retention ≤ 1) to its own rounding (tol()); o = q·S/√d with unit q moves by at
    most (‖q‖₁/√d)·δS ≤ δS, plus its own rounding."""
    B, T, H, d = x["q"].shape
    Smax = max(w for w, _ in rec.calls)
    fit = np.sqrt(d) * Smax + np.abs(x["v"]).max()
    dr = np.sqrt(d) * tol() * Smax + (d + 2) * EPS * fit + (2 + 2 * b) * EPS * fit
    ends = [(t0, min(t0 + b, T)) for t0 in range(0, T, b)]
    b1, b2 = rec.b1, rec.b2
    mm, vv, dm, dv, dS = 0.0, 0.0, 0.0, 0.0, 0.0
    for n, (t0, t1) in enumerate(ends, 1):
        G = rec.calls[t1 - 1][1]
        e_G = (x["eta"][:, t0:t1, :, None] * np.abs(x["k"][:, t0:t1])).sum(1)[..., None] * dr
        mm, vv = b1 * mm + (1 - b1) * G, b2 * vv + (1 - b2) * G * G
        dm = b1 * dm + (1 - b1) * e_G + 2 * EPS * np.abs(mm)
        dv = b2 * dv + (1 - b2) * (2 * np.abs(G) * e_G + e_G * e_G) + 2 * EPS * vv
        c1, c2 = 1 - b1 ** n, 1 - b2 ** n
        # β rounded to float32 (|δβ| ≤ εβ) moves (1 − β)·Σβᵏx by at most εβ·(1/(1 − β) + n)
        # of it and the bias correction 1 − βⁿ by nεβⁿ/(1 − βⁿ) of it: for β₂ = 0.999 that is
        # ~1000ε, the conditioning of 1 − β₂
        hm = EPS * b1 * (1 / (1 - b1) + n) + n * EPS * b1 ** n / c1
        hv = EPS * b2 * (1 / (1 - b2) + n) + n * EPS * b2 ** n / c2
        den = np.sqrt(vv / c2) + rec.eps
        dS += lr * np.max(((dm + hm * np.abs(mm)) / c1 +
                           np.abs(mm / c1) * (dv + hv * vv) / (2 * vv)) / den)
    tS = tol() + dS / np.abs(S).max()
    hm = EPS * b1 * (1 / (1 - b1) + n)
    hv = EPS * b2 * (1 / (1 - b2) + n)
    return (tS * np.abs(S).max() / np.abs(o).max() + tol(), tS,
            np.max(dm + hm * np.abs(mm)) / np.abs(m).max(),
            np.max(dv + hv * vv) / np.abs(v).max())


@pytest.mark.parametrize("b", [1, 3])
def test_a_python_adam_equals_the_library_adam(b):
    x = inputs(1)
    rec = Recording()
    o, S, (m, v, t) = P.run(optimizer=rec, lr=0.05, mini_batch=b, **x)
    L = ttt.Layer(model="linear", loss="squared", optimizer="adam", lr=0.05, mini_batch=b)
    oc, (Sc, mc, vc, tc) = L(**x)
    assert [n for n, _ in L.state_info(8)][1:3] == ["W.opt0", "W.opt1"]
    t_o, t_S, t_m, t_v = adam_bounds(x, rec, b, 0.05, o, S, m, v)
    print("adam b=%d ratios o %.2f S %.2f m %.2f v %.2f" % (
        b, rel(oc, o) / t_o, rel(Sc, S) / t_S, rel(mc, m) / t_m, rel(vc, v) / t_v))
    assert rel(oc, o) <= t_o and rel(Sc, S) <= t_S and rel(mc, m) <= t_m and rel(vc, v) <= t_v
    # β₁ = 0.85 instead of 0.9 (o, S and m) and β₂ = 0.998 instead of 0.999 (v) are told apart.
    # The bounds of o and S are worst cases: they add m̂'s and v̂'s errors as if independent,
    # where a gradient's own error cancels in m̂/√v̂ (exactly at the first step), so they cannot
    # see a change of β₁ much smaller than this one.
    o2, S2, (m2, _, _) = P.run(optimizer=Adam(beta1=0.85), lr=0.05, mini_batch=b, **x)
    _, _, (_, v2, _) = P.run(optimizer=Adam(beta2=0.998), lr=0.05, mini_batch=b, **x)
    print("moved/bound o %.1f S %.1f m %.1f v %.1f" % (rel(o2, o) / t_o, rel(S2, S) / t_S,
                                                        rel(m2, m) / t_m, rel(v2, v) / t_v))
    assert rel(o2, o) > t_o and rel(S2, S) > t_S and rel(m2, m) > t_m and rel(v2, v) > t_v


def test_a_wrong_rule_is_told_apart():
    x = inputs(2)
    o, _, _ = P.run(optimizer=P.Momentum(0.6), lr=0.5, mini_batch=4, **x)
    oc, _ = ttt.Layer(model="linear", loss="squared", optimizer="momentum", lr=0.5, mini_batch=4,
                      momentum=0.5)(**x)
    assert rel(oc, o) > 100 * TOL


def test_a_stateless_function_and_the_reference():
    x = inputs(3)
    o, S, _ = P.run(optimizer=lambda W, G, lr, alpha: alpha * W - lr * G, **x)
    # linear model, squared loss, sgd, b = 1, decoupled decay
    o_ref, S_ref = ttt.reference("gated_deltanet", decay_placement="decoupled", **x)
    assert rel(o, o_ref) <= 1e-12 and rel(S, S_ref) <= 1e-12
    with pytest.raises(ValueError, match="loss must be"):
        P.run(optimizer=P.SGD(), loss="recon", **x)
