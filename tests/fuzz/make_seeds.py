#!/usr/bin/env python3
"""Write the small hand-made seeds of the safetensors fuzz target (tests/fuzz/corpus/safetensors/).

Standard library only (no numpy, no torch), deterministic. The seeds are tiny `ttt apply` inputs
covering every dtype the reader converts, the optional inputs (beta, log_alpha scalar and vector,
initial_state), metadata, a NaN, zero tokens and an empty file, so the fuzzer starts from inputs
that reach deep into the reader and into ttt_apply. Run from the repository root:
    python3 tests/fuzz/make_seeds.py
"""
import json
import math
import os
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "safetensors")


def values(n, seed, lo=-1.0, hi=1.0):
    # A small linear congruential generator: the same bytes on every machine.
    x = seed * 2654435761 % 2**32
    out = []
    for _ in range(n):
        x = (1103515245 * x + 12345) % 2**31
        out.append(lo + (hi - lo) * x / 2**31)
    return out


def encode(dtype, vals):
    if dtype == "F32":
        return b"".join(struct.pack("<f", v) for v in vals)
    if dtype == "F64":
        return b"".join(struct.pack("<d", v) for v in vals)
    if dtype == "F16":
        return b"".join(struct.pack("<e", v) for v in vals)
    if dtype == "BF16":
        return b"".join(struct.pack("<I", struct.unpack("<I", struct.pack("<f", v))[0])[2:]
                        for v in vals)
    raise ValueError(dtype)


def write(name, tensors, meta=None):
    """tensors: list of (name, dtype, shape, values)."""
    header, data = {}, b""
    if meta:
        header["__metadata__"] = meta
    for tname, dtype, shape, vals in tensors:
        raw = encode(dtype, vals)
        header[tname] = {"dtype": dtype, "shape": shape,
                         "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - (8 + len(h)) % 8) % 8)
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


def numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def qkv(B, T, H, dk, dv, dtype="F32"):
    s_qk, s_v = [B, T, H, dk], [B, T, H, dv]
    return [("q", dtype, s_qk, values(numel(s_qk), 1)),
            ("k", dtype, s_qk, values(numel(s_qk), 2)),
            ("v", dtype, s_v, values(numel(s_v), 3))]


def main():
    os.makedirs(OUT, exist_ok=True)
    B, T, H, dk, dv = 1, 5, 2, 3, 2
    write("seed_f32.safetensors", qkv(B, T, H, dk, dv))
    write("seed_gates.safetensors", qkv(B, T, H, dk, dv) + [
        ("beta", "F32", [B, T, H], values(B * T * H, 4, 0.1, 1.0)),
        ("log_alpha", "F32", [B, T, H, dk], values(B * T * H * dk, 5, -0.5, -0.01))])
    write("seed_dtypes.safetensors", qkv(B, T, H, dk, dv, "F16") + [
        ("beta", "BF16", [B, T, H], values(B * T * H, 6, 0.1, 1.0)),
        ("log_alpha", "F64", [B, T, H], values(B * T * H, 7, -0.5, -0.01))])
    write("seed_state.safetensors", qkv(2, 3, 1, 2, 2) + [
        ("initial_state", "F32", [2, 1, 2, 2], values(8, 8))],
        meta={"layer": "{preset: deltanet}", "layout": "BTHD"})
    nan_q = qkv(B, T, H, dk, dv)
    idx = ((0 * T + 3) * H + 1) * dk + 2  # q[0, 3, 1, 2]
    nan_q[0][3][idx] = math.nan
    write("seed_nan.safetensors", nan_q)
    write("seed_zero_tokens.safetensors", qkv(2, 0, 2, 3, 2))
    write("seed_empty.safetensors", [])
    write("seed_scalar.safetensors", [("x", "F32", [], [1.5]), ("y", "F64", [0, 4], [])],
          meta={"a": "b"})


if __name__ == "__main__":
    main()
