"""CUDA tensors (docs/python.md "CUDA tensors") and FLA's signatures (ttt.fla).

On a GPU: every rule of ttt.fla on CUDA tensors, float32 and bfloat16, forward and every
gradient, against a float64 recurrence evaluated by torch on the same (bf16-rounded) inputs, and
against the library's CPU path; the caller's stream; bad input. Without a GPU (or a libttt built
without CUDA) those tests are skipped with the reason, and the CPU-side tests of ttt.fla run.

Tolerances (relative RMS, docs/python.md "CUDA tensors"):
  float32: the CUDA forms must be within 2x of the error the CPU chunkwise form makes on the
           same inputs (both against float64), floored at 4 float32 epsilons (1 ulp-level
           agreement cannot be asked of a sum of T terms computed in another order);
  bfloat16: against float64 from the same bf16-rounded inputs (the inputs' own rounding is
           not an error of the kernel), outputs within 1e-3 and gradients within 2e-3 of what
           storing the float64 result itself in bfloat16 costs: a bf16 tensor cannot be closer
           to float64 than its own rounding, about 1.7e-3 relative RMS (half a unit of an 8-bit
           significand, spread over the mantissas). The state, the chunk inverse and every
           intermediate stay float32, so the kernels add only float32 rounding to that; tensors
           stored in float32 (final state, gate and β gradients) are held to 1e-3 / 2e-3 alone.
"""
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import ttt  # noqa: E402
import ttt.cuda  # noqa: E402
import ttt.fla  # noqa: E402

F32_EPS = 2.0 ** -24


def _gpu_reason():
    if not torch.cuda.is_available():
        return "torch sees no CUDA device"
    n, why = ttt.cuda.device_count()
    if n <= 0:
        return "libttt has no CUDA device: " + why
    return None


needs_gpu = pytest.mark.skipif(_gpu_reason() is not None, reason=str(_gpu_reason()))

RULES = {
    # name: (function, has gate, gate per key, has beta, delta rule)
    "gated_delta_rule": (ttt.fla.chunk_gated_delta_rule, True, False, True, True),
    "delta_rule": (ttt.fla.chunk_delta_rule, False, False, True, True),
    "simple_gla": (ttt.fla.chunk_simple_gla, True, False, False, False),
    "gla": (ttt.fla.chunk_gla, True, True, False, False),
    "linear_attn": (ttt.fla.chunk_linear_attn, False, False, False, False),
}


def reference(rule, q, k, v, g, beta, scale, h0):
    """The recurrence in float64, token by token (docs/math.md §4): differentiable by torch."""
    _, gated, per_key, _, delta = RULES[rule]
    q, k, v = q.double(), k.double(), v.double()
    B, T, H, K = q.shape
    S = h0.double() if h0 is not None else q.new_zeros((B, H, K, v.shape[-1]))
    out = []
    for t in range(T):
        if g is not None:
            a = torch.exp(g[:, t].double())
            S = S * (a[..., None] if per_key else a[..., None, None])
        w = v[:, t] if beta is None else beta[:, t].double()[..., None] * v[:, t]
        if delta:
            pred = torch.einsum("bhk,bhkv->bhv", k[:, t], S)
            w = w - beta[:, t].double()[..., None] * pred
        S = S + torch.einsum("bhk,bhv->bhkv", k[:, t], w)
        out.append(scale * torch.einsum("bhk,bhkv->bhv", q[:, t], S))
    return torch.stack(out, 1), S


def inputs(rule, B, T, H, K, V, dtype, device, seed=0, strong=False):
    """Inputs as FLA's users give them: unit keys for the delta rules, β in (0, 1), log gates."""
    _, gated, per_key, has_beta, delta = RULES[rule]
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(B, T, H, K, generator=gen)
    k = torch.randn(B, T, H, K, generator=gen)
    if delta:
        k = torch.nn.functional.normalize(k, dim=-1)
    else:
        k = k / math.sqrt(K)
    v = torch.randn(B, T, H, V, generator=gen)
    g = None
    if gated:
        shape = (B, T, H, K) if per_key else (B, T, H)
        g = torch.nn.functional.logsigmoid(torch.randn(*shape, generator=gen) +
                                           (0.0 if strong else 4.0))
    beta = torch.sigmoid(torch.randn(B, T, H, generator=gen)) if has_beta else None
    h0 = torch.randn(B, H, K, V, generator=gen) * 0.1
    cast = dict(device=device)
    q, k, v = (x.to(dtype=dtype, **cast) for x in (q, k, v))
    g = None if g is None else g.to(**cast)
    beta = None if beta is None else beta.to(**cast)
    return q, k, v, g, beta, h0.to(**cast)


def call(rule, q, k, v, g, beta, h0, scale):
    fn, gated, _, has_beta, _ = RULES[rule]
    args = [q, k, v]
    if gated:
        args.append(g)
    if has_beta:
        args.append(beta)
    return fn(*args, scale=scale, initial_state=h0, output_final_state=True)


def rel_rms(x, ref):
    x, ref = x.double(), ref.double()
    return (torch.linalg.vector_norm(x - ref) /
            torch.linalg.vector_norm(ref).clamp_min(1e-300)).item()


def storage_error(x, ref):
    """What storing ref in x's dtype costs by itself (0 for float32 and float64 tensors)."""
    if x.dtype != torch.bfloat16:
        return 0.0
    return rel_rms(ref.to(torch.bfloat16), ref)


# ---- without a GPU: ttt.fla on CPU tensors ------------------------------------------------

@pytest.mark.parametrize("rule", list(RULES))
def test_fla_signature_on_cpu_matches_float64(rule):
    q, k, v, g, beta, h0 = inputs(rule, 2, 70, 3, 16, 24, torch.float32, "cpu")
    scale = 16 ** -0.5
    o, S = call(rule, q, k, v, g, beta, h0, scale)
    ro, rS = reference(rule, q, k, v, g, beta, scale, h0)
    # float32 against float64 on well-conditioned inputs: c·ε·√T with c = 64 (the CPU forms'
    # stated bound, docs/forms.md "Precision on hard inputs", is 2e-6 on far harder inputs)
    tol = 64 * F32_EPS * math.sqrt(70)
    assert rel_rms(o, ro) < tol and rel_rms(S, rS) < tol
    # the same comparison rejects a perturbed input: one value row changed
    v2 = v.clone()
    v2[0, 35, 1] += 1.0
    ro2, _ = reference(rule, q, k, v2, g, beta, scale, h0)
    assert rel_rms(o, ro2) > tol


def test_fla_signature_defaults_scale_and_final_state():
    q, k, v, g, beta, h0 = inputs("gated_delta_rule", 1, 20, 2, 16, 16, torch.float32, "cpu")
    o, S = ttt.fla.chunk_gated_delta_rule(q, k, v, g, beta)
    assert S is None  # output_final_state=False, as in FLA
    ro, _ = reference("gated_delta_rule", q, k, v, g, beta, 16 ** -0.5, None)
    assert rel_rms(o, ro) < 1e-5


def test_fla_signature_refuses_what_ttt_does_not_take():
    q, k, v, g, beta, h0 = inputs("gated_delta_rule", 1, 8, 2, 8, 8, torch.float32, "cpu")
    with pytest.raises(NotImplementedError, match="use_qk_l2norm_in_kernel"):
        ttt.fla.chunk_delta_rule(q, k, v, beta, use_qk_l2norm_in_kernel=True)
    with pytest.raises(TypeError, match="unsupported argument"):
        ttt.fla.chunk_delta_rule(q, k, v, beta, head_first=True)


def test_cuda_device_count_answers_without_a_gpu():
    n, why = ttt.cuda.device_count()
    assert n >= 0
    if n == 0:
        assert why  # the reason is said, never an empty message
    assert isinstance(ttt.cuda.describe(), str) and ttt.cuda.describe()


# ---- on a GPU ---------------------------------------------------------------------------

SHAPES = [(2, 100, 3, 32, 48), (1, 130, 2, 64, 64)]


def _cpu_error(rule, q, k, v, g, beta, h0, scale, ro, rS):
    """The CPU chunkwise form's error on the same (float32) inputs, against float64."""
    cpu = [None if x is None else x.detach().float().cpu() for x in (q, k, v, g, beta, h0)]
    o, S = call(rule, cpu[0], cpu[1], cpu[2], cpu[3], cpu[4], cpu[5], scale)
    return rel_rms(o, ro.cpu()), rel_rms(S, rS.cpu())


@needs_gpu
@pytest.mark.parametrize("rule", list(RULES))
@pytest.mark.parametrize("shape", SHAPES)
def test_cuda_forward_float32_within_twice_the_cpu_error(rule, shape):
    B, T, H, K, V = shape
    q, k, v, g, beta, h0 = inputs(rule, B, T, H, K, V, torch.float32, "cuda")
    scale = K ** -0.5
    o, S = call(rule, q, k, v, g, beta, h0, scale)
    assert o.device.type == "cuda" and o.dtype == torch.float32
    ro, rS = reference(rule, q, k, v, g, beta, scale, h0)
    eo, eS = _cpu_error(rule, q, k, v, g, beta, h0, scale, ro, rS)
    floor = 4 * F32_EPS
    assert rel_rms(o, ro) <= 2 * max(eo, floor), (rel_rms(o, ro), eo)
    assert rel_rms(S, rS) <= 2 * max(eS, floor), (rel_rms(S, rS), eS)
    # the GPU against the CPU library: within the sum of both bounds
    cpu = call(rule, *[None if x is None else x.cpu() for x in (q, k, v, g, beta, h0)],
               scale)
    assert rel_rms(o.cpu(), cpu[0]) <= 3 * max(eo, floor)
    # a perturbed input is rejected by the same bound
    if g is not None:
        g2 = g.clone()
        g2[0, T // 2] -= 1.0
        ro2, _ = reference(rule, q, k, v, g2, beta, scale, h0)
    else:
        k2 = k.clone()
        k2[0, T // 2] *= 1.5
        ro2, _ = reference(rule, q, k2, v, g, beta, scale, h0)
    assert rel_rms(o, ro2) > 2 * max(eo, floor)


@needs_gpu
@pytest.mark.parametrize("rule", list(RULES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_gradients_against_float64(rule, dtype):
    B, T, H, K, V = 2, 80, 2, 32, 48
    q, k, v, g, beta, h0 = inputs(rule, B, T, H, K, V, dtype, "cuda", seed=3)
    scale = K ** -0.5
    leaves = [x for x in (q, k, v, g, beta, h0) if x is not None]
    for x in leaves:
        x.requires_grad_(True)
    o, S = call(rule, q, k, v, g, beta, h0, scale)
    gen = torch.Generator().manual_seed(7)
    d_o = torch.randn(o.shape, generator=gen).to(device="cuda", dtype=dtype)
    d_S = torch.randn(S.shape, generator=gen).to("cuda")
    grads = torch.autograd.grad((o.float() * d_o.float()).sum() + (S * d_S).sum(), leaves)
    # float64 on the same (bf16-rounded) values
    ref_leaves = [x.detach().double().requires_grad_(True) for x in leaves]
    it = iter(ref_leaves)
    rq, rk, rv = next(it), next(it), next(it)
    rg = next(it) if g is not None else None
    rb = next(it) if beta is not None else None
    rh = next(it)
    ro, rS = reference(rule, rq, rk, rv, rg, rb, scale, rh)
    ref_grads = torch.autograd.grad((ro * d_o.double()).sum() + (rS * d_S.double()).sum(),
                                    ref_leaves, retain_graph=True)
    out_tol = 1e-3 if dtype == torch.bfloat16 else 2e-5
    grad_tol = 2e-3 if dtype == torch.bfloat16 else 2e-5
    assert rel_rms(o, ro) < storage_error(o, ro) + out_tol
    names = ["q", "k", "v"] + (["g"] if g is not None else []) + \
        (["beta"] if beta is not None else []) + ["h0"]
    for name, got, want in zip(names, grads, ref_grads):
        assert got.dtype == (dtype if name in ("q", "k", "v") else torch.float32), name
        assert rel_rms(got, want) < storage_error(got, want) + grad_tol, \
            (name, rel_rms(got, want), storage_error(got, want))
    # the gradient check rejects a wrong upstream gradient: d_o scaled at one token
    bad = torch.autograd.grad((ro * d_o.double() * 1.0).sum() + (rS * d_S.double()).sum()
                              + ro[0, T // 2].sum(), ref_leaves)
    assert rel_rms(grads[2], bad[2]) > storage_error(grads[2], bad[2]) + grad_tol


@needs_gpu
def test_cuda_bfloat16_forward_beats_fla_precision_on_long_sequences():
    B, T, H, K, V = 1, 2048, 4, 64, 64
    q, k, v, g, beta, h0 = inputs("gated_delta_rule", B, T, H, K, V, torch.bfloat16, "cuda")
    o, S = call("gated_delta_rule", q, k, v, g, beta, h0, K ** -0.5)
    ro, rS = reference("gated_delta_rule", q, k, v, g, beta, K ** -0.5, h0)
    assert rel_rms(o, ro) < storage_error(o, ro) + 1e-3 and rel_rms(S, rS) < 1e-3


@needs_gpu
def test_cuda_runs_on_the_current_stream():
    q, k, v, g, beta, h0 = inputs("gated_delta_rule", 2, 300, 4, 64, 64, torch.float32, "cuda")
    want, _ = call("gated_delta_rule", q, k, v, g, beta, h0, 0.125)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        # inputs produced on the side stream: a call on another stream would race with them
        q2 = q * 1.0
        got, _ = call("gated_delta_rule", q2, k, v, g, beta, h0, 0.125)
    s.synchronize()
    assert torch.equal(got, want)


@needs_gpu
def test_cuda_refuses_bad_tensors_clearly():
    q, k, v, g, beta, h0 = inputs("gated_delta_rule", 1, 16, 2, 16, 16, torch.float32, "cuda")
    with pytest.raises(ValueError, match="k is on cpu but q is on cuda"):
        ttt.fla.chunk_gated_delta_rule(q, k.cpu(), v, g, beta)
    with pytest.raises(ValueError, match="not contiguous"):
        ttt.fla.chunk_gated_delta_rule(q.transpose(1, 2).contiguous().transpose(1, 2), k, v,
                                       g, beta)
    with pytest.raises(TypeError, match="float16"):
        ttt.fla.chunk_gated_delta_rule(q.half(), k.half(), v.half(), g, beta)
    with pytest.raises(TypeError, match="v is torch.bfloat16"):
        ttt.fla.chunk_gated_delta_rule(q, k, v.bfloat16(), g, beta)
    big = torch.zeros(1, 16, 2, 16 * 2 + 1, device="cuda")[..., 1:17]
    with pytest.raises(ValueError, match="contiguous|aligned"):
        ttt.fla.chunk_gated_delta_rule(big, k, v, g, beta)
    # the process carries on: a good call after the refusals
    o, _ = ttt.fla.chunk_gated_delta_rule(q, k, v, g, beta)
    assert torch.isfinite(o).all()


@needs_gpu
def test_cuda_double_backward_is_an_error_not_a_silent_zero():
    q, k, v, g, beta, h0 = inputs("delta_rule", 1, 16, 2, 16, 16, torch.float32, "cuda")
    q.requires_grad_(True)
    o, _ = ttt.fla.chunk_delta_rule(q, k, v, beta)
    (gq,) = torch.autograd.grad(o.sum(), q, create_graph=True)
    with pytest.raises(RuntimeError):
        gq.sum().backward()


@needs_gpu
def test_cuda_hard_reset_gate_is_a_reset_not_nan():
    q, k, v, g, beta, h0 = inputs("gated_delta_rule", 1, 200, 2, 32, 32, torch.float32,
                                  "cuda")
    g = g.clone()
    g[0, 5, 0] = -math.inf
    g[0, 64, 1] = -math.inf
    o, S = call("gated_delta_rule", q, k, v, g, beta, h0, 0.2)
    ro, rS = reference("gated_delta_rule", q, k, v, g, beta, 0.2, h0)
    assert torch.isfinite(o).all()
    assert rel_rms(o, ro) < 1e-5 and rel_rms(S, rS) < 1e-5


def test_numpy_path_is_unchanged_by_the_cuda_module():
    x = np.ones((1, 8, 2, 8), np.float32) / 8
    o, S = ttt.Layer("deltanet")(x, x, x)
    assert isinstance(o, np.ndarray)
