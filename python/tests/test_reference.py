"""The float64 reference and the library's float32 forms pin each other, preset by preset."""
import numpy as np
import pytest

import ttt
from ttt.reference import PRESETS

# float32 forms against the float64 recurrence, relative to max|reference| per tensor: measured
# at most 3e-6 over T = 1024 with every hard case (float32 rounding accumulated over the
# sequence); 1e-5 leaves room for summation-order changes between forms.
TOL = 1e-5
SHAPES = [(1, 67, 2, 16, 16), (1, 1024, 2, 16, 16)]


def library(preset, **options):
    def fn(q, k, v, scale, initial_state, **kw):
        # the candidate is given the scale the reference uses
        L = ttt.Layer(preset, scale=scale, **options)
        return L.forward(q, k, v, initial_state=initial_state, **kw)
    return fn


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_library_forms_equal_the_float64_recurrence(preset):
    ttt.assert_close(library(preset), preset, shapes=SHAPES, tol=TOL)


@pytest.mark.parametrize("form", ["recurrent", "chunkwise", "parallel"])
def test_every_delta_rule_form_equals_the_reference(form):
    ttt.assert_close(library("gated_deltanet", form=form, chunk=16), "gated_deltanet",
                     shapes=[(1, 67, 2, 16, 16)], tol=TOL)


def test_a_changed_hyperparameter_is_seen():
    # the comparison is sharp enough to see the preset's decay move by 1 %
    with pytest.raises(AssertionError, match="state"):
        ttt.assert_close(library("retnet", decay=0.96), "retnet", shapes=[(1, 67, 2, 16, 16)],
                         tol=TOL)
    # and the same override on both sides agrees
    ttt.assert_close(library("retnet", decay=0.96), "retnet", shapes=[(1, 67, 2, 16, 16)],
                     tol=TOL, decay=0.96)


def test_titans_with_a_shorter_chunk():
    ttt.assert_close(library("titans", mini_batch=5, momentum=0.5), "titans",
                     shapes=[(1, 67, 2, 8, 8)], tol=TOL, mini_batch=5, momentum=0.5)


def test_reference_arguments_are_checked():
    x = np.zeros((1, 3, 1, 4))
    with pytest.raises(ValueError, match="no float64 reference for preset 'ttt_mlp'"):
        ttt.reference("ttt_mlp", x, x, x)
    with pytest.raises(ValueError, match="has no parameter 'momentum'"):
        ttt.reference("deltanet", x, x, x, momentum=0.5)
    with pytest.raises(ValueError, match="pass initial_state"):
        ttt.reference("ttt_linear", x, x, x)
