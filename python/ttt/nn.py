"""PyTorch: a torch.autograd.Function over the library's forward and backward, and an
nn.Module (docs/python.md "PyTorch").

The backward is the library's: the forward recorded with the layer's differentiable forms and
differentiated in float32 (ttt_layer_backward_run). Tensors are moved to the CPU; float64
tensors are computed in float32 and returned as float64.
"""
import math

import numpy as np
import torch

from .layer import Layer, check_gate_shape, is_scalar

_DTYPES = (torch.float32, torch.float64)


def _np(x):
    return None if x is None else x.detach().cpu().contiguous().numpy()


class _NotTwice(torch.autograd.Function):
    """The gradients of LayerFunction under create_graph=True: their values, and an error if
    anything differentiates through them (the library's backward is not differentiable).

    apply(n, *grads, *inputs): the n gradients, as a node of the graph that depends on the
    layer's inputs, so that every path from a gradient back to them meets the error."""

    @staticmethod
    def forward(ctx, n, *xs):
        return tuple(g.detach().clone() for g in xs[:n])

    @staticmethod
    def backward(ctx, *_):
        raise RuntimeError(
            "ttt: the library's backward is not differentiable: a gradient of a ttt layer "
            "cannot be differentiated again (create_graph=True, a gradient penalty, a "
            "Hessian-vector product); compute it with ttt.reference in float64 instead")


class LayerFunction(torch.autograd.Function):
    """apply(layer, q, k, v, eta, log_alpha, *initial_state) -> (o, *final_state)."""

    @staticmethod
    def forward(ctx, layer, q, k, v, eta, log_alpha, *state):
        st = None if not state else [_np(s) for s in state]
        o, out = layer.forward(_np(q), _np(k), _np(v), eta=_np(eta), log_alpha=_np(log_alpha),
                               initial_state=st)
        ctx.layer = layer
        ctx.n_state = len(out)
        ctx.has_state = bool(state)
        ctx.save_for_backward(q, k, v, eta, log_alpha, *state)
        dt = q.dtype
        return (torch.from_numpy(o).to(dt),) + tuple(torch.from_numpy(s).to(dt) for s in out)

    @staticmethod
    def backward(ctx, d_o, *d_state):
        q, k, v, eta, log_alpha, *state = ctx.saved_tensors
        st = [_np(s) for s in state] if ctx.has_state else None
        ds = [None if d is None else _np(d) for d in d_state]
        g = ctx.layer.backward(_np(d_o) if d_o is not None else np.zeros(
            q.shape[:3] + (v.shape[3],), np.float32), _np(q), _np(k), _np(v), eta=_np(eta),
            log_alpha=_np(log_alpha), initial_state=st, d_state=ds)
        dt = q.dtype

        def t(name, need):
            return torch.from_numpy(g[name]).to(dt) if need and name in g else None
        need = ctx.needs_input_grad
        grads = [None, t("q", need[1]), t("k", need[2]), t("v", need[3]), t("eta", need[4]),
                 t("log_alpha", need[5])]
        for i in range(len(state)):
            grads.append(torch.from_numpy(g["initial_state"][i]).to(dt)
                         if need[6 + i] and state[i] is not None else None)
        if torch.is_grad_enabled():
            # create_graph=True: the values go on, and a second differentiation through them
            # raises instead of silently counting them as constants
            idx = [i for i, x in enumerate(grads) if x is not None]
            inputs = [x for x in ctx.saved_tensors if x is not None and x.requires_grad]
            if idx and inputs:
                out = _NotTwice.apply(len(idx), *(grads[i] for i in idx), *inputs)
                for i, x in zip(idx, out):
                    grads[i] = x
        return tuple(grads)


def _tensor(x, name, cuda=False):
    """x when it is a tensor the library takes (float32 or float64; on CUDA also bfloat16),
    else ttt's error."""
    if not isinstance(x, torch.Tensor):
        raise TypeError("ttt: %s must be a torch tensor like q, got %s" % (name, type(x).__name__))
    if cuda and x.dtype in (torch.float32, torch.bfloat16):
        return x
    if cuda and x.dtype == torch.float64:
        raise TypeError("ttt: %s is torch.float64; on CUDA the library takes float32 or "
                        "bfloat16 (convert with %s.float())" % (name, name))
    if x.dtype not in _DTYPES:
        raise TypeError("ttt: %s is %s; the library computes in float32 and takes float32 or "
                        "float64 tensors (convert with %s.float())" % (name, x.dtype, name))
    return x


def _gate(x, name, B, T, H, d_k, like):
    """A per-token input as a tensor of its checked shape; a number is broadcast to (B, T, H).
    On CUDA, gates and rates are float32 (whatever the dtype of q)."""
    if x is None:
        return None
    cuda = like.is_cuda
    dt = torch.float32 if cuda else like.dtype
    if is_scalar(x):
        if isinstance(x, torch.Tensor):
            _tensor(x, name, cuda)
            return x.to(device=like.device, dtype=dt).expand(B, T, H)
        return torch.full((B, T, H), float(x), dtype=dt, device=like.device)
    x = _tensor(x, name, cuda)
    check_gate_shape(name, x.shape, B, T, H, d_k)
    return x


class _Packed:
    """A layer with its cu_seqlens bound (docs/python.md "Packed sequences"): LayerFunction
    calls its forward and backward as a Layer's, and every call runs the packed sequences."""

    def __init__(self, layer, cu_seqlens):
        self.layer, self.cu_seqlens = layer, cu_seqlens

    def forward(self, *args, **kw):
        return self.layer.forward(*args, cu_seqlens=self.cu_seqlens, **kw)

    def backward(self, *args, **kw):
        return self.layer.backward(*args, cu_seqlens=self.cu_seqlens, **kw)


def layer_apply(layer, q, k, v, beta=None, log_alpha=None, eta=None, initial_state=None,
                cu_seqlens=None):
    """Layer.__call__ on torch tensors: (o, final_state), differentiable.

    Every argument is checked here, on any device and with its own name; the computation then
    runs on q's device: the CUDA forms in place for a CUDA q (ttt.cuda), else the CPU
    (run_cpu)."""
    cuda = isinstance(q, torch.Tensor) and q.is_cuda
    q, k, v = _tensor(q, "q", cuda), _tensor(k, "k", cuda), _tensor(v, "v", cuda)
    # steps_per_token n_h (docs/math.md §4.7): k, v and the rates have n_h·T rows
    (B, T, H, d_k, d_v), nh = layer._dims(q, k, v)
    if beta is not None and eta is not None:
        raise ValueError("ttt: give beta or eta, not both (beta = lr * eta)")
    names = layer.state_info(d_k, d_v)
    if beta is not None:
        eta = _gate(beta, "beta", B, nh * T, H, d_k, q) / layer._handle(d_k, d_v)[4]
    else:
        eta = _gate(eta, "eta", B, nh * T, H, d_k, q)
    log_alpha = _gate(log_alpha, "log_alpha", B, T, H, d_k, q)
    state = []
    if initial_state is not None:
        given = list(initial_state) if isinstance(initial_state, (list, tuple)) else \
            [initial_state]
        if len(given) > len(names):
            raise ValueError("ttt: initial_state has %d tensors; this layer carries %d"
                             % (len(given), len(names)))
        # None entries reach the library as NULL: that tensor starts at its initial value, and
        # optimizer state not given is initialized from the given weights (docs/api.md
        # "Forward"), exactly as on numpy
        state = [None if s is None else _tensor(s, "initial_state[%d] (%s)" % (i, names[i][0]),
                                                cuda)
                 for i, s in enumerate(given)]
    if cuda:
        # CUDA tensors run the library's CUDA forms in place (ttt.cuda, docs/python.md "CUDA
        # tensors"); every tensor of the call must be on q's device. Packed sequences: the
        # offsets go to the host (the C API reads them there; a copy of n_seqs + 1 integers)
        from . import cuda as _cuda
        from .layer import _offsets
        _cuda.check_devices(q, k=k, v=v, eta=eta, log_alpha=log_alpha, initial_state=state)
        cu = None if cu_seqlens is None else _offsets(cu_seqlens)
        out = _cuda.CudaLayerFunction.apply(layer, cu, q, k, v, eta, log_alpha, *state)
        o, st = out[0], out[1:]
        return o, (st[0] if len(st) == 1 else tuple(st))
    return run_cpu(layer, q, k, v, eta, log_alpha, state, cu_seqlens)


def run_cpu(layer, q, k, v, eta, log_alpha, state, cu_seqlens=None):
    """The library's CPU forward and backward on checked tensors; tensors on another device are
    copied to the CPU and the results stay there. cu_seqlens: packed sequences."""
    if cu_seqlens is not None:
        from .layer import _offsets
        layer = _Packed(layer, _offsets(cu_seqlens))
    out = LayerFunction.apply(layer, q, k, v, eta, log_alpha, *state)
    o, st = out[0], out[1:]
    return o, (st[0] if len(st) == 1 else tuple(st))


class TTTLayer(torch.nn.Module):
    """A ttt layer as a module: projections to q, k, v (and the gates of the gated presets),
    the library's layer over (B, T, H, D), an output projection.

    TTTLayer(d_model, n_heads, preset="gated_deltanet", **layer_options)
    forward(x: (B, T, d_model)) -> (B, T, d_model).

    The gates (docs/python.md "PyTorch"), with gates=None meaning those of the preset:
      deltanet        β = sigmoid(x W_β + b_β)
      gated_deltanet  β as deltanet, log α = logsigmoid(x W_α + b_α + 4)
      titans          η = sigmoid(x W_η + b_η), log α as gated_deltanet
      mamba2          log α = logsigmoid(x W_α + b_α + 4)
      gla             log α = logsigmoid(x W_g + b_g) / 16, one per key dimension (FLA's)
      retnet          log α = log(1 - 2^(-5-h)) for head h: RetNet's fixed decays, no weights
    gates=False: none of them: the tuple's constants, on purpose (no GateWarning)."""

    def __init__(self, d_model, n_heads, preset="gated_deltanet", head_dim=None, gates=None,
                 **layer_options):
        super().__init__()
        self.H = n_heads
        self.D = head_dim or d_model // n_heads
        layer_options.setdefault("scale", self.D ** -0.5)
        self.layer = Layer(preset, **layer_options)
        inner = self.H * self.D
        self.qkv = torch.nn.Linear(d_model, 3 * inner, bias=False)
        self.out = torch.nn.Linear(inner, d_model, bias=False)
        self.gates = gates if gates is not None else preset in (
            "deltanet", "gated_deltanet", "mamba2", "gla", "retnet", "titans")
        self.preset = preset
        self.layer.warn_gates = bool(self.gates)
        if self.gates:
            if preset == "gla":
                self.gate = torch.nn.Linear(d_model, inner)
            elif preset == "retnet":
                self.register_buffer("log_gamma", torch.tensor(
                    [math.log1p(-2.0 ** (-5 - h)) for h in range(self.H)]))
            else:
                self.gate = torch.nn.Linear(d_model, 2 * self.H)

    def forward(self, x):
        B, T, _ = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.H, self.D).unbind(2)
        # unit-norm keys keep the delta rule's step I - beta k^T k a contraction for beta < 2
        k = torch.nn.functional.normalize(k, dim=-1)
        q = torch.nn.functional.normalize(q, dim=-1)
        kw = {}
        if self.gates and self.preset == "gla":
            kw["log_alpha"] = torch.nn.functional.logsigmoid(
                self.gate(x)).view(B, T, self.H, self.D) / 16.0
        elif self.gates and self.preset == "retnet":
            kw["log_alpha"] = self.log_gamma.to(x.dtype).expand(B, T, self.H).contiguous()
        elif self.gates:
            b, a = self.gate(x).view(B, T, 2, self.H).unbind(2)
            if self.preset in ("deltanet", "gated_deltanet", "titans"):
                kw["eta"] = torch.sigmoid(b)
            if self.preset in ("gated_deltanet", "mamba2", "titans"):
                kw["log_alpha"] = torch.nn.functional.logsigmoid(a + 4.0)
        o, _ = self.layer(q.contiguous(), k.contiguous(), v.contiguous(), **kw)
        return self.out(o.reshape(B, T, self.H * self.D))


__all__ = ["LayerFunction", "TTTLayer", "layer_apply"]
