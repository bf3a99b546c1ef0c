#!/usr/bin/python3
"""What the Python package costs on top of the library, and a training step against PyTorch.

1. Call overhead. The same gated_deltanet forward (B = 1, H = 8, d = 64, log alpha and beta per
   token) three ways, one thread:
     C       one cffi call of ttt_layer_forward_run on a prepared ttt_batch_io over preallocated
             buffers: the library's own time plus a single foreign call (~1 µs);
     numpy   ttt.Layer(...)(q, k, v, beta=, log_alpha=) on float32 arrays: argument checks,
             output and state allocation, the call;
     out=    the same writing into given output arrays (no allocation);
     torch   the same on torch tensors without gradients (zero-copy views both ways).
   CPU time of the calling thread (every call runs on it: threads = 1), interleaved repeats after a warm-up, medians. "outside C" is a Python
   call's time minus the time spent in ttt_layer_forward_run within that same call (so load
   from other processes between calls cancels); overhead = outside C / the bare C call. A new
   output's page faults happen at its first write, inside the library: compare the numpy and
   out= columns' totals for their cost.
2. Training step. Embedding → one gated delta rule mixer (q, k, v, β, α projections, d_model =
   128, 2 heads of 64) → linear head, B = 8, T = 256, next-token cross-entropy, Adam: forward,
   backward and step. "ttt" uses ttt.nn.TTTLayer (the library's forward and backward through
   the autograd Function); "torch" the same model with the mixer written in plain PyTorch
   (python/examples/chunk_gdn.py, chunk 64, autograd). Same initial weights, one thread each.

    TTT_LIBRARY=build/libttt.so /usr/bin/python3 python/bench/overhead.py
"""
import argparse
import os
import platform
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))
import ttt  # noqa: E402
from ttt._lib import ffi, lib  # noqa: E402


def median_time(fn, repeats):
    fn()
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


class _TimedLib:
    """libttt with its forward call timed: what a Python call spends outside the library is
    its total time minus the time inside, both measured within the same call, so load from
    other processes between calls does not enter the difference."""

    def __init__(self):
        self.inside = 0.0

    def __getattr__(self, name):
        return getattr(lib, name)

    def ttt_layer_forward_run(self, *args):
        t0 = time.thread_time()
        r = lib.ttt_layer_forward_run(*args)
        self.inside += time.thread_time() - t0
        return r


def overhead(T, repeats, torch):
    import ttt.layer
    B, H, d = 1, 8, 64
    rng = np.random.default_rng(0)
    unit = lambda x: (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)  # noqa
    q, k = unit(rng.standard_normal((B, T, H, d))), unit(rng.standard_normal((B, T, H, d)))
    v = rng.standard_normal((B, T, H, d)).astype(np.float32)
    beta = rng.uniform(0.1, 1, (B, T, H)).astype(np.float32)
    la = rng.uniform(-0.1, -0.01, (B, T, H)).astype(np.float32)
    layer = ttt.Layer("gated_deltanet", chunk=64, scale=d ** -0.5, threads=1)

    # the bare C call on prepared, warm buffers
    p = layer._prepare(q, k, v, None, la, beta, None)   # lr = 1: beta is eta
    o, st = layer._out(p)
    io, keep = layer._io(p, o, st)
    err = ffi.new("ttt_error *")
    h = p["h"]
    o2, st2 = layer._out(p)
    calls = [lambda: lib.ttt_layer_forward_run(h, io, 1, err),
             lambda: layer(q, k, v, beta=beta, log_alpha=la),
             lambda: layer(q, k, v, beta=beta, log_alpha=la, out=(o2, st2))]
    if torch is not None:
        tq, tk, tv, tb, tl = (torch.from_numpy(x) for x in (q, k, v, beta, la))

        def torch_call():
            with torch.no_grad():
                layer(tq, tk, tv, beta=tb, log_alpha=tl)
        calls.append(torch_call)
    timed = _TimedLib()
    ttt.layer.lib = timed
    try:
        for c in calls:
            c()
        total = [[] for _ in calls]
        outside = [[] for _ in calls]
        for _ in range(repeats):
            for i, c in enumerate(calls):
                timed.inside = 0.0
                t0 = time.thread_time()
                c()
                t = time.thread_time() - t0
                total[i].append(t)
                outside[i].append(t - timed.inside)
    finally:
        ttt.layer.lib = lib
    t_c = float(np.median(total[0]))
    row = [T, t_c * 1e3]
    for i in range(1, len(calls)):
        py = float(np.median(outside[i]))
        row += [float(np.median(total[i])) * 1e3, py * 1e6, 100 * py / t_c]
    return row


def training(torch, steps):
    import ttt.nn
    from chunk_gdn import chunk_gated_delta_rule
    F = torch.nn.functional
    B, T, V, D, H = 8, 256, 64, 128, 2
    hd = D // H

    class Model(torch.nn.Module):
        def __init__(self, mixer):
            super().__init__()
            self.mixer = mixer
            self.emb = torch.nn.Embedding(V, D)
            self.ttt = ttt.nn.TTTLayer(D, H, "gated_deltanet", chunk=64, threads=1)
            self.head = torch.nn.Linear(D, V)

        def forward(self, x):
            h = self.emb(x)
            if self.mixer == "ttt":
                return self.head(h + self.ttt(h))
            m = self.ttt   # same parameters, the mixer in plain PyTorch
            q, k, v = m.qkv(h).view(B, T, 3, H, hd).unbind(2)
            q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
            b, a = m.gate(h).view(B, T, 2, H).unbind(2)
            init = [torch.zeros(B, H, hd, hd)]
            o, _ = chunk_gated_delta_rule(q, k, v, torch.sigmoid(b), F.logsigmoid(a + 4.0),
                                          init, hd ** -0.5, chunk=64)
            return self.head(h + m.out(o.reshape(B, T, D)))

    x = torch.randint(0, V, (B, T + 1))
    rows = []
    losses = {}
    for mixer in ("ttt", "torch"):
        torch.manual_seed(0)
        model = Model(mixer)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)

        def step():
            loss = F.cross_entropy(model(x[:, :-1]).reshape(-1, V), x[:, 1:].reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
            return loss.item()
        losses[mixer] = step()
        t = median_time(step, steps)
        rows.append((mixer, t * 1e3, B * T / t))
    return rows, losses


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=50)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="fewer repeats")
    a = ap.parse_args()
    if a.quick:
        a.repeats, a.steps = 3, 2
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    try:
        import torch
        torch.set_num_threads(1)
    except ImportError:
        torch = None
    print("machine: %s, %d cores; Python %s; numpy %s; torch %s; libttt %s"
          % (platform.processor() or platform.machine(), os.cpu_count(),
             platform.python_version(), np.__version__, torch.__version__ if torch else "-",
             ttt.__version__))
    print("\n1. call overhead, gated_deltanet forward, B = 1, H = 8, d = 64, one thread, "
          "CPU time of the calling thread (median of %d)\n" % a.repeats)
    head = ("| T | C call (ms) | numpy call (ms) | outside C (µs) | overhead | numpy, out= (ms) "
            "| outside C (µs) | overhead |")
    if torch is not None:
        head += " torch call (ms) | outside C (µs) | overhead |"
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for T in (1, 64, 512, 4096):
        r = overhead(T, a.repeats, torch)
        cells = ["%d" % r[0], "%.3f" % r[1]]
        for i in range(2, len(r), 3):
            cells += ["%.3f" % r[i], "%.0f" % r[i + 1], "%.2f %%" % r[i + 2]]
        print("| " + " | ".join(cells) + " |")
    if torch is None:
        print("\n2. training step: skipped (no torch)")
        return
    print("\n2. training step (forward + backward + Adam), B = 8, T = 256, d_model = 128, "
          "2 heads of 64, one thread (median of %d)\n" % a.steps)
    rows, losses = training(torch, a.steps)
    print("| mixer | step (ms) | tokens/s | first loss |")
    print("|---|---|---|---|")
    for mixer, ms, tps in rows:
        print("| %s | %.1f | %.0f | %.4f |" % (mixer, ms, tps, losses[mixer]))
    print("\nttt / torch step time: %.2f" % (rows[0][1] / rows[1][1]))


if __name__ == "__main__":
    main()
