"""Packed variable-length batches from Python (docs/python.md "Packed sequences"): cu_seqlens on
ttt.Layer calls (numpy and torch) and on ttt.fla's functions equals one call per sequence, bit
for bit, outputs, final states and gradients; bad offsets are refused by name."""
import numpy as np
import pytest

import ttt

pytestmark = pytest.mark.filterwarnings("ignore::ttt.GateWarning")

H, D = 2, 4
CU = [0, 13, 13, 14, 50, 57]  # an empty sequence, a single token, one of 36 tokens
T, N = CU[-1], len(CU) - 1


def inputs(seed=0, vec=False, nh=1, nl=1):
    """nh: key/value pairs per token (deltaproduct's steps_per_token): k, v, beta have nh·T
    rows; nl: levels of state (the loglinear presets): q has nl·D columns."""
    r = np.random.default_rng(seed)
    q = r.standard_normal((1, T, H, nl * D)).astype(np.float32)
    k = r.standard_normal((1, nh * T, H, D)).astype(np.float32)
    k /= np.linalg.norm(k, axis=-1, keepdims=True)  # unit keys: the delta rules contract
    v = r.standard_normal((1, nh * T, H, D)).astype(np.float32)
    beta = r.uniform(0.1, 0.9, (1, nh * T, H)).astype(np.float32)
    la = r.uniform(-0.3, 0, (1, T, H, D) if vec else (1, T, H)).astype(np.float32)
    return q, k, v, beta, la


def bits(a):
    return np.ascontiguousarray(a, np.float32).view(np.uint32)


def same(a, b):
    return a.shape == b.shape and np.array_equal(bits(a), bits(b))


def piece(x, n, nh=1):
    return None if x is None else x[:, nh * CU[n]:nh * CU[n + 1]]


@pytest.mark.parametrize("preset", [name for name, _ in ttt.registry("presets")])
@pytest.mark.parametrize("cu_type", [np.int64, np.int32, list])
def test_numpy_forward_and_backward_equal_one_call_per_sequence(preset, cu_type):
    layer = ttt.Layer(preset)
    nh = layer.steps_per_token(D)  # pairs per token: k, v, beta at nh·CU
    q, k, v, beta, la = inputs(nh=nh, nl=layer.levels(D))
    cu = list(CU) if cu_type is list else np.array(CU, cu_type)
    shapes = [s for _, s in layer.state_info(D, D)]
    r = np.random.default_rng(1)
    s0 = [r.uniform(-0.5, 0.5, (N, H) + s).astype(np.float32) for s in shapes[:1]]
    o, st = layer.forward(q, k, v, beta=beta, log_alpha=la, initial_state=s0, cu_seqlens=cu)
    assert o.shape == v.shape[:1] + q.shape[1:3] + v.shape[3:] and \
        all(x.shape == (N, H) + s for x, s in zip(st, shapes))
    d_o = r.standard_normal(o.shape).astype(np.float32)
    d_s = [r.standard_normal(x.shape).astype(np.float32) for x in st]
    g = layer.backward(d_o, q, k, v, beta=beta, log_alpha=la, initial_state=s0, d_state=d_s,
                       cu_seqlens=cu)
    for n in range(N):
        one = [s[n:n + 1] for s in s0]
        o1, st1 = layer.forward(piece(q, n), piece(k, n, nh), piece(v, n, nh),
                                beta=piece(beta, n, nh), log_alpha=piece(la, n),
                                initial_state=one)
        assert same(o1, piece(o, n)), (preset, n)
        for a, b in zip(st1, st):
            assert same(a, b[n:n + 1]), (preset, n)
        g1 = layer.backward(piece(d_o, n), piece(q, n), piece(k, n, nh), piece(v, n, nh),
                            beta=piece(beta, n, nh), log_alpha=piece(la, n), initial_state=one,
                            d_state=[x[n:n + 1] for x in d_s])
        for name in ("q", "k", "v", "beta", "log_alpha"):
            rows = nh if name in ("k", "v", "beta") else 1
            assert same(g1[name], piece(g[name], n, rows)), (preset, n, name)
        for a, b in zip(g1["initial_state"], g["initial_state"]):
            assert same(a, b[n:n + 1]), (preset, n)
    # the same tokens as one sequence differ after the first boundary: the comparison above
    # would see a state carried over
    o_whole, _ = layer.forward(q, k, v, beta=beta, log_alpha=la,
                               initial_state=[s[:1] for s in s0])
    assert not same(o_whole[:, CU[1]:], o[:, CU[1]:])


@pytest.mark.parametrize("cu, message", [
    ([1, 13, T], "io->cu_seqlens[0] = 1; expected 0"),
    ([0, 13, 12, T], "io->cu_seqlens[2] = 12 < io->cu_seqlens[1] = 13"),
    ([0, T + 1, T], "io->cu_seqlens[1] = 58 is past T = 57"),
    ([0, 13, T - 1], "io->cu_seqlens[2] = 56 (the last offset); expected T = 57"),
])
def test_bad_offsets_are_named(cu, message):
    q, k, v, beta, la = inputs()
    with pytest.raises(ttt.Error, match=message.replace("[", r"\[").replace("]", r"\]")
                       .replace("(", r"\(").replace(")", r"\)")):
        ttt.Layer("gated_deltanet")(q, k, v, beta=beta, log_alpha=la, cu_seqlens=cu)


def test_offsets_of_the_wrong_kind_or_batch_are_refused():
    q, k, v, beta, la = inputs()
    layer = ttt.Layer("gated_deltanet")
    with pytest.raises(TypeError, match="cu_seqlens must hold integer offsets"):
        layer(q, k, v, beta=beta, log_alpha=la, cu_seqlens=np.array(CU, np.float32))
    with pytest.raises(ValueError, match="cu_seqlens has shape"):
        layer(q, k, v, beta=beta, log_alpha=la, cu_seqlens=[0])
    q2, k2, v2 = (np.concatenate([x, x]) for x in (q, k, v))
    with pytest.raises(ttt.Error, match="io->cu_seqlens with B = 2"):
        layer(q2, k2, v2, cu_seqlens=CU)


def test_torch_and_fla_take_cu_seqlens():
    torch = pytest.importorskip("torch")
    import ttt.fla
    q, k, v, beta, la = (torch.from_numpy(x) for x in inputs(2))
    h0 = torch.from_numpy(np.random.default_rng(3).uniform(-0.5, 0.5, (N, H, D, D))
                          .astype(np.float32))
    leaves = [x.clone().requires_grad_() for x in (q, k, v, la, beta, h0)]
    for cu in (torch.tensor(CU, dtype=torch.int32), torch.tensor(CU, dtype=torch.int64)):
        xs = [x.detach().clone().requires_grad_() for x in leaves]
        o, S = ttt.fla.chunk_gated_delta_rule(*xs[:5], initial_state=xs[5],
                                              output_final_state=True, cu_seqlens=cu)
        assert S.shape == (N, H, D, D)
        (o.square().sum() + S.square().sum()).backward()
        for n in range(N):
            a, b = CU[n], CU[n + 1]
            ys = [x.detach()[:, a:b].clone().requires_grad_() for x in leaves[:5]]
            y0 = leaves[5].detach()[n:n + 1].clone().requires_grad_()
            o1, S1 = ttt.fla.chunk_gated_delta_rule(*ys, initial_state=y0,
                                                    output_final_state=True)
            (o1.square().sum() + S1.square().sum()).backward()
            assert torch.equal(o1, o[:, a:b]) and torch.equal(S1, S[n:n + 1]), n
            for x, y in zip(xs[:5], ys):
                assert torch.equal(y.grad, x.grad[:, a:b]), n
            assert torch.equal(y0.grad, xs[5].grad[n:n + 1]), n
    # ttt.Layer on torch tensors, the other functions of ttt.fla
    o, _ = ttt.Layer("gla")(q, k, v, log_alpha=torch.from_numpy(inputs(2, vec=True)[4]),
                            cu_seqlens=CU)
    o1, _ = ttt.Layer("gla")(q[:, 14:50], k[:, 14:50], v[:, 14:50],
                             log_alpha=torch.from_numpy(inputs(2, vec=True)[4])[:, 14:50])
    assert torch.equal(o1, o[:, 14:50])
    for fn, extra in ((ttt.fla.chunk_linear_attn, ()), (ttt.fla.chunk_simple_gla, (la,)),
                      (ttt.fla.chunk_delta_rule, (beta,))):
        o, S = fn(q, k, v, *extra, output_final_state=True, cu_seqlens=torch.tensor(CU))
        o1, S1 = fn(q[:, 14:50], k[:, 14:50], v[:, 14:50], *(x[:, 14:50] for x in extra),
                    output_final_state=True)
        assert torch.equal(o1, o[:, 14:50]) and torch.equal(S1, S[3:4]), fn.__name__
