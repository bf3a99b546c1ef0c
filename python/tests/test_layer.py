"""ttt.Layer over libttt.so: declarations, registries, errors, dtypes, zero-copy, state."""
import os
import re

import numpy as np
import pytest

import ttt
from ttt import _lib
from ttt.layer import _f32

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")

# these tests leave gates out on purpose (test_arguments.py checks the warning)
pytestmark = pytest.mark.filterwarnings("ignore::ttt.GateWarning")


def test_every_public_function_is_declared_and_loaded():
    # the declarations are parsed from the header: every function of ttt.h reaches Python
    with open(os.path.join(ROOT, "include", "ttt", "ttt.h")) as f:
        names = set(re.findall(r"\b(ttt_\w+)\s*\(", _lib._strip(f.read())))
    assert len(names) >= 15
    for n in sorted(names):
        assert hasattr(_lib.lib, n), n


def test_header_constants_evaluated():
    assert _lib.consts["TTT_DESC_UNSET_INT"] == -2**31
    assert _lib.consts["TTT_DESC_UNSET_NUM"] == -1.0e300
    assert _lib.ffi.sizeof("ttt_error") >= _lib.consts["TTT_ERROR_MSG_LEN"]


def test_registries_list_every_preset_and_optimizer():
    presets = [n for n, _ in ttt.registry("presets")]
    assert presets[:6] == ["linear_attention", "retnet", "mamba2", "gla", "deltanet",
                           "gated_deltanet"]
    reg = ttt.registries()
    assert set(reg) == {"optimizers", "models", "losses", "presets", "forms", "tasks"}
    assert {"sgd", "momentum", "muon", "large_batch", "adam"} <= set(reg["optimizers"])
    assert "memory" in reg["tasks"]
    with pytest.raises(ValueError, match="unknown registry"):
        ttt.registry("optimisers")


def test_every_preset_optimizer_and_form_is_reachable():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 5, 2, 8)).astype(np.float32)
    for p, _ in ttt.registry("presets"):
        # deltaproduct: two key/value pairs per token, one step each (mini_batch 1); the
        # loglinear presets: one query per level of state (mini_batch 1)
        nh, nl = ttt.Layer(p).steps_per_token(8), ttt.Layer(p).levels(8)
        kv = np.repeat(x, nh, axis=1)
        q = np.concatenate([x] * nl, axis=-1)
        o, _ = ttt.Layer(p, **({"mini_batch": 4} if nh == nl == 1 else {}))(q, kv, kv)
        assert o.shape == x.shape and np.all(np.isfinite(o)), p
    for name, _ in ttt.registry("optimizers"):
        o, _ = ttt.Layer("deltanet", optimizer=name)(x, x, x)
        assert np.all(np.isfinite(o)), name
    # every form computes some preset (linear attention, delta rule, TTT-Linear, Titans, LaCT;
    # MesaNet's forms at its own mini_batch 1)
    for form, _ in ttt.registry("forms"):
        ok = False
        for p in ("linear_attention", "deltanet", "ttt_linear", "titans", "lact", "mesanet"):
            try:
                ttt.Layer(p, form=form, **({} if p == "mesanet" else {"mini_batch": 4}))(x, x, x)
                ok = True
                break
            except ttt.Error:
                pass
        assert ok, form


def test_errors_carry_the_library_message():
    with pytest.raises(ttt.Error) as e:
        ttt.Layer("gated_deltant")
    assert e.value.status == "TTT_ERR_NAME"
    assert "did you mean 'gated_deltanet'" in str(e.value)
    with pytest.raises(ttt.Error, match=r"layer.optimizer.momentum.*\[0, 1\)"):
        ttt.Layer("titans", momentum=1.0)
    with pytest.raises(ttt.Error, match="momentun"):
        ttt.Layer("titans", momentun=0.5)
    with pytest.raises(ValueError, match="log_alpha has shape"):
        x = np.zeros((1, 3, 2, 4), np.float32)
        ttt.Layer("mamba2")(x, x, x, log_alpha=np.zeros((1, 3, 3), np.float32))


def test_float32_inputs_are_not_copied():
    a = np.zeros((2, 3, 4, 5), np.float32)
    assert _f32(a, "a") is a
    assert _f32(a.astype(np.float64), "a") is not a
    assert _f32(a[:, ::2], "a").flags.c_contiguous


def test_float64_in_float64_out_and_beta_is_lr_eta():
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((2, 20, 3, 8)) for _ in range(3))
    eta = rng.uniform(0.1, 1, (2, 20, 3))
    L = ttt.Layer("titans")  # lr 0.1: beta = 0.1 eta
    o64, st = L(q, k, v, eta=eta)
    assert o64.dtype == np.float64 and st[0].dtype == np.float64
    o32, _ = L(q.astype(np.float32), k.astype(np.float32), v.astype(np.float32),
               eta=eta.astype(np.float32))
    assert o32.dtype == np.float32
    np.testing.assert_array_equal(o64.astype(np.float32), o32)
    ob, _ = L(q, k, v, beta=0.1 * eta)
    # beta/lr in float64, then lr*eta in float32: two float32 runs, each within 6·ε·√((d + 3)·T)
    # of the float64 recurrence (the argument of the split-sequence test below), so they differ
    # by at most the sum of the two bounds
    tol = 2 * 6 * 2.0 ** -24 * np.sqrt((8 + 3) * 20)
    print("beta as lr·eta: ratio %.3f" % (np.abs(ob - o64).max() / np.abs(o64).max() / tol))
    np.testing.assert_allclose(ob, o64, rtol=0, atol=tol * np.abs(o64).max())
    # a step 1 % larger on one token is told apart
    beta = 0.1 * eta.copy()
    beta[:, 10] *= 1.01
    assert np.abs(L(q, k, v, beta=beta)[0] - o64).max() > tol * np.abs(o64).max()
    with pytest.raises(ValueError, match="beta or eta"):
        L(q, k, v, beta=eta, eta=eta)


def test_split_sequence_resumes_from_the_state():
    rng = np.random.default_rng(2)
    B, T, H, d = 2, 32, 2, 8
    q, k, v = (rng.standard_normal((B, T, H, d)).astype(np.float32) for _ in range(3))
    L = ttt.Layer("titans")  # carries W and the momentum M; blocks of 16
    o, st = L(q, k, v)
    o1, st1 = L(q[:, :16], k[:, :16], v[:, :16])
    o2, st2 = L(q[:, 16:], k[:, 16:], v[:, 16:], initial_state=st1)
    # Both runs against the float64 recurrence (the preset's constant step and decay, zero
    # state), each relative to the tensor's largest entry. Bound: every step rounds each state
    # entry through a d-term product, the residual, the momentum and the rank-1 write (about
    # d + 3 roundings of at most ε, independent); lr·|k|² ≈ 0.8 < 2 and decay ≤ 1 keep the
    # update non-expansive, so they add up over the T steps as a random walk, ε·√((d + 3)·T);
    # c = 6 covers the largest of the 2·32·2·8 entries (√(2 ln 1024) ≈ 3.7 deviations) plus the
    # split run's one extra rounding of the carried state. The two float32 runs then differ by
    # at most the sum of their bounds (docs/hardening.md "Portable tolerances").
    tol = 6 * 2.0 ** -24 * np.sqrt((d + 3) * T)
    f64 = lambda x: x.astype(np.float64)  # noqa: E731
    zero = [np.zeros((B, H, d, d))] * 2
    ro, rs = ttt.reference("titans", f64(q), f64(k), f64(v), initial_state=zero,
                           eta=np.ones((B, T, H)), scale=d ** -0.5)
    rel = lambda a, b: np.abs(a - b).max() / np.abs(b).max()  # noqa: E731
    for got, want in [(o, ro), (np.concatenate([o1, o2], 1), ro)] + list(zip(st, rs)) + \
            list(zip(st2, rs)):
        assert rel(got, want) <= tol, (rel(got, want), tol)
        print("split: ratio %.3f" % (rel(got, want) / tol))
    assert rel(np.concatenate([o1, o2], 1), o) <= 2 * tol
    # without the momentum half of the state the continuation differs
    o3, _ = L(q[:, 16:], k[:, 16:], v[:, 16:], initial_state=[st1[0]])
    assert rel(o3, o2) > 100 * 2 * tol


def test_initial_state_shapes_and_seed():
    L = ttt.Layer("ttt_linear", seed=3)
    s = L.initial_state(2, 3, 8)
    assert [x.shape for x in s] == [(2, 3, 8, 8), (2, 3, 8)]
    assert np.abs(s[0]).max() > 0 and np.all(s[1] == 0)
    assert not np.array_equal(ttt.Layer("ttt_linear", seed=4).initial_state(2, 3, 8)[0], s[0])


def test_backward_matches_finite_differences():
    rng = np.random.default_rng(3)
    B, T, H, d = 1, 6, 1, 4
    q, k, v = (rng.standard_normal((B, T, H, d)) for _ in range(3))
    la = rng.uniform(-0.5, -0.1, (B, T, H))
    beta = rng.uniform(0.2, 0.8, (B, T, H))
    d_o = rng.standard_normal((B, T, H, d))
    L = ttt.Layer("gated_deltanet", form="generic")
    g = L.backward(d_o, q, k, v, beta=beta, log_alpha=la)

    def f(la_):
        o = L.forward(q, k, v, beta=beta, log_alpha=la_)[0]
        return float(np.sum(o * d_o)), float(np.sum(np.abs(o * d_o)))
    # Central differences of the float32 layer (the loss summed in float64), h = 1e-2, each term
    # bounded on its own (docs/hardening.md "Portable tolerances"), n = 4d + T + 10 roundings a
    # step (the d-term products, a block's sums, a few element-wise), ε = 2^-24:
    #   - the library's gradient: the forward and backward walk, 6ε·√(2n·T) of max|gradient|;
    #   - the quotient's rounding: each loss within 6ε·√(n·T)·Σ|o ⊙ d_o| (the same walk on the
    #     loss's terms), so the quotient within that over h;
    #   - its truncation c·h², estimated by halving the step: 4/3·|D(h) − D(h/2)|.
    # Control: the gradient 5 % off is rejected at one of the tokens at least.
    h, n, eps = 1e-2, 4 * d + T + 10, 2.0 ** -24
    g_scale = max(np.abs(g[x]).max() for x in ("q", "k", "v", "beta", "log_alpha"))
    off = 0
    for idx in [(0, 0, 0), (0, 3, 0), (0, 5, 0)]:
        D = []
        for step in (h, h / 2):
            e = np.zeros_like(la)
            e[idx] = step
            (lp, ap), (lm, am) = f(la + e), f(la - e)
            D.append((lp - lm) / (2 * step))
        loss_round = 6 * eps * np.sqrt(n * T) * max(ap, am)
        tol = 6 * eps * np.sqrt(2 * n * T) * g_scale + loss_round / h + 4 / 3 * abs(D[0] - D[1])
        err = abs(D[0] - g["log_alpha"][idx])
        print("finite differences, log_alpha%s: ratio %.3f" % (idx, err / tol))
        assert err <= tol, (idx, err, tol)
        off += abs(D[0] - 1.05 * g["log_alpha"][idx]) > tol
    assert off > 0


def test_the_form_a_call_runs_is_reported():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((1, 40, 2, 8)).astype(np.float32)
    tok = rng.uniform(-0.2, -0.01, (1, 40, 2)).astype(np.float32)
    key = rng.uniform(-0.2, -0.01, (1, 40, 2, 8)).astype(np.float32)
    L = ttt.Layer("gated_deltanet", chunk=8)
    # docs/forms.md "How `auto` chooses": the delta rule runs its recurrence; with a gate per key
    # dimension (KDA) KDA's chunkwise form; the generic driver with decoupled placement
    assert L.form_for(x, x, x, log_alpha=tok) == "recurrent"
    o_auto, _ = L(x, x, x, log_alpha=tok)
    assert L.last_form == "recurrent"
    assert L.form_for(x, x, x, log_alpha=key) == "chunkwise"
    D = ttt.Layer("gated_deltanet", chunk=8, decay_placement="decoupled")
    assert D.form_for(x, x, x, log_alpha=key) == "generic"
    D(x, x, x, log_alpha=key)
    assert D.last_form == "generic"
    # what it names is what ran: bit for bit the named form's output, not another's
    o_rec, _ = ttt.Layer("gated_deltanet", chunk=8, form="recurrent")(x, x, x, log_alpha=tok)
    o_chk, _ = ttt.Layer("gated_deltanet", chunk=8, form="chunkwise")(x, x, x, log_alpha=tok)
    assert np.array_equal(o_auto, o_rec) and not np.array_equal(o_auto, o_chk)
