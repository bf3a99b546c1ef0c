#!/usr/bin/env python3
"""Data-parallel training over GPUs (docs/scaling.md "Several GPUs"): tokens/s of the 125M-class
language model of experiments/benchmark_lm_gpu.yaml (d_model 768, 12 gated DeltaNet blocks,
sequence 2048, bf16) on 1, 2, 4 and 8 GPUs, as many as the machine has, and the efficiency
against N times one GPU.

    python3 tests/bench/scaling_gpu.py [--ttt build-gpu/ttt] [--per-gpu 8] [--repeats 5]
        [--gpus 1,2,4,8] [--shared]

Weak scaling: every GPU takes --per-gpu sequences of a step (the batch is N·per_gpu), as
data-parallel training is used. Each row is one `ttt run` of the benchmark (its train_step
measure: the fastest and the median of --repeats steps after a warm-up step), all in one
invocation so that the rows are side by side. The one-GPU rows are three: train.device (the
plain device step), train.devices of one GPU (the data-parallel path with its NCCL sum over a
group of one) — their ratio is what the path costs by itself — and, with --shared, two ranks
sharing the GPU (the ordered sum; each rank half the batch): what splitting a step costs.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def gpu_count():
    r = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
    return len([l for l in r.stdout.splitlines() if l.startswith("GPU ")]) if r.returncode == 0 else 0


def run(a, place, batch, out):
    cmd = [a.ttt, "run", os.path.join(ROOT, "experiments/benchmark_lm_gpu.yaml"), "--out", out,
           "--quiet", "--set", "task.seq_len=[2048]", "--set", "task.pairs=64", "--set",
           "train.dtype=bfloat16", "--set", f"train.batch={batch}", "--set",
           f"task.repeats={a.repeats}", "--set", place]
    if "devices" in place:  # the file says device: cpu; rank 0 is cuda:0
        cmd += ["--set", "train.device=cuda"]
    r = subprocess.run(cmd, env=dict(os.environ, OPENBLAS_NUM_THREADS="1"), capture_output=True,
                       text=True)
    if r.returncode != 0:
        return None, r.stderr.strip().splitlines()[-1] if r.stderr.strip() else "failed"
    with open(os.path.join(out, "metrics.jsonl")) as f:
        for line in f:
            rec = json.loads(line)
            if rec.get("measure") == "train_step":
                return rec, ""
    return None, "no train_step record"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ttt", default="build-gpu/ttt")
    ap.add_argument("--per-gpu", type=int, default=8, help="sequences per GPU and step")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--gpus", default="1,2,4,8", help="GPU counts to run (those present)")
    ap.add_argument("--shared", action="store_true", help="also two ranks sharing one GPU")
    a = ap.parse_args()
    have = gpu_count()
    if have == 0:
        print("scaling_gpu: no GPU (nvidia-smi -L lists none); nothing to measure")
        return 77
    rows = [("train.device=cuda", 1, "1 GPU, train.device"),
            ("train.devices=cuda:0", 1, "1 GPU, train.devices")]
    if a.shared:
        rows.append(("train.devices=cuda:0,cuda:0", 1, "2 ranks on 1 GPU"))
    for n in [int(x) for x in a.gpus.split(",")]:
        if 1 < n <= have:
            rows.append((f"train.devices={n}", n, f"{n} GPUs"))
    ver = subprocess.run([a.ttt, "--version"], capture_output=True, text=True).stdout.strip()
    print(f"# {have} GPU(s); ttt {ver.splitlines()[0] if ver else '?'}")
    print(f"# command: python3 {' '.join(sys.argv)}")
    print(f"# weak scaling: {a.per_gpu} sequences of 2048 tokens per GPU and step, bf16; "
          f"fastest (median) of {a.repeats} steps")
    print(f"{'run':<24} {'GPUs':>4} {'batch':>5} {'tok/s':>10} {'tok/s_med':>10} "
          f"{'s/step':>8} {'peak_MiB':>9} {'efficiency':>10}")
    base = None
    with tempfile.TemporaryDirectory() as wd:
        for i, (place, n, label) in enumerate(rows):
            batch = a.per_gpu * n
            rec, why = run(a, place, batch, os.path.join(wd, f"r{i}"))
            if rec is None:
                print(f"{label:<24} {n:>4} {batch:>5} failed: {why}")
                continue
            tps = rec["tokens_per_s"]
            if base is None:
                base = tps
            eff = tps / (n * base)
            print(f"{label:<24} {n:>4} {batch:>5} {tps:>10.0f} {rec['tokens_per_s_median']:>10.0f} "
                  f"{rec['seconds']:>8.3f} {rec.get('gpu_peak_mb', float('nan')):>9.0f} "
                  f"{eff:>10.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
