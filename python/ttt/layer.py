"""ttt.Layer: a layer of libttt on numpy arrays (and torch tensors) in the (B, T, H, D) layout.

The C library computes in float32; float64 inputs are converted and the outputs returned in the
input's dtype (the float64 definition is ttt.reference). float32 C-contiguous inputs are passed
to the library without a copy (docs/python.md "Layers").
"""
import difflib
import numbers
import re
from types import SimpleNamespace
import warnings

import numpy as np

from ._lib import Error, check, ffi, lib

_STR_FIELDS = ("preset", "model", "loss", "optimizer", "decay_placement", "order", "steps",
               "position_scale", "form", "normalize", "feature_map")
_NUM_FIELDS = ("lr", "decay", "scale", "rope_base")
_INT_FIELDS = ("mini_batch", "chunk", "rope", "features", "feature_seed", "feature_gate",
               "levels")
_FIELDS = _STR_FIELDS + _NUM_FIELDS + _INT_FIELDS

# the library's dimensions and thread counts are C ints
INT_MAX = 2**31 - 1

# The per-token inputs that make a gated preset what it is (docs/python.md "Layers"): called
# without them, every token uses the tuple's constant (lr for the step, decay for the gate).
# Which constant is named after each input; "beta" stands for beta or eta.
GATES = {"deltanet": ("beta",), "gated_deltanet": ("beta", "log_alpha"),
         "mamba2": ("log_alpha",), "gla": ("log_alpha",), "titans": ("beta", "log_alpha")}


class GateWarning(UserWarning):
    """A gated preset called without one of its gates: every token gets the tuple's constant."""


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


def _offsets(cu_seqlens):
    """cu_seqlens (a sequence of integers, a numpy or torch integer array) as a C-contiguous
    int64 array of n_seqs + 1 >= 2 offsets; the C API checks their values (docs/api.md
    "Packed sequences")."""
    if type(cu_seqlens).__module__.startswith("torch"):
        cu_seqlens = cu_seqlens.detach().cpu().numpy()
    a = np.asarray(cu_seqlens)
    if a.dtype.kind not in "iu" and a.size:
        raise TypeError("ttt: cu_seqlens must hold integer offsets (int32 or int64), got %s"
                        % a.dtype)
    if a.ndim != 1 or a.shape[0] < 2:
        raise ValueError("ttt: cu_seqlens has shape %s; expected (n_seqs + 1,) with n_seqs >= 1"
                         % (a.shape,))
    return np.ascontiguousarray(a, dtype=np.int64)


def is_scalar(x):
    """A Python number (not a bool) or a 0-d array: a gate given once for every token."""
    if isinstance(x, np.ndarray):
        return x.ndim == 0
    if isinstance(x, numbers.Real) and not isinstance(x, bool):
        return True
    return getattr(x, "ndim", None) == 0


def _shape(x):
    s = getattr(x, "shape", None)
    return tuple(np.shape(x) if s is None else s)


def check_dims(q, k, v):
    """(B, T, H, d_k, d_v) of q, k and v, from their shapes alone (nothing converted or copied),
    refused with the argument's name when the library cannot take them: B, H, d ≥ 1, T ≥ 0,
    each at most 2^31 - 1 (C ints)."""
    qs, ks, vs = _shape(q), _shape(k), _shape(v)
    if len(qs) == 4 and ks == qs and len(vs) == 4 and vs[:3] == qs[:3] and \
            min(qs[0], qs[2], qs[3], vs[3]) >= 1 and qs[1] >= 0 and max(qs + vs) <= INT_MAX:
        return qs + (vs[3],)  # the common case, in one test; the refusals below
    if len(qs) != 4:
        raise ValueError("ttt: q must be (B, T, H, d_k); got shape %s" % (qs,))
    if ks != qs:
        raise ValueError("ttt: k has shape %s; expected the shape of q, %s" % (ks, qs))
    if len(vs) != 4 or vs[:3] != qs[:3]:
        raise ValueError("ttt: v must be (B, T, H, d_v) = (%d, %d, %d, d_v); got %s"
                         % (qs[0], qs[1], qs[2], vs))
    for arg, shape, i, dim, low in (("q", qs, 0, "B", 1), ("q", qs, 1, "T", 0),
                                    ("q", qs, 2, "H", 1), ("q", qs, 3, "d_k", 1),
                                    ("v", vs, 3, "d_v", 1)):
        n = int(shape[i])
        if n < low:
            raise ValueError("ttt: %s has %s = %d (shape %s); expected %s >= %d"
                             % (arg, dim, n, shape, dim, low))
        if n > INT_MAX:
            raise ValueError("ttt: %s has %s = %d (shape %s); the library takes dimensions up "
                             "to 2^31 - 1" % (arg, dim, n, shape))
    return qs + (vs[3],)


def check_gate_shape(name, shape, B, T, H, d_k):
    """1 when a (B, T, H, d_k) gate is given per key dimension, else 0; a shape other than
    (B, T, H) (or that one for log_alpha) is refused naming the argument."""
    shape = tuple(shape)
    if shape == (B, T, H):
        return 0
    if name == "log_alpha" and shape == (B, T, H, d_k):
        return 1
    raise ValueError("ttt: %s has shape %s; expected (B, T, H) = %s%s, or a number for every "
                     "token" % (name, shape, (B, T, H),
                                " or (B, T, H, d_k) = %s" % ((B, T, H, d_k),)
                                if name == "log_alpha" else ""))


def _gate(x, name, B, T, H, d_k):
    """A per-token input as a float32 or float64 array of its checked shape (a number is
    broadcast to (B, T, H)); None stays None."""
    if x is None:
        return None
    if is_scalar(x):
        a = np.asarray(x)
        dt = a.dtype if a.dtype in (np.float32, np.float64) else np.float32
        if isinstance(x, np.ndarray) and a.dtype not in (np.float32, np.float64):
            raise TypeError("ttt: %s must be float32 or float64, got %s" % (name, a.dtype))
        return np.full((B, T, H), float(a), dt)
    a = np.asarray(x)
    if a.dtype not in (np.float32, np.float64):
        raise TypeError("ttt: %s must be float32 or float64, got %s" % (name, a.dtype))
    check_gate_shape(name, a.shape, B, T, H, d_k)
    return a


def _suggest(err, keys):
    """The library's refusal of an unknown option, with the layer's own field the key was
    meant to be (the library knows only the optimizer's options there)."""
    msg = str(err)
    if err.status != "TTT_ERR_NAME" or "did you mean" in msg:
        return err
    for key in keys:
        if "'%s'" % key in msg:
            close = difflib.get_close_matches(key, _FIELDS + ("threads", "seed"), n=1,
                                              cutoff=0.75)
            if close:
                return Error(err.status, "%s; did you mean the layer's '%s'?" % (msg, close[0]))
    return err


class Layer:
    """A layer of libttt: a preset, or any tuple, with overrides.

    Layer(preset="gated_deltanet", chunk=64, scale=0.125, form="auto", **overrides)

    Overrides are the descriptor's fields (model, loss, optimizer, lr, decay, decay_placement,
    mini_batch, order, steps, position_scale, form, chunk, scale, rope, rope_base, normalize,
    feature_map, features, feature_seed, feature_gate) and the optimizer's own options
    (momentum=0.5, nesterov=True, …: `ttt list`). Errors are ttt.Error with the library's
    message.
    """

    def __init__(self, preset=None, *, threads=0, seed=0, **overrides):
        if not isinstance(threads, numbers.Integral) or isinstance(threads, bool) or \
                not 0 <= threads <= INT_MAX:
            raise ValueError("ttt: threads must be 0 (OpenMP's default) or a count of threads "
                             ">= 1; got %r" % (threads,))
        if not isinstance(seed, numbers.Integral) or isinstance(seed, bool) or \
                not 0 <= seed < 2**64:
            raise ValueError("ttt: seed must be an integer in [0, 2^64); got %r" % (seed,))
        self.preset = preset
        self.threads = int(threads)
        self.seed = int(seed)
        self._fields = {"preset": preset}
        self._options = {}
        for key, val in overrides.items():
            if key in _FIELDS:
                self._fields[key] = val
            else:
                self._options[key] = val
        self._handles = {}
        self.last_form = None
        self.warn_gates = True  # False: the constants of a gated preset are meant (GATES)
        self._handle(8, 8)  # validates every name and value now, not at the first call

    # -- copies and pickles: the C handles are rebuilt from the configuration ----------------
    def __getstate__(self):
        return {"preset": self.preset, "threads": self.threads, "seed": self.seed,
                "fields": dict(self._fields), "options": dict(self._options),
                "warn_gates": self.warn_gates}

    def __setstate__(self, state):
        self.preset, self.threads, self.seed = state["preset"], state["threads"], state["seed"]
        self._fields, self._options = dict(state["fields"]), dict(state["options"])
        self.warn_gates = state.get("warn_gates", True)
        self._handles = {}
        self.last_form = None

    def __deepcopy__(self, memo):
        new = Layer.__new__(Layer)
        new.__setstate__(self.__getstate__())
        memo[id(self)] = new
        return new

    # -- the C handle, one per (d_k, d_v) --------------------------------------------------
    def _handle(self, d_k, d_v):
        key = (d_k, d_v)
        if key in self._handles:
            return self._handles[key]
        desc = ffi.new("ttt_layer_descriptor *")
        lib.ttt_layer_descriptor_init(desc, ffi.sizeof("ttt_layer_descriptor"))
        keep = []
        fields = dict(self._fields)
        if fields.get("scale") is None:
            fields["scale"] = d_k ** -0.5  # FLA's default query scale (docs/python.md "Layers")
        for name, val in fields.items():
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
        try:
            check(lib.ttt_layer_new(out, desc, d_k, d_v, err), err)
        except Error as e:
            raise _suggest(e, self._options) from None
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

    def steps_per_token(self, d_k=8, d_v=None):
        """n_h, the delta steps per token (docs/math.md §4.7): k, v and beta/eta then have n_h
        rows per token, (B, n_h·T, H, ·), pair j of token t at row n_h·t + j."""
        m = re.search(r"steps_per_token (\d+)", self.tuple(d_k, d_v))
        return int(m.group(1)) if m else 1

    def levels(self, d_k=8, d_v=None):
        """Λ, the Fenwick levels of state (log-linear attention, docs/math.md §4.8): q then is
        (B, T, H, Λ·d_k), level ℓ's query λ^ℓ q in columns ℓ·d_k … (ℓ + 1)·d_k − 1."""
        m = re.search(r"levels (\d+)", self.tuple(d_k, d_v))
        return int(m.group(1)) if m else 1

    def _dims(self, q, k, v):
        """(B, T, H, d_k, d_v) and n_h: q's T, with k and v of n_h·T rows for a layer that
        takes n_h > 1 steps per token; d_k is k's width, q's for a layer of Λ levels Λ·d_k."""
        qs, ks, vs = _shape(q), _shape(k), _shape(v)
        if len(qs) == 4 and len(ks) == 4 and qs[:3] == ks[:3] and qs[3] != ks[3] and \
                ks[3] >= 1 and len(vs) == 4 and vs[3] >= 1:
            nl = self.levels(ks[3], vs[3])
            if nl > 1 and qs[3] == nl * ks[3]:
                return check_dims(k, k, v), 1
            if nl > 1:
                raise ValueError("ttt: this layer holds %d levels of state (levels): q must be "
                                 "(B, T, H, %d·d_k) = %s, every level's query; got q %s"
                                 % (nl, nl, ks[:3] + (nl * ks[3],), qs))
        if len(qs) == 4 and len(ks) == 4 and len(vs) == 4 and ks != qs and \
                min(qs[3], vs[3]) >= 1 and qs[1] > 0:
            nh = self.steps_per_token(qs[3], vs[3])
            if nh > 1:
                want = (qs[0], nh * qs[1], qs[2])
                if ks != want + (qs[3],) or vs[:3] != want:
                    raise ValueError("ttt: this layer takes %d pairs per token (steps_per_token):"
                                     " k and v must be (B, %d·T, H, d) = %s; got k %s, v %s"
                                     % (nh, nh, want, ks, vs))
                # the limits on every dimension, with v's rows counted as q's
                check_dims(q, q, SimpleNamespace(shape=qs[:3] + (vs[3],)))
                return qs + (vs[3],), nh
        dims = check_dims(q, k, v)
        if min(dims[3], dims[4]) >= 1 and self.levels(dims[3], dims[4]) > 1:
            nl = self.levels(dims[3], dims[4])
            raise ValueError("ttt: this layer holds %d levels of state (levels): q must be "
                             "(B, T, H, %d·d_k) = %s, every level's query; got q %s"
                             % (nl, nl, tuple(dims[:3]) + (nl * dims[3],), _shape(q)))
        nh = self.steps_per_token(dims[3], dims[4]) if min(dims[3], dims[4]) >= 1 else 1
        if nh > 1 and dims[1] > 0:
            raise ValueError("ttt: this layer takes %d pairs per token (steps_per_token): k and "
                             "v must be (B, %d·T, H, d); got k %s for q %s"
                             % (nh, nh, _shape(k), _shape(q)))
        return dims, nh

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
        zq = np.zeros((B, 0, H, self.levels(d_k, d_v) * d_k), np.float32)
        return self.forward(zq, z, np.zeros((B, 0, H, d_v), np.float32))[1]

    def __repr__(self):
        return "ttt.Layer(%s)" % self.tuple()

    # -- calls -------------------------------------------------------------------------------
    def _prepare(self, q, k, v, beta, log_alpha, eta, initial_state, cu_seqlens=None):
        # before any copy: a 2^31 dimension is no array
        (B, T, H, d_k, d_v), nh = self._dims(q, k, v)
        cu = None if cu_seqlens is None else _offsets(cu_seqlens)
        S = B if cu is None else cu.shape[0] - 1  # the states' first dimension
        q, k, v = _f32(q, "q"), _f32(k, "k"), _f32(v, "v")
        h, names, shapes, _, lr = self._handle(d_k, d_v)
        if beta is not None and eta is not None:
            raise ValueError("ttt: give beta or eta, not both (beta = lr * eta)")
        Tk = nh * T  # rows of k, v and the rates (steps_per_token, docs/math.md §4.7)
        if beta is not None:
            beta = _gate(beta, "beta", B, Tk, H, d_k)
            # β = lr·η: with lr = 1 (the delta-rule presets) beta is passed as it is, zero-copy
            eta = _f32(beta if lr == 1.0 else beta.astype(np.float64) / lr, "beta")
        elif eta is not None:
            eta = _f32(_gate(eta, "eta", B, Tk, H, d_k), "eta")
        alpha_vec = 0
        if log_alpha is not None:
            log_alpha = _gate(log_alpha, "log_alpha", B, T, H, d_k)
            alpha_vec = int(log_alpha.ndim == 4)
            log_alpha = _f32(log_alpha, "log_alpha")
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
                                                  (S, H) + shapes[i])
                      for i, s in enumerate(given)]
        return dict(h=h, names=names, shapes=shapes, lr=lr, B=B, T=T, Tk=Tk, H=H, d_k=d_k, d_v=d_v,
                    q=q, k=k, v=v, eta=eta, log_alpha=log_alpha, alpha_vec=alpha_vec,
                    states=states, cu=cu, S=S)

    def _io(self, p, o, state_out):
        io = ffi.new("ttt_batch_io *")
        io.size = ffi.sizeof("ttt_batch_io")
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
        if p["cu"] is not None:
            io.cu_seqlens = ffi.cast("const int64_t *", p["cu"].ctypes.data)
            io.n_seqs = p["cu"].shape[0] - 1
            keep.append(p["cu"])
        return io, keep

    def _out(self, p):
        o = np.empty((p["B"], p["T"], p["H"], p["d_v"]), np.float32)
        st = [np.empty((p["S"], p["H"]) + s, np.float32) for s in p["shapes"]]
        return o, st

    def form_for(self, q, k, v, beta=None, log_alpha=None, eta=None):
        """The computation form a call on these inputs runs ("chunkwise", "recurrent",
        "generic", …): `auto` resolved as the call resolves it (ttt_layer_form_for)."""
        p = self._prepare(q, k, v, beta, log_alpha, eta, None)
        io = ffi.new("ttt_batch_io *")
        io.size = ffi.sizeof("ttt_batch_io")
        io.B, io.T, io.H = p["B"], p["T"], p["H"]
        io.eta, io.log_alpha = _ptr(p["eta"]), _ptr(p["log_alpha"])
        io.alpha_vec = p["alpha_vec"]
        return ffi.string(lib.ttt_layer_form_for(p["h"], io)).decode()

    def forward(self, q, k, v, beta=None, log_alpha=None, eta=None, initial_state=None,
                out=None, cu_seqlens=None):
        """(o, final_state) as float32 numpy arrays; final_state is a list of tensors.

        out=(o, [state tensors]) writes into those float32 C-contiguous arrays instead of new
        ones (no allocation: a large new output costs its page faults, docs/python.md "Speed");
        a state entry may be None (not wanted).

        cu_seqlens: packed sequences (docs/python.md "Packed sequences"): B = 1 and the
        n_seqs + 1 token offsets; each sequence starts afresh, states are (n_seqs, H, …)."""
        p = self._prepare(q, k, v, beta, log_alpha, eta, initial_state, cu_seqlens)
        if out is None:
            o, st = self._out(p)
        else:
            o, st = out[0], list(out[1]) + [None] * (len(p["shapes"]) - len(out[1]))
            want = [(p["B"], p["T"], p["H"], p["d_v"])] + [(p["S"], p["H"]) + s
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
        if p["cu"] is not None:  # each sequence resolves `auto` for its own length
            self.last_form += " (per sequence)"
        del keep
        return o, st

    def backward(self, d_o, q, k, v, beta=None, log_alpha=None, eta=None, initial_state=None,
                 d_state=None, cu_seqlens=None):
        """Gradients of sum(d_o * o) + sum_i sum(d_state[i] * final_state[i]).

        Returns a dict: o, final_state (the forward's), q, k, v, eta (or beta), log_alpha,
        initial_state (a list), each float32; inputs not given have no gradient, and a gate
        given as a number gets one number (the sum over its tokens). cu_seqlens: as in
        forward (d_state and the initial_state gradients are then (n_seqs, H, …))."""
        p = self._prepare(q, k, v, beta, log_alpha, eta, initial_state, cu_seqlens)
        o, st = self._out(p)
        io, keep = self._io(p, o, st)
        B, T, H, d_k, d_v = p["B"], p["T"], p["H"], p["d_k"], p["d_v"]
        g = ffi.new("ttt_batch_grad *")
        g.size = ffi.sizeof("ttt_batch_grad")
        d_o = _f32(d_o, "d_o", (B, T, H, d_v))
        g.d_o = _ptr(d_o)
        if d_state is not None:
            ds = [None if x is None else _f32(x, "d_state[%d]" % i,
                                              (p["S"], H) + p["shapes"][i])
                  for i, x in enumerate(d_state)]
            ds += [None] * (len(p["shapes"]) - len(ds))
            arr = ffi.new("float *[]", [_ptr(x) for x in ds])
            keep += [arr, ds]
            g.d_state_out = ffi.cast("const float *const *", arr)
        Tk = p["Tk"]  # k, v and the rates: n_h rows per token (steps_per_token)
        out = {"q": np.empty(p["q"].shape, np.float32), "k": np.empty((B, Tk, H, d_k),
                                                                       np.float32),
               "v": np.empty((B, Tk, H, d_v), np.float32)}
        g.d_q, g.d_k, g.d_v = _ptr(out["q"]), _ptr(out["k"]), _ptr(out["v"])
        if p["eta"] is not None:
            out["eta"] = np.empty((B, Tk, H), np.float32)
            g.d_eta = _ptr(out["eta"])
        if p["log_alpha"] is not None:
            out["log_alpha"] = np.empty(p["log_alpha"].shape, np.float32)
            g.d_log_alpha = _ptr(out["log_alpha"])
        dsi = [np.empty((p["S"], H) + s, np.float32) for s in p["shapes"]]
        arr = ffi.new("float *[]", [_ptr(x) for x in dsi])
        keep.append(arr)
        g.d_state_in = arr
        err = ffi.new("ttt_error *")
        check(lib.ttt_layer_backward_run(p["h"], io, g, err), err)
        out["initial_state"] = dsi
        out["o"], out["final_state"] = o, st
        if beta is not None:
            out["beta"] = out.pop("eta") / p["lr"]
        for name, given in (("beta", beta), ("eta", eta), ("log_alpha", log_alpha)):
            if given is not None and is_scalar(given):  # one number for every token
                out[name] = np.float32(out[name].sum(dtype=np.float64))
        return out

    def _warn_missing_gates(self, q, beta, eta, log_alpha):
        """GateWarning for each gate of a gated preset left out (GATES), unless its constant was
        set on purpose (lr=, decay=, warn_gates = False) or there are no tokens."""
        if not self.warn_gates or self.preset not in GATES:
            return
        shape = _shape(q)
        if len(shape) != 4 or shape[1] == 0:
            return
        tup = self._handle(8, 8)[3]

        def value(field):
            return re.search(r"\b%s ([^,]+)," % field, tup).group(1)
        need = GATES[self.preset]
        said = []
        if "beta" in need and beta is None and eta is None and self._fields.get("lr") is None:
            said.append("beta (or eta): every token writes with the constant step lr = %s (give "
                        "beta (B, T, H), or lr= to choose the constant)" % value("lr"))
        if "log_alpha" in need and log_alpha is None and self._fields.get("decay") is None:
            said.append("log_alpha: every token keeps the constant decay %s (give log_alpha "
                        "%s, FLA's g, or decay= to choose the constant)"
                        % (value("decay"), "(B, T, H, d_k)" if self.preset == "gla"
                           else "(B, T, H)"))
        for text in said:
            # stacklevel 3: the line that called the layer
            warnings.warn("ttt: %s called without %s" % (self.preset, text), GateWarning,
                          stacklevel=3)

    def __call__(self, q, k, v, beta=None, log_alpha=None, eta=None, initial_state=None,
                 out=None, cu_seqlens=None):
        """(o, final_state) in the (B, T, H, D) layout.

        numpy in, numpy out (in the dtype of q); torch in, torch out, differentiable through
        the library's backward when any input requires a gradient (ttt.nn). final_state is one
        array when the layer carries one tensor (the linear model's S: (B, H, d_k, d_v), as in
        flash-linear-attention), else a tuple in the order of state_info(). out: see forward
        (numpy only). cu_seqlens: packed sequences, FLA's argument (docs/python.md "Packed
        sequences"): B = 1, the offsets of the n_seqs sequences in the T tokens (int32 or
        int64); each starts afresh and states are (n_seqs, H, …)."""
        if type(q).__module__.startswith("torch"):
            from .nn import layer_apply
            o, st = layer_apply(self, q, k, v, beta=beta, log_alpha=log_alpha, eta=eta,
                                initial_state=initial_state, cu_seqlens=cu_seqlens)
        else:
            dtype = np.asarray(q).dtype
            o, st = self.forward(q, k, v, beta, log_alpha, eta, initial_state, out, cu_seqlens)
            if dtype == np.float64:
                o, st = o.astype(np.float64), [s.astype(np.float64) for s in st]
            st = st[0] if len(st) == 1 else tuple(st)
        self._warn_missing_gates(q, beta, eta, log_alpha)  # after the call: its inputs were valid
        return o, st


__all__ = ["Layer", "Error", "GateWarning", "GATES"]
