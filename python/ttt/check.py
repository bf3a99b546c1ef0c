"""ttt.assert_close: check a candidate implementation against the float64 reference on random and
hard inputs, and report the worst error per output and state tensor (docs/python.md "Checking
your kernel")."""
import numpy as np

from .reference import PRESETS, reference

# Which per-token inputs each family's candidate receives (besides q, k, v, scale and
# initial_state): the delta rule's step beta, per-token rates eta, log retentions log_alpha.
_INPUTS = {
    "linear_attention": (), "retnet": (), "mamba2": ("log_alpha",), "gla": ("log_alpha_vec",),
    "deltanet": ("beta",), "gated_deltanet": ("beta", "log_alpha"),
    "kda": ("beta", "log_alpha_vec"),
    # Gated DeltaProduct: k, v and beta with steps_per_token rows per token (docs/math.md §4.7)
    "deltaproduct": ("beta", "log_alpha"),
    # log-linear attention: q with one query per level of state (docs/math.md §4.8)
    "loglinear_mamba2": ("beta", "log_alpha"), "loglinear_gdn": ("beta", "log_alpha"),
    "titans": ("eta", "log_alpha"), "ttt_linear": ("eta",), "lact": ("eta",),
    # MesaNet: the input gate as beta, the forget gate per token
    "mesanet": ("beta", "log_alpha"),
}

# (name, log alpha range, beta/eta range, T multiplier): strong and weak gates, steps near 0 and
# near 2 (the delta rule's I - beta k^T k is a reflection at beta = 2 for unit keys).
CASES = (
    ("random", (-0.5, -0.01), (0.2, 1.0)),
    ("strong gates", (-5.0, -2.0), (0.2, 1.0)),
    ("weak gates", (-1e-3, -1e-6), (0.2, 1.0)),
    ("beta near 0", (-0.5, -0.01), (0.0, 1e-3)),
    ("beta near 2", (-0.5, -0.01), (1.95, 2.0)),
)


def _unit(x):
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def _initial(preset, rng, B, H, d_k, d_v):
    fam = PRESETS[preset]["family"]
    if fam in ("linear", "delta", "deltaproduct"):
        return [rng.standard_normal((B, H, d_k, d_v)) / np.sqrt(d_k)]
    if fam.startswith("loglinear"):  # the levels one after the other
        nl = int(PRESETS[preset]["levels"])
        return [rng.standard_normal((B, H, nl * d_k, d_v)) / np.sqrt(d_k)]
    if fam == "mesa":  # [W, H, G]: H positive semidefinite, W the solve of H and G
        Bm = rng.standard_normal((B, H, d_k, d_k)) / np.sqrt(d_k)
        Hs = Bm @ np.swapaxes(Bm, -1, -2)
        Gs = rng.standard_normal((B, H, d_k, d_v)) / np.sqrt(d_k)
        return [np.linalg.solve(Hs + np.eye(d_k), Gs), Hs, Gs]
    if fam == "titans":
        return [rng.standard_normal((B, H, d_k, d_v)) / np.sqrt(d_k),
                0.1 * rng.standard_normal((B, H, d_k, d_v)) / np.sqrt(d_k)]
    if fam == "ttt_linear":
        return [0.02 * rng.standard_normal((B, H, d_k, d_k)), 0.02 * rng.standard_normal((B, H,
                                                                                         d_k))]
    Ws = [rng.standard_normal((B, H, d_k, d_k)) / np.sqrt(d_k) for _ in range(3)]
    return Ws + [np.sqrt((W * W).sum(-2)) for W in Ws]


def make_inputs(preset, B, T, H, d_k, d_v, case=CASES[0], seed=0):
    """The keyword inputs of one case: q, k (unit rows), v, scale, the family's gates and rates,
    and a random initial_state (a list in the order of Layer.state_info)."""
    name, (la_lo, la_hi), (b_lo, b_hi) = case
    rng = np.random.default_rng(seed)
    nh = int(PRESETS[preset].get("steps_per_token", 1))  # pairs per token (deltaproduct)
    nl = int(PRESETS[preset].get("levels", 1))  # queries per token (log-linear attention)
    kw = dict(q=_unit(rng.standard_normal((B, T, H, nl * d_k))),
              k=_unit(rng.standard_normal((B, nh * T, H, d_k))),
              v=rng.standard_normal((B, nh * T, H, d_v)), scale=1.0)
    for inp in _INPUTS[preset]:
        if inp == "beta" or inp == "eta":
            kw[inp] = rng.uniform(b_lo, b_hi, (B, nh * T, H))
        elif inp == "log_alpha":
            kw[inp] = rng.uniform(la_lo, la_hi, (B, T, H))
        else:
            kw["log_alpha"] = rng.uniform(la_lo, la_hi, (B, T, H, d_k))
    kw["initial_state"] = _initial(preset, rng, B, H, d_k, d_v)
    return kw


def _as_np(x):
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    return np.asarray(x, dtype=np.float64)


def _states(s):
    return [s] if not isinstance(s, (list, tuple)) else list(s)


def compare(candidate_fn, preset, shapes=None, cases=CASES, seed=0, as_torch=False, **params):
    """{tensor: (worst relative error, case, shape)} over every shape and case; the error of a
    tensor is max|candidate - reference| / max|reference| (the scale of the tensor)."""
    shapes = shapes or [(1, 67, 2, 16, 16), (2, 1024, 2, 16, 16)]
    worst = {}
    for si, (B, T, H, d_k, d_v) in enumerate(shapes):
        for ci, case in enumerate(cases):
            kw = make_inputs(preset, B, T, H, d_k, d_v, case, seed=seed + 1000 * si + ci)
            ref_o, ref_s = reference(preset, **kw, **params)
            if as_torch:
                import torch
                kw = {key: (torch.from_numpy(val) if isinstance(val, np.ndarray) else
                            [torch.from_numpy(x) for x in val] if isinstance(val, list) else
                            val) for key, val in kw.items()}
            o, s = candidate_fn(**kw)
            pairs = [("o", _as_np(o), ref_o)]
            got = _states(s)
            want = _states(ref_s)
            if len(got) != len(want) and len(got) > 0:
                raise AssertionError("ttt.assert_close: the candidate returned %d state tensors; "
                                     "the reference has %d" % (len(got), len(want)))
            pairs += [("state[%d]" % i, _as_np(g), w) for i, (g, w) in enumerate(zip(got, want))]
            for name, g, w in pairs:
                if g.shape != w.shape:
                    raise AssertionError("ttt.assert_close: %s has shape %s; expected %s"
                                         % (name, g.shape, w.shape))
                err = np.max(np.abs(g - w)) / max(np.max(np.abs(w)), 1e-300) if w.size else 0.0
                if not np.isfinite(err):
                    err = np.inf
                if name not in worst or err > worst[name][0]:
                    worst[name] = (float(err), case[0], (B, T, H, d_k, d_v))
    return worst


def assert_close(candidate_fn, preset, shapes=None, tol=1e-5, cases=CASES, seed=0,
                 as_torch=False, **params):
    """Check candidate_fn against ttt.reference(preset) in float64.

    candidate_fn(q=, k=, v=, scale=, initial_state=[…], and the family's beta / eta /
    log_alpha) -> (o, final_state), arrays in the (B, T, H, D) layout (torch tensors in and out
    with as_torch=True). shapes: [(B, T, H, d_k, d_v)], by default a short T that is not a
    multiple of any chunk size and T = 1024; cases: gates strong and weak, beta near 0 and 2.
    Raises AssertionError naming the worst error per tensor when one exceeds tol; returns the
    report {tensor: (error, case, shape)} otherwise."""
    worst = compare(candidate_fn, preset, shapes, cases, seed, as_torch, **params)
    lines = ["%-9s %.3e  (%s, shape %s)" % (name, e, case, shp)
             for name, (e, case, shp) in worst.items()]
    bad = [name for name, (e, _, _) in worst.items() if not e <= tol]
    if bad:
        raise AssertionError("ttt.assert_close(%s): %s above tol = %g\n  worst relative error "
                             "per tensor:\n  %s" % (preset, ", ".join(bad), tol,
                                                    "\n  ".join(lines)))
    return worst
