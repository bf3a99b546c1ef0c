"""KDA (docs/math.md §4.5): the delta rule with a gate per key dimension. The library's forms
that accept it (the recurrent delta rule, KDA's chunkwise form and the generic driver) against
the float64 reference, on the hard cases of ttt.check, with hard resets of key rows
(log alpha = -inf) and through the backward; each comparison also with a perturbed input it must
reject."""
import numpy as np
import pytest

import ttt
from ttt.check import make_inputs

from layer_gradients import check_gradients

EPS = 2.0 ** -24


def tol(T, d):
    """float32 against the float64 recurrence, relative to max|reference| per tensor
    (docs/hardening.md "Portable tolerances"; python/tests/test_reference.py's bound): each step
    rounds every state entry through about d + 3 operations (the d-term product with the key, the
    rank-1 write, the gate), independent from step to step and carried by non-expanding steps, a
    walk of deviation ε·√((d + 3)·T); c = 6."""
    return 6 * EPS * np.sqrt((d + 3) * T)


TOL = tol(200, 16)  # the hard-reset sequence (T = 200, d_k = 16): 2.2e-5
FORMS = ["recurrent", "chunkwise", "generic", "auto"]


def library(form):
    def fn(q, k, v, scale, initial_state, **kw):
        L = ttt.Layer("kda", scale=scale, form=form)
        return L.forward(q, k, v, initial_state=initial_state, **kw)
    return fn


def _rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.abs(a - b).max() / np.abs(b).max())


@pytest.mark.parametrize("form", FORMS)
def test_kda_forms_equal_the_float64_recurrence(form):
    for shape in [(1, 67, 2, 16, 16), (1, 1024, 2, 16, 12)]:
        ttt.assert_close(library(form), "kda", shapes=[shape], tol=tol(shape[1], shape[3]))


def _reset_inputs(T=200, seed=3):
    kw = make_inputs("kda", 1, T, 2, 16, 12, seed=seed)
    rng = np.random.default_rng(seed + 1)
    la = kw["log_alpha"]
    la[rng.random(la.shape) < 0.05] = -np.inf  # a hard reset of those key rows
    return kw


@pytest.mark.parametrize("form", FORMS)
def test_kda_hard_resets_of_key_rows(form):
    kw = _reset_inputs()
    o_ref, s_ref = ttt.reference("kda", **kw)
    o, s = library(form)(**kw)
    print("kda resets (%s): ratio %.3f" % (form, max(_rel(o, o_ref), _rel(s, s_ref)) / TOL))
    assert _rel(o, o_ref) <= TOL and _rel(s, s_ref) <= TOL, (_rel(o, o_ref), _rel(s, s_ref))
    # a reset moved to another key dimension of the same token must be seen
    la = kw["log_alpha"].copy()
    b, t, h, i = np.argwhere(np.isinf(la))[len(la) // 2]
    j = (i + 1) % la.shape[-1]
    la[b, t, h, i], la[b, t, h, j] = la[b, t, h, j], la[b, t, h, i]
    o_bad, _ = ttt.reference("kda", **dict(kw, log_alpha=la))
    assert _rel(o, o_bad) > 100 * TOL


def test_a_scalar_gate_per_key_is_the_gated_delta_rule():
    # the same retention on every key dimension is Gated DeltaNet's scalar gate
    kw = make_inputs("gated_deltanet", 1, 67, 2, 16, 16, seed=5)
    vec = dict(kw, log_alpha=np.repeat(kw["log_alpha"][..., None], 16, -1))
    kw.pop("scale")
    vec.pop("scale")
    o_s, s_s = ttt.Layer("gated_deltanet", scale=1.0, form="recurrent").forward(**kw)
    o_v, s_v = library("recurrent")(scale=1.0, **vec)
    two = 2 * tol(67, 16)  # two float32 runs: the sum of their bounds
    print("kda scalar gate: ratio %.3f" % (max(_rel(o_v, o_s), _rel(s_v, s_s)) / two))
    assert _rel(o_v, o_s) <= two and _rel(s_v, s_s) <= two
    # a per-key gate that differs in one dimension is not
    vec["log_alpha"][0, :, 0, 3] -= 0.5
    o_w, _ = library("recurrent")(scale=1.0, **vec)
    assert _rel(o_w, o_s) > 100 * two


@pytest.mark.parametrize("form", ["recurrent", "chunkwise", "generic"])
@pytest.mark.parametrize("resets", [False, True])
def test_kda_backward_equals_the_reference_gradient(form, resets):
    kw = make_inputs("kda", 2, 9, 2, 4, 4, seed=1)
    if resets:
        kw["log_alpha"][0, 3, 1, 2] = kw["log_alpha"][1, 5, 0, 0] = -np.inf
    # T = 9 tokens, d = 4 (grad_tol: 9.0e-6); the control moves the gate of key 1 at token 2
    check_gradients("kda", kw, form, steps=9, d=4, moved=(0, 2, 0, 1))


def test_auto_runs_the_chunkwise_form():
    # form: auto picks KDA's chunkwise form for a gate per key (docs/math.md §4.5), not the
    # recurrent delta rule or the generic driver
    x = np.zeros((1, 64, 2, 16), np.float32)
    assert ttt.Layer("kda").form_for(x, x, x, beta=np.ones((1, 64, 2), np.float32),
                                     log_alpha=np.zeros((1, 64, 2, 16), np.float32)) == "chunkwise"
