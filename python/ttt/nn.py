"""PyTorch: a torch.autograd.Function over the library's forward and backward, and an
nn.Module (docs/python.md "PyTorch").

The backward is the library's: the forward recorded with the layer's differentiable forms and
differentiated in float32 (ttt_layer_backward_run). Tensors are moved to the CPU; float64
tensors are computed in float32 and returned as float64.
"""
import numpy as np
import torch

from .layer import Layer


def _np(x):
    return None if x is None else x.detach().cpu().contiguous().numpy()


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
        return tuple(grads)


def layer_apply(layer, q, k, v, beta=None, log_alpha=None, eta=None, initial_state=None):
    """Layer.__call__ on torch tensors: (o, final_state), differentiable."""
    if beta is not None and eta is not None:
        raise ValueError("ttt: give beta or eta, not both (beta = lr * eta)")
    d_k, d_v = q.shape[-1], v.shape[-1]
    names = layer.state_info(d_k, d_v)
    if beta is not None:
        eta = beta / layer._handle(d_k, d_v)[4]
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
        state = given
    # CUDA tensors run the library's CUDA forms in place (ttt.cuda); every tensor of a call
    # must be on q's device
    from . import cuda as _cuda
    _cuda.check_devices(q, k=k, v=v, eta=eta, log_alpha=log_alpha, initial_state=state)
    fn = _cuda.CudaLayerFunction if q.is_cuda else LayerFunction
    out = fn.apply(layer, q, k, v, eta, log_alpha, *state)
    o, st = out[0], out[1:]
    return o, (st[0] if len(st) == 1 else tuple(st))


class TTTLayer(torch.nn.Module):
    """A ttt layer as a module: projections to q, k, v (and β, log α for the gated presets),
    the library's layer over (B, T, H, D), an output projection.

    TTTLayer(d_model, n_heads, preset="gated_deltanet", **layer_options)
    forward(x: (B, T, d_model)) -> (B, T, d_model)."""

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
            "deltanet", "gated_deltanet", "mamba2")
        self.preset = preset
        if self.gates:
            self.gate = torch.nn.Linear(d_model, 2 * self.H)

    def forward(self, x):
        B, T, _ = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.H, self.D).unbind(2)
        # unit-norm keys keep the delta rule's step I - beta k^T k a contraction for beta < 2
        k = torch.nn.functional.normalize(k, dim=-1)
        q = torch.nn.functional.normalize(q, dim=-1)
        kw = {}
        if self.gates:
            b, a = self.gate(x).view(B, T, 2, self.H).unbind(2)
            if self.preset in ("deltanet", "gated_deltanet"):
                kw["eta"] = torch.sigmoid(b)
            if self.preset in ("gated_deltanet", "mamba2"):
                kw["log_alpha"] = torch.nn.functional.logsigmoid(a + 4.0)
        o, _ = self.layer(q.contiguous(), k.contiguous(), v.contiguous(), **kw)
        return self.out(o.reshape(B, T, self.H * self.D))


__all__ = ["LayerFunction", "TTTLayer", "layer_apply"]
