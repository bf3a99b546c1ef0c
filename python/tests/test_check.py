"""ttt.assert_close catches a wrong implementation and accepts a correct one."""
import numpy as np
import pytest

import ttt


def recurrent_gdn(q, k, v, beta, log_alpha, initial_state, scale, forget_first=True):
    """A plain numpy gated delta rule; forget_first=False applies the gate after the write,
    a classic slip (the decay then also shrinks the new write)."""
    S = initial_state[0].copy()
    o = np.empty_like(v)
    for t in range(q.shape[1]):
        a = np.exp(log_alpha[:, t])[..., None, None]
        kt, vt, bt = k[:, t], v[:, t], beta[:, t][..., None, None]
        if forget_first:
            S = a * S
        S = S + bt * np.einsum("bhk,bhv->bhkv", kt, vt - np.einsum("bhk,bhkv->bhv", kt, S))
        if not forget_first:
            S = a * S
        o[:, t] = scale * np.einsum("bhk,bhkv->bhv", q[:, t], S)
    return o, S


SHAPES = [(1, 67, 2, 8, 8), (1, 256, 2, 8, 8)]


def test_accepts_a_correct_numpy_implementation():
    rep = ttt.assert_close(recurrent_gdn, "gated_deltanet", shapes=SHAPES, tol=1e-12)
    assert set(rep) == {"o", "state[0]"}


def test_catches_the_gate_after_the_write():
    def wrong(**kw):
        return recurrent_gdn(forget_first=False, **kw)
    with pytest.raises(AssertionError) as e:
        ttt.assert_close(wrong, "gated_deltanet", shapes=SHAPES, tol=1e-5)
    msg = str(e.value)
    # the report names every tensor and the case where it was worst
    assert "o " in msg and "state[0]" in msg and "worst relative error" in msg


def test_only_strong_gates_reveal_a_gate_clipped_at_minus_one():
    # clipping log alpha at -1 is invisible on mild gates and wrong on strong ones: the hard
    # cases are what catch it
    def clipped(log_alpha, **kw):
        return recurrent_gdn(log_alpha=np.maximum(log_alpha, -1.0), **kw)
    mild = [c for c in ttt.check.CASES if c[0] != "strong gates"]
    ttt.assert_close(clipped, "gated_deltanet", shapes=SHAPES, cases=mild, tol=1e-12)
    with pytest.raises(AssertionError, match="strong gates"):
        ttt.assert_close(clipped, "gated_deltanet", shapes=SHAPES, tol=1e-5)


def test_a_wrong_number_of_state_tensors_is_reported():
    def two(**kw):
        o, S = recurrent_gdn(**kw)
        return o, (S, S)
    with pytest.raises(AssertionError, match="returned 2 state tensors"):
        ttt.assert_close(two, "gated_deltanet", shapes=SHAPES[:1])
