"""The generalized delta rule (DPLR, RWKV-7's rule; docs/math.md "RWKV-7") through the C API
(ttt_dplr_forward, ttt_dplr_backward), on numpy arrays in the (B, T, H, D) layout:

    o, S = ttt.dplr(q, k, v, a, b, log_w, initial_state=S0)            # chunk=C: chunkwise
    grads = ttt.dplr_backward(d_o, q, k, v, a, b, log_w, initial_state=S0, d_state=dS)  # chunk=C

Per (batch, head): S_t = Diag(exp(log_w_t)) S_{t-1} + b_t^T (a_t S_{t-1}) + k_t^T v_t,
o_t = q_t S_t, S (d_k, d_v). RWKV-7 is a = -kappa_hat, b = kappa_hat * alpha. q is used as
given (no scale). The float64 definition is ttt.reference("rwkv7", ...).
"""
import numpy as np

from ._lib import check, ffi, lib
from .layer import _f32, _ptr


def _io(q, k, v, a, b, log_w, initial_state, chunk=0):
    q = _f32(q, "q")
    if q.ndim != 4:
        raise ValueError("ttt.dplr: q must be (B, T, H, d_k), got shape %s" % (q.shape,))
    B, T, H, dk = q.shape
    k, a, b = (_f32(x, n, q.shape) for x, n in ((k, "k"), (a, "a"), (b, "b")))
    v = _f32(v, "v")
    if v.ndim != 4 or v.shape[:3] != (B, T, H):
        raise ValueError("ttt.dplr: v must be (B, T, H, d_v) = (%d, %d, %d, d_v), got %s"
                         % (B, T, H, v.shape))
    dv = v.shape[3]
    lw = None if log_w is None else _f32(log_w, "log_w", q.shape)
    S0 = None if initial_state is None else _f32(initial_state, "initial_state", (B, H, dk, dv))
    keep = [q, k, v, a, b, lw, S0]
    io = ffi.new("ttt_dplr_io *")
    io.B, io.T, io.H, io.d_k, io.d_v = B, T, H, dk, dv
    io.q, io.k, io.v, io.a, io.b = _ptr(q), _ptr(k), _ptr(v), _ptr(a), _ptr(b)
    io.log_w, io.state_in = _ptr(lw), _ptr(S0)
    io.chunk = int(chunk)
    return io, keep, (B, T, H, dk, dv)


def dplr(q, k, v, a, b, log_w=None, initial_state=None, chunk=0):
    """(o (B, T, H, d_v), final state (B, H, d_k, d_v)), float32. chunk: 0 runs the recurrence,
    C >= 1 the chunkwise form in chunks of C tokens (the same function)."""
    io, keep, (B, T, H, dk, dv) = _io(q, k, v, a, b, log_w, initial_state, chunk)
    o = np.empty((B, T, H, dv), np.float32)
    S = np.empty((B, H, dk, dv), np.float32)
    io.o, io.state_out = _ptr(o), _ptr(S)
    err = ffi.new("ttt_error *")
    check(lib.ttt_dplr_forward(io, err), err)
    del keep
    return o, S


def dplr_backward(d_o, q, k, v, a, b, log_w=None, initial_state=None, d_state=None, chunk=0):
    """The gradients of sum(d_o * o) + sum(d_state * final state): a dict with q, k, v, a, b,
    log_w (when given) and initial_state, float32. chunk: 0 runs the recurrence's backward,
    C >= 1 the chunkwise form's in chunks of C tokens."""
    io, keep, (B, T, H, dk, dv) = _io(q, k, v, a, b, log_w, initial_state, chunk)
    d_o = _f32(d_o, "d_o", (B, T, H, dv))
    dS = None if d_state is None else _f32(d_state, "d_state", (B, H, dk, dv))
    o = np.empty((B, T, H, dv), np.float32)
    io.o = _ptr(o)
    out = {n: np.empty((B, T, H, dk), np.float32) for n in ("q", "k", "a", "b")}
    out["v"] = np.empty((B, T, H, dv), np.float32)
    if log_w is not None:
        out["log_w"] = np.empty((B, T, H, dk), np.float32)
    out["initial_state"] = np.empty((B, H, dk, dv), np.float32)
    g = ffi.new("ttt_dplr_grad *")
    g.d_o, g.d_state_out = _ptr(d_o), _ptr(dS)
    g.d_q, g.d_k, g.d_a, g.d_b = (_ptr(out[n]) for n in ("q", "k", "a", "b"))
    g.d_v, g.d_log_w, g.d_state_in = _ptr(out["v"]), _ptr(out.get("log_w")), \
        _ptr(out["initial_state"])
    err = ffi.new("ttt_error *")
    check(lib.ttt_dplr_backward(io, g, err), err)
    del keep
    return out
