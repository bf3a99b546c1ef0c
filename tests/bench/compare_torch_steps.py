#!/usr/bin/python3
"""Training parity with PyTorch, step for step (docs/training.md "Training parity with PyTorch").

For each mixer it runs `ttt run` on a generated experiment with
`task: {kind: benchmark, measure: train_step, dump_steps: N}` (src/tasks/benchmark.c): ttt's own
trainer (src/train/train.c: forward, loss, backward, gradient clipping, AdamW with warm-up and
cosine schedule) trains a freshly initialized MQAR model for N steps on N fresh batches and writes
the initial parameters, every step's batch, the loss the trainer recorded for it and its learning
rate, and the parameters after step N. The model is then trained again in PyTorch from the same
initial parameters on the same batches, twice: in float64 (the reference) and in float32, with

    the model          the package's twin (python/ttt/torch_model.py, through
                       compare_torch_train.py), built from the dump's resolved model.* and
                       layer.* values (anything it does not implement is refused by name)
    weight decay       torch.optim.AdamW with two groups: decays() of the twin (the
                       twin's own rule, checked against the flags ttt wrote) at train.weight_decay,
                       the rest at 0
    learning rate      this script's own implementation of the schedule of src/train/adamw.h
                       (warm-up (s + 1)/W, then cosine down to min_lr_ratio at N), set on both
                       groups before every step, and checked against the rate ttt recorded
    clipping           the global norm of all gradients (accumulated in float64); when above
                       train.clip, every gradient is scaled by clip / norm (ttt's definition;
                       torch's clip_grad_norm_ divides by norm + 1e-6 instead)

Agreement (exit 1 when it fails). Float64 PyTorch is the reference; ttt and PyTorch float32 are
held to the same bound. With e(s) = |loss(s) − loss_64(s)| / loss_64(s) the relative loss error
of a float32 curve at step s, and leave = the first step at which e(s) > LOSS_TOL (N + 1 if
never), each of the two float32 curves must satisfy

    leave ≥ LEAVE_RATIO · leave_other     and     max_s e(s) ≤ SPREAD · max(LOSS_TOL, max_s e_other(s))

e_other being the other float32 curve's error. Why: a step's float32 rounding (~1e-7 relative)
is carried into the weights and amplified by every later update — Adam divides by sqrt(v), so a
weight whose gradient is near zero moves a full step whichever way rounding tips it, and training
at these rates is a chaotic map — so both float32 curves leave the exact one by the same
mechanism, at about the same step, and then wander by similar amounts; which of the two leaves
first is a matter of chance (the full run: steps 74 / 64 for gla, 92 / 90 for linear attention,
75 to 153 for the others, never for softmax and ttt_linear; largest errors within a factor 2 of
each other). An implementation error in ttt shows up as ttt leaving early while PyTorch float32
stays on the curve: a missing weight decay on the head alone makes ttt leave at step 19–21 of
the quick test's 100 (where both float32 curves otherwise stay below 3e-5). The learning rates
ttt used must equal this script's schedule to float32 storage (LR_TOL) at every step. The final
parameters' differences are printed, not checked.

Run with Debian's interpreter and packages (apt-get install python3-torch python3-numpy):
    /usr/bin/python3 tests/bench/compare_torch_steps.py --ttt build/ttt             # 300 steps
    /usr/bin/python3 tests/bench/compare_torch_steps.py --ttt build/ttt --quick     # ctest
Without torch it exits 77 (ctest: skipped), or 1 when the environment variable CI is set.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time

try:
    import numpy as np
    import torch
except ImportError as e:  # CI installs python3-torch (.ci/deps test): missing there is a failure
    print(f"compare_torch_steps: {e}; install python3-torch python3-numpy", file=sys.stderr)
    sys.exit(1 if os.environ.get("CI") else 77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_torch import read_safetensors  # noqa: E402
from compare_torch_train import Config, decays, forward_loss, self_check  # noqa: E402
# (the twin itself is python/ttt/torch_model.py; compare_torch_train loads it)

LOSS_TOL = 1e-4
LEAVE_RATIO = 0.75
SPREAD = 10.0
LR_TOL = 1e-6

# The mixers with a PyTorch twin: the `layer:` section of each (the model's defaults resolve the
# rest, and the twin follows whatever they resolve to).
MIXERS = {
    "linear_attention": "{preset: linear_attention}",
    "retnet": "{preset: retnet}",
    "mamba2": "{preset: mamba2}",
    "gla": "{preset: gla}",
    "deltanet": "{preset: deltanet}",
    "gated_deltanet": "{preset: gated_deltanet}",
    "ttt_linear": "{preset: ttt_linear}",
    "softmax": "{mixer: softmax}",
}


def schedule(meta, s):
    """lr(s) of src/train/adamw.h for a run of parity.steps updates (s counted from 0)."""
    lr, W = float(meta["train.lr"]), int(meta["parity.warmup"])
    T, r = int(meta["parity.steps"]), float(meta["train.min_lr_ratio"])
    if s < W:
        return lr * (s + 1) / W
    if s >= T:
        return lr * r
    return lr * (r + (1 - r) * 0.5 * (1 + math.cos(math.pi * (s - W) / (T - W))))


def train_torch(cfg, meta, dump, names, dtype):
    """N steps of PyTorch from the dump's initial parameters on its batches: (losses, gradient
    norms, final parameters)."""
    P = {n: torch.tensor(dump["param." + n], dtype=dtype, requires_grad=True) for n in names}
    wd = float(meta["train.weight_decay"])
    groups = [{"params": [P[n] for n in names if decays(n, P[n].shape)], "weight_decay": wd},
              {"params": [P[n] for n in names if not decays(n, P[n].shape)],
               "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=float(meta["train.lr"]),
                            betas=(float(meta["train.beta1"]), float(meta["train.beta2"])),
                            eps=float(meta["train.eps"]), foreach=False)
    clip = float(meta["train.clip"])
    tokens = torch.from_numpy(dump["tokens"].astype(np.int64))
    labels = torch.from_numpy(dump["labels"].astype(np.int64))
    losses, norms = [], []
    for s in range(tokens.shape[0]):
        for g in opt.param_groups:
            g["lr"] = schedule(meta, s)
        opt.zero_grad(set_to_none=True)
        loss = forward_loss(cfg, P, tokens[s], labels[s])
        loss.backward()
        unused = [n for n in names if P[n].grad is None]
        if unused:
            raise SystemExit(f"compare_torch_steps: the twin does not use {', '.join(unused)}")
        with torch.no_grad():
            norm = math.sqrt(sum(float(P[n].grad.double().pow(2).sum()) for n in names))
            if clip > 0 and norm > clip:
                for n in names:
                    P[n].grad.mul_(clip / norm)
        opt.step()
        losses.append(loss.item())
        norms.append(norm)
    return np.array(losses), np.array(norms), {n: P[n].detach().double().numpy() for n in names}


def run_ttt(a, wd, name, layer):
    y = os.path.join(wd, f"{name}.yaml")
    out = os.path.join(wd, name)
    with open(y, "w") as f:
        f.write(f"""name: compare_torch_steps
seed: {a.seed}
task: {{kind: benchmark, measure: train_step, threads: [1], repeats: 1, dump_steps: {a.steps},
        seq_len: [{a.seq_len}], vocab: {a.vocab}, pairs: {a.pairs}}}
model: {{d_model: {a.d_model}, layers: {a.layers}, heads: {a.heads}, mlp: {a.mlp}}}
layer: {layer}
train: {{batch: {a.batch}, lr: {a.lr}, warmup: {a.warmup}, weight_decay: {a.weight_decay},
         clip: {a.clip}}}
""")
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    r = subprocess.run([a.ttt, "run", y, "--out", out, "--quiet"], env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        raise SystemExit(f"compare_torch_steps: ttt run {y} failed:\n{r.stderr}")
    return read_safetensors(os.path.join(out, f"train_steps_point0_L{a.seq_len}.safetensors"))


def cpu_seconds():
    """CPU time of this process and of the ttt runs it waited for."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def rel(a, ref):
    return np.abs(a - ref) / np.abs(ref)


def param_err(final, ref):
    return max(float(np.abs(final[n] - ref[n]).max() / max(np.abs(ref[n]).max(), 1e-30))
               for n in ref)


def leave_step(e):
    """The first step (from 1) at which e exceeds LOSS_TOL; len(e) + 1 if it never does."""
    k = np.nonzero(e > LOSS_TOL)[0]
    return int(k[0]) + 1 if len(k) else len(e) + 1


def within(e, other):
    """e stays within LOSS_TOL at least LEAVE_RATIO as long as the other float32 curve does, and
    its largest error is at most SPREAD times the other's (or LOSS_TOL's); see the top."""
    return (leave_step(e) >= LEAVE_RATIO * leave_step(other) and
            e.max() <= SPREAD * max(LOSS_TOL, other.max()))


def leaves(e):
    """The first step (from 1) at which e exceeds LOSS_TOL, or '-'."""
    k = np.nonzero(e > LOSS_TOL)[0]
    return str(k[0] + 1) if len(k) else "-"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ttt", default="build/ttt", help="the ttt program")
    ap.add_argument("--mixers", default=",".join(MIXERS), help="from: " + ",".join(MIXERS))
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--d-model", type=int, default=32)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--mlp", type=int, default=0)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--vocab", type=int, default=64)
    ap.add_argument("--pairs", type=int, default=8)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--save", help="write every step's losses (ttt, PyTorch float32 and "
                    "float64) and learning rate per mixer to this JSON file")
    ap.add_argument("--quick", action="store_true",
                    help="the test's setting: 100 steps of a tiny model (d_model 16, batch 8, "
                         "L 32)")
    a = ap.parse_args()
    if a.quick:
        a.steps, a.d_model, a.heads, a.batch, a.seq_len, a.vocab, a.pairs, a.warmup = \
            100, 16, 2, 8, 32, 32, 4, 10
    torch.set_num_threads(1)
    self_check()
    t0, c0 = time.time(), cpu_seconds()
    print(f"# command: /usr/bin/python3 {' '.join(sys.argv)}; torch {torch.__version__}")
    print(f"# MQAR model: d_model {a.d_model}, {a.layers} layers, {a.heads} heads, mlp {a.mlp}, "
          f"V {a.vocab}, {a.pairs} pairs, L {a.seq_len}, batch {a.batch}; {a.steps} steps, lr "
          f"{a.lr:g}, warm-up {a.warmup}, weight decay {a.weight_decay:g}, clip {a.clip:g}")
    print(f"# loss error: |loss - loss64| / loss64 at the step (loss64: PyTorch float64); "
          f"each float32 curve stays within {LOSS_TOL:g} at least {LEAVE_RATIO:g} x as long as the "
          f"other, and its largest error is at most {SPREAD:g} x the other's")
    marks = sorted({1, min(100, a.steps), a.steps})
    cols = ["mixer"] + [f"ttt@{s}" for s in marks] + [f"t32@{s}" for s in marks] + \
        ["ttt_max", "t32_max", "ttt_leave", "t32_leave", "lr_err", "param_ttt", "param_t32",
         "loss64@1", f"loss64@{a.steps}"]
    print(" ".join(f"{c:>10}" if i else f"{c:<16}" for i, c in enumerate(cols)))
    failed, saved = [], {}
    with tempfile.TemporaryDirectory() as wd:
        for name in a.mixers.split(","):
            if name not in MIXERS:
                raise SystemExit(f"compare_torch_steps: unknown mixer '{name}' (known: "
                                 f"{', '.join(MIXERS)})")
            dump, meta = run_ttt(a, wd, name, MIXERS[name])
            cfg = Config(meta)
            names = [n[6:] for n in dump if n.startswith("param.")]
            flags = meta["param_decay"]
            differ = [n for i, n in enumerate(names)
                      if (flags[i] == "1") != decays(n, dump["param." + n].shape)]
            if differ:
                failed.append(name)
                print(f"{name:<16} weight decay differs from the twin's rule on: "
                      f"{', '.join(differ)}")
                continue
            N = dump["loss"].shape[0]
            lr_py = np.array([schedule(meta, s) for s in range(N)])
            lr_err = float(rel(dump["lr"].astype(np.float64), lr_py).max())
            l64, _, p64 = train_torch(cfg, meta, dump, names, torch.float64)
            l32, _, p32 = train_torch(cfg, meta, dump, names, torch.float32)
            lt = dump["loss"].astype(np.float64)
            e_ttt, e_32 = rel(lt, l64), rel(l32, l64)
            ok = within(e_ttt, e_32) and within(e_32, e_ttt) and lr_err <= LR_TOL
            if not ok:
                failed.append(name)
            pt = {n: dump["final." + n].astype(np.float64) for n in names}
            row = [name] + [f"{e_ttt[s - 1]:.1e}" for s in marks] + \
                [f"{e_32[s - 1]:.1e}" for s in marks] + \
                [f"{e_ttt.max():.1e}", f"{e_32.max():.1e}", leaves(e_ttt), leaves(e_32),
                 f"{lr_err:.1e}", f"{param_err(pt, p64):.1e}", f"{param_err(p32, p64):.1e}",
                 f"{l64[0]:.4f}", f"{l64[-1]:.4f}" + ("" if ok else " !")]
            print(" ".join(f"{str(c):>10}" if i else f"{str(c):<16}"
                           for i, c in enumerate(row)), flush=True)
            saved[name] = {"loss_ttt": lt.tolist(), "loss_torch32": l32.tolist(),
                           "loss_torch64": l64.tolist(), "lr": dump["lr"].tolist()}
    if a.save:
        with open(a.save, "w") as f:
            json.dump(saved, f)
    print(f"# *_leave: the first step at which that float32 curve is more than {LOSS_TOL:g} from "
          f"the float64 one ('-': never)")
    print(f"# param_*: max over parameters of max|W - W64| / max|W64| after step {a.steps} "
          f"(not checked: reported to show how far the weights drift)")
    print(f"# {time.time() - t0:.0f} s wall, {cpu_seconds() - c0:.0f} s CPU (with ttt's); parity: "
          f"{'ok' if not failed else 'FAILED for ' + ', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
