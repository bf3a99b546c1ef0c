"""ttt.torch_model: a trained model exported by `ttt export`, loaded as a torch.nn.Module, gives
the logits ttt's own forward pass gives (`ttt logits`, computed here at test time from the run's
checkpoint), for every mixer the module implements (docs/python.md "Loading an export in
PyTorch")."""
import os
import subprocess

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import ttt  # noqa: E402
import ttt.torch_model as tm  # noqa: E402

EPS = 2.0 ** -24


def bound(model, t):
    """The largest error of a float32 evaluation of the model's logits on tokens t, against the
    module in float64 from the same float32 weights (docs/hardening.md "Portable tolerances").

    A logit is Σ_j h_j W_jv over the final normalized hidden h: an error of ρ·max|h| in h moves
    it by at most ρ·max|h|·max_v Σ_j|W_jv| (that product's conditioning, from the weights and h
    in float64). ρ: a value on the way to the logits passes through K roundings of at most ε of
    its scale, independent, a random walk of deviation ε·√K. Per block, with w the widest inner
    width (3·d_model: Mamba's expansion, the largest here): the norm (w + 3), the mixer's T steps
    of a w-term product each ((w + 3)·T; softmax's T-term sums and the chunked forms are no
    longer), the four projections (4w), the MLP (w + mlp) and some twenty element-wise
    operations; then the final norm (w + 3). c = 6 covers the largest of the B·T·V logits
    (√(2 ln 2304) ≈ 3.9 deviations) with the projections' sums taken in blocks."""
    cfg = model.cfg
    T = t.shape[1]
    w = 3 * cfg.d
    K = cfg.layers * ((w + 3) * (T + 1) + 5 * w + cfg.mlp + 20) + w + 3
    P = {n: x.double() for n, x in model.ttt_parameters().items()}
    W = P["head"]
    with torch.no_grad():
        h = tm.forward_logits(cfg, dict(P, head=torch.eye(cfg.d, dtype=torch.float64)), t)
    return 6 * EPS * np.sqrt(K) * float(h.abs().max() * W.abs().sum(0).max())


# Each mixer's `layer:` (or `model.mixer`), from weights of standard deviation 0.3 (not 0.02,
# with which q·S and the mixers' outputs are ~1e-6 and a wrong mixer would go unseen) trained a
# few steps at a high learning rate (logits up to ~4).
MIXERS = {
    "linear_attention": {"layer": {"preset": "linear_attention"}},
    "retnet": {"layer": {"preset": "retnet"}},
    "mamba2": {"layer": {"preset": "mamba2"}},
    "gla": {"layer": {"preset": "gla"}},
    "deltanet": {"layer": {"preset": "deltanet"}},
    "gated_deltanet": {"layer": {"preset": "gated_deltanet"}},
    "ttt_linear": {"layer": {"preset": "ttt_linear"}},
    "titans": {"layer": {"preset": "titans"}},
    "lact": {"layer": {"preset": "lact"}},
    "softmax": {"model": {"mixer": "softmax"}},
    "fox": {"model": {"mixer": "fox"}},
    "mamba": {"model": {"mixer": "mamba"}},
    "lru": {"model": {"mixer": "lru"}},
    # the other block options: LayerNorm, learned positions, normalized linear attention
    "layernorm_learned_ratio": {"model": {"norm": "layer", "positions": "learned"},
                                "layer": {"preset": "linear_attention", "normalize": "ratio"}},
    # Titans with Nesterov, another μ and θ, blocks of 5 (24 tokens: 4 full and a short one)
    # and a gate per key dimension
    "titans_options": {"model": {"gate": "vector"},
                       "layer": {"preset": "titans", "mini_batch": 5,
                                 "optimizer": "{name: momentum, nesterov: true, momentum: 0.8, "
                                              "lr: 0.2}"}},
    # LaCT's updates seen by later tokens (the preset's block of 2048 holds all 24 tokens):
    # blocks of 7 (three full, one short) with Newton–Schulz, momentum, position_scale inverse and
    # a scalar gate; blocks of 6 with the plain step (no Newton–Schulz, no renormalization) and
    # a constant decay; blocks of 8 with the squared loss, the cubic Newton–Schulz, one norm per
    # row and RetNet's decays per head.
    # Not the quintic on a single block's gradient at lr 1 (the preset with mini_batch 8): there
    # the module's own float32 and float64 logits differ by 7e-6 to 1.1e-5, so no float32
    # evaluation, ttt's included, is within 1e-5 of the exact value (docs/python.md "Loading an
    # export in PyTorch").
    "lact_blocks": {"model": {"gate": "scalar"},
                    "layer": {"preset": "lact", "mini_batch": 7, "position_scale": "inverse",
                              "optimizer": "{name: large_batch, muon: true, momentum: 0.5, "
                                           "lr: 0.5}"}},
    "lact_plain": {"layer": {"preset": "lact", "mini_batch": 6,
                             "optimizer": "{name: large_batch, muon: false, renormalize: false, "
                                          "lr: 0.3, decay: 0.8}"}},
    "lact_rows": {"model": {"gate": "multiscale"},
                  "layer": {"preset": "lact", "mini_batch": 8, "loss": "squared",
                            "optimizer": "{name: large_batch, muon: true, coefficients: cubic, "
                                         "steps: 8, renormalize_axis: rows}"}},
    # the mixers' block options and their own options away from the defaults
    "fox_options": {"model": {"mixer": "fox", "positions": "rope", "qk_norm": "true", "conv": 4,
                              "act": "silu", "out_norm": "true", "out_gate": "true",
                              "fgate_bias": 2.0}},
    "mamba_options": {"model": {"mixer": "mamba", "mamba_state": 8, "mamba_dt_rank": 3,
                                "mamba_conv": 3, "mamba_expand": 3, "out_norm": "true",
                                "positions": "learned"}},
    "lru_options": {"model": {"mixer": "lru", "lru_state": 12, "out_gate": "true",
                              "norm": "layer"}},
}


def program():
    """The ttt program: $TTT_PROGRAM, else the one built next to the library under test."""
    p = os.environ.get("TTT_PROGRAM") or os.path.join(os.path.dirname(ttt.library_path), "ttt")
    if not os.access(p, os.X_OK):
        pytest.fail(f"no ttt program at {p} (build the target ttt, or set TTT_PROGRAM)")
    return p


def ttt_cli(*args):
    r = subprocess.run([program(), *args], capture_output=True, text=True)
    assert r.returncode == 0, f"ttt {' '.join(args)}:\n{r.stderr}"


def experiment(name, extra):
    model = {"d_model": 16, "layers": 2, "heads": 2, "mlp": 16,
             "init_std": 0.3, **extra.get("model", {})}
    lines = [f"name: {name}", "seed: 3",
             "task: {kind: mqar, vocab: 32, seq_len: 24, pairs: 4, train_examples: 64, "
             "test_examples: 16}",
             f"model: {flow(model)}",
             "train: {steps: 8, batch: 8, lr: 3e-2, warmup: 1, log_every: 8}"]
    if "layer" in extra:
        lines.append(f"layer: {flow(extra['layer'])}")
    return "\n".join(lines) + "\n"


def flow(d):
    return "{" + ", ".join(f"{k}: {v}" for k, v in d.items()) + "}"


def export_and_reference(tmp_path, name, extra, tokens):
    """Train, export, and ttt's logits on `tokens` from the run's checkpoint."""
    cfg = tmp_path / f"{name}.yaml"
    cfg.write_text(experiment(name, extra))
    run, exp = tmp_path / name, tmp_path / f"{name}.safetensors"
    ttt_cli("run", str(cfg), "--out", str(run), "--quiet")
    ttt_cli("export", str(run), str(exp))
    tm.write_safetensors(tmp_path / "tokens.safetensors", {"tokens": tokens})
    out = tmp_path / f"{name}_logits.safetensors"
    ttt_cli("logits", str(run), str(tmp_path / "tokens.safetensors"), str(out))
    return str(exp), tm.read_safetensors(out)[0]["logits"]


def batch(B=3, T=24, V=32, seed=0):
    return np.random.default_rng(seed).integers(0, V, size=(B, T))


@pytest.mark.parametrize("name", list(MIXERS))
def test_export_reproduces_ttts_logits(tmp_path, name):
    tokens = batch()
    exp, ref = export_and_reference(tmp_path, name, MIXERS[name], tokens)
    model = tm.load(exp)
    assert set(model.state_dict()) == set(tm.read_safetensors(exp)[0])   # the export's names
    t = torch.from_numpy(tokens)
    with torch.no_grad():
        l32 = model(t).numpy()
        l64 = model.double()(t).numpy()
    assert ref.shape == l32.shape == (3, 24, 32)
    assert np.abs(ref).max() > 0.5, "logits too small for the tolerance to mean anything"
    # ttt's float32 logits and the module's own float32 logits, each against the module in
    # float64 (the same float32 weights): each within its derived bound
    tol = bound(model.float(), t)
    e_ttt, e_mod = np.abs(ref - l64).max(), np.abs(l32 - l64).max()
    print(f"{name}: bound {tol:.2e}, ratio ttt {e_ttt / tol:.3f}, module {e_mod / tol:.3f}")
    assert e_ttt <= tol and e_mod <= tol, f"{name}: max |Δlogit| {e_ttt:.2e} (ttt), " \
                                          f"{e_mod:.2e} (the module in float32); bound {tol:.2e}"
    # the check has power here: a layout slip in the last block's first projection moves the
    # logits beyond the bound
    slip(model.layers[1].mixer)
    with torch.no_grad():
        moved = np.abs(model.double()(t).numpy() - l64).max()
    assert moved > 2 * tol, f"{name}: a layout slip moves the logits by {moved:.1e} only"


def slip(mixer):
    """A layout slip: the query weight read transposed, or, for the mixers without q, k, v, the
    two halves of the input projection's outputs swapped (Mamba's x and z branches, the LRU's
    real and imaginary parts)."""
    with torch.no_grad():
        if hasattr(mixer, "wq"):
            w = mixer.wq.weight
            w.copy_(w.t().clone())
        else:
            w = (mixer.w_in if hasattr(mixer, "w_in") else mixer.w_b).weight   # (out, in)
            w.copy_(w.roll(w.shape[0] // 2, 0))


def test_a_sweep_point(tmp_path):
    # a swept run's export names its point; the module rebuilds that point's model
    text = experiment("sweep", {"layer": {"preset": "deltanet"}}) + \
        "sweep:\n  layer:\n    - {preset: deltanet}\n    - {preset: gla}\n"
    (tmp_path / "s.yaml").write_text(text)
    ttt_cli("run", str(tmp_path / "s.yaml"), "--out", str(tmp_path / "s"), "--quiet")
    ttt_cli("export", str(tmp_path / "s"), str(tmp_path / "s1.safetensors"), "--point", "1")
    tokens = batch(B=2)
    tm.write_safetensors(tmp_path / "tok.safetensors", {"tokens": tokens})
    ttt_cli("logits", str(tmp_path / "s"), str(tmp_path / "tok.safetensors"),
            str(tmp_path / "l1.safetensors"), "--point", "1")
    ref = tm.read_safetensors(tmp_path / "l1.safetensors")[0]["logits"]
    model = tm.load(str(tmp_path / "s1.safetensors"))
    assert model.cfg.gate == "vector"                                    # gla, not deltanet
    t = torch.from_numpy(tokens)
    with torch.no_grad():
        assert np.abs(model.double()(t).numpy() - ref).max() <= bound(model, t)


def test_refuses_what_it_does_not_implement(tmp_path):
    # Adam (another inner optimizer), TTT-MLP (another fast-weight model) and Titans' momentum
    # with one step per block (a combination the module does not implement): refused by the
    # option, never approximated
    for name, extra, option in (("adam", {"layer": {"preset": "deltanet",
                                                    "optimizer": "{name: adam}"}},
                                 "layer.optimizer.name = adam"),
                                ("ttt_mlp", {"layer": {"preset": "ttt_mlp"}},
                                 "layer.model = ttt_mlp"),
                                ("titans_block", {"layer": {"preset": "titans",
                                                            "steps": "per_block"}},
                                 "layer.steps = per_block")):
        (tmp_path / f"{name}.yaml").write_text(experiment(name, extra).replace("steps: 8",
                                                                                 "steps: 1"))
        ttt_cli("run", str(tmp_path / f"{name}.yaml"), "--out", str(tmp_path / name), "--quiet")
        ttt_cli("export", str(tmp_path / name), str(tmp_path / f"{name}.safetensors"))
        with pytest.raises(ValueError, match=option):
            tm.load(str(tmp_path / f"{name}.safetensors"))
    # a vector model: it reads features, not token ids
    (tmp_path / "reg.yaml").write_text(
        "task: {kind: regression, dim: 2, points: 4, eval_sequences: 8, eval_batch: 8}\n"
        "model: {d_model: 8, layers: 1, heads: 2, mlp: 0}\nlayer: {preset: deltanet}\n"
        "train: {steps: 1, batch: 4, log_every: 1}\n")
    ttt_cli("run", str(tmp_path / "reg.yaml"), "--out", str(tmp_path / "reg"), "--quiet")
    ttt_cli("export", str(tmp_path / "reg"), str(tmp_path / "reg.safetensors"))
    with pytest.raises(ValueError, match="task.kind = regression"):
        tm.load(str(tmp_path / "reg.safetensors"))
    # not an export at all
    tm.write_safetensors(tmp_path / "x.safetensors", {"w": np.zeros(2)})
    with pytest.raises(ValueError, match="ttt.format"):
        tm.load(str(tmp_path / "x.safetensors"))


def test_chunkwise_layers_match_their_recurrences():
    # the module's chunkwise linear attention and delta rule and TTT-Linear's dual form against
    # token-by-token loops of their recurrences, float64 (self_check asserts 1e-10)
    torch.set_num_threads(1)
    tm.self_check()
