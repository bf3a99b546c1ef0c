"""ttt.Layer's defaults and refusals: the query scale, gated presets without their gates, and
arguments the library cannot take, each refused by name before anything reaches C."""
import warnings

import numpy as np
import pytest

import ttt
from ttt.layer import GATES

RNG = np.random.default_rng(11)


def inputs(B=1, T=12, H=2, d=8):
    q, k, v = (RNG.standard_normal((B, T, H, d)).astype(np.float32) for _ in range(3))
    return q, k / np.linalg.norm(k, axis=-1, keepdims=True), v


def test_the_default_query_scale_is_d_k_to_the_minus_half():
    # FLA's default: without scale=, q is scaled by d_k^-0.5, for every d_k of the calls
    for d in (8, 64):
        q, k, v = inputs(d=d)
        beta = np.full(q.shape[:3], 0.5, np.float32)
        o, _ = ttt.Layer("deltanet")(q, k, v, beta=beta)
        o_fla, _ = ttt.Layer("deltanet", scale=d ** -0.5)(q, k, v, beta=beta)
        o_one, _ = ttt.Layer("deltanet", scale=1.0)(q, k, v, beta=beta)
        assert np.array_equal(o, o_fla)
        assert not np.allclose(o, o_one)
        assert "scale %g," % (d ** -0.5) in ttt.Layer("deltanet").tuple(d)
        # the float64 reference and the prototype driver default to the same scale
        o64, _ = ttt.reference("deltanet", q, k, v, beta=beta)
        o64_fla, _ = ttt.reference("deltanet", q, k, v, beta=beta, scale=d ** -0.5)
        assert np.array_equal(o64, o64_fla)
        p, _, _ = ttt.prototype.run(q, k, v, ttt.prototype.SGD(), eta=beta)
        p_fla, _, _ = ttt.prototype.run(q, k, v, ttt.prototype.SGD(), eta=beta, scale=d ** -0.5)
        assert np.array_equal(p, p_fla)
    # the library's float32 layer and the float64 reference agree by default: the float32
    # recurrence's walk, 6ε·√((d + 3)·T) of max|reference| (python/tests/test_reference.py's
    # bound; docs/hardening.md "Portable tolerances"), T = 12, d = 64; one token's β 1 % larger
    # is told apart
    tol = 6 * 2.0 ** -24 * np.sqrt((d + 3) * q.shape[1])
    print("default scale against float64: ratio %.3f"
          % (np.abs(o - o64).max() / (tol * np.abs(o64).max())))
    assert np.abs(o - o64).max() <= tol * np.abs(o64).max()
    beta_x = beta.copy()
    beta_x[0, 2, 0] *= 1.01
    o_x, _ = ttt.Layer("deltanet")(q, k, v, beta=beta_x)
    assert np.abs(o_x - o64).max() > tol * np.abs(o64).max()


def gates_for(preset, q):
    B, T, H, d = q.shape
    g = {}
    if "beta" in GATES[preset]:
        g["beta"] = np.full((B, T, H), 0.5, np.float32)
    if "log_alpha" in GATES[preset]:
        g["log_alpha"] = np.full((B, T, H, d) if preset == "gla" else (B, T, H), -0.1,
                                 np.float32)
    return g


def caught(fn):
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        fn()
    return [str(x.message) for x in w if issubclass(x.category, ttt.GateWarning)]


def test_a_gated_preset_called_without_its_gates_warns():
    q, k, v = inputs()
    for preset in GATES:
        L = ttt.Layer(preset, mini_batch=4)
        full = gates_for(preset, q)
        assert caught(lambda: L(q, k, v, **full)) == [], preset
        for name in full:
            part = {n: x for n, x in full.items() if n != name}
            said = caught(lambda: L(q, k, v, **part))
            assert len(said) == 1 and ("without %s" % name) in said[0], (preset, said)
        # the constant chosen on purpose: no warning
        const = {"beta": {"lr": 0.5}, "log_alpha": {"decay": 0.9}}
        chosen = {}
        for name in full:
            chosen.update(const[name])
        assert caught(lambda: ttt.Layer(preset, mini_batch=4, **chosen)(q, k, v)) == [], preset
    # the torch path warns at the caller's line too
    torch = pytest.importorskip("torch")
    with pytest.warns(ttt.GateWarning, match="gated_deltanet called without log_alpha") as w:
        ttt.Layer("gated_deltanet")(*(torch.from_numpy(x) for x in (q, k, v)),
                                    beta=torch.full(q.shape[:3], 0.5))
    assert w[0].filename == __file__
    # presets whose definition has no per-token gate: no warning
    for preset in ("linear_attention", "retnet", "ttt_linear", "lact"):
        assert caught(lambda: ttt.Layer(preset, mini_batch=4)(q, k, v)) == [], preset


def test_beta_is_named_beta_and_may_be_a_number():
    q, k, v = inputs()
    B, T, H, _ = q.shape
    for preset in ("deltanet", "titans"):  # lr 1: beta passed as it is; lr 0.1: beta / lr
        L = ttt.Layer(preset)
        with pytest.raises(ValueError, match=r"ttt: beta has shape \(1, 12, 3\)"):
            L(q, k, v, beta=np.ones((B, T, 3), np.float32))
        with pytest.raises(TypeError, match="ttt: beta must be float32 or float64, got int32"):
            L(q, k, v, beta=np.ones((B, T, H), np.int32))
        with pytest.raises(ValueError, match=r"ttt: beta has shape \(2,\)"):
            L(q, k, v, beta=[0.5, 0.5])
        full = np.full((B, T, H), 0.25, np.float32)
        o, _ = L(q, k, v, beta=full, log_alpha=np.full((B, T, H), -0.1, np.float32))
        for scalar in (0.25, np.float32(0.25), np.array(0.25)):
            o_s, _ = L(q, k, v, beta=scalar, log_alpha=-0.1)
            assert np.array_equal(o_s, o), (preset, type(scalar))
        o_int, _ = L(q, k, v, beta=1, log_alpha=-0.1)  # a Python int is a number too
        assert not np.array_equal(o_int, o)
        # the gradient of a number is the sum over the tokens it stands for
        d_o = np.ones_like(o)
        g = L.backward(d_o, q, k, v, beta=full, log_alpha=-0.1)
        g_s = L.backward(d_o, q, k, v, beta=0.25, log_alpha=-0.1)
        assert g_s["beta"].shape == () and g_s["log_alpha"].shape == ()
        # the same per-token gradients summed in float64 and rounded once to float32: within
        # ε = 2^-24 of the sum (c = 3 over that exact bound); the sum without the first token's
        # is told apart
        total = g["beta"].sum(dtype=np.float64)
        print("scalar beta gradient: ratio %.3f"
              % (abs(float(g_s["beta"]) - total) / (3 * 2.0 ** -24 * abs(total))))
        assert abs(float(g_s["beta"]) - total) <= 3 * 2.0 ** -24 * abs(total)
        assert abs(float(g_s["beta"]) - (total - g["beta"][0, 0, 0])) > 3 * 2.0 ** -24 * abs(total)
        assert np.array_equal(g_s["q"], g["q"])


def test_a_misspelt_keyword_gets_a_suggestion():
    with pytest.raises(ttt.Error, match="did you mean the layer's 'chunk'"):
        ttt.Layer("deltanet", chunck=64)
    with pytest.raises(ttt.Error, match="did you mean the layer's 'mini_batch'"):
        ttt.Layer("titans", minibatch=8)
    # the library's own suggestion for an optimizer option is kept, not doubled
    with pytest.raises(ttt.Error) as e:
        ttt.Layer("titans", momentun=0.5)
    assert str(e.value).count("did you mean") == 1 and "'momentum'" in str(e.value)


def test_the_feature_fields_reach_the_layer():
    # docs/python.md "Layers": feature_map, features, feature_seed, feature_gate are fields
    L = ttt.Layer("rfa", features=16, feature_seed=7, feature_gate=True)
    assert ("feature_map rfa, features 16, feature_seed 7, feature_gate true)"
            in L.tuple(d_k=4))
    # another seed draws another random matrix: the outputs differ
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 5, 1, 4), dtype=np.float32) for _ in range(3))
    o7, _ = L(q, k, v, log_alpha=-0.1)
    o8, _ = ttt.Layer("rfa", features=16, feature_seed=8, feature_gate=True)(q, k, v,
                                                                           log_alpha=-0.1)
    assert not np.array_equal(o7, o8)
    with pytest.raises(ttt.Error, match="needs normalize: ratio"):
        ttt.Layer("deltanet", feature_map="favor").tuple(d_k=4)


def test_shapes_the_library_cannot_take_are_refused_by_name():
    L = ttt.Layer("linear_attention")
    for shape, what in (((0, 4, 2, 8), "q has B = 0"), ((1, 4, 0, 8), "q has H = 0"),
                        ((1, 4, 2, 0), "q has d_k = 0")):
        x = np.zeros(shape, np.float32)
        with pytest.raises(ValueError, match=what):
            L(x, x, x)
    # dimensions past a C int, with T = 0 so that no memory is needed: refused by ttt, not by
    # cffi's OverflowError at the call
    for shape, what in (((1, 0, 2**31, 1), "q has H = 2147483648"),
                        ((2**31, 0, 1, 1), "q has B = 2147483648"),
                        ((1, 0, 1, 2**31), "q has d_k = 2147483648")):
        x = np.zeros(shape, np.float32)
        with pytest.raises(ValueError, match=what + r".*up to 2\^31 - 1"):
            L(x, x, x)
    x = np.zeros((1, 3, 2, 4), np.float32)
    with pytest.raises(ValueError, match=r"v has d_v = 0"):
        L(x, x, np.zeros((1, 3, 2, 0), np.float32))
    with pytest.raises(ValueError, match=r"k has shape \(1, 3, 2, 5\)"):
        L(x, np.zeros((1, 3, 2, 5), np.float32), x)


def test_thread_and_seed_counts_are_checked():
    for bad in (-3, -1, 1.5, True, "2", 2**31):
        with pytest.raises(ValueError, match="threads must be 0"):
            ttt.Layer("deltanet", threads=bad)
    for bad in (-1, 2**64, 0.5):
        with pytest.raises(ValueError, match="seed must be"):
            ttt.Layer("ttt_linear", seed=bad)
    assert ttt.Layer("deltanet", threads=1).threads == 1


def test_the_forms_docs_python_md_names_are_the_ones_auto_picks():
    # docs/python.md "Layers", "Which form ran": auto depends on the head size and the gate
    L = ttt.Layer("gated_deltanet")
    for d, tok_form in ((16, "recurrent"), (64, "chunkwise")):
        x = np.zeros((1, 256, 1, d), np.float32)
        assert L.form_for(x, x, x, beta=0.5, log_alpha=-0.1) == tok_form, d
        key = np.full((1, 256, 1, d), -0.1, np.float32)
        assert L.form_for(x, x, x, beta=0.5, log_alpha=key) == "chunkwise", d
