"""ttt.Layer: a layer of libttt on numpy arrays (and torch tensors) in the (B, T, H, D) layout.

The C library computes in float32; float64 inputs are converted and the outputs returned in the
input's dtype (the float64 definition is ttt.reference). float32 C-contiguous inputs are passed
to the library without a copy (docs/python.md "Layers").
"""
import re

import numpy as np

from ._lib import Error, check, ffi, lib

_STR_FIELDS = ("preset", "model", "loss", "optimizer", "decay_placement", "order", "steps",
               "position_scale", "form", "normalize")
_NUM_FIELDS = ("lr", "decay", "scale", "rope_base")
_INT_FIELDS = ("mini_batch", "chunk", "rope")


def _f32(x, name, shape=None):
    """x as a C-contiguous float32 array: no copy when it already is one."""
    a = np.asarray(x)
    if a.dtype not in (np.float32, np.float64):
        raise TypeError("ttt: %s must be float32 or float64, got %s" % (name, a.dtype))
    a = np.ascontiguousarray(a, dtype=np.float32)
    if shape is not None and a.shape != tuple(shape):
        raise ValueError("ttt: %s has shape %s; expected %s" % (name, a.shape, tuple(shape)))
    return a


def _ptr(a):
    return ffi.NULL if a is None else ffi.cast("float *", a.ctypes.data)


class Layer:
    """A layer of libttt: a preset, or any tuple, with overrides.

    Layer(preset="gated_deltanet", chunk=64, scale=0.125, form="auto", **overrides)

    Overrides are the descriptor's fields (model, loss, optimizer, lr, decay, decay_placement,
    mini_batch, order, steps, position_scale, form, chunk, scale, rope, rope_base, normalize)
    and the optimizer's own options (momentum=0.5, nesterov=True, …: `ttt list`). Errors are
    ttt.Error with the library's message.
    """

    def __init__(self, preset=None, *, threads=0, seed=0, **overrides):
        self.preset = preset
        self.threads = int(threads)
        self.seed = int(seed)
        self._fields = {"preset": preset}
        self._options = {}
        for key, val in overrides.items():
            if key in _STR_FIELDS or key in _NUM_FIELDS or key in _INT_FIELDS:
                self._fields[key] = val
            else:
                self._options[key] = val
        self._handles = {}
        self.last_form = None
        self._handle(8, 8)  # validates every name and value now, not at the first call

    # -- the C handle, one per (d_k, d_v) --------------------------------------------------
    def _handle(self, d_k, d_v):
        key = (d_k, d_v)
        if key in self._handles:
            return self._handles[key]
        desc = ffi.new("ttt_layer_descriptor *")
        lib.ttt_layer_descriptor_init(desc)
        keep = []
        for name, val in self._fields.items():
            if val is None:
                continue
            if name in _STR_FIELDS:
                s = ffi.new("char[]", str(val).encode())
                keep.append(s)
                setattr(desc, name, s)
            elif name in _INT_FIELDS:
                setattr(desc, name, int(val))
            else:
                setattr(desc, name, float(val))
        if self._options:
            opts = ffi.new("ttt_option_value[]", len(self._options))
            for i, (name, val) in enumerate(self._options.items()):
                s = ffi.new("char[]", name.encode())
                keep.append(s)
                opts[i].key = s
                if isinstance(val, str):
                    t = ffi.new("char[]", val.encode())
                    keep.append(t)
                    opts[i].text = t
                else:
                    opts[i].number = float(val)
            desc.options = opts
            desc.n_options = len(self._options)
            keep.append(opts)
        out = ffi.new("ttt_layer_handle **")
        err = ffi.new("ttt_error *")
        check(lib.ttt_layer_new(out, desc, d_k, d_v, err), err)
        h = ffi.gc(out[0], lib.ttt_layer_free)
        n = lib.ttt_layer_state_tensors(h)
        names, shapes = [], []
        shape = ffi.new("int[4]")
        nm = ffi.new("char **")
        for i in range(n):
            nd = lib.ttt_layer_state_shape(nm, shape, h, i)
            names.append(ffi.string(nm[0]).decode())
            shapes.append(tuple(shape[j] for j in range(nd)))
        tup = ffi.string(lib.ttt_layer_tuple(h)).decode()
        # θ, to turn beta into eta: as given, else the tuple's (printed with %g: exact for the
        # presets' 1 and 0.1)
        lr = float(self._fields["lr"]) if self._fields.get("lr") is not None else \
            float(re.search(r"\blr ([^,]+),", tup).group(1))
        self._handles[key] = (h, names, shapes, tup, lr)
        return self._handles[key]

    def tuple(self, d_k=8, d_v=None):
        """The resolved tuple, every value (`ttt_layer_tuple`)."""
        return self._handle(d_k, d_v or d_k)[3]

    def state_info(self, d_k, d_v=None):
        """[(name, shape for one sequence)] of the carried state, in order."""
        _, names, shapes, _, _ = self._handle(d_k, d_v or d_k)
        return list(zip(names, shapes))

    def initial_state(self, B, H, d_k, d_v=None):
        """The state a call starts from when none is given (zeros, or the random weights of
        `seed` for models that have them): a list of float32 arrays (B, H, shape_i)."""
        d_v = d_v or d_k
        z = np.zeros((B, 0, H, d_k), np.float32)
        return self.forward(z, z, np.zeros((B, 0, H, d_v), np.float32))[1]

    def __repr__(self):
        return "ttt.Layer(%s)" % self.tuple()

    # -- calls -------------------------------------------------------------------------------
    def _prepare(self, q, k, v, beta, log_alpha, eta, initial_state):
        q = _f32(q, "q")
        if q.ndim != 4:
            raise ValueError("ttt: q must be (B, T, H, d_k); got shape %s" % (q.shape,))
        B, T, H, d_k = q.shape
        k = _f32(k, "k", q.shape)
        v = _f32(v, "v")
        if v.ndim != 4 or v.shape[:3] != q.shape[:3]:
            raise ValueError("ttt: v must be (B, T, H, d_v) = (%d, %d, %d, d_v); got %s"
                             % (B, T, H, v.shape))
        d_v = v.shape[3]
        h, names, shapes, _, lr = self._handle(d_k, d_v)
        if beta is not None and eta is not None:
            raise ValueError("ttt: give beta or eta, not both (beta = lr * eta)")
        if beta is not None:
            # β = lr·η: with lr = 1 (the delta-rule presets) beta is passed as it is, zero-copy
            eta = beta if lr == 1.0 else np.asarray(beta, dtype=np.float64) / lr
        eta = None if eta is None else _f32(eta, "eta", (B, T, H))
        alpha_vec = 0
        if log_alpha is not None:
            log_alpha = _f32(log_alpha, "log_alpha")
            if log_alpha.shape == (B, T, H, d_k):
                alpha_vec = 1
            elif log_alpha.shape != (B, T, H):
                raise ValueError("ttt: log_alpha has shape %s; expected (B, T, H) = %s or "
                                 "(B, T, H, d_k) = %s" % (log_alpha.shape, (B, T, H),
                                                          (B, T, H, d_k)))
        states = None
        if initial_state is not None:
            if isinstance(initial_state, (list, tuple)):
                given = list(initial_state)
            else:
                given = [initial_state]
            if len(given) > len(shapes):
                raise ValueError("ttt: initial_state has %d tensors; this layer carries %d (%s)"
                                 % (len(given), len(shapes), ", ".join(names)))
            given += [None] * (len(shapes) - len(given))
            states = [None if s is None else _f32(s, "initial_state[%d] (%s)" % (i, names[i]),
                                                  (B, H) + shapes[i])
                      for i, s in enumerate(given)]
        return dict(h=h, names=names, shapes=shapes, lr=lr, B=B, T=T, H=H, d_k=d_k, d_v=d_v,
                    q=q, k=k, v=v, eta=eta, log_alpha=log_alpha, alpha_vec=alpha_vec,
                    states=states)

    def _io(self, p, o, state_out):
        io = ffi.new("ttt_batch_io *")
        io.B, io.T, io.H = p["B"], p["T"], p["H"]
        io.o = _ptr(o)
        io.q, io.k, io.v = _ptr(p["q"]), _ptr(p["k"]), _ptr(p["v"])
        io.eta, io.log_alpha = _ptr(p["eta"]), _ptr(p["log_alpha"])
        io.alpha_vec = p["alpha_vec"]
        keep = []
        if p["states"] is not None:
            arr = ffi.new("float *[]", [_ptr(s) for s in p["states"]])
            keep.append(arr)
            io.state_in = ffi.cast("const float *const *", arr)
        arr = ffi.new("float *[]", [_ptr(s) for s in state_out])
        keep.append(arr)
        io.state_out = arr
        io.seed = self.seed
        return io, keep

    def _out(self, p):
        o = np.empty((p["B"], p["T"], p["H"], p["d_v"]), np.float32)
        st = [np.empty((p["B"], p["H"]) + s, np.float32) for s in p["shapes"]]
        return o, st

    def form_for(self, q, k, v, beta=None, log_alpha=None, eta=None):
        """The computation form a call on these inputs runs ("chunkwise", "recurrent",
        "generic", …): `auto` resolved as the call resolves it (ttt_layer_form_for)."""
        p = self._prepare(q, k, v, beta, log_alpha, eta, None)
        io = ffi.new("ttt_batch_io *")
        io.B, io.T, io.H = p["B"], p["T"], p["H"]
        io.eta, io.log_alpha = _ptr(p["eta"]), _ptr(p["log_alpha"])
        io.alpha_vec = p["alpha_vec"]
        return ffi.string(lib.ttt_layer_form_for(p["h"], io)).decode()

    def forward(self, q, k, v, beta=None, log_alpha=None, eta=None, initial_state=None,
                out=None):
        """(o, final_state) as float32 numpy arrays; final_state is a list of tensors.

        out=(o, [state tensors]) writes into those float32 C-contiguous arrays instead of new
        ones (no allocation: a large new output costs its page faults, docs/python.md "Speed");
        a state entry may be None (not wanted)."""
        p = self._prepare(q, k, v, beta, log_alpha, eta, initial_state)
        if out is None:
            o, st = self._out(p)
        else:
            o, st = out[0], list(out[1]) + [None] * (len(p["shapes"]) - len(out[1]))
            want = [(p["B"], p["T"], p["H"], p["d_v"])] + [(p["B"], p["H"]) + s
                                                           for s in p["shapes"]]
            for name, a, shp in zip(["o"] + p["names"], [o] + st, want):
                if a is not None and (not isinstance(a, np.ndarray) or a.dtype != np.float32
                                      or not a.flags.c_contiguous or a.shape != shp):
                    raise ValueError("ttt: out for %s must be a C-contiguous float32 array of "
                                     "shape %s" % (name, shp))
        io, keep = self._io(p, o, st)
        err = ffi.new("ttt_error *")
        check(lib.ttt_layer_forward_run(p["h"], io, self.threads, err), err)
        # the form this call ran, for the record (`auto` is resolved per call)
        self.last_form = ffi.string(lib.ttt_layer_form_for(p["h"], io)).decode()
        del keep
        return o, st

    def backward(self, d_o, q, k, v, beta=None, log_alpha=None, eta=None, initial_state=None,
                 d_state=None):
        """Gradients of sum(d_o * o) + sum_i sum(d_state[i] * final_state[i]).

        Returns a dict: o, final_state (the forward's), q, k, v, eta (or beta), log_alpha,
        initial_state (a list), each float32; inputs not given have no gradient."""
        p = self._prepare(q, k, v, beta, log_alpha, eta, initial_state)
        o, st = self._out(p)
        io, keep = self._io(p, o, st)
        B, T, H, d_k, d_v = p["B"], p["T"], p["H"], p["d_k"], p["d_v"]
        g = ffi.new("ttt_batch_grad *")
        d_o = _f32(d_o, "d_o", (B, T, H, d_v))
        g.d_o = _ptr(d_o)
        if d_state is not None:
            ds = [None if x is None else _f32(x, "d_state[%d]" % i, (B, H) + p["shapes"][i])
                  for i, x in enumerate(d_state)]
            ds += [None] * (len(p["shapes"]) - len(ds))
            arr = ffi.new("float *[]", [_ptr(x) for x in ds])
            keep += [arr, ds]
            g.d_state_out = ffi.cast("const float *const *", arr)
        out = {"q": np.empty((B, T, H, d_k), np.float32), "k": np.empty((B, T, H, d_k),
                                                                      np.float32),
               "v": np.empty((B, T, H, d_v), np.float32)}
        g.d_q, g.d_k, g.d_v = _ptr(out["q"]), _ptr(out["k"]), _ptr(out["v"])
        if p["eta"] is not None:
            out["eta"] = np.empty((B, T, H), np.float32)
            g.d_eta = _ptr(out["eta"])
        if p["log_alpha"] is not None:
            out["log_alpha"] = np.empty(p["log_alpha"].shape, np.float32)
            g.d_log_alpha = _ptr(out["log_alpha"])
        dsi = [np.empty((B, H) + s, np.float32) for s in p["shapes"]]
        arr = ffi.new("float *[]", [_ptr(x) for x in dsi])
        keep.append(arr)
        g.d_state_in = arr
        err = ffi.new("ttt_error *")
        check(lib.ttt_layer_backward_run(p["h"], io, g, err), err)
        out["initial_state"] = dsi
        out["o"], out["final_state"] = o, st
        if beta is not None:
            out["beta"] = out.pop("eta") / p["lr"]
        return out

    def __call__(self, q, k, v, beta=None, log_alpha=None, eta=None, initial_state=None,
                 out=None):
        """(o, final_state) in the (B, T, H, D) layout.

        numpy in, numpy out (in the dtype of q); torch in, torch out, differentiable through
        the library's backward when any input requires a gradient (ttt.nn). final_state is one
        array when the layer carries one tensor (the linear model's S: (B, H, d_k, d_v), as in
        flash-linear-attention), else a tuple in the order of state_info(). out: see forward
        (numpy only)."""
        if type(q).__module__.startswith("torch"):
            from .nn import layer_apply
            return layer_apply(self, q, k, v, beta=beta, log_alpha=log_alpha, eta=eta,
                               initial_state=initial_state)
        dtype = np.asarray(q).dtype
        o, st = self.forward(q, k, v, beta, log_alpha, eta, initial_state, out)
        if dtype == np.float64:
            o, st = o.astype(np.float64), [s.astype(np.float64) for s in st]
        return o, (st[0] if len(st) == 1 else tuple(st))


__all__ = ["Layer", "Error"]
