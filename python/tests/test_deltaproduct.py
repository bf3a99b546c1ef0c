"""Gated DeltaProduct (docs/math.md §4.7): n_h delta steps per token on n_h key/value pairs, the
gate once per token. The library's forms (recurrent, chunkwise, the generic driver, auto)
against the float64 reference ttt.reference("deltaproduct"), with hard resets, and through the
backward against torch's float64 gradient; each comparison also with a perturbed input it must
reject. k, v and beta are (B, n_h·T, H, ·): pair j of token t at row n_h·t + j."""
import numpy as np
import pytest

import ttt

from layer_gradients import check_gradients

# float32 against float64, relative to max|reference| per tensor (as test_kda.py: float32
# rounding accumulated over the tokens is measured at a few 1e-7 here, ≤ 2e-6 on the hard inputs
# of tests/test_hard_inputs.c; 1e-5 leaves room for the order of the sums)
TOL = 1e-5
FORMS = ["recurrent", "chunkwise", "generic", "auto"]


def _inputs(B=2, T=67, H=2, D=16, nh=2, seed=0, resets=False):
    rng = np.random.default_rng(seed)
    k = rng.standard_normal((B, nh * T, H, D)).astype(np.float32)
    k /= np.linalg.norm(k, axis=-1, keepdims=True)
    kw = dict(q=rng.standard_normal((B, T, H, D)).astype(np.float32), k=k,
              v=rng.standard_normal((B, nh * T, H, D)).astype(np.float32),
              beta=rng.uniform(0, 2, (B, nh * T, H)).astype(np.float32),
              log_alpha=-rng.uniform(1e-3, 1, (B, T, H)).astype(np.float32),
              initial_state=[(0.1 * rng.standard_normal((B, H, D, D))).astype(np.float32)])
    if resets:
        kw["log_alpha"][rng.random((B, T, H)) < 0.05] = -np.inf
    return kw


def _rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.abs(a - b).max() / np.abs(b).max())


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("resets", [False, True])
def test_forms_equal_the_float64_recurrence(form, resets):
    kw = _inputs(resets=resets)
    o_ref, s_ref = ttt.reference("deltaproduct", scale=0.25, **kw)
    o, s = ttt.Layer("deltaproduct", scale=0.25, form=form)(**kw)
    assert _rel(o, o_ref) <= TOL and _rel(s, s_ref) <= TOL, (_rel(o, o_ref), _rel(s, s_ref))
    # the two pairs of every token in the other order: the Householder factors do not commute
    sw = dict(kw)
    for n in ("k", "v", "beta"):
        x = kw[n].reshape((2, -1, 2) + kw[n].shape[2:])
        sw[n] = np.ascontiguousarray(x[:, :, ::-1].reshape(kw[n].shape))
    o_bad, _ = ttt.reference("deltaproduct", scale=0.25, **sw)
    assert _rel(o, o_bad) > 100 * TOL


def test_one_step_per_token_is_gated_deltanet():
    # the reference with n_h = 1 is Gated DeltaNet's; and pairs written with beta = 0 add nothing
    kw = _inputs(nh=1, seed=3)
    o_g, s_g = ttt.reference("gated_deltanet", scale=0.25, **kw)
    o_1, s_1 = ttt.reference("deltaproduct", scale=0.25, steps_per_token=1, **kw)
    assert np.array_equal(o_g, o_1) and np.array_equal(s_g, s_1)
    two = _inputs(nh=2, seed=3)
    for n in ("k", "v", "beta"):
        two[n][:, 0::2] = kw[n]
    two["beta"][:, 1::2] = 0.0
    two["q"], two["log_alpha"], two["initial_state"] = kw["q"], kw["log_alpha"], \
        kw["initial_state"]
    o, s = ttt.Layer("deltaproduct", scale=0.25, form="chunkwise")(**two)
    assert _rel(o, o_g) <= TOL and _rel(s, s_g) <= TOL
    two["beta"][0, 11, 1] = 0.5  # one second pair written: no longer the one-step rule
    o, _ = ttt.Layer("deltaproduct", scale=0.25, form="chunkwise")(**two)
    assert _rel(o, o_g) > 100 * TOL


def test_shapes_are_checked():
    kw = _inputs(T=5)
    with pytest.raises(ValueError, match="2 pairs per token"):
        ttt.Layer("deltaproduct").forward(kw["q"], kw["q"], kw["q"])
    with pytest.raises(ValueError, match="beta"):
        ttt.Layer("deltaproduct").forward(kw["q"], kw["k"], kw["v"], beta=kw["beta"][:, :5])


@pytest.mark.parametrize("form", ["recurrent", "chunkwise", "generic"])
@pytest.mark.parametrize("resets", [False, True])
def test_backward_equals_the_reference_gradient(form, resets):
    kw = _inputs(B=2, T=9, H=2, D=4, seed=1)
    if resets:
        kw["log_alpha"][0, 3, 1] = kw["log_alpha"][1, 5, 0] = -np.inf
    # 9 tokens of n_h = 2 pairs: 18 delta steps, d = 4 (grad_tol: 1.4e-5; it was a fixed 1e-4);
    # the control moves the gate of token 2
    check_gradients("deltaproduct", kw, form, steps=18, d=4, moved=(0, 2, 0))


def test_auto_runs_the_recurrence():
    x = np.zeros((1, 64, 2, 16), np.float32)
    y = np.zeros((1, 128, 2, 16), np.float32)
    assert ttt.Layer("deltaproduct").form_for(x, y, y, beta=np.ones((1, 128, 2), np.float32),
                                              log_alpha=np.zeros((1, 64, 2),
                                                                 np.float32)) == "recurrent"
