"""The float64 reference and the library's float32 forms pin each other, preset by preset."""
import numpy as np
import pytest

import ttt
from ttt.reference import PRESETS

EPS = 2.0 ** -24


def tol(T, d):
    """The float32 forms' bound against the float64 recurrence, relative to max|reference| per
    tensor (docs/hardening.md "Portable tolerances"). Each step rounds every state entry through
    a d-term product with the key, the rank-1 write and the gate: about d + 3 roundings of at
    most ε of the entry's scale, independent from step to step; the state carries them over the
    T steps (gates ≤ 1; β near 2 is a reflection, which keeps them), a random walk of standard
    deviation ε·√((d + 3)·T). c = 6: the largest of the ≤ 2·1024·2·16 entries compared is within
    √(2 ln 65536) ≈ 4.7 deviations, and chunked forms add one more product per chunk."""
    return 6 * EPS * np.sqrt((d + 3) * T)


SHAPES = [(1, 67, 2, 16, 16), (1, 1024, 2, 16, 16)]
TOL = tol(67, 16)   # the short sequence's bound: 1.3e-5


def assert_close_per_shape(fn, preset, shapes=SHAPES, **kw):
    for shape in shapes:
        ttt.assert_close(fn, preset, shapes=[shape], tol=tol(shape[1], shape[3]), **kw)


def library(preset, **options):
    def fn(q, k, v, scale, initial_state, **kw):
        # the candidate is given the scale the reference uses
        L = ttt.Layer(preset, scale=scale, **options)
        return L.forward(q, k, v, initial_state=initial_state, **kw)
    return fn


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_library_forms_equal_the_float64_recurrence(preset):
    assert_close_per_shape(library(preset), preset)


@pytest.mark.parametrize("form", ["recurrent", "chunkwise", "parallel"])
def test_every_delta_rule_form_equals_the_reference(form):
    ttt.assert_close(library("gated_deltanet", form=form, chunk=16), "gated_deltanet",
                     shapes=[(1, 67, 2, 16, 16)], tol=TOL)


def test_a_changed_hyperparameter_is_seen():
    # the comparison is sharp enough to see the preset's decay move by 1 % (the state moves by
    # ~1e-2 of its scale, 800 times TOL)
    with pytest.raises(AssertionError, match="state"):
        ttt.assert_close(library("retnet", decay=0.96), "retnet", shapes=[(1, 67, 2, 16, 16)],
                         tol=TOL)
    # and the same override on both sides agrees
    ttt.assert_close(library("retnet", decay=0.96), "retnet", shapes=[(1, 67, 2, 16, 16)],
                     tol=TOL, decay=0.96)


def test_titans_with_a_shorter_chunk():
    ttt.assert_close(library("titans", mini_batch=5, momentum=0.5), "titans",
                     shapes=[(1, 67, 2, 8, 8)], tol=tol(67, 8), mini_batch=5, momentum=0.5)


def test_reference_arguments_are_checked():
    x = np.zeros((1, 3, 1, 4))
    with pytest.raises(ValueError, match="no float64 reference for preset 'ttt_mlp'"):
        ttt.reference("ttt_mlp", x, x, x)
    with pytest.raises(ValueError, match="has no parameter 'momentum'"):
        ttt.reference("deltanet", x, x, x, momentum=0.5)
    with pytest.raises(ValueError, match="pass initial_state"):
        ttt.reference("ttt_linear", x, x, x)
