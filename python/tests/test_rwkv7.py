"""RWKV-7's generalized delta rule (DPLR, docs/math.md "RWKV-7") through the C API (ttt.dplr,
ttt.dplr_backward) against the float64 reference ttt.reference("rwkv7"), its gradients against
torch's float64 autograd of that reference, and the two reductions the section states (the delta
rule and KDA are DPLR steps), each with a perturbed input the comparison must reject."""
import numpy as np
import pytest
import torch

import ttt

# float32 against float64, relative to max|reference| per tensor (as tests/test_reference.py:
# float32 rounding over T <= 1024 tokens is measured at a few 1e-7 here; 1e-5 leaves room)
TOL = 1e-5


def _rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.abs(a - b).max() / np.abs(b).max())


def make(B, T, H, dk, dv, seed, alpha_hi=1.0, lw_lo=-0.6065, resets=0.0):
    """RWKV-7's inputs: a = -kappa_hat, b = kappa_hat * alpha, log w in [lw_lo, 0)."""
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((B, T, H, dk))
    k = rng.standard_normal((B, T, H, dk))
    v = rng.standard_normal((B, T, H, dv))
    kap = rng.standard_normal((B, T, H, dk))
    kap /= np.linalg.norm(kap, axis=-1, keepdims=True)
    alpha = alpha_hi * rng.random((B, T, H, dk))
    lw = lw_lo * rng.random((B, T, H, dk))
    if resets:
        lw[rng.random(lw.shape) < resets] = -np.inf
    S0 = 0.3 * rng.standard_normal((B, H, dk, dv))
    f = np.float32
    return dict(q=q.astype(f), k=k.astype(f), v=v.astype(f), a=(-kap).astype(f),
                b=(kap * alpha).astype(f), log_w=lw.astype(f), initial_state=S0.astype(f))


def ref(x, **over):
    y = dict(x, **over)
    return ttt.reference("rwkv7", y["q"], y["k"], y["v"], a=y["a"], b=y["b"],
                         log_alpha=y["log_w"], initial_state=y["initial_state"], scale=1.0)


@pytest.mark.parametrize("case", [
    dict(B=2, T=67, H=2, dk=16, dv=16, seed=1),
    dict(B=1, T=1024, H=2, dk=16, dv=12, seed=2),
    dict(B=1, T=1024, H=1, dk=8, dv=40, seed=3, lw_lo=-1e-5),           # weak decays
    dict(B=1, T=300, H=2, dk=16, dv=12, seed=4, resets=0.05),            # hard resets of rows
    dict(B=1, T=300, H=2, dk=16, dv=12, seed=5, alpha_hi=2.0, lw_lo=-1e-3),  # alpha up to 2
])
@pytest.mark.parametrize("chunk", [0, 16, 64])  # the recurrence, the chunkwise form
def test_dplr_equals_the_float64_recurrence(case, chunk):
    x = make(**case)
    o, S = ttt.dplr(**x, chunk=chunk)
    o64, S64 = ref(x)
    assert _rel(o, o64) <= TOL and _rel(S, S64) <= TOL, (_rel(o, o64), _rel(S, S64))
    # one token's in-context rate moved by 0.1 must be seen
    b = x["b"].copy()
    t = case["T"] // 2
    b[0, t, 0] -= 0.1 * x["a"][0, t, 0]
    o_bad, S_bad = ref(x, b=b)
    assert max(_rel(o, o_bad), _rel(S, S_bad)) > 10 * TOL


def test_w_one_is_identity_plus_low_rank():
    x = make(1, 100, 2, 8, 8, seed=6)
    o, S = ttt.dplr(**dict(x, log_w=None))
    o64, S64 = ref(x, log_w=None)
    assert _rel(o, o64) <= TOL and _rel(S, S64) <= TOL
    o_w, _ = ref(x)  # with the decays it is another function
    assert _rel(o, o_w) > 100 * TOL


def test_the_delta_rule_and_kda_are_dplr_steps():
    # docs/math.md "RWKV-7": a = -k ⊙ alpha, b = beta k, write key beta k, w = alpha is KDA
    # (I - beta k^T k) Diag(alpha) S + beta k^T v; alpha = 1 is DeltaNet
    rng = np.random.default_rng(7)
    B, T, H, D = 1, 80, 2, 16
    q, k, v = (rng.standard_normal((B, T, H, D)).astype(np.float32) for _ in range(3))
    k /= np.linalg.norm(k, axis=-1, keepdims=True)
    beta = rng.random((B, T, H)).astype(np.float32)
    la = (-rng.random((B, T, H, D))).astype(np.float32)
    S0 = (0.3 * rng.standard_normal((B, H, D, D))).astype(np.float32)
    bk = beta[..., None] * k
    o_k, S_k = ttt.Layer("kda", scale=1.0, form="recurrent").forward(
        q, k, v, beta=beta, log_alpha=la, initial_state=[S0])
    o_d, S_d = ttt.dplr(q, bk, v, -k * np.exp(la), bk, la, initial_state=S0)
    assert _rel(o_d, o_k) <= TOL and _rel(S_d, S_k[0] if isinstance(S_k, list) else S_k) <= TOL
    o_n, _ = ttt.Layer("deltanet", scale=1.0, form="recurrent").forward(
        q, k, v, beta=beta, initial_state=[S0])
    o_dn, _ = ttt.dplr(q, bk, v, -k, bk, None, initial_state=S0)
    assert _rel(o_dn, o_n) <= TOL
    # the removal read at the decayed state matters: a = -k (not -k ⊙ alpha) is not KDA
    o_x, _ = ttt.dplr(q, bk, v, -k, bk, la, initial_state=S0)
    assert _rel(o_x, o_k) > 100 * TOL


@pytest.mark.parametrize("chunk", [0, 16])  # the recurrence's backward, the chunkwise form's
@pytest.mark.parametrize("resets", [False, True])
def test_dplr_backward_equals_the_reference_gradient(resets, chunk):
    x = make(2, 90, 2, 5, 6, seed=8)  # 90 tokens: chunks of 64 and a partial one
    if resets:
        x["log_w"][0, 30, 1, 2] = x["log_w"][1, 70, 0, 0] = -np.inf
    names = ["q", "k", "v", "a", "b", "log_w", "initial_state"]
    t = {n: torch.from_numpy(x[n].astype(np.float64)).requires_grad_() for n in names}
    o_ref, s_ref = ttt.reference("rwkv7", t["q"], t["k"], t["v"], a=t["a"], b=t["b"],
                                 log_alpha=t["log_w"], initial_state=t["initial_state"],
                                 scale=1.0)
    gen = torch.Generator().manual_seed(2)
    c_o = torch.randn(o_ref.shape, generator=gen, dtype=torch.float64)
    c_s = torch.randn(s_ref.shape, generator=gen, dtype=torch.float64)
    g_ref = torch.autograd.grad((c_o * o_ref).sum() + (c_s * s_ref).sum(), [t[n] for n in names])
    g = ttt.dplr_backward(c_o.numpy(), d_state=c_s.numpy(), chunk=chunk, **x)
    for name, want in zip(names, g_ref):
        got = torch.from_numpy(g[name].astype(np.float64))
        fin = torch.isfinite(want)
        scale = want[fin].abs().max().item()
        # float32 forward and backward over T = 90 tokens against float64: ~eps sqrt(T d)
        # relative (5e-7); 1e-4 is test_kda.py's bound for the same comparison
        err = (got[fin] - want[fin]).abs().max().item()
        assert err <= 1e-4 * scale, (name, err, scale)
        if resets and name == "log_w":
            assert got[0, 30, 1, 2] == 0 and got[1, 70, 0, 0] == 0
    # a gradient taken at a moved rate must fail the comparison
    xb = dict(x, b=x["b"].copy())
    xb["b"][0, 10, 0] -= 0.1 * x["a"][0, 10, 0]
    g_bad = ttt.dplr_backward(c_o.numpy(), d_state=c_s.numpy(), chunk=chunk, **xb)
    assert (torch.from_numpy(g_bad["a"].astype(np.float64)) - g_ref[3]).abs().max().item() > \
        1e-3 * g_ref[3].abs().max().item()


def test_bad_shapes_are_named():
    x = make(1, 10, 1, 4, 4, seed=9)
    with pytest.raises(ValueError, match="a has shape"):
        ttt.dplr(**dict(x, a=x["a"][:, :5]))
    with pytest.raises(ValueError, match="v must be"):
        ttt.dplr(**dict(x, v=x["v"][:, :5]))
    empty = {n: v[:0] for n, v in x.items()}  # B = 0: the C API's own check
    with pytest.raises(ttt.Error, match="expected B, H, d_k, d_v >= 1"):
        ttt.dplr(**empty)
    with pytest.raises(ttt.Error, match="io->chunk = -1"):
        ttt.dplr(**x, chunk=-1)
    with pytest.raises(ValueError, match="not beta"):
        ttt.reference("rwkv7", x["q"], x["k"], x["v"], a=x["a"], b=x["b"], beta=x["q"][..., 0])
    with pytest.raises(ValueError, match="give a and b"):
        ttt.reference("rwkv7", x["q"], x["k"], x["v"], a=x["a"])
