"""ttt on torch CUDA tensors (docs/python.md "CUDA tensors").

A layer called on CUDA tensors runs the library's CUDA forms on the tensors' own memory: q, k, v
(float32 or bfloat16, contiguous) are passed by pointer, never copied; the outputs and every
gradient are allocated by torch (its caching allocator owns them); the work is queued on torch's
current stream of the tensors' device, so it orders with the surrounding torch work exactly as
a torch operation would. The backward is the library's (ttt_layer_backward_run) and is
differentiable once: a double backward is an error, not a silent zero.
"""
import torch
from torch.autograd.function import once_differentiable

from ._lib import check, ffi, lib

_DTYPES = {torch.float32: "TTT_DTYPE_F32", torch.bfloat16: "TTT_DTYPE_BF16"}
# The kernels load rows with 16-byte vector loads (docs/gpu.md): every buffer's start must be
# 16-byte aligned, which any tensor torch allocates is (offset views may not be).
_ALIGN = 16

# Kept forward (docs/python.md "CUDA tensors", docs/gpu.md "Kept forward"): a forward whose
# inputs need gradients stores what its backward would recompute, in a buffer torch allocates
# and autograd frees after the backward. The delta rules then skip recomputing the forward in
# the backward (about 1.2 ms of 6 at (8, 4096, 16, 128) on an H200) for 1.4 GB held between
# the two there; False recomputes, holding nothing.
keep_forward = True


def device_count():
    """(number of CUDA devices libttt can use, why none when 0)."""
    err = ffi.new("ttt_error *")
    n = lib.ttt_cuda_device_count(err)
    return n, ffi.string(err.msg).decode("utf-8", "replace")


def describe():
    """The CUDA runtime, driver and GPUs libttt sees, in one line (ttt_cuda_describe)."""
    return ffi.string(lib.ttt_cuda_describe()).decode("utf-8", "replace")


def _require_cuda():
    n, why = device_count()
    if n <= 0:
        raise RuntimeError("ttt: CUDA tensors given, but libttt (%s) cannot run on a GPU: %s"
                           % (ffi.string(lib.ttt_version()).decode(), why or "no CUDA device"))


def _check(x, name, device, dtype=None, shape=None):
    """x as given, after checking that it is on `device`, contiguous, aligned, of dtype/shape."""
    if x is None:
        return None
    if not isinstance(x, torch.Tensor):
        raise TypeError("ttt: %s must be a torch tensor on %s like q, got %s"
                        % (name, device, type(x).__name__))
    if x.device != device:
        raise ValueError("ttt: %s is on %s but q is on %s: every tensor of a call must be on "
                         "the same device" % (name, x.device, device))
    if dtype is not None and x.dtype != dtype:
        raise TypeError("ttt: %s is %s; expected %s" % (name, x.dtype, dtype))
    if shape is not None and tuple(x.shape) != tuple(shape):
        raise ValueError("ttt: %s has shape %s; expected %s" % (name, tuple(x.shape),
                                                                tuple(shape)))
    if not x.is_contiguous():
        raise ValueError("ttt: %s is not contiguous: pass %s.contiguous() (ttt does not copy "
                         "inputs behind your back)" % (name, name))
    if x.numel() and x.data_ptr() % _ALIGN:
        raise ValueError("ttt: %s starts at an address that is not %d-byte aligned (a view at "
                         "an offset?): pass %s.clone()" % (name, _ALIGN, name))
    return x


def _ptr(x):
    return ffi.NULL if x is None else ffi.cast("float *", x.data_ptr())


def _stream(device):
    return ffi.cast("void *", torch.cuda.current_stream(device).cuda_stream)


class _Call:
    """The checked inputs of one CUDA call and its ttt_batch_io."""

    def __init__(self, layer, q, k, v, eta, log_alpha, state, cu=None):
        _require_cuda()
        dev = q.device
        if q.dtype not in _DTYPES:
            raise TypeError("ttt: q is %s; CUDA layers take float32 or bfloat16" % q.dtype)
        if q.dim() != 4:
            raise ValueError("ttt: q must be (B, T, H, d_k); got shape %s" % (tuple(q.shape),))
        B, T, H, d_k = q.shape
        _check(q, "q", dev)
        _check(k, "k", dev, q.dtype, q.shape)
        _check(v, "v", dev, q.dtype)
        if v.dim() != 4 or tuple(v.shape[:3]) != (B, T, H):
            raise ValueError("ttt: v must be (B, T, H, d_v) = (%d, %d, %d, d_v); got %s"
                             % (B, T, H, tuple(v.shape)))
        d_v = v.shape[3]
        h, names, shapes, _, _ = layer._handle(d_k, d_v)
        # packed sequences (cu: int64 offsets on the host): states are one per sequence
        n_st = B if cu is None else len(cu) - 1
        # rates and gates are float32 on the device: (B, T, H) tensors, small beside q, k, v
        eta = None if eta is None else _check(eta.float().contiguous(), "eta/beta", dev,
                                              torch.float32, (B, T, H))
        alpha_vec = 0
        if log_alpha is not None:
            log_alpha = _check(log_alpha.float().contiguous(), "log_alpha", dev, torch.float32)
            if tuple(log_alpha.shape) == (B, T, H, d_k):
                alpha_vec = 1
            elif tuple(log_alpha.shape) != (B, T, H):
                raise ValueError("ttt: log_alpha has shape %s; expected (B, T, H) = %s or "
                                 "(B, T, H, d_k) = %s" % (tuple(log_alpha.shape), (B, T, H),
                                                          (B, T, H, d_k)))
        st = list(state) + [None] * (len(shapes) - len(state))
        st = [None if s is None else _check(s.float().contiguous(), "initial_state[%d] (%s)"
                                            % (i, names[i]), dev, torch.float32,
                                            (n_st, H) + shapes[i]) for i, s in enumerate(st)]
        self.__dict__.update(layer=layer, h=h, names=names, shapes=shapes, dev=dev, B=B, T=T,
                             H=H, d_k=d_k, d_v=d_v, q=q, k=k, v=v, eta=eta,
                             log_alpha=log_alpha, alpha_vec=alpha_vec, state=st, cu=cu,
                             n_st=n_st)
        self.keep = []

    def io(self, o, state_out):
        io = ffi.new("ttt_batch_io *")
        io.size = ffi.sizeof("ttt_batch_io")
        io.B, io.T, io.H = self.B, self.T, self.H
        io.o = _ptr(o)
        io.q, io.k, io.v = _ptr(self.q), _ptr(self.k), _ptr(self.v)
        io.eta, io.log_alpha = _ptr(self.eta), _ptr(self.log_alpha)
        io.alpha_vec = self.alpha_vec
        if any(s is not None for s in self.state):
            arr = ffi.new("float *[]", [_ptr(s) for s in self.state])
            self.keep.append(arr)
            io.state_in = ffi.cast("const float *const *", arr)
        arr = ffi.new("float *[]", [_ptr(s) for s in state_out])
        self.keep.append(arr)
        io.state_out = arr
        io.seed = self.layer.seed
        io.device = lib.TTT_DEVICE_CUDA
        io.device_index = self.dev.index if self.dev.index is not None else \
            torch.cuda.current_device()
        io.stream = _stream(self.dev)
        io.dtype = getattr(lib, _DTYPES[self.q.dtype])
        if self.cu is not None:
            io.cu_seqlens = ffi.cast("const int64_t *", self.cu.ctypes.data)
            io.n_seqs = len(self.cu) - 1
        return io

    def outputs(self):
        o = torch.empty((self.B, self.T, self.H, self.d_v), dtype=self.q.dtype, device=self.dev)
        st = [torch.empty((self.n_st, self.H) + s, dtype=torch.float32, device=self.dev)
              for s in self.shapes]
        return o, st


def _kept_buffer(c, io):
    """(buffer, offset, bytes) of a kept forward for io, set on io; None when the form keeps
    nothing (the linear-attention family)."""
    nbytes = lib.ttt_layer_kept_bytes(c.h, io)
    if not nbytes:
        return None
    buf = torch.empty(nbytes + 256, dtype=torch.uint8, device=c.dev)
    off = -buf.data_ptr() % 256  # the kernels place their arrays on 256-byte boundaries
    io.kept = ffi.cast("void *", buf.data_ptr() + off)
    io.kept_bytes = nbytes
    return buf, off, nbytes


class CudaLayerFunction(torch.autograd.Function):
    """apply(layer, cu, q, k, v, eta, log_alpha, *initial_state) -> (o, *final_state), on CUDA.
    cu: None, or packed sequences' int64 offsets (a numpy array: host memory, as the C API
    takes them; B = 1 and states (n_seqs, H, ...), docs/python.md "Packed sequences")."""

    @staticmethod
    def forward(ctx, layer, cu, q, k, v, eta, log_alpha, *state):
        c = _Call(layer, q, k, v, eta, log_alpha, state, cu)
        o, st = c.outputs()
        io = c.io(o, st)
        err = ffi.new("ttt_error *")
        ctx.kept = None
        with torch.cuda.device(c.dev):
            if keep_forward and cu is None and any(ctx.needs_input_grad[2:]):
                ctx.kept = _kept_buffer(c, io)
            check(lib.ttt_layer_forward_run(c.h, io, 0, err), err)
        layer.last_form = ffi.string(lib.ttt_layer_form_for(c.h, io)).decode()
        ctx.layer = layer
        ctx.cu = cu
        ctx.n_state = len(st)
        ctx.save_for_backward(q, k, v, eta, log_alpha, *state)
        return (o,) + tuple(st)

    @staticmethod
    @once_differentiable
    def backward(ctx, d_o, *d_state):
        q, k, v, eta, log_alpha, *state = ctx.saved_tensors
        c = _Call(ctx.layer, q, k, v, eta, log_alpha, state, ctx.cu)
        o, st = c.outputs()
        io = c.io(o, st)
        if d_o is None:
            d_o = torch.zeros_like(o)
        d_o = _check(d_o.to(q.dtype).contiguous(), "d_o", c.dev, q.dtype, o.shape)
        g = ffi.new("ttt_batch_grad *")
        g.size = ffi.sizeof("ttt_batch_grad")
        g.d_o = _ptr(d_o)
        ds = [None if d is None else _check(d.float().contiguous(), "d_state[%d]" % i, c.dev,
                                            torch.float32, (c.n_st, c.H) + c.shapes[i])
              for i, d in enumerate(d_state)]
        ds += [None] * (len(c.shapes) - len(ds))
        arr = ffi.new("float *[]", [_ptr(x) for x in ds])
        c.keep.append(arr)
        g.d_state_out = ffi.cast("const float *const *", arr)
        need = ctx.needs_input_grad[1:]  # after cu: as the inputs of _Call
        dq = torch.empty_like(q) if need[1] else None
        dk = torch.empty_like(k) if need[2] else None
        dv = torch.empty_like(v) if need[3] else None
        deta = torch.empty_like(c.eta) if need[4] and c.eta is not None else None
        dla = torch.empty_like(c.log_alpha) if need[5] and c.log_alpha is not None else None
        g.d_q, g.d_k, g.d_v = _ptr(dq), _ptr(dk), _ptr(dv)
        g.d_eta, g.d_log_alpha = _ptr(deta), _ptr(dla)
        dsi = [torch.empty((c.n_st, c.H) + s, dtype=torch.float32, device=c.dev)
               if need[6 + i] and state[i] is not None else None
               for i, s in enumerate(c.shapes[:len(state)])]
        dsi += [None] * (len(c.shapes) - len(dsi))
        arr = ffi.new("float *[]", [_ptr(x) for x in dsi])
        c.keep.append(arr)
        g.d_state_in = arr
        if ctx.kept is not None:
            # the kept forward of this call: read once, as the backward overwrites it (a second
            # backward of a retained graph recomputes)
            buf, off, nbytes = ctx.kept
            io.kept = ffi.cast("void *", buf.data_ptr() + off)
            io.kept_bytes = nbytes
            ctx.kept = None
        err = ffi.new("ttt_error *")
        with torch.cuda.device(c.dev):
            check(lib.ttt_layer_backward_run(c.h, io, g, err), err)

        def cast(x, like):
            return None if x is None or like is None else x.to(like.dtype)
        grads = [None, None, dq, dk, dv, cast(deta, eta), cast(dla, log_alpha)]
        grads += [cast(dsi[i], state[i]) for i in range(len(state))]
        return tuple(grads)


def check_devices(q, **tensors):
    """Refuse a call whose tensors are not all on q's device, naming the first that is not."""
    for name, x in tensors.items():
        if isinstance(x, (list, tuple)):
            for i, y in enumerate(x):
                check_devices(q, **{"%s[%d]" % (name, i): y})
        elif isinstance(x, torch.Tensor) and x.device != q.device:
            raise ValueError("ttt: %s is on %s but q is on %s: every tensor of a call must be "
                             "on the same device" % (name, x.device, q.device))


__all__ = ["CudaLayerFunction", "device_count", "describe", "check_devices"]
