"""Shared by the layer tests (test_kda.py, test_deltaproduct.py): a float32 layer's backward
against float64 autograd through ttt.reference on the same inputs, with the derived bound and a
control it must reject (docs/hardening.md "Portable tolerances")."""
import numpy as np
import torch

import ttt

EPS = 2.0 ** -24
NAMES = ["q", "k", "v", "beta", "log_alpha"]


def grad_tol(T, d):
    """A float32 gradient against float64 autograd, relative to max|reference gradient|: the
    forward's and the backward's roundings, n = 4d + T + 10 a step each (the d-term products, a
    block's sums, a few element-wise; the count of the C suites), a walk of deviation
    ε·√(2n·T), c = 6. T counts the steps (sub-steps where a token takes several)."""
    return 6 * EPS * np.sqrt(2 * (4 * d + T + 10) * T)


def check_gradients(preset, kw, form, steps, d, moved):
    """Every input's gradient of L = Σ c_o ⊙ o + Σ c_s ⊙ S (random c) from ttt.Layer(preset,
    form) against float64 autograd of ttt.reference(preset) within grad_tol(steps, d), then the
    control: the reference with log alpha moved by −0.3 at index `moved` has a log alpha gradient
    the library's must be farther than the bound from."""
    t = {n: torch.from_numpy(kw[n]).requires_grad_() for n in NAMES}
    s0 = torch.from_numpy(kw["initial_state"][0]).requires_grad_()
    o_ref, s_ref = ttt.reference(preset, scale=0.5, initial_state=[s0], **t)
    gen = torch.Generator().manual_seed(2)
    c_o = torch.randn(o_ref.shape, generator=gen, dtype=torch.float64)
    c_s = torch.randn(s_ref.shape, generator=gen, dtype=torch.float64)
    g_ref = torch.autograd.grad((c_o * o_ref).sum() + (c_s * s_ref).sum(),
                                [t[n] for n in NAMES] + [s0])

    lib = {n: t[n].detach().clone().requires_grad_() for n in NAMES}
    s1 = s0.detach().clone().requires_grad_()
    o, s = ttt.Layer(preset, scale=0.5, form=form)(**lib, initial_state=[s1])
    ((c_o * o).sum() + (c_s * s).sum()).backward()
    g_lib = [lib[n].grad for n in NAMES] + [s1.grad]
    bound = grad_tol(steps, d)
    for name, a, b in zip(NAMES + ["state"], g_lib, g_ref):
        fin = torch.isfinite(b)  # d/d log alpha at -inf: alpha = 0, the gradient is 0 there
        scale = b[fin].abs().max().item()
        err = (a[fin] - b[fin]).abs().max().item()
        print("%s gradient %s (%s): ratio %.3f" % (preset, name, form, err / (bound * scale)))
        assert err <= bound * scale, (name, err, scale)
    la = t["log_alpha"].detach().clone()
    la[moved] -= 0.3
    lab = la.requires_grad_()
    o_b, s_b = ttt.reference(preset, scale=0.5, initial_state=[s0.detach()],
                             **dict({n: t[n].detach() for n in NAMES}, log_alpha=lab))
    g_bad = torch.autograd.grad((c_o * o_b).sum() + (c_s * s_b).sum(), lab)[0]
    fin = torch.isfinite(g_bad) & torch.isfinite(g_ref[4])
    assert (lib["log_alpha"].grad[fin] - g_bad[fin]).abs().max().item() > \
        bound * g_ref[4][fin].abs().max().item()
