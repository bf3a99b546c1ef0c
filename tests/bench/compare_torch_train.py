#!/usr/bin/python3
"""A full training step of the MQAR model in ttt and in PyTorch autograd, side by side.

For each preset (and chunk size) it runs `ttt run` on a generated experiment with
`task: {kind: benchmark, measure: train_step, dump: true}` (src/tasks/benchmark.c): ttt times its
own training steps (forward, loss, backward, gradient clipping, AdamW; the trainer of
src/train/train.c) and writes the initial parameters, the first batch, its loss and every parameter's
gradient to a .safetensors file. This script then builds the SAME model in PyTorch from that
file with the package's twin of ttt's sequence model, python/ttt/torch_model.py (the model of
src/train/seqmodel.h, its equations and chunkwise layers in that file's docstring, each layer
checked at start-up against a token-by-token loop of its recurrence in float64), configured by
the dump's resolved model.* and layer.* values (class Config there); a value it does not
implement, or an option it does not know, is refused by name.

Agreement (the script exits 1 if it fails): the loss and every gradient of ttt against PyTorch
in float64 (the same float32 parameters and batch, promoted): per parameter
max|g_ttt − g_64| / max|g_64| ≤ 1e-4, loss |Δ| / loss ≤ 1e-5. The PyTorch float32 gradients are
held to the same bound, so the table shows both sides' float32 rounding against one reference.
Measured: ~1e-6 on both sides (float32 rounding through two blocks).

Timing: the same step in PyTorch — zero_grad, forward, loss, backward, clip_grad_norm_,
torch.optim.AdamW (weight decay on the parameters ttt decays) — with set_threads(n) (compare_torch.py);
ttt with train.threads = train.shards = n (data parallel over the batch), OPENBLAS_NUM_THREADS=1.
Both report the fastest of --repeats steps after a warm-up step, the median step, and the least
process CPU time of a step (over --rounds alternating measurements of the two: min, median of
medians, min) (all threads; with one thread the work itself, which preemption by
other processes on a shared machine does not inflate, while it does inflate wall times).

Memory (--memory): on one thread, from a fresh model, both sides report the growth of their
process's resident set from before the first step to its peak over the same number of steps
(VmHWM, reset by writing 5 to /proc/self/clear_refs; PyTorch in a fresh interpreter, whose
allocator holds nothing from earlier runs), and their page faults per step after the first two;
PyTorch also the bytes of the storages its autograd saves for the backward (saved_tensors_hooks),
ttt its own accounting (src/tasks/bench_train_step.c peak_mb, act_mb). docs/benchmarks.md "Training
memory".

Run with Debian's interpreter and packages (apt-get install python3-torch python3-numpy):
    /usr/bin/python3 tests/bench/compare_torch_train.py --ttt build/ttt
    /usr/bin/python3 tests/bench/compare_torch_train.py --ttt build/ttt --quick
"""
import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_torch import blas_threads_note, cpu_name, read_safetensors, set_threads  # noqa: E402


def load_twin():
    """python/ttt/torch_model.py, the package's PyTorch model (the one twin of ttt's sequence
    model), loaded by its path: `import ttt.torch_model` would run the package's __init__, which
    loads libttt.so, and a sanitizer build's library cannot be loaded into this interpreter."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python", "ttt",
                        "torch_model.py")
    spec = importlib.util.spec_from_file_location("ttt_torch_model", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


twin = load_twin()
decays, forward_loss, self_check = twin.decays, twin.forward_loss, twin.self_check


def Config(meta):
    """The twin's configuration from a dump's resolved values; what it does not implement ends
    the script, naming the options."""
    try:
        return twin.Config(meta)
    except ValueError as e:
        raise SystemExit(f"{os.path.basename(sys.argv[0])}: {e}")

GRAD_TOL = 1e-4
LOSS_TOL = 1e-5

# read_safetensors and cpu_name come from the forward comparison (compare_torch.py)

def gradients(cfg, params, tokens, labels, dtype):
    P = {n: torch.tensor(a, dtype=dtype, requires_grad=True) for n, a in params.items()}
    loss = forward_loss(cfg, P, tokens, labels)
    loss.backward()
    unused = [n for n, t in P.items() if t.grad is None]
    if unused:
        raise SystemExit(f"compare_torch_train: the twin does not use {', '.join(unused)}")
    return loss.item(), {n: t.grad.double().numpy() for n, t in P.items()}


def rel_err(a, ref):
    den = np.abs(ref).max()
    return float(np.abs(a - ref).max() / (den if den > 0 else 1.0))

# ---------------------------------------------------------------- timing


def time_torch(cfg, params, decay, tokens, labels, meta, threads, repeats):
    set_threads(threads)
    P = {n: torch.tensor(a, requires_grad=True) for n, a in params.items()}
    groups = [{"params": [P[n] for n in P if decay[n]],
               "weight_decay": float(meta["train.weight_decay"])},
              {"params": [P[n] for n in P if not decay[n]], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=float(meta["train.lr"]),
                            betas=(float(meta["train.beta1"]), float(meta["train.beta2"])),
                            eps=float(meta["train.eps"]), foreach=True)
    clip = float(meta["train.clip"])
    plist = list(P.values())

    def step():
        opt.zero_grad(set_to_none=True)
        loss = forward_loss(cfg, P, tokens, labels)
        loss.backward()
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(plist, clip)
        opt.step()

    step()  # warm-up
    secs, cpu = [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        step()
        secs.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return min(secs), float(np.median(secs)), min(cpu)

# ---------------------------------------------------------------- memory


def proc_status_bytes(key):
    """VmRSS (the resident set now) or VmHWM (its high-water mark) of this process, in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return 1024.0 * float(line.split()[1])
    return float("nan")


def torch_memory_child(cfg, params, decay, tokens, labels, meta, steps, q):
    """In a fresh interpreter (the parent's allocator holds memory from earlier steps): the
    resident set's growth from before the first step (parameters and batch built) to its peak
    over `steps` steps (warm-up included, as ttt's rss_mb counts from before its first step),
    measured as ttt measures its own (src/tasks/bench_train_step.c: VmHWM reset through clear_refs);
    the minor page faults per step after the first two; and the bytes autograd saves for the
    backward (every saved tensor's storage, each counted once)."""
    import resource
    set_threads(1)
    P = {n: torch.tensor(a, requires_grad=True) for n, a in params.items()}
    groups = [{"params": [P[n] for n in P if decay[n]],
               "weight_decay": float(meta["train.weight_decay"])},
              {"params": [P[n] for n in P if not decay[n]], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=float(meta["train.lr"]), foreach=True)
    plist = list(P.values())

    def step():
        opt.zero_grad(set_to_none=True)
        loss = forward_loss(cfg, P, tokens, labels)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(plist, float(meta["train.clip"]))
        opt.step()

    rss0 = proc_status_bytes("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    faults = []
    for _ in range(steps):
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt)
        step()
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt)
    peak = proc_status_bytes("VmHWM") - rss0
    per_step = (faults[-1] - faults[2]) / max(1, steps - 2)
    seen = {}

    def pack(t):
        st = t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()
        seen[st.data_ptr()] = st.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = forward_loss(cfg, P, tokens, labels)
    saved = float(sum(seen.values()))
    del loss
    q.put((peak, per_step, saved))


def torch_memory(cfg, params, decay, tokens, labels, meta, steps):
    import multiprocessing as mp
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=torch_memory_child,
                    args=(cfg, params, decay, tokens, labels, meta, steps, q))
    p.start()
    r = q.get()
    p.join()
    return r

# ---------------------------------------------------------------- ttt


def layer_section(preset, chunk):
    """The `layer:` of a preset: the chunkwise form with chunk C where the preset has one (the
    linear-attention and delta-rule families); ttt_linear's own form; `softmax` = softmax
    attention."""
    if preset == "softmax":
        return "{mixer: softmax}"
    if preset == "ttt_linear":
        return "{preset: ttt_linear}"
    return f"{{preset: {preset}, form: chunkwise, chunk: {chunk}}}"


def run_ttt(a, wd, preset, chunk):
    y = os.path.join(wd, f"{preset}_{chunk}.yaml")
    out = os.path.join(wd, f"{preset}_{chunk}")
    with open(y, "w") as f:
        f.write(f"""name: compare_torch_train
seed: {a.seed}
task: {{kind: benchmark, measure: train_step, threads: [{a.threads}], repeats: {a.repeats},
        dump: true, seq_len: [{a.seq_len}], vocab: {a.vocab}, pairs: {a.pairs}}}
model: {{d_model: {a.d_model}, layers: {a.layers}, heads: {a.heads}, mlp: 0, conv: 4}}
layer: {layer_section(preset, chunk)}
train: {{batch: {a.batch}, lr: 3e-3, warmup: 50, weight_decay: 0.1, clip: 1.0}}
""")
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    subprocess.run([a.ttt, "run", y, "--out", out, "--quiet"], env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rows = {}
    with open(os.path.join(out, "metrics.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            if r.get("measure") == "train_step":
                rows[int(r["threads"])] = r
    dump, meta = read_safetensors(os.path.join(out, f"train_step_point0_L{a.seq_len}.safetensors"))
    return rows, dump, meta


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ttt", default="build/ttt", help="the ttt program")
    ap.add_argument("--presets", default="linear_attention,deltanet,gated_deltanet",
                    help="presets, and softmax (any of linear_attention, retnet, mamba2, gla, "
                         "deltanet, gated_deltanet, ttt_linear, softmax)")
    ap.add_argument("--chunks", default="16,64", help="chunk sizes C")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--repeats", type=int, default=20, help="timed steps (after one warm-up)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="measure ttt and PyTorch this many times in turn; fastest and least-CPU "
                         "steps over all rounds, median of the rounds' medians")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--d-model", type=int, default=32)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--vocab", type=int, default=64)
    ap.add_argument("--pairs", type=int, default=8)
    ap.add_argument("--quick", action="store_true", help="one chunk size, one thread, 5 steps")
    ap.add_argument("--memory", action="store_true",
                    help="also the memory of a training run on one thread, ttt against PyTorch "
                         "(a table after the timings)")
    a = ap.parse_args()
    if a.quick:
        a.chunks, a.threads, a.repeats = "16", "1", 5
    self_check()
    ver = subprocess.run([a.ttt, "--version"], capture_output=True, text=True).stdout.strip()
    print(f"# machine: {cpu_name()}, {os.cpu_count()} cores; torch {torch.__version__}; ttt {ver}")
    print(f"# {blas_threads_note()}")
    print(f"# command: /usr/bin/python3 {' '.join(sys.argv)}")
    print(f"# MQAR model: d_model {a.d_model}, {a.layers} layers, {a.heads} heads, conv 4, no MLP,"
          f" V {a.vocab}, L {a.seq_len}, batch {a.batch} ({a.batch * a.seq_len} tokens/step); "
          f"best (median) of {a.repeats} steps after a warm-up, {a.rounds} round(s)")
    print(f"# grad_err: max over parameters of max|g - g64| / max|g64| (g64: PyTorch float64 "
          f"on the same parameters and batch); tolerance {GRAD_TOL:g}")
    print("# ratio = PyTorch step time / ttt step time (> 1: ttt faster): of the fastest steps "
          "(wall), of the median steps (med), and of the least process CPU time of a step (cpu: "
          "all threads, insensitive to preemption by other processes)")
    print("# ttt_MB: ttt's memory per step (parameters, gradients, AdamW moments, shard "
          "gradients and the arenas' peak: the benchmark's peak_mb)")
    cols = ["preset", "C", "threads", "ttt_tok/s", "torch_tok/s", "ratio", "ttt_med", "torch_med",
            "ratio_med", "ttt_cpu_ms", "torch_cpu_ms", "ratio_cpu", "ttt_MB", "grad_err_ttt",
            "grad_err_torch", "loss_err"]
    print(" ".join(f"{c:>12}" if i else f"{c:<16}" for i, c in enumerate(cols)))
    worst = 0.0
    mem_rows = []
    with tempfile.TemporaryDirectory() as wd:
        for preset in a.presets.split(","):
            for chunk in (int(c) for c in a.chunks.split(",")):
                rows, dump, meta = run_ttt(a, wd, preset, chunk)
                cfg = Config(meta)
                params = {n[6:]: v for n, v in dump.items() if n.startswith("param.")}
                names = list(params)
                decay = {n: meta["param_decay"][i] == "1" for i, n in enumerate(names)}
                tokens = torch.from_numpy(dump["tokens"].astype(np.int64))
                labels = torch.from_numpy(dump["labels"].astype(np.int64))
                set_threads(1)
                loss64, g64 = gradients(cfg, params, tokens, labels, torch.float64)
                loss32, g32 = gradients(cfg, params, tokens, labels, torch.float32)
                e_ttt = max(rel_err(dump["grad." + n].astype(np.float64), g64[n]) for n in names)
                e_pt = max(rel_err(g32[n], g64[n]) for n in names)
                e_loss = abs(float(dump["loss"]) - loss64) / abs(loss64)
                ok = e_ttt <= GRAD_TOL and e_pt <= GRAD_TOL and e_loss <= LOSS_TOL
                worst = max(worst, e_ttt / GRAD_TOL, e_pt / GRAD_TOL, e_loss / LOSS_TOL)
                ntok = a.batch * a.seq_len
                res = {}  # threads -> [ttt best, ttt median, ttt cpu, torch best, median, cpu]
                mem = {}  # threads -> ttt's peak_mb (the largest over rounds)
                for rnd in range(a.rounds):
                    if rnd > 0:
                        rows = run_ttt(a, wd, preset, chunk)[0]
                    for th in (int(t) for t in a.threads.split(",")):
                        r = rows[th]
                        t = [r["seconds"], r["seconds_median"], r["cpu_seconds"],
                             *time_torch(cfg, params, decay, tokens, labels, meta, th, a.repeats)]
                        res.setdefault(th, []).append(t)
                        mem[th] = max(mem.get(th, 0.0), float(r.get("peak_mb", float("nan"))))
                if a.memory and 1 in rows:
                    r = rows[1]
                    pk, pf, ps = torch_memory(cfg, params, decay, tokens, labels, meta,
                                              a.repeats + 2)
                    mem_rows.append([preset, chunk, f"{r['rss_mb']:.1f}", f"{pk / 2**20:.1f}",
                                     f"{r['rss_mb'] * 2**20 / pk:.2f}x", f"{r['peak_mb']:.1f}",
                                     f"{r['act_mb']:.1f}", f"{ps / 2**20:.1f}",
                                     f"{r['faults_per_step']:.0f}", f"{pf:.0f}"])
                for th, ts in res.items():
                    ts = np.array(ts)  # (rounds, 6): best and cpu: min over rounds; median: median
                    tb, tm, tc, pb, pm, pc = (ts[:, i].min() if i % 3 != 1 else
                                              float(np.median(ts[:, i])) for i in range(6))
                    row = [preset, chunk, th, f"{ntok / tb:.4g}", f"{ntok / pb:.4g}",
                           f"{pb / tb:.2f}x", f"{ntok / tm:.4g}", f"{ntok / pm:.4g}",
                           f"{pm / tm:.2f}x", f"{1e3 * tc:.2f}", f"{1e3 * pc:.2f}",
                           f"{pc / tc:.2f}x", f"{mem[th]:.0f}",
                           f"{e_ttt:.1e}", f"{e_pt:.1e}", f"{e_loss:.1e}" + ("" if ok else " !")]
                    print(" ".join(f"{str(c):>12}" if i else f"{str(c):<16}"
                                   for i, c in enumerate(row)), flush=True)
    if mem_rows:
        print(f"# memory, 1 thread, {a.repeats + 2} steps from a fresh model: rss = the resident "
              "set's growth from before the first step to its peak (VmHWM, reset through "
              "/proc/self/clear_refs; PyTorch in a fresh interpreter); ttt_peak = what ttt "
              "accounts for (parameters, gradients, AdamW moments, shard copies, batches, the "
              "step's arena peak); act = ttt's arena at the loss (what the backward reads), "
              "torch_saved = the storages autograd saves for the backward; faults = minor page "
              "faults per step after the first two")
        mcols = ["preset", "C", "ttt_rss_mb", "torch_rss_mb", "ratio", "ttt_peak_mb", "ttt_act_mb",
                 "torch_saved_mb", "ttt_faults", "torch_faults"]
        print(" ".join(f"{c:>14}" if i else f"{c:<16}" for i, c in enumerate(mcols)))
        for row in mem_rows:
            print(" ".join(f"{str(c):>14}" if i else f"{str(c):<16}" for i, c in enumerate(row)))
    ok = worst <= 1.0
    print(f"# agreement: {'ok' if ok else 'FAILED'} (gradients {GRAD_TOL:g}, loss {LOSS_TOL:g} "
          f"relative)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
