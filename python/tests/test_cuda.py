"""CUDA tensors (docs/python.md "CUDA tensors") and FLA's signatures (ttt.fla).

On a GPU: every rule of ttt.fla on CUDA tensors, float32 and bfloat16, forward and every
gradient, against a float64 recurrence evaluated by torch on the same (bf16-rounded) inputs, and
against the library's CPU path; the caller's stream; bad input. Without a GPU (or a libttt built
without CUDA) those tests are skipped with the reason, and the CPU-side tests of ttt.fla run.

Tolerances (relative RMS ‖got − ref‖₂/‖ref‖₂; docs/hardening.md "Portable tolerances"), derived
as tests/test_cuda_la.c and tests/test_cuda_delta.c derive theirs for the same kernels:
  float32: 2e-6·c. A float32 evaluation rounds each term a few times (u = 2^-24) and sums chains
           of L = K + V + 2C + ⌈T/C⌉ terms (C = 64, the kernels' chunk: the state read, the
           intra-chunk sum and the chunk updates of the state) with RMS error growing as u·√L;
           2e-6 holds u·√L with 2× room up to L = 256, so c = max(1, √(L/256)) for o and the
           final state, twice that for gradients (the backward chains a second such
           evaluation). The gradients of the gates and of β are sums that cancel: their error
           is measured against the norm of the per-element sums of |terms| instead (from the
           float64 run: the decayed state's adjoint times the state, and the delta's adjoint
           times the innovation v − kᵀS), as in the C tests. (Was 2e-5 fixed, 1e-5 for the hard
           resets, and twice the CPU form's measured error for the forward.)
  bfloat16: against float64 from the same bf16-rounded inputs (the inputs' own rounding is not
           an error of the kernel). A tensor stored in bf16 is the rounding of the kernel's
           float32 result x: elementwise |bf16(x) − ref| ≤ |bf16(ref) − ref| + 2|x − ref| (bf16(x)
           is the nearest bf16 value to x), so its error is at most storing the float64 result
           itself in bfloat16 (storage_error, about 1.7e-3 relative RMS) plus twice the kernel's;
           the kernel's allowance is the C tests' stated one, 1e-3 for outputs and 2e-3 for
           gradients (the state, the chunk inverse and every intermediate stay float32; the
           tensor-core forward splits float32 operands into two bf16 terms); tensors stored in
           float32 (final state, gate and β gradients) are held to 1e-3 / 2e-3 alone.
  The CPU signature tests: the CPU forms' walk, 6ε·√((K + 3)·T) (docs/hardening.md).
Every comparison has a perturbed input or gradient it must reject.
"""
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import ttt  # noqa: E402
import ttt.cuda  # noqa: E402
import ttt.fla  # noqa: E402

F32_EPS = 2.0 ** -24
CHUNK = 64  # the CUDA kernels' chunk (the bound's L)


def f32_bound(T, K, V, grad=False):
    """The C CUDA tests' float32 bound (the top of the file): 2e-6·max(1, √(L/256)), L = K + V +
    2C + ⌈T/C⌉, twice that for gradients."""
    L = K + V + 2 * CHUNK + -(-T // CHUNK)
    return 2e-6 * max(1.0, math.sqrt(L / 256)) * (2 if grad else 1)


def cpu_walk(T, K):
    """The CPU forms' bound against float64: 6ε·√((K + 3)·T) (docs/hardening.md)."""
    return 6 * F32_EPS * math.sqrt((K + 3) * T)


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


def reference(rule, q, k, v, g, beta, scale, h0, keep=None):
    """The recurrence in float64, token by token (docs/math.md §4): differentiable by torch.
    keep (a dict) receives the decayed states a_t·S_{t−1} ("Sd"), the deltas w_t = β_t·u_t
    ("w") and the innovations u_t ("u"), lists over t, for the gradients' |terms|."""
    _, gated, per_key, _, delta = RULES[rule]
    q, k, v = q.double(), k.double(), v.double()
    B, T, H, K = q.shape
    S = h0.double() if h0 is not None else q.new_zeros((B, H, K, v.shape[-1]))
    out = []
    for t in range(T):
        if g is not None:
            a = torch.exp(g[:, t].double())
            S = S * (a[..., None] if per_key else a[..., None, None])
        u = v[:, t]
        if delta:
            u = u - torch.einsum("bhk,bhkv->bhv", k[:, t], S)
        w = u if beta is None else beta[:, t].double()[..., None] * u
        if keep is not None:
            keep.setdefault("Sd", []).append(S)
            keep.setdefault("w", []).append(w)
            keep.setdefault("u", []).append(u)
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


def abs_terms(rule, leaves, d_o, d_S, scale):
    """Per element of the gate's and β's gradients, the sum of the |terms| it is made of (the
    float64 run; the top of the file): |adjoint of a_t·S_{t−1}| ⊙ |a_t·S_{t−1}| summed over the
    state (over its value dimension for a gate per key), and |adjoint of w_t| ⊙ |u_t| summed over
    the value dimension. Returns (gate terms or None, β terms or None)."""
    _, gated, per_key, has_beta, _ = RULES[rule]
    if not gated and not has_beta:
        return None, None
    it = iter(leaves)
    q, k, v = next(it), next(it), next(it)
    g = next(it) if gated else None
    beta = next(it) if has_beta else None
    h0 = next(it)
    keep = {}
    ro, rS = reference(rule, q, k, v, g, beta, scale, h0, keep)
    loss = (ro * d_o.double()).sum() + (rS * d_S.double()).sum()
    T = q.shape[1]
    wanted = (keep["Sd"] if gated else []) + (keep["w"] if has_beta else [])
    adj = torch.autograd.grad(loss, wanted, allow_unused=True)
    tg = tb = None
    if gated:
        dims = (-1,) if per_key else (-2, -1)
        tg = torch.stack([(adj[t] * keep["Sd"][t]).abs().sum(dims) for t in range(T)], 1)
    if has_beta:
        off = T if gated else 0
        tb = torch.stack([(adj[off + t] * keep["u"][t]).abs().sum(-1) for t in range(T)], 1)
    return tg, tb


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
    # the CPU forms' walk (the top of the file; was 1e-5 fixed)
    assert rel_rms(o, ro) < cpu_walk(20, 16)
    # the same comparison rejects another scale (FLA's default is K^-½, not 1)
    ro1, _ = reference("gated_delta_rule", q, k, v, g, beta, 1.0, None)
    assert rel_rms(o, ro1) > cpu_walk(20, 16)


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


@needs_gpu
@pytest.mark.parametrize("rule", list(RULES))
@pytest.mark.parametrize("shape", SHAPES)
def test_cuda_forward_float32_within_the_derived_bound(rule, shape):
    B, T, H, K, V = shape
    q, k, v, g, beta, h0 = inputs(rule, B, T, H, K, V, torch.float32, "cuda")
    scale = K ** -0.5
    o, S = call(rule, q, k, v, g, beta, h0, scale)
    assert o.device.type == "cuda" and o.dtype == torch.float32
    ro, rS = reference(rule, q, k, v, g, beta, scale, h0)
    bound = f32_bound(T, K, V)
    assert rel_rms(o, ro) <= bound, (rel_rms(o, ro), bound)
    assert rel_rms(S, rS) <= bound, (rel_rms(S, rS), bound)
    # the GPU against the CPU library: within the sum of both bounds
    cpu = call(rule, *[None if x is None else x.cpu() for x in (q, k, v, g, beta, h0)],
               scale)
    assert rel_rms(o.cpu(), cpu[0]) <= bound + cpu_walk(T, K)
    # a perturbed input is rejected by the same bound
    if g is not None:
        g2 = g.clone()
        g2[0, T // 2] -= 1.0
        ro2, _ = reference(rule, q, k, v, g2, beta, scale, h0)
    else:
        k2 = k.clone()
        k2[0, T // 2] *= 1.5
        ro2, _ = reference(rule, q, k2, v, g, beta, scale, h0)
    assert rel_rms(o, ro2) > bound


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
    bf16 = dtype == torch.bfloat16
    # the top of the file: bf16, the C tests' allowances above the storage rounding; float32,
    # their derived bound, the gate's and β's gradients against the sums of their |terms|
    out_tol = 1e-3 if bf16 else f32_bound(T, K, V)
    grad_tol = 2e-3 if bf16 else f32_bound(T, K, V, grad=True)
    tg, tb = (None, None) if bf16 else abs_terms(rule, ref_leaves, d_o, d_S, scale)
    assert rel_rms(o, ro) < storage_error(o, ro) + out_tol
    names = ["q", "k", "v"] + (["g"] if g is not None else []) + \
        (["beta"] if beta is not None else []) + ["h0"]
    scales = {"g": tg, "beta": tb}

    def err(name, got, want):
        if scales.get(name) is not None:  # relative to the norm of the |terms|
            return (torch.linalg.vector_norm(got.double() - want.double()) /
                    torch.linalg.vector_norm(scales[name]).clamp_min(1e-300)).item()
        return rel_rms(got, want)

    for name, got, want in zip(names, grads, ref_grads):
        assert got.dtype == (dtype if name in ("q", "k", "v") else torch.float32), name
        assert err(name, got, want) < storage_error(got, want) + grad_tol, \
            (name, err(name, got, want), storage_error(got, want), grad_tol)
        # and rejects the gradient 5 % off
        assert err(name, 1.05 * got.double(), want) > storage_error(got, want) + grad_tol, name
    # the gradient check rejects a wrong upstream gradient: d_o scaled at one token
    bad = torch.autograd.grad((ro * d_o.double() * 1.0).sum() + (rS * d_S.double()).sum()
                              + ro[0, T // 2].sum(), ref_leaves)
    assert rel_rms(grads[2], bad[2]) > storage_error(grads[2], bad[2]) + grad_tol


@needs_gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_kept_forward_gives_the_recomputed_gradients(dtype):
    """A kept forward (ttt.cuda.keep_forward, docs/gpu.md "Kept forward") runs the same kernels
    as the backward's recomputation and no atomics decide an order, so the gradients are the
    same bits; and the backward really reads the kept buffer: keys changed behind autograd's
    back after the forward give other gradients than a recomputation from the changed keys."""
    rule = "gated_delta_rule"
    B, T, H, K, V = 2, 150, 3, 64, 64  # T not a multiple of the chunk
    q, k, v, g, beta, h0 = inputs(rule, B, T, H, K, V, dtype, "cuda", seed=11)
    leaves = [q, k, v, g, beta, h0]
    for x in leaves:
        x.requires_grad_(True)
    gen = torch.Generator().manual_seed(5)
    d_o = torch.randn(B, T, H, V, generator=gen).to(device="cuda", dtype=dtype)
    d_S = torch.randn(B, H, K, V, generator=gen).to("cuda")

    def grads(keep, change_k=False, twice=False):
        saved = ttt.cuda.keep_forward
        ttt.cuda.keep_forward = keep
        try:
            o, S = call(rule, q, k, v, g, beta, h0, K ** -0.5)
            if change_k:
                k.data.mul_(2.0)  # after the forward, unseen by autograd's version counter
            loss = (o.float() * d_o.float()).sum() + (S * d_S).sum()
            out = torch.autograd.grad(loss, leaves, retain_graph=twice)
            if twice:  # a retained graph's second backward recomputes: the same bits
                again = torch.autograd.grad(loss, leaves)
                assert all(torch.equal(a, b) for a, b in zip(out, again))
            return out, o.detach().clone()
        finally:
            ttt.cuda.keep_forward = saved
            if change_k:
                k.data.div_(2.0)

    kept, o_kept = grads(True, twice=True)
    recomputed, o_re = grads(False)
    assert torch.equal(o_kept, o_re)
    for name, a, b in zip("q k v g beta h0".split(), kept, recomputed):
        assert torch.equal(a, b), (name, rel_rms(a, b))
    changed_kept, _ = grads(True, change_k=True)
    changed_re, _ = grads(False, change_k=True)
    assert rel_rms(changed_kept[2], changed_re[2]) > 1e-3  # dv: from the kept forward


@needs_gpu
@pytest.mark.parametrize("rule", ["gated_delta_rule", "gla"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_packed_sequences_equal_the_sequences_one_by_one(rule, dtype):
    """cu_seqlens on CUDA tensors (docs/python.md "Packed sequences"): outputs, final states and
    every gradient equal those of calling each sequence alone, bit for bit, an empty sequence
    and lengths off the chunk included; offsets moved by one token give other outputs."""
    fn, gated, _, has_beta, _ = RULES[rule]
    lens = [70, 0, 129, 1, 64]
    cu = [0]
    for n in lens:
        cu.append(cu[-1] + n)
    T, H, K, V, N = cu[-1], 2, 32, 48, len(lens)
    q, k, v, g, beta, _ = inputs(rule, 1, T, H, K, V, dtype, "cuda", seed=4)
    gen = torch.Generator().manual_seed(9)
    h0 = (torch.randn(N, H, K, V, generator=gen) * 0.1).to("cuda")
    d_o = torch.randn(1, T, H, V, generator=gen).to(device="cuda", dtype=dtype)
    d_S = torch.randn(N, H, K, V, generator=gen).to("cuda")
    names = ["q", "k", "v"] + (["g"] if gated else []) + (["beta"] if has_beta else []) + ["h0"]

    def run(xs, h, offsets=None):
        args = xs[:3] + ([xs[3]] if gated else []) + ([xs[-1]] if has_beta else [])
        return fn(*args, scale=K ** -0.5, initial_state=h, output_final_state=True,
                  cu_seqlens=offsets)

    xs = [x.clone().requires_grad_(True) for x in (q, k, v, g, beta) if x is not None]
    hp = h0.clone().requires_grad_(True)
    o, S = run(xs, hp, torch.tensor(cu, device="cuda"))
    got = torch.autograd.grad((o.float() * d_o.float()).sum() + (S * d_S).sum(), xs + [hp])
    for n in range(N):
        a, b = cu[n], cu[n + 1]
        if a == b:  # no tokens: the final state is the initial one, and so its gradient
            assert torch.equal(S[n], h0[n]) and torch.equal(got[-1][n], d_S[n])
            continue
        xn = [x[:, a:b].detach().clone().requires_grad_(True) for x in xs]
        hn = h0[n:n + 1].clone().requires_grad_(True)
        on, Sn = run(xn, hn)
        want = torch.autograd.grad((on.float() * d_o[:, a:b].float()).sum() +
                                   (Sn * d_S[n:n + 1]).sum(), xn + [hn])
        assert torch.equal(o[:, a:b], on), n
        assert torch.equal(S[n:n + 1], Sn), n
        for name, x, w in zip(names, got, want):
            part = x[n:n + 1] if name == "h0" else x[:, a:b]
            assert torch.equal(part, w), (n, name)
    moved = list(cu)
    moved[3] -= 1  # the third sequence ends a token early, the fourth starts there
    with torch.no_grad():
        o2, _ = run([x.detach() for x in xs], h0, moved)
    assert not torch.equal(o2, o.detach())


@needs_gpu
def test_cuda_bfloat16_forward_beats_fla_precision_on_long_sequences():
    B, T, H, K, V = 1, 2048, 4, 64, 64
    q, k, v, g, beta, h0 = inputs("gated_delta_rule", B, T, H, K, V, torch.bfloat16, "cuda")
    o, S = call("gated_delta_rule", q, k, v, g, beta, h0, K ** -0.5)
    ro, rS = reference("gated_delta_rule", q, k, v, g, beta, K ** -0.5, h0)
    # bf16 inputs: the C tests' allowance above the storage rounding for o, and for the float32
    # state (the top of the file)
    assert rel_rms(o, ro) < storage_error(o, ro) + 1e-3 and rel_rms(S, rS) < 1e-3
    # a perturbed input is rejected by each check: one token's gate moved by −0.5, in the middle
    # for the outputs, at the last token for the final state (the gates forget a change in the
    # middle before the end: measured on an H200, the state then moved by 3.9e-6 only)
    g2 = g.clone()
    g2[0, T // 2] -= 0.5
    ro2, _ = reference("gated_delta_rule", q, k, v, g2, beta, K ** -0.5, h0)
    assert rel_rms(o, ro2) > storage_error(o, ro2) + 1e-3
    g3 = g.clone()
    g3[0, T - 1] -= 0.5
    _, rS3 = reference("gated_delta_rule", q, k, v, g3, beta, K ** -0.5, h0)
    assert rel_rms(S, rS3) > 1e-3


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
    bound = f32_bound(200, 32, 32)  # the top of the file (was 1e-5)
    assert rel_rms(o, ro) < bound and rel_rms(S, rS) < bound
    # the recurrence without the first reset is rejected
    g2 = g.clone()
    g2[0, 5, 0] = -1.0
    ro2, rS2 = reference("gated_delta_rule", q, k, v, g2, beta, 0.2, h0)
    assert rel_rms(o, ro2) > bound


def test_numpy_path_is_unchanged_by_the_cuda_module():
    x = np.ones((1, 8, 2, 8), np.float32) / 8
    o, S = ttt.Layer("deltanet")(x, x, x)
    assert isinstance(o, np.ndarray)
