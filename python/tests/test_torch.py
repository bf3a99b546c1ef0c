"""PyTorch: the autograd Function and module, gradcheck of the float64 reference, the library's
float32 backward against it, and a chunkwise gated delta rule checked by ttt.assert_close."""
import os
import sys
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import ttt  # noqa: E402
import ttt.nn  # noqa: E402
from ttt.check import make_inputs  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
from chunk_gdn import chunk_gated_delta_rule  # noqa: E402  (docs/python.md's worked example)

torch.manual_seed(0)


def test_assert_close_validates_a_pytorch_chunkwise_kernel():
    # float64 throughout: the chunkwise form equals the recurrence to rounding
    rep = ttt.assert_close(chunk_gated_delta_rule, "gated_deltanet", tol=1e-10, as_torch=True)
    assert rep["o"][0] < 1e-10


def test_assert_close_catches_a_tail_chunk_bug():
    # a kernel that drops the gates of the last, partial chunk (a padding slip): only the
    # shapes whose T is not a multiple of the chunk reveal it
    def tail_bug(q, k, v, beta, log_alpha, initial_state, scale):
        T = q.shape[1]
        la = log_alpha.clone()
        la[:, (T // 16) * 16:] = 0
        return chunk_gated_delta_rule(q, k, v, beta, la, initial_state, scale)
    ttt.assert_close(tail_bug, "gated_deltanet", shapes=[(1, 64, 2, 16, 16)], tol=1e-10,
                     as_torch=True)
    with pytest.raises(AssertionError, match="above tol"):
        ttt.assert_close(tail_bug, "gated_deltanet", tol=1e-5, as_torch=True)


FAMILIES = ["linear_attention", "retnet", "mamba2", "gla", "deltanet", "gated_deltanet",
            "titans", "ttt_linear", "lact"]
# small enough for gradcheck's finite differences, long enough to cross a block boundary
GC_PARAMS = {"titans": dict(mini_batch=3), "ttt_linear": dict(mini_batch=3),
             "lact": dict(mini_batch=3)}


def _torch_inputs(preset, B=1, T=7, H=2, d=4, seed=0):
    kw = make_inputs(preset, B, T, H, d, d, seed=seed)
    return {key: (torch.from_numpy(val).requires_grad_() if isinstance(val, np.ndarray) else
                  [torch.from_numpy(x).requires_grad_() for x in val] if isinstance(val, list)
                  else val) for key, val in kw.items()}


@pytest.mark.parametrize("preset", FAMILIES)
def test_gradcheck_float64_reference(preset):
    kw = _torch_inputs(preset)
    names = [n for n in kw if n not in ("scale", "initial_state")]
    n_state = len(kw["initial_state"])
    if preset == "lact":
        n_state = 3  # the recorded initial norms are not differentiated by the library either
    params = GC_PARAMS.get(preset, {})

    def f(*xs):
        args = dict(zip(names, xs[:len(names)]))
        st = list(xs[len(names):]) + kw["initial_state"][n_state:]
        o, s = ttt.reference(preset, scale=0.5, initial_state=st, **args, **params)
        s = s if isinstance(s, tuple) else (s,)
        return (o,) + tuple(s[:n_state])
    assert torch.autograd.gradcheck(f, [kw[n] for n in names] + kw["initial_state"][:n_state],
                                    eps=1e-6, atol=1e-6, rtol=1e-5)


EPS = 2.0 ** -24


def ns_rtol(A, steps=5, backward=True):
    """The float32 Newton-Schulz bound of tests/ns_bound.h (ns_rtol), relative to the largest
    entry, from the float64 singular values of its input A (m, n): a step rounds an entry through
    n + 2m + 4 operations on terms up to |a| + |b| + |c| times its scale; a later step carries a
    rounding with the gain g = max(|p'(x)|, |p(x)/x|) along each singular value's trajectory
    x = σ/‖A‖_F; the steps add as a walk, c = 6; the backward doubles the operations."""
    a, b, c = sys.modules["ttt.reference"]._MUON
    m, n = sorted(A.shape)
    sv = np.linalg.svd(A, compute_uv=False)
    kappa = 0.0
    for x in sv / (np.sqrt((sv ** 2).sum()) + 1e-7):
        g = []
        for _ in range(steps):
            g.append(max(abs(a + 3 * b * x ** 2 + 5 * c * x ** 4), abs(a + b * x ** 2 + c * x ** 4)))
            x = a * x + b * x ** 3 + c * x ** 5
        prods = np.cumprod([1.0] + g[::-1])  # Π_{j>k} g_j for k = steps-1 … -1
        kappa = max(kappa, np.sqrt((prods ** 2).sum()))
    return 6 * EPS * np.sqrt((2 if backward else 1) * (n + 2 * m + 4)) * (abs(a) + abs(b) + abs(c)) \
        * kappa


@pytest.mark.parametrize("preset", FAMILIES)
def test_library_backward_equals_the_reference_gradient(preset):
    kw = _torch_inputs(preset, B=2, T=9, H=2, d=4, seed=1)
    params = GC_PARAMS.get(preset, {})
    layer = ttt.Layer(preset, scale=0.5, **params)
    names = [n for n in kw if n not in ("scale", "initial_state")]
    # the float64 run records the inputs of its Newton-Schulz evaluations (LaCT's block steps)
    ref_mod = sys.modules["ttt.reference"]
    ns_plain, ns_inputs = ref_mod._newton_schulz, []

    def ns_recorded(xp, A, steps):
        ns_inputs.append((A.detach().numpy() if torch.is_tensor(A) else np.asarray(A), steps))
        return ns_plain(xp, A, steps)
    ref_mod._newton_schulz = ns_recorded
    try:
        o_ref, s_ref = ttt.reference(preset, scale=0.5, initial_state=kw["initial_state"],
                                     **{n: kw[n] for n in names}, **params)
    finally:
        ref_mod._newton_schulz = ns_plain
    s_ref = s_ref if isinstance(s_ref, tuple) else (s_ref,)
    n_state = 3 if preset == "lact" else len(s_ref)
    # L = sum(c_o * o) + sum_i sum(c_i * S_i) with fixed random weights c
    gen = torch.Generator().manual_seed(2)
    c_o = torch.randn(o_ref.shape, generator=gen, dtype=torch.float64)
    cs = [torch.randn(s.shape, generator=gen, dtype=torch.float64) for s in s_ref[:n_state]]
    loss = (c_o * o_ref).sum() + sum((c * s).sum() for c, s in zip(cs, s_ref))
    leaves = [kw[n] for n in names] + kw["initial_state"][:n_state]
    g_ref = torch.autograd.grad(loss, leaves)

    lib_in = {n: kw[n].detach().clone().requires_grad_() for n in names}
    st = [x.detach().clone().requires_grad_() for x in kw["initial_state"]]
    o, s = layer(**lib_in, initial_state=st)
    s = s if isinstance(s, tuple) else (s,)
    loss = (c_o * o).sum() + sum((c * x).sum() for c, x in zip(cs, s))
    loss.backward()
    g_lib = [lib_in[n].grad for n in names] + [x.grad for x in st[:n_state]]
    # float32 forward and backward against float64, relative to the gradient's scale
    # (docs/hardening.md "Portable tolerances"): n = 4d + T + 10 roundings a step each way (the
    # d-term products, a block's sums, a norm's, a few element-wise), a walk of deviation
    # ε·√(2n·T), c = 6; plus, for LaCT, the largest Newton-Schulz bound (ns_rtol, backward) over
    # the block steps' matrices (NS amplifies rounding near small singular values, docs/math.md
    # §5.7). Control: every gradient scaled by 1.05 is rejected.
    T_, d_ = 9, 4
    rtol = 6 * EPS * np.sqrt(2 * (4 * d_ + T_ + 10) * T_)
    for A, steps in ns_inputs:
        for mat in A.reshape((-1,) + A.shape[-2:]):
            rtol = max(rtol, 6 * EPS * np.sqrt(2 * (4 * d_ + T_ + 10) * T_) + ns_rtol(mat, steps))
    for name, a, b in zip(names + ["state%d" % i for i in range(n_state)], g_lib, g_ref):
        tol = rtol * b.abs().max().item()
        err = (a - b).abs().max().item()
        if os.environ.get("TTT_PRINT_ERRORS"):
            print("%s %s %.2e ratio %.3f" % (preset, name, err / b.abs().max().item(), err / tol))
        assert err <= tol, (name, err, tol)
        assert (1.05 * a - b).abs().max().item() > tol, (name, "a gradient 5 % off passes")


@pytest.mark.filterwarnings("ignore::ttt.GateWarning")
def test_function_keeps_dtype_and_the_state_output_is_differentiable():
    L = ttt.Layer("deltanet")
    q, k, v = (torch.randn(1, 5, 2, 4, dtype=torch.float32, requires_grad=True)
               for _ in range(3))
    o, S = L(q, k, v)
    assert o.dtype == torch.float32 and S.shape == (1, 2, 4, 4)
    S.sum().backward()
    assert q.grad is not None and float(q.grad.abs().max()) == 0.0  # S does not depend on q
    assert float(k.grad.abs().max()) > 0


def test_a_tiny_model_trains():
    torch.manual_seed(0)
    d, V, T = 32, 16, 24
    model = torch.nn.Sequential(torch.nn.Embedding(V, d), ttt.nn.TTTLayer(d, 2, "gated_deltanet"),
                                torch.nn.Linear(d, V))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    x = torch.randint(0, V, (8, T))
    y = torch.roll(x, 1, dims=1)  # copy the previous token: needs the layer's memory
    losses = []
    for _ in range(60):
        loss = torch.nn.functional.cross_entropy(model(x).reshape(-1, V), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    # a model without memory cannot beat log V = 2.77 nats on this target (the previous token
    # is independent of the current one); the ttt layer has to carry it
    assert losses[-1] < 1.0, losses[::10]


def test_partial_initial_state_means_what_it_means_on_numpy():
    # LaCT carries (W0, W1, W2) and their initial column norms: given the weights only, the
    # norms are taken from the given weights (not the seed's), on torch as on numpy; the
    # gradient reaches the given weights
    rng = np.random.default_rng(5)
    q, k, v = (rng.standard_normal((1, 20, 2, 4)).astype(np.float32) for _ in range(3))
    Ws = [rng.standard_normal((1, 2, 4, 4)).astype(np.float32) for _ in range(3)]
    L = ttt.Layer("lact", mini_batch=4)
    o_np, _ = L(q, k, v, initial_state=Ws)
    o_seed, _ = L(q, k, v, initial_state=Ws + L.initial_state(1, 2, 4)[3:])
    assert not np.allclose(o_np, o_seed)  # the norms matter after the first block
    Wt = [torch.from_numpy(W).requires_grad_() for W in Ws]
    o_t, _ = L(*(torch.from_numpy(x) for x in (q, k, v)), initial_state=Wt)
    assert np.array_equal(o_t.detach().numpy(), o_np)
    o_t.sum().backward()
    assert all(W.grad is not None and float(W.grad.abs().max()) > 0 for W in Wt)


def test_a_second_differentiation_is_refused_not_dropped():
    # the library's backward is float32 C, not a graph: a gradient penalty through it would be
    # silently constant, so differentiating the gradient raises
    q = torch.randn(1, 6, 2, 4, requires_grad=True)
    beta = torch.full((1, 6, 2), 0.5)
    L = ttt.Layer("deltanet")
    o, _ = L(q, q, q, beta=beta)
    g1, = torch.autograd.grad((o ** 2).sum(), q)
    o, _ = L(q, q, q, beta=beta)
    g2, = torch.autograd.grad((o ** 2).sum(), q, create_graph=True)
    assert torch.equal(g1, g2)  # create_graph changes no value
    with pytest.raises(RuntimeError, match="library's backward is not differentiable"):
        (g2 ** 2).sum().backward()
    # a constant upstream gradient too (o.sum(): the grad output does not require grad)
    o, _ = L(q, q, q, beta=beta)
    g3, = torch.autograd.grad(o.sum(), q, create_graph=True)
    with pytest.raises(RuntimeError, match="library's backward is not differentiable"):
        torch.autograd.grad(g3.sum(), q)


def test_gla_and_retnet_modules_have_their_gates():
    torch.manual_seed(1)
    x = torch.randn(2, 9, 16)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ttt.GateWarning)  # every gate is given
        for preset in ("gla", "retnet", "mamba2", "deltanet", "gated_deltanet", "titans"):
            ttt.nn.TTTLayer(16, 2, preset)(x)
        ttt.nn.TTTLayer(16, 2, "gla", gates=False)(x)  # the constant decay, on purpose
    # GLA: log α = logsigmoid(x W + b) / 16, one per head and key dimension (FLA's)
    m = ttt.nn.TTTLayer(16, 2, "gla")
    assert m.gate.weight.shape == (16, 16)
    B, T, H, D = 2, 9, 2, 8
    q, k, v = m.qkv(x).view(B, T, 3, H, D).unbind(2)
    q, k = (torch.nn.functional.normalize(t, dim=-1).contiguous() for t in (q, k))
    la = torch.nn.functional.logsigmoid(m.gate(x)).view(B, T, H, D) / 16
    o, _ = m.layer(q, k, v.contiguous(), log_alpha=la)
    want = m.out(o.reshape(B, T, H * D))
    assert torch.equal(m(x), want)
    # the gate is used and learns: its gradient is not zero
    m(x).sum().backward()
    assert m.gate.weight.grad.abs().max() > 0
    # RetNet: the fixed decay 1 - 2^(-5-h) of head h (no weights), not one constant for all
    r = ttt.nn.TTTLayer(16, 2, "retnet")
    assert torch.allclose(r.log_gamma.exp(), torch.tensor([1 - 2 ** -5, 1 - 2 ** -6]))
    assert not any("gate" in n for n, _ in r.named_parameters())
    q, k, v = r.qkv(x).view(B, T, 3, H, D).unbind(2)
    q, k = (torch.nn.functional.normalize(t, dim=-1).contiguous() for t in (q, k))
    lg = torch.log1p(-2.0 ** (-5 - torch.arange(H, dtype=torch.float64))).float()
    o, _ = r.layer(q, k, v.contiguous(), log_alpha=lg.expand(B, T, H).contiguous())
    assert torch.equal(r(x), r.out(o.reshape(B, T, H * D)))
    o1, _ = r.layer(q, k, v.contiguous(), log_alpha=float(lg[0]))  # head 0's decay for all
    assert not torch.allclose(r(x), r.out(o1.reshape(B, T, H * D)))


def test_modules_holding_a_layer_copy_and_save_whole():
    import copy
    import io
    import pickle
    torch.manual_seed(2)
    model = torch.nn.Sequential(torch.nn.Embedding(16, 32),
                                ttt.nn.TTTLayer(32, 2, "titans", momentum=0.5, gates=False),
                                ttt.nn.TTTLayer(32, 2, "gated_deltanet"), torch.nn.Linear(32, 16))
    x = torch.randint(0, 16, (2, 20))
    with torch.no_grad():
        y = model(x)
    twin = copy.deepcopy(model)
    buf = io.BytesIO()
    torch.save(model, buf)
    buf.seek(0)
    loaded = torch.load(buf)
    for m in (twin, loaded):
        with torch.no_grad():
            assert torch.equal(m(x), y)
        # its own handles and the same configuration (momentum 0.5, not the preset's 0.9)
        assert m[1].layer is not model[1].layer
        assert m[1].layer.tuple(16) == model[1].layer.tuple(16)
        assert m[1].layer._options == {"momentum": 0.5}
    # the copy trains apart from the original
    twin[2].qkv.weight.data.add_(0.1)
    with torch.no_grad():
        assert torch.equal(model(x), y) and not torch.equal(twin(x), y)
    L = pickle.loads(pickle.dumps(ttt.Layer("titans", momentum=0.5, threads=1, seed=3)))
    assert (L.threads, L.seed, L.last_form) == (1, 3, None) and "momentum" in repr(L)


def test_tensors_the_library_cannot_take_get_ttts_error():
    x = torch.randn(1, 4, 2, 8)
    beta = torch.full((1, 4, 2), 0.5)
    L = ttt.Layer("deltanet")
    for dt in (torch.bfloat16, torch.float16):
        with pytest.raises(TypeError, match=r"ttt: q is %s; .*float32 or float64" % dt):
            L(x.to(dt), x.to(dt), x.to(dt), beta=beta)
        with pytest.raises(TypeError, match=r"ttt: beta is %s" % dt):
            L(x, x, x, beta=beta.to(dt))
    with pytest.raises(ValueError, match=r"ttt: beta has shape \(1, 4, 3\)"):
        L(x, x, x, beta=torch.ones(1, 4, 3))
    with pytest.raises(ValueError, match="q has B = 0"):
        z = torch.zeros(0, 4, 2, 8)
        L(z, z, z, beta=0.5)
    with pytest.raises(ValueError, match="q has H = 2147483648"):
        z = torch.zeros(1, 0, 2**31, 1)
        L(z, z, z, beta=0.5)
    # a number, a 0-d tensor and a full tensor are the same β, and a 0-d tensor gets its gradient
    o, _ = L(x, x, x, beta=beta)
    b0 = torch.tensor(0.5, requires_grad=True)
    for b in (0.5, b0):
        o_s, _ = L(x, x, x, beta=b)
        assert torch.equal(o_s, o)
    o_s.sum().backward()
    bf = beta.clone().requires_grad_()
    L(x, x, x, beta=bf)[0].sum().backward()
    assert torch.allclose(b0.grad, bf.grad.sum())
