#!/usr/bin/python3
"""The generalized delta rule's (DPLR, RWKV-7's rule; docs/math.md "RWKV-7") two forms side by
side through the C API: the recurrence (ttt.dplr / ttt.dplr_backward with chunk = 0) and the
chunkwise form (chunk = C), forward alone and forward + backward (ttt_dplr_backward runs the
forward again to keep the states it needs), on RWKV-7's inputs (unit removal keys κ̂, a = −κ̂,
b = κ̂ ⊙ α with α ~ U(0, 1), log w = −e^{−1/2} σ(·) as its layer makes them, q scaled by
D^−1/2). One thread; CPU seconds of the calling thread (every call runs on it), the least of
--repeats after a warm-up call; tokens per second count every (batch, head) token.

    OMP_NUM_THREADS=1 TTT_LIBRARY=build/libttt.so /usr/bin/python3 tests/bench/bench_dplr.py
        [--shape B,T,H,D] [--chunks 16,32,64] [--repeats 5]
"""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import ttt  # noqa: E402


def inputs(B, T, H, D, seed=0):
    r = np.random.default_rng(seed)
    kap = r.standard_normal((B, T, H, D))
    kap /= np.linalg.norm(kap, axis=-1, keepdims=True)
    f32 = lambda x: np.ascontiguousarray(x, dtype=np.float32)  # noqa: E731
    return dict(q=f32(r.standard_normal((B, T, H, D)) * D ** -0.5),
                k=f32(0.1 * r.standard_normal((B, T, H, D))),
                v=f32(r.standard_normal((B, T, H, D))),
                a=f32(-kap), b=f32(kap * r.uniform(0, 1, (B, T, H, D))),
                log_w=f32(-np.exp(-0.5) / (1 + np.exp(-r.standard_normal((B, T, H, D))))))


def least_cpu(fn, repeats):
    fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.thread_time()
        fn()
        best = min(best, time.thread_time() - t0)
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", default="1,4096,2,64", help="B,T,H,D (d_k = d_v = D)")
    ap.add_argument("--chunks", default="16,32,64", help="chunk sizes of the chunkwise form")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    B, T, H, D = (int(v) for v in args.shape.split(","))
    x = inputs(B, T, H, D)
    d_o = np.random.default_rng(1).standard_normal((B, T, H, D)).astype(np.float32)
    n = B * T * H
    print("DPLR, B = %d, T = %d, H = %d, d_k = d_v = %d, one thread (CPU seconds, least of %d)\n"
          % (B, T, H, D, args.repeats))
    print("| form | forward s | forward tokens/s | forward + backward s | forward + backward "
          "tokens/s |")
    print("|---|---|---|---|---|")
    for C in [0] + [int(c) for c in args.chunks.split(",") if c]:
        f = least_cpu(lambda: ttt.dplr(**x, chunk=C), args.repeats)
        fb = least_cpu(lambda: ttt.dplr_backward(d_o, **x, chunk=C), args.repeats)
        print("| %s | %.4f | %.0f | %.4f | %.0f |" % ("recurrent" if not C else "chunkwise C = %d" % C,
                                                    f, n / f, fb, n / fb))


if __name__ == "__main__":
    main()
