"""Log-linear attention (docs/math.md §4.8): Λ levels of state merged by the Fenwick schedule,
each read with its own query. ttt.Layer("loglinear_mamba2" | "loglinear_gdn") against the float64
reference ttt.reference on the same inputs, with hard resets, and through the backward against
torch's float64 gradient; each comparison also with a perturbed input it must reject. q is
(B, T, H, Λ·d_k): level ℓ's query λ^ℓ q in columns ℓ·d_k … (ℓ + 1)·d_k − 1."""
import numpy as np
import pytest

import ttt

from layer_gradients import check_gradients

# float32 against float64, relative to max|reference| per tensor (as test_deltaproduct.py: the
# C suites measure ≤ 3e-7 relative RMS on the hard inputs of tests/test_hard_inputs.c; 1e-5 leaves
# room for max-norm over a few hundred tokens and the order of the sums)
TOL = 1e-5
PRESETS = ["loglinear_mamba2", "loglinear_gdn"]


def _inputs(nl, B=2, T=150, H=2, D=8, seed=0, resets=False):
    rng = np.random.default_rng(seed)
    k = rng.standard_normal((B, T, H, D)).astype(np.float32)
    k /= np.linalg.norm(k, axis=-1, keepdims=True)
    q = rng.standard_normal((B, T, H, D))
    lam = rng.uniform(0.25, 2.0, (B, T, H, nl))
    kw = dict(q=(lam[..., :, None] * q[..., None, :]).reshape(B, T, H, nl * D).astype(np.float32),
              k=k, v=rng.standard_normal((B, T, H, D)).astype(np.float32),
              beta=rng.uniform(0, 2, (B, T, H)).astype(np.float32),
              log_alpha=-rng.uniform(1e-3, 1, (B, T, H)).astype(np.float32),
              initial_state=[(0.1 * rng.standard_normal((B, H, nl * D, D))).astype(np.float32)])
    if resets:
        kw["log_alpha"][rng.random((B, T, H)) < 0.05] = -np.inf
    return kw


def _rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.abs(a - b).max() / np.abs(b).max())


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("nl", [4, 9])  # 4: the top level holds the old buckets; 9: exact
@pytest.mark.parametrize("resets", [False, True])
def test_layer_equals_the_float64_recurrence(preset, nl, resets):
    kw = _inputs(nl, resets=resets)
    o_ref, s_ref = ttt.reference(preset, scale=0.25, levels=nl, **kw)
    o, s = ttt.Layer(preset, scale=0.25, levels=nl)(**kw)
    assert _rel(o, o_ref) <= TOL and _rel(s, s_ref) <= TOL, (_rel(o, o_ref), _rel(s, s_ref))
    # two levels' queries exchanged: a token read from the wrong bucket
    D = kw["k"].shape[-1]
    sw = dict(kw)
    q = kw["q"].reshape(kw["q"].shape[:3] + (nl, D)).copy()
    q[..., [1, 2], :] = q[..., [2, 1], :]
    sw["q"] = q.reshape(kw["q"].shape)
    o_bad, _ = ttt.reference(preset, scale=0.25, levels=nl, **sw)
    assert _rel(o, o_bad) > 100 * TOL


@pytest.mark.parametrize("preset", PRESETS)
def test_level_scales_are_the_queries_per_level(preset):
    """reference(q (B, T, H, d_k), level_scales λ) is reference(q per level λ^ℓ q)."""
    rng = np.random.default_rng(3)
    B, T, H, D, nl = 1, 40, 2, 4, 7
    q = rng.standard_normal((B, T, H, D))
    lam = rng.uniform(0.1, 2, (B, T, H, nl))
    k = rng.standard_normal((B, T, H, D))
    k /= np.linalg.norm(k, axis=-1, keepdims=True)
    v = rng.standard_normal((B, T, H, D))
    la = -rng.uniform(0, 1, (B, T, H))
    o1, _ = ttt.reference(preset, q, k, v, log_alpha=la, level_scales=lam, levels=nl)
    qq = (lam[..., :, None] * q[..., None, :]).reshape(B, T, H, nl * D)
    o2, _ = ttt.reference(preset, qq, k, v, log_alpha=la, levels=nl)
    assert np.abs(o1 - o2).max() <= 1e-14 * np.abs(o2).max()
    with pytest.raises(ValueError, match="level_scales"):
        ttt.reference(preset, q, k, v, level_scales=lam[..., :3], levels=nl)


@pytest.mark.parametrize("preset", PRESETS)
def test_gradients_equal_float64_autograd(preset):
    kw = _inputs(12, B=1, T=23, H=2, D=4, seed=5, resets=True)
    kw = {n: (x.astype(np.float64) if not isinstance(x, list) else [x[0].astype(np.float64)])
          for n, x in kw.items()}
    # Λ = 12 levels (the preset's) of 4 key dimensions: 48 terms in each read-out
    check_gradients(preset, kw, "recurrent", 23, 48, moved=(0, 11, 1))


def test_wrong_query_width_is_refused():
    kw = _inputs(4)
    kw["q"] = kw["q"][..., :8]
    with pytest.raises(ValueError, match="levels"):
        ttt.Layer("loglinear_gdn", levels=4)(**kw)
