#!/usr/bin/python3
"""Reference dumps for tests/test_apply.c, computed in PyTorch in float64.

Writes, next to this script:
  delta_reference.safetensors  gated delta rule (docs/math.md §4 row gated_deltanet) with per-token
                               beta and log_alpha, an initial state and query scaling
  gla_reference.safetensors    gated linear attention (docs/math.md §4 row gla) with a per-key-dimension
                               gate log_alpha (B, T, H, d_k), beta and an initial state

Every file holds the inputs in the public layout (B, T, H, D) as F32 (exactly what `ttt apply`
reads), the expected outputs as F64 under `expected.o` (B, T, H, d_v) and `expected.final_state`
(B, H, d_k, d_v), and in its metadata the `layer:` mapping to run (flow YAML). The expected
outputs are computed from the float32-rounded inputs, in float64, by a naive token-by-token loop
written here from docs/math.md (no library code involved).

Run with Debian's interpreter and packages (apt-get install python3-torch python3-numpy):
    /usr/bin/python3 tests/data/make_reference.py
The committed .safetensors files are the ones the C test reads; regenerating them with another
torch version may change the random inputs (not the check: the C test compares against whatever
expected outputs the file holds).
"""
import json
import os
import struct

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))


def write_safetensors(path, tensors, metadata):
    """A minimal safetensors writer: tensors is a list of (name, numpy array); F32/F64 only."""
    dtypes = {np.dtype("float32"): ("F32", "<f4"), np.dtype("float64"): ("F64", "<f8")}
    header = {"__metadata__": metadata}
    blobs, offset = [], 0
    for name, arr in tensors:
        code, le = dtypes[arr.dtype]
        raw = np.ascontiguousarray(arr).astype(le).tobytes()
        header[name] = {"dtype": code, "shape": list(arr.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((8 - (8 + len(text)) % 8) % 8)  # data buffer 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in blobs:
            f.write(raw)


def gated_delta_rule(q, k, v, beta, log_alpha, S0, scale):
    """float64, (B, T, H, D) layout. Per token (docs/math.md §4, coupled decay):
        S <- alpha_t S;  S <- S + beta_t k_t^T (v_t - k_t S);  o_t = (scale q_t) S."""
    B, T, H, dk = q.shape
    S = S0.clone()  # (B, H, d_k, d_v)
    o = torch.zeros(B, T, H, v.shape[-1], dtype=torch.float64)
    for t in range(T):
        qt, kt, vt = q[:, t] * scale, k[:, t], v[:, t]          # (B, H, D)
        S = S * torch.exp(log_alpha[:, t])[..., None, None]
        err = vt - torch.einsum("bhk,bhkv->bhv", kt, S)
        S = S + torch.einsum("bhk,bhv->bhkv", kt, beta[:, t][..., None] * err)
        o[:, t] = torch.einsum("bhk,bhkv->bhv", qt, S)
    return o, S


def gated_linear_attention(q, k, v, beta, log_alpha, S0, scale):
    """float64, (B, T, H, D) layout, vector gate log_alpha (B, T, H, d_k). Per token:
        S <- Diag(alpha_t) S + beta_t k_t^T v_t;  o_t = (scale q_t) S."""
    B, T, H, dk = q.shape
    S = S0.clone()
    o = torch.zeros(B, T, H, v.shape[-1], dtype=torch.float64)
    for t in range(T):
        qt, kt, vt = q[:, t] * scale, k[:, t], v[:, t]
        S = S * torch.exp(log_alpha[:, t])[..., None]
        S = S + torch.einsum("bhk,bhv->bhkv", beta[:, t][..., None] * kt, vt)
        o[:, t] = torch.einsum("bhk,bhkv->bhv", qt, S)
    return o, S


def f32(x):
    """Round to float32 (what the file stores) and continue in float64."""
    return x.to(torch.float32).to(torch.float64)


def main():
    g = torch.Generator().manual_seed(20240607)
    B, T, H, dk, dv = 2, 13, 2, 8, 6
    scale = dk ** -0.5

    def randn(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64)

    # -- gated delta rule: unit keys and beta in (0, 1) keep the recurrence contractive
    q = f32(randn(B, T, H, dk))
    k = randn(B, T, H, dk)
    k = f32(k / k.norm(dim=-1, keepdim=True))
    v = f32(randn(B, T, H, dv))
    beta = f32(torch.sigmoid(randn(B, T, H)))
    log_alpha = f32(-0.2 * torch.nn.functional.softplus(randn(B, T, H)))
    S0 = f32(0.5 * randn(B, H, dk, dv))
    o, S = gated_delta_rule(q, k, v, beta, log_alpha, S0, scale)
    layer = "{preset: gated_deltanet, scale: %.17g}" % scale
    write_safetensors(
        os.path.join(HERE, "delta_reference.safetensors"),
        [("q", q.float().numpy()), ("k", k.float().numpy()), ("v", v.float().numpy()),
         ("beta", beta.float().numpy()), ("log_alpha", log_alpha.float().numpy()),
         ("initial_state", S0.float().numpy()),
         ("expected.o", o.numpy()), ("expected.final_state", S.numpy())],
        {"layer": layer, "layout": "BTHD", "generator": "tests/data/make_reference.py",
         "torch": torch.__version__})

    # -- gated linear attention with a vector gate
    q = f32(randn(B, T, H, dk))
    k = f32(randn(B, T, H, dk) / dk ** 0.5)
    v = f32(randn(B, T, H, dv))
    beta = f32(torch.sigmoid(randn(B, T, H)))
    log_alpha = f32(-0.3 * torch.nn.functional.softplus(randn(B, T, H, dk)))
    S0 = f32(0.5 * randn(B, H, dk, dv))
    o, S = gated_linear_attention(q, k, v, beta, log_alpha, S0, scale)
    layer = "{preset: linear_attention, scale: %.17g}" % scale
    write_safetensors(
        os.path.join(HERE, "gla_reference.safetensors"),
        [("q", q.float().numpy()), ("k", k.float().numpy()), ("v", v.float().numpy()),
         ("beta", beta.float().numpy()), ("log_alpha", log_alpha.float().numpy()),
         ("initial_state", S0.float().numpy()),
         ("expected.o", o.numpy()), ("expected.final_state", S.numpy())],
        {"layer": layer, "layout": "BTHD", "generator": "tests/data/make_reference.py",
         "torch": torch.__version__})


if __name__ == "__main__":
    main()
