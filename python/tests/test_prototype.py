"""ttt.prototype: an inner optimizer written in Python runs the generic driver's rule, so a rule
prototyped there gives what the C optimizer gives once it is written."""
import numpy as np
import pytest

import ttt
from ttt import prototype as P

# float32 C against the float64 Python driver, relative to the tensor's scale: measured ~2e-7
# at T = 37; 1e-5 is the budget of docs/python.md "The float64 reference"
TOL = 1e-5


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


@pytest.mark.parametrize("b", [1, 3])
def test_a_python_adam_equals_the_library_adam(b):
    x = inputs(1)
    o, S, (m, v, t) = P.run(optimizer=Adam(), lr=0.05, mini_batch=b, **x)
    L = ttt.Layer(model="linear", loss="squared", optimizer="adam", lr=0.05, mini_batch=b)
    oc, (Sc, mc, vc, tc) = L(**x)
    assert [n for n, _ in L.state_info(8)][1:3] == ["W.opt0", "W.opt1"]
    assert rel(oc, o) <= TOL and rel(Sc, S) <= TOL and rel(mc, m) <= TOL
    assert rel(vc, v) <= 1e-4  # second moments: squares of float32 gradients


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
