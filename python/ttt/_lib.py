"""Loading libttt.so through cffi in ABI mode (no compiler, no Python headers).

The C declarations are not copied here: they are read from the public headers
(include/ttt/status.h and include/ttt/ttt.h) at import time, so they cannot drift from the
library they describe (docs/python.md "How the package finds libttt.so").
"""
import os
import re

import cffi

_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(os.path.dirname(_HERE))


def _candidates(name, env, inside):
    """Where to look for `name`: the environment variable, next to the package, the build tree."""
    out = []
    if os.environ.get(env):
        out.append(os.environ[env])
    out.append(os.path.join(_HERE, inside))
    out.append(os.path.join(_ROOT, name))
    return out


def _first(paths, what, env, hint):
    for p in paths:
        if os.path.exists(p):
            return p
    raise ImportError("ttt: cannot find %s (looked in: %s); %s, or set %s"
                      % (what, ", ".join(paths), hint, env))


def _header_dir():
    """The directory of ttt.h and status.h: $TTT_INCLUDE/ttt, next to the package, the tree."""
    paths = []
    if os.environ.get("TTT_INCLUDE"):
        paths.append(os.path.join(os.environ["TTT_INCLUDE"], "ttt", "ttt.h"))
    paths += [os.path.join(_HERE, "include", "ttt", "ttt.h"),
              os.path.join(_ROOT, "include", "ttt", "ttt.h")]
    return os.path.dirname(_first(paths, "the public header ttt/ttt.h", "TTT_INCLUDE",
                                  "it is the repository's include/ttt/ttt.h"))


def _strip(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    return text


def parse_header(ttt_h, status_h):
    """The cdef text and the numeric #define constants of the public header.

    Preprocessor lines are dropped (the C++ guard, include guards, the #include of status.h,
    whose text is put in its place); #define constants are evaluated and substituted, because
    cffi's cdef accepts only plain integer macros.
    """
    consts = {}
    body = []
    for src in (status_h, ttt_h):
        text = _strip(src)
        for line in text.splitlines():
            s = line.strip()
            m = re.match(r"#\s*define\s+(TTT_\w+)\s+(.+)$", s)
            # TTT_API is the visibility attribute of the exported functions, not a constant
            if m and m.group(1) == "TTT_API":
                continue
            if m and not m.group(1).endswith("_H"):
                # numbers, or expressions of the constants before them (TTT_VERSION_NUMBER)
                consts[m.group(1)] = eval(m.group(2), {"__builtins__": {}}, dict(consts))
                continue
            # the C++ guard's closing brace stands alone on its line (every struct and enum
            # closes with its name or at least a semicolon)
            if s.startswith("#") or s == "}":
                continue
            body.append(line)
    text = "\n".join(body)
    text = re.sub(r'extern\s+"C"\s*\{', "", text)
    text = re.sub(r"\bTTT_API\b", "", text)
    for k, v in consts.items():
        if isinstance(v, int):
            text = re.sub(r"\b%s\b" % k, str(v), text)
    return text, consts


def _load():
    inc = _header_dir()
    with open(os.path.join(inc, "ttt.h")) as f:
        ttt_h = f.read()
    with open(os.path.join(inc, "status.h")) as f:
        status_h = f.read()
    cdef, consts = parse_header(ttt_h, status_h)
    ffi = cffi.FFI()
    ffi.cdef(cdef)
    path = _first(_candidates("build/libttt.so", "TTT_LIBRARY", "libttt.so"), "libttt.so",
                  "TTT_LIBRARY", "build it with `cmake --build build --target ttt_shared`")
    # RTLD_NODELETE: cffi closes the library when the interpreter exits, and unloading it would
    # unload the OpenMP runtime while its worker threads still run (a segfault at exit,
    # docs/python.md "Processes"); the library is also linked with -z nodelete
    lib = ffi.dlopen(path, ffi.RTLD_NOW | getattr(ffi, "RTLD_NODELETE", 0))
    return ffi, lib, consts, path


ffi, lib, consts, library_path = _load()


class Error(RuntimeError):
    """A failed libttt call; `status` is the ttt_status name, the message is the library's."""

    def __init__(self, status, message):
        self.status = status
        super().__init__(message)


_STATUS = {int(ffi.cast("ttt_status", i)): ffi.string(ffi.cast("ttt_status", i))
           for i in range(lib.TTT_STATUS_COUNT)}


def status_name(code):
    """"TTT_ERR_NAME" for the code of an unknown name, and so on."""
    return _STATUS.get(code, str(code))


def check(status, err):
    """Raise Error carrying the C message when status is not TTT_OK."""
    if status != lib.TTT_OK:
        raise Error(_STATUS.get(status, str(status)), ffi.string(err.msg).decode("utf-8",
                                                                                 "replace"))
