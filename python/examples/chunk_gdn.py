"""docs/python.md's worked example: a PyTorch user's chunkwise gated delta rule, checked against
ttt.reference with ttt.assert_close, then a tiny model trained with a ttt.nn layer.

    TTT_LIBRARY=build/libttt.so /usr/bin/python3 python/examples/chunk_gdn.py
"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import ttt  # noqa: E402
import ttt.nn  # noqa: E402


def chunk_gated_delta_rule(q, k, v, beta, log_alpha, initial_state, scale, chunk=16):
    """A plain PyTorch chunkwise gated delta rule (the WY/UT form, docs/math.md §5.3), the kind
    of kernel a user brings: (B, T, H, D) in, (o, S) out."""
    B, T, H, K = q.shape
    V = v.shape[-1]
    pad = (-T) % chunk
    f = lambda x: torch.nn.functional.pad(x, (0, 0) * (x.dim() - 3) + (0, 0, 0, pad))  # noqa
    # padded tokens write nothing (beta = 0) and forget nothing (log alpha = 0)
    q, k, v = f(q) * scale, f(k), f(v)
    beta = torch.nn.functional.pad(beta, (0, 0, 0, pad))
    g = torch.nn.functional.pad(log_alpha, (0, 0, 0, pad))
    n = (T + pad) // chunk
    # (B, H, n, C, D)
    r = lambda x: x.reshape(B, n, chunk, H, -1).permute(0, 3, 1, 2, 4)  # noqa: E731
    q, k, v, beta, g = r(q), r(k), r(v), r(beta[..., None])[..., 0], r(g[..., None])[..., 0]
    g = g.cumsum(-1)
    eye = torch.eye(chunk, dtype=q.dtype)
    low = torch.tril(torch.ones(chunk, chunk, dtype=torch.bool), -1)
    decay = torch.exp((g[..., :, None] - g[..., None, :]).masked_fill(~torch.tril(
        torch.ones(chunk, chunk, dtype=torch.bool)), float("-inf")))
    kb = k * beta[..., None]
    # the UT transform: T = (I + tril(diag(beta) K K^T ⊙ decay, -1))^{-1}
    L = (kb @ k.transpose(-1, -2) * decay).masked_fill(~low, 0)
    Tm = torch.linalg.solve_triangular(eye + L, eye.expand_as(L), upper=False)
    u = Tm @ (v * beta[..., None])
    w = Tm @ (kb * torch.exp(g)[..., None])
    S = initial_state[0].clone()
    outs = []
    for c in range(n):
        qc, kc, uc, wc, gc = q[:, :, c], k[:, :, c], u[:, :, c], w[:, :, c], g[:, :, c]
        vn = uc - wc @ S
        att = (qc @ kc.transpose(-1, -2) * decay[:, :, c])
        outs.append((qc * torch.exp(gc)[..., None]) @ S + att @ vn)
        S = S * torch.exp(gc[..., -1])[..., None, None] + \
            (kc * torch.exp(gc[..., -1:] - gc)[..., None]).transpose(-1, -2) @ vn
    o = torch.stack(outs, 2).permute(0, 2, 3, 1, 4).reshape(B, n * chunk, H, V)
    return o[:, :T], S


def main():
    # 1. the kernel against the float64 definition: random and hard inputs, T = 67 and 1024
    report = ttt.assert_close(chunk_gated_delta_rule, "gated_deltanet", tol=1e-10,
                              as_torch=True)
    for name, (err, case, shape) in report.items():
        print("%-9s worst relative error %.2e  (%s, B T H dk dv = %s)" % (name, err, case, shape))

    # 2. a tiny model with a ttt layer, trained on the CPU: predict the previous token
    torch.manual_seed(0)
    d, V, T = 32, 16, 24
    model = torch.nn.Sequential(torch.nn.Embedding(V, d),
                                ttt.nn.TTTLayer(d, n_heads=2, preset="gated_deltanet"),
                                torch.nn.Linear(d, V))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    x = torch.randint(0, V, (8, T))
    y = torch.roll(x, 1, dims=1)
    for step in range(60):
        loss = torch.nn.functional.cross_entropy(model(x).reshape(-1, V), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 20 == 0 or step == 59:
            print("step %2d  loss %.3f" % (step, loss.item()))


if __name__ == "__main__":
    main()
