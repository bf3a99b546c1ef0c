"""The chunk functions under flash-linear-attention's names and signatures (docs/python.md
"FLA's signature"), so that code written against FLA runs on ttt by changing one import:

    from ttt.fla import chunk_gated_delta_rule      # instead of: from fla.ops.gated_delta_rule …
    o, S = chunk_gated_delta_rule(q, k, v, g, beta, scale=None, initial_state=h0,
                                  output_final_state=True)

Layouts are FLA's: q, k (B, T, H, K), v (B, T, H, V), gates and β (B, T, H) (GLA's gate
(B, T, H, K)), log-space gates, states (B, H, K, V) in float32, scale K^-0.5 by default. Inputs
on a CUDA device run the library's CUDA forms in place, CPU tensors its CPU forms; both are
differentiable. Each function is one ttt layer, a tuple of docs/math.md §4:

    chunk_linear_attn       linear model, dot loss, sgd (lr 1): S_t = S_{t-1} + k_t v_tᵀ
    chunk_simple_gla        … with a scalar log gate per token and head (RetNet, Mamba2)
    chunk_gla               … with a log gate per token, head and key (GLA)
    chunk_delta_rule        squared loss (the delta rule), β per token and head
    chunk_gated_delta_rule  … with the coupled scalar gate (Gated DeltaNet)

cu_seqlens (int32 or int64, FLA's packed variable-length batches: B = 1, the offsets of the
sequences in the T tokens) runs each sequence afresh; initial_state and the final state are
then (N, H, K, V), one per sequence (docs/python.md "Packed sequences"; on CUDA tensors each
sequence is a device call of its own). What FLA has and ttt does not take yet is refused by name (grouped value heads, gates
computed in the kernel), never ignored.
"""
import torch

from .layer import Layer

_TUPLES = {
    "linear": dict(model="linear", loss="dot", optimizer="sgd", lr=1.0, decay=1.0),
    "delta": dict(preset="deltanet", lr=1.0),
    "gated_delta": dict(preset="gated_deltanet", lr=1.0),
}
_layers = {}


def _layer(kind, scale):
    key = (kind, float(scale))
    if key not in _layers:
        _layers[key] = Layer(form="auto", scale=float(scale), **_TUPLES[kind])
    return _layers[key]


def _refuse(fn, kwargs, **named):
    for name, val in named.items():
        if val is not None and val is not False:
            raise NotImplementedError("ttt.fla.%s: %s=%r is not supported by ttt" %
                                      (fn, name, val))
    for name, val in kwargs.items():
        if val is not None and val is not False:
            raise TypeError("ttt.fla.%s: unsupported argument %s" % (fn, name))


def _run(fn, kind, q, k, v, g, beta, scale, initial_state, output_final_state,
         cu_seqlens=None):
    if q.dim() != 4:
        raise ValueError("ttt.fla.%s: q must be [B, T, H, K]; got shape %s"
                         % (fn, tuple(q.shape)))
    if v.shape[2] != q.shape[2]:
        raise NotImplementedError("ttt.fla.%s: v has %d heads and q %d: grouped value heads "
                                  "are not supported by ttt" % (fn, v.shape[2], q.shape[2]))
    if scale is None:
        scale = q.shape[-1] ** -0.5
    layer = _layer(kind, scale)
    o, st = layer(q, k, v, beta=beta, log_alpha=g, initial_state=initial_state,
                  cu_seqlens=cu_seqlens)
    return o, (st if output_final_state else None)


def chunk_linear_attn(q, k, v, scale=None, initial_state=None, output_final_state=False,
                      cu_seqlens=None, **kwargs):
    """Linear attention: o_t = scale·q_t S_t, S_t = S_{t-1} + k_t v_tᵀ."""
    _refuse("chunk_linear_attn", kwargs)
    return _run("chunk_linear_attn", "linear", q, k, v, None, None, scale, initial_state,
                output_final_state, cu_seqlens)


def chunk_simple_gla(q, k, v, g=None, g_gamma=None, scale=None, initial_state=None,
                     output_final_state=False, cu_seqlens=None, **kwargs):
    """S_t = e^{g_t} S_{t-1} + k_t v_tᵀ with g (B, T, H), or the constant g_gamma (H)."""
    _refuse("chunk_simple_gla", kwargs)
    if g is not None and g_gamma is not None:
        raise ValueError("ttt.fla.chunk_simple_gla: give g or g_gamma, not both")
    if g_gamma is not None:
        B, T, H = q.shape[:3]
        g = g_gamma.to(device=q.device, dtype=torch.float32).view(1, 1, H).expand(B, T, H)
        g = g.contiguous()
    return _run("chunk_simple_gla", "linear", q, k, v, g, None, scale, initial_state,
                output_final_state, cu_seqlens)


def chunk_gla(q, k, v, g, scale=None, initial_state=None, output_final_state=False,
              cu_seqlens=None, **kwargs):
    """S_t = Diag(e^{g_t}) S_{t-1} + k_t v_tᵀ with g (B, T, H, K)."""
    _refuse("chunk_gla", kwargs)
    if g.dim() != 4:
        raise ValueError("ttt.fla.chunk_gla: g must be [B, T, H, K]; got shape %s"
                         % (tuple(g.shape),))
    return _run("chunk_gla", "linear", q, k, v, g, None, scale, initial_state,
                output_final_state, cu_seqlens)


def chunk_delta_rule(q, k, v, beta, scale=None, initial_state=None, output_final_state=False,
                     use_qk_l2norm_in_kernel=False, cu_seqlens=None, **kwargs):
    """The delta rule: S_t = (I − β_t k_t k_tᵀ) S_{t-1} + β_t k_t v_tᵀ."""
    _refuse("chunk_delta_rule", kwargs,
            use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel)
    return _run("chunk_delta_rule", "delta", q, k, v, None, beta, scale, initial_state,
                output_final_state, cu_seqlens)


def chunk_gated_delta_rule(q, k, v, g, beta, scale=None, initial_state=None,
                           output_final_state=False, use_qk_l2norm_in_kernel=False,
                           cu_seqlens=None, **kwargs):
    """The gated delta rule: S_t = e^{g_t} (I − β_t k_t k_tᵀ) S_{t-1} + β_t k_t v_tᵀ."""
    _refuse("chunk_gated_delta_rule", kwargs,
            use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel)
    return _run("chunk_gated_delta_rule", "gated_delta", q, k, v, g, beta, scale,
                initial_state, output_final_state, cu_seqlens)


__all__ = ["chunk_linear_attn", "chunk_simple_gla", "chunk_gla", "chunk_delta_rule",
           "chunk_gated_delta_rule"]
