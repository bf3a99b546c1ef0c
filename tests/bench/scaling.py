#!/usr/bin/python3
"""Scaling over processes (docs/scaling.md): prints three tables.

1. Sweep throughput: experiments/mqar_quick.yaml (10 trained points) as one process
   (train.threads 1 and 2) and over `mpirun -np 2` (train.threads 1 per rank): wall clock of the
   whole `ttt run`, points per minute, and the CPU seconds the processes used.
2. Data-parallel scaling of the MQAR training step (one point of mqar_quick, deltanet, batch 32,
   train.shards 4, 60 steps): 1 rank × 1 and 2 threads, 2 ranks × 1 thread; the trainer's own
   seconds and tokens/s (rank 0's summary row), and the bytes a rank receives per step (the
   partial sum from the rank before it and the broadcast sum).
3. On paper: the ordered chain's volume per step against the step time for the same model and a model
   100× larger (step time assumed ×100: the work of a step grows with the parameters at a fixed
   number of tokens), at 10 Gb Ethernet and 100 Gb/s InfiniBand (bandwidth only, no latency);
   also what a ring MPI_Allreduce would move.

usage: python3 tests/bench/scaling.py [build/ttt] [mpirun]
Run from the repository root, on an otherwise idle machine.
"""
import csv
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

TTT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build/ttt")
MPIRUN = sys.argv[2] if len(sys.argv) > 2 else "mpirun"
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OPENBLAS_NUM_THREADS="1")


def run(args, ranks, out):
    cmd = [TTT, "run"] + args + ["--out", out, "--quiet"]
    if ranks > 1:
        cmd = [MPIRUN, "-np", str(ranks), "--oversubscribe"] + cmd
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.time()
    subprocess.run(cmd, env=ENV, check=True, stdout=subprocess.DEVNULL)
    wall = time.time() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    with open(os.path.join(out, "summary.csv")) as f:
        rows = list(csv.DictReader(f))
    return wall, cpu, rows


def main():
    tmp = tempfile.mkdtemp(prefix="ttt_scaling_")
    exp = os.path.abspath("experiments/mqar_quick.yaml")
    try:
        print("## Sweep throughput (mqar_quick.yaml, 10 points × 40 steps)\n")
        print("| processes × threads | wall s | points/min | CPU s | speed-up |")
        print("|---|---|---|---|---|")
        base = None
        for ranks, threads in ((1, 1), (1, 2), (2, 1)):
            out = os.path.join(tmp, "sweep_%d_%d" % (ranks, threads))
            wall, cpu, rows = run([exp, "--set", "train.threads=%d" % threads], ranks, out)
            base = base or wall
            print("| %d × %d | %.1f | %.1f | %.1f | %.2f× |"
                  % (ranks, threads, wall, 60 * len(rows) / wall, cpu, base / wall))

        print("\n## Data-parallel training step (deltanet, d_model 32, 2 layers, batch 32 × 32 "
              "tokens, shards 4, 60 steps)\n")
        print("| ranks × threads | train s | tokens/s | ms/step | speed-up | received/step/rank |")
        print("|---|---|---|---|---|---|")
        one = ["--set", "sweep={}", "--set", "layer={preset: deltanet}", "--set",
               "train.steps=60", "--set", "train.shards=4", "--set", "train.log_every=60"]
        base = None
        params = step1 = None
        for ranks, threads in ((1, 1), (1, 2), (2, 1)):
            out = os.path.join(tmp, "dp_%d_%d" % (ranks, threads))
            _, _, rows = run([exp] + one + ["--set", "train.threads=%d" % threads,
                                            "--parallel", "data"], ranks, out)
            r = rows[0]
            sec, tps = float(r["seconds"]), float(r["tokens_per_s"])
            params = int(float(r["params"]))
            base = base or sec
            step1 = step1 or sec / 60
            # the chain's partial sum from the rank before + the broadcast sum (+ 4 headers)
            recv = 2 * 4 * params + 4 * 6 * 8 if ranks > 1 else 0
            print("| %d × %d | %.2f | %.0f | %.1f | %.2f× | %s |"
                  % (ranks, threads, sec, tps, 1000 * sec / 60, base / sec,
                     "%.0f KB" % (recv / 1e3) if recv else "—"))

        print("\n## On paper: what a step moves against what it computes (the global batch "
              "fixed, so each of R ranks computes 1/R of the step; bandwidth only)\n")
        print("| model | params | step on 1 rank | R | compute/rank | received MB/rank | "
              "chain + broadcast ms, 10 GbE / IB | ring all-reduce ms, 10 GbE / IB | "
              "communication share, 10 GbE / IB |")
        print("|---|---|---|---|---|---|---|---|---|")
        gbe, ib = 1.25e9, 12e9  # bytes/s: 10 Gb Ethernet, 100 Gb/s InfiniBand

        for name, scale in (("MQAR quick", 1), ("100× larger", 100)):
            P = params * scale
            step = step1 * scale
            chunk = min(max(P // 8, 4096), 65536)  # floats per message (src/train/train_shards.c)
            for R in (2, 8, 64):
                # the chain: P floats pass every rank, pipelined in chunks: P + (R−1)·chunk on
                # the critical path; the broadcast: a binomial tree, ⌈log2 R⌉ hops of P (an
                # upper bound: a pipelined broadcast approaches one P)
                hops = (R - 1).bit_length()
                chain = 4 * (P + (R - 1) * min(P, chunk)) + 4 * P * hops
                ring = 2 * (R - 1) / R * 4 * P
                comp = step / R
                print("| %s | %.2fM | %.0f ms | %d | %.1f ms | %.2f | %.2f / %.2f | %.2f / %.2f | "
                      "%.0f %% / %.0f %% |"
                      % (name, P / 1e6, 1000 * step, R, 1000 * comp, 2 * 4 * P / 1e6,
                         1000 * chain / gbe, 1000 * chain / ib, 1000 * ring / gbe,
                         1000 * ring / ib, 100 * (chain / gbe) / (chain / gbe + comp),
                         100 * (chain / ib) / (chain / ib + comp)))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
