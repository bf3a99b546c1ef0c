#!/usr/bin/python3
"""ttt against the same algorithms in PyTorch on the CPU, side by side, same inputs.

For each layer (preset) and form it writes one set of random inputs in the (B, T, H, D) layout
to a .safetensors file, runs `ttt apply` on it, runs the same computation in PyTorch, checks that
the outputs agree, and prints a table of times and the speed ratio.

  recurrent   ttt's token-by-token kernel     vs  a PyTorch per-token loop (batched over B·H:
                                                  one set of tensor ops per token, as a
                                                  straightforward decoder would run)
  chunkwise   ttt's chunkwise form (chunk C)   vs  a batched chunkwise implementation in PyTorch
                                                  (docs/math.md §5.2 linear attention with scalar or
                                                  per-key gates, §5.3 gated delta rule with the
                                                  WY/UT transform), the same chunk size

Same thread count on both sides: set_threads(n) for PyTorch (its intra-op threads and its BLAS's),
OMP_NUM_THREADS=n for ttt (OpenMP over batch × heads, single-threaded BLAS inside;
OPENBLAS_NUM_THREADS=1). ttt's time is the `seconds` its output file reports: the layer over all
sequences, including allocating the outputs (a fresh process: their pages are faulted in by the
first writes) and, for forms other than the linear-attention and delta-rule kernels (which read
the layout in place), the copies between the (B, T, H, D) layout and per-sequence (T, D) slices,
without reading, validating and writing files or starting the process (which the `ttt_wall_s`
column includes). PyTorch's is the forward call on tensors already in memory, including the
same layout conversion (B, T, H, D) → (B, H, T, D) → (B, T, H, D). Both: the fastest of
--repeats runs after a warm-up. Beside the wall times, the least process CPU time of each side
over the same spans (ttt's `cpu_seconds` metadata, Python's time.process_time): on a machine
shared with other jobs preemption inflates wall time but not CPU time, so with one thread the
CPU-time ratio is the one to quote.

--chunk takes a list (e.g. 16,32,64): every size runs on both sides, and a summary puts each
side at its own fastest size.

Agreement: max |o_ttt − o_torch| / max |o_torch| must be ≤ 1e-4 (docs/math.md §6's budget for
chunked against recurrent delta rule in float32; measured ~1e-6) or the script exits 1.

Run with Debian's interpreter and packages (apt-get install python3-torch python3-numpy):
    /usr/bin/python3 tests/bench/compare_torch.py --ttt build/ttt
    /usr/bin/python3 tests/bench/compare_torch.py --ttt build/ttt --quick
"""
import argparse
import json
import math
import os
import platform
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

TOL = 1e-4

# ---------------------------------------------------------------- safetensors in and out


def write_safetensors(path, tensors):
    """tensors: list of (name, float32 numpy array)."""
    header, blobs, offset = {}, [], 0
    for name, arr in tensors:
        raw = np.ascontiguousarray(arr, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(arr.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - (8 + len(text)) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in blobs:
            f.write(raw)


def read_safetensors(path):
    """Returns ({name: float32 array}, metadata dict). F32 only (what ttt writes)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    meta = header.pop("__metadata__", {})
    out = {}
    for name, h in header.items():
        assert h["dtype"] == "F32", h
        a, b = h["data_offsets"]
        out[name] = np.frombuffer(data[a:b], dtype="<f4").reshape(h["shape"])
    return out, meta

# ---------------------------------------------------------------- PyTorch implementations
# All take (B, H, T, D) float32 tensors: q, k (…, d_k), v (…, d_v), beta (B, H, T),
# log_alpha (B, H, T) scalar gates, (B, H, T, d_k) per-key gates, or None; state starts at zero.


def la_loop(q, k, v, beta, la):
    """Linear attention, token by token: S = Diag(α_t) S + β_t k_tᵀ v_t, o_t = q_t S."""
    B, H, T, dk = q.shape
    S = q.new_zeros(B, H, dk, v.shape[-1])
    o = torch.empty_like(v)
    for t in range(T):
        if la is not None:
            a = la[:, :, t].exp()
            S = S * (a[..., None, None] if a.dim() == 2 else a[..., None])
        S = S + (beta[:, :, t, None] * k[:, :, t])[..., None] * v[:, :, t, None, :]
        o[:, :, t] = (q[:, :, t, None, :] @ S).squeeze(-2)
    return o


def delta_loop(q, k, v, beta, la):
    """Gated delta rule, token by token: S = α S; S = S + β kᵀ(v − k S); o = q S."""
    B, H, T, dk = q.shape
    S = q.new_zeros(B, H, dk, v.shape[-1])
    o = torch.empty_like(v)
    for t in range(T):
        if la is not None:
            S = S * la[:, :, t].exp()[..., None, None]
        kt = k[:, :, t, None, :]                                  # (B, H, 1, d_k)
        e = v[:, :, t, None, :] - kt @ S                          # (B, H, 1, d_v)
        S = S + beta[:, :, t, None, None] * kt.transpose(-1, -2) @ e
        o[:, :, t] = (q[:, :, t, None, :] @ S).squeeze(-2)
    return o


def la_chunk(q, k, v, beta, la, C):
    """docs/math.md §5.2 with gates, chunk by chunk, batched over (B, H). Within a chunk with
    G = cumsum(log α) (per key dimension for vector gates):
        O = (Q ⊙ e^G) S + [((Q ⊙ e^G)(K ⊙ e^−G)ᵀ) ⊙ M] diag(β) V
        S ← e^{G_n} S + (K ⊙ e^{G_n − G})ᵀ diag(β) V
    (the e^G / e^−G split is exact for the gates used here: spans of a few nats per chunk)."""
    B, H, T, dk = q.shape
    S = q.new_zeros(B, H, dk, v.shape[-1])
    o = torch.empty_like(v)
    for t0 in range(0, T, C):
        t1 = min(t0 + C, T)
        n = t1 - t0
        qc, kc, vc = q[:, :, t0:t1], k[:, :, t0:t1], v[:, :, t0:t1]
        vb = vc * beta[:, :, t0:t1, None]
        mask = torch.ones(n, n, dtype=torch.bool).tril()
        if la is None:
            A = (qc @ kc.transpose(-1, -2)).masked_fill(~mask, 0)
            o[:, :, t0:t1] = qc @ S + A @ vb
            S = S + kc.transpose(-1, -2) @ vb
            continue
        G = la[:, :, t0:t1].cumsum(2)
        if G.dim() == 3:                                          # scalar gates
            eG = G.exp()[..., None]
            eGn = G[:, :, -1].exp()[..., None, None]
            kw = kc * (G[:, :, -1:] - G).exp()[..., None]
        else:                                                     # per key dimension
            eG = G.exp()
            eGn = G[:, :, -1].exp()[..., None]
            kw = kc * (G[:, :, -1:, :] - G).exp()
        qg = qc * eG
        A = (qg @ (kc / eG).transpose(-1, -2)).masked_fill(~mask, 0)
        o[:, :, t0:t1] = qg @ S + A @ vb
        S = eGn * S + kw.transpose(-1, -2) @ vb
    return o


def delta_chunk(q, k, v, beta, la, C):
    """docs/math.md §5.3, chunk by chunk, batched over (B, H):
        A = I + strictly_lower(diag(β) K Kᵀ ⊙ Γ),  U = A⁻¹(β⊙V),  W = A⁻¹(β⊙e^G⊙K)
        V' = U − W S,  O = (e^G⊙Q) S + ((Q Kᵀ) ⊙ Γ ⊙ M) V',  S ← e^{G_n} S + (e^{G_n−G}⊙K)ᵀ V'."""
    B, H, T, dk = q.shape
    S = q.new_zeros(B, H, dk, v.shape[-1])
    o = torch.empty_like(v)
    for t0 in range(0, T, C):
        t1 = min(t0 + C, T)
        n = t1 - t0
        qc, kc, vc, bc = q[:, :, t0:t1], k[:, :, t0:t1], v[:, :, t0:t1], beta[:, :, t0:t1, None]
        if la is None:
            G = q.new_zeros(B, H, n)
        else:
            G = la[:, :, t0:t1].cumsum(2)
        Gam = (G[..., :, None] - G[..., None, :]).tril().exp().tril()  # Γ_ij, i ≥ j
        eG = G.exp()[..., None]
        A = torch.eye(n) + (bc * (kc @ kc.transpose(-1, -2)) * Gam).tril(-1)
        rhs = torch.cat([bc * vc, bc * eG * kc], dim=-1)
        UW = torch.linalg.solve_triangular(A, rhs, upper=False, unitriangular=True)
        U, W = UW[..., :vc.shape[-1]], UW[..., vc.shape[-1]:]
        Vp = U - W @ S
        o[:, :, t0:t1] = (eG * qc) @ S + ((qc @ kc.transpose(-1, -2)) * Gam) @ Vp
        S = G[:, :, -1].exp()[..., None, None] * S + \
            (kc * (G[:, :, -1:] - G).exp()[..., None]).transpose(-1, -2) @ Vp
    return o

# ---------------------------------------------------------------- the comparison


PRESETS = {  # preset: (family, gates)
    "linear_attention": ("la", None),
    "mamba2": ("la", "scalar"),
    "gla": ("la", "vector"),
    "deltanet": ("delta", None),
    "gated_deltanet": ("delta", "scalar"),
}


def make_inputs(seed, B, T, H, d, gates):
    """q ~ N(0, 1/d), unit keys, v ~ N(0, 1), β ~ U(0.05, 1), retentions ~ U(0.9, 1)."""
    g = np.random.default_rng(seed)
    q = (g.standard_normal((B, T, H, d)) / math.sqrt(d)).astype(np.float32)
    k = g.standard_normal((B, T, H, d))
    k = (k / np.linalg.norm(k, axis=-1, keepdims=True)).astype(np.float32)
    v = g.standard_normal((B, T, H, d)).astype(np.float32)
    beta = g.uniform(0.05, 1.0, (B, T, H)).astype(np.float32)
    la = None
    if gates == "scalar":
        la = g.uniform(math.log(0.9), -1e-4, (B, T, H)).astype(np.float32)
    elif gates == "vector":
        la = g.uniform(math.log(0.9), -1e-4, (B, T, H, d)).astype(np.float32)
    return q, k, v, beta, la


def best_of(fn, repeats):
    """(fastest wall time, least process CPU time, output) over `repeats` calls after a warm-up."""
    fn()  # warm-up
    best, best_cpu = math.inf, math.inf
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        out = fn()
        best = min(best, time.perf_counter() - t0)
        best_cpu = min(best_cpu, time.process_time() - c0)
    return best, best_cpu, out


def run_ttt(ttt, workdir, inputs, preset, form, chunk, threads, repeats):
    q, k, v, beta, la = inputs
    tensors = [("q", q), ("k", k), ("v", v), ("beta", beta)]
    if la is not None:
        tensors.append(("log_alpha", la))
    fin, fout = os.path.join(workdir, "in.safetensors"), os.path.join(workdir, "out.safetensors")
    fyaml = os.path.join(workdir, "layer.yaml")
    write_safetensors(fin, tensors)
    with open(fyaml, "w") as f:
        f.write(f"layer: {{preset: {preset}, form: {form}, chunk: {chunk}}}\n")
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS="1")
    best, wall, cpu = math.inf, math.inf, math.inf
    for r in range(repeats + 1):
        t0 = time.perf_counter()
        subprocess.run([ttt, "apply", fyaml, fin, fout], env=env, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        dt = time.perf_counter() - t0
        out, meta = read_safetensors(fout)
        if r == 0:
            continue  # warm-up (page cache)
        wall = min(wall, dt)
        best = min(best, float(meta["seconds"]))
        cpu = min(cpu, float(meta.get("cpu_seconds", "nan")))
        assert int(meta["threads"]) == min(threads, q.shape[0] * q.shape[2]), meta
    return best, wall, cpu, out["o"]


def _find_blas_threads():
    """openblas_set_num_threads of the BLAS this PyTorch calls for its matrix products (Debian's
    python3-torch uses the system libblas, OpenBLAS), or None. torch.set_num_threads sets only
    PyTorch's own intra-op threads: without this, a "1-thread" PyTorch run multiplies matrices on
    every core (measured: a 4096×1024·1024×1024 product used 2 CPU-seconds per wall-second)."""
    import ctypes
    torch.ones(2, 2) @ torch.ones(2, 2)  # make sure the BLAS is loaded
    with open("/proc/self/maps") as f:
        paths = sorted({line.split()[-1] for line in f if "blas" in line and "/" in line})
    for path in paths:
        try:
            return ctypes.CDLL(path).openblas_set_num_threads
        except (OSError, AttributeError):
            pass
    return None


_BLAS_THREADS = _find_blas_threads()


def blas_threads_note():
    return ("PyTorch's BLAS threads set with openblas_set_num_threads" if _BLAS_THREADS else
            "PyTorch's BLAS threads NOT controlled (no openblas_set_num_threads found)")


def set_threads(n):
    """n threads for PyTorch: its intra-op threads and its BLAS's threads."""
    torch.set_num_threads(n)
    if _BLAS_THREADS is not None:
        _BLAS_THREADS(n)


def run_torch(inputs, family, form, chunk, threads, repeats):
    """The layout conversion (B, T, H, D) → (B, H, T, D) and back is inside the timed call, as
    ttt apply's time includes its own (it gathers each (batch, head) sequence into (T, D))."""
    set_threads(threads)
    q, k, v, beta, la = (None if a is None else torch.from_numpy(a) for a in inputs)
    f = {("la", "recurrent"): la_loop, ("delta", "recurrent"): delta_loop,
         ("la", "chunkwise"): lambda *x: la_chunk(*x, chunk),
         ("delta", "chunkwise"): lambda *x: delta_chunk(*x, chunk)}[(family, form)]

    def fn():
        t = [x.transpose(1, 2).contiguous() for x in (q, k, v, beta)]
        g = None if la is None else la.transpose(1, 2).contiguous()
        return f(*t, g).transpose(1, 2).contiguous()

    with torch.inference_mode():
        secs, cpu, o = best_of(fn, repeats)
    return secs, cpu, o.numpy()


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ttt", default="build/ttt", help="the ttt program")
    ap.add_argument("--presets", default="linear_attention,mamba2,gla,deltanet,gated_deltanet")
    ap.add_argument("--forms", default="recurrent,chunkwise")
    ap.add_argument("--T", type=int, default=4096, help="tokens (chunkwise)")
    ap.add_argument("--T-loop", type=int, default=1024,
                    help="tokens for the recurrent comparison (PyTorch's loop is slow)")
    ap.add_argument("--d", default="64,128", help="head sizes d = d_k = d_v")
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--chunk", default="64",
                    help="chunk sizes, e.g. 16,32,64: every size on both sides, then a summary "
                         "with each side at its own fastest size")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true",
                    help="T 1024 / 256, d 64, gated presets only, one thread count")
    a = ap.parse_args()
    if a.quick:
        a.T, a.T_loop, a.d, a.presets, a.threads = 1024, 256, "64", "mamba2,gated_deltanet", "1"
    print(f"# machine: {cpu_name()}, {os.cpu_count()} cores; torch {torch.__version__}; "
          f"ttt {subprocess.run([a.ttt, '--version'], capture_output=True, text=True).stdout.strip()}")
    print(f"# command: /usr/bin/python3 {' '.join(sys.argv)}")
    print(f"# {blas_threads_note()}")
    print(f"# B = {a.batch}, H = {a.heads}, chunks = {a.chunk}; times are the best of "
          f"{a.repeats} after a warm-up; err = max|o_ttt - o_torch| / max|o_torch|")
    cols = ["preset", "form", "T", "d", "threads", "ttt_s", "ttt_wall_s", "torch_s", "speedup",
            "ttt_cpu_s", "torch_cpu_s", "speedup_cpu", "ttt_tok/s", "torch_tok/s", "err"]
    print(" ".join(f"{c:>15}" if i else f"{c:<15}" for i, c in enumerate(cols)))
    worst = 0.0
    chunks = [int(x) for x in a.chunk.split(",")]
    best = {}  # (preset, T, d, threads) → {"ttt": (s, C), "torch": (s, C)}, chunkwise only
    with tempfile.TemporaryDirectory() as wd:
        for preset in a.presets.split(","):
            family, gates = PRESETS[preset]
            for form in a.forms.split(","):
                T = a.T_loop if form == "recurrent" else a.T
                for d in (int(x) for x in a.d.split(",")):
                    inputs = make_inputs(1234 + d + T, a.batch, T, a.heads, d, gates)
                    for th in (int(x) for x in a.threads.split(",")):
                        # the loop has no chunk: one size is enough for it
                        for C in (chunks if form == "chunkwise" else chunks[:1]):
                            ts, wall, tc, o_ttt = run_ttt(a.ttt, wd, inputs, preset, form, C, th,
                                                          a.repeats)
                            ps, pc, o_pt = run_torch(inputs, family, form, C, th, a.repeats)
                            err = float(np.abs(o_ttt - o_pt).max() / np.abs(o_pt).max())
                            worst = max(worst, err)
                            ntok = a.batch * a.heads * T
                            row = [preset, form if form == "recurrent" else f"chunkwise/{C}", T,
                                   d, th, f"{ts:.4g}", f"{wall:.4g}", f"{ps:.4g}",
                                   f"{ps / ts:.2f}x", f"{tc:.4g}", f"{pc:.4g}", f"{pc / tc:.2f}x",
                                   f"{ntok / ts:.3g}", f"{ntok / ps:.3g}", f"{err:.1e}"]
                            print(" ".join(f"{str(c):>15}" if i else f"{str(c):<15}"
                                           for i, c in enumerate(row)), flush=True)
                            if form == "chunkwise":
                                b = best.setdefault((preset, T, d, th), {})
                                for key, secs in (("ttt", ts), ("torch", ps), ("ttt_cpu", tc),
                                                  ("torch_cpu", pc)):
                                    if key not in b or secs < b[key][0]:
                                        b[key] = (secs, C)
    if len(chunks) > 1 and best:
        print("# chunkwise, each side at its own fastest chunk (ms; speedup = PyTorch / ttt), by "
              "wall time and by CPU time (on a loaded machine the CPU times are the work)")
        print("| preset | T | d | threads | ttt ms (C) | PyTorch ms (C) | speedup "
              "| ttt CPU ms (C) | PyTorch CPU ms (C) | speedup (CPU) |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for (preset, T, d, th), b in best.items():
            cells = []
            for t_key, p_key in (("ttt", "torch"), ("ttt_cpu", "torch_cpu")):
                (ts, ct), (ps, cp) = b[t_key], b[p_key]
                cells.append(f"{1e3 * ts:.1f} ({ct}) | {1e3 * ps:.1f} ({cp}) | {ps / ts:.2f}x")
            print(f"| {preset} | {T} | {d} | {th} | {cells[0]} | {cells[1]} |")
    ok = worst <= TOL
    print(f"# agreement: worst relative max error {worst:.2e} "
          f"({'ok' if ok else 'FAILED'}: tolerance {TOL:g})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
