"""ttt from Python: the library's layers on numpy arrays and torch tensors, their float64
reference, a checker for other implementations, and experiments (docs/python.md).

    import ttt
    layer = ttt.Layer("gated_deltanet", chunk=64, scale=0.125)
    o, S = layer(q, k, v, beta=beta, log_alpha=log_alpha)        # (B, T, H, D)
    o64, S64 = ttt.reference("gated_deltanet", q, k, v, beta=beta, log_alpha=log_alpha)
    ttt.assert_close(my_kernel, "gated_deltanet", tol=1e-5)

PyTorch (optional): ttt.nn.TTTLayer, ttt.nn.LayerFunction; ttt.torch_model.load(FILE), a
`ttt export` file as a torch.nn.Module; CUDA tensors run the CUDA forms in place (ttt.cuda);
ttt.fla has the chunk functions under flash-linear-attention's names and signatures.
ttt.dplr, ttt.dplr_backward: the generalized delta rule (RWKV-7's) through the C API.
"""
from ._lib import Error, library_path, status_name
from ._lib import ffi as _ffi, lib as _clib
from .check import assert_close, compare, make_inputs
from .experiments import Run, load_run, registries, registry, run
from .layer import GateWarning, Layer
from .dplr import dplr, dplr_backward
from .reference import reference
from . import prototype

__version__ = _ffi.string(_clib.ttt_version()).decode()


def __getattr__(name):
    # ttt.nn, ttt.torch_model, ttt.cuda and ttt.fla import torch: only when asked for
    if name in ("nn", "torch_model", "cuda", "fla"):
        import importlib
        return importlib.import_module("." + name, __name__)
    raise AttributeError("module 'ttt' has no attribute '%s'" % name)


__all__ = ["Layer", "Error", "GateWarning", "reference", "assert_close", "compare",
           "make_inputs", "run", "load_run", "Run", "registry", "prototype", "registries",
           "library_path", "status_name", "__version__", "dplr", "dplr_backward"]
