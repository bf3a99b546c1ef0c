#!/usr/bin/env python3
"""libttt.so exports exactly the functions the public headers declare (docs/api.md "Versions and
the ABI").

    python3 tests/check_symbols.py build/libttt.so include/ttt

The headers' functions are the names followed by "(" in include/ttt/*.h once comments are gone;
each of their declarations must begin with TTT_API (a declaration without it would be compiled
hidden, and so missing from the library). The library's functions and objects are its defined
dynamic symbols (`nm -D --defined-only`, binutils). The check fails on any difference in either
direction, naming each symbol: one declared but not exported (a caller would fail to link or
load), or one exported but not declared (internal code that would become part of the ABI).
It also holds ttt_version() of the library against the header's TTT_VERSION_MAJOR/MINOR/PATCH
(CMakeLists.txt reads project(VERSION) from them; this catches a version set anywhere else).
Before it looks at the real library, it checks itself: a symbol list with one declared function
removed and one internal name added must be reported as both, and a declaration without TTT_API
must be reported; if either is not, the check itself is broken and fails.
"""
import os
import re
import subprocess
import sys

# Defined by the linker in every shared object, not by the library's code; older binutils list
# them among the dynamic symbols.
LINKER_SYMBOLS = {"_init", "_fini", "_edata", "_end", "__bss_start"}


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def header_functions(texts):
    """(declared function names, [problems]) of the header texts {file name: text}."""
    names, problems = set(), []
    for fname, text in sorted(texts.items()):
        body = "\n".join(line for line in strip_comments(text).splitlines()
                         if not line.strip().startswith("#"))
        # a statement is what lies between two semicolons or braces: one declaration each
        for stmt in re.split(r"[;{}]", body):
            found = re.findall(r"\b(ttt_\w+)\s*\(", stmt)
            if not found:
                continue
            names.update(found)
            if not re.match(r"\s*TTT_API\b", stmt):
                problems.append("%s: %s is declared without TTT_API (it would not be exported)"
                                % (fname, found[0]))
    return names, problems


def library_symbols(lib):
    out = subprocess.run(["nm", "-D", "--defined-only", lib], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit("check_symbols: nm -D --defined-only %s failed: %s" % (lib, out.stderr.strip()))
    syms = set()
    for line in out.stdout.splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        name = parts[-1].split("@")[0]
        if name not in LINKER_SYMBOLS:
            syms.add(name)
    return syms


def differences(exported, declared):
    """One line per symbol that is in one list and not the other."""
    lines = ["declared in include/ttt but not exported by the library: %s" % s
             for s in sorted(declared - exported)]
    lines += ["exported by the library but not declared in include/ttt: %s" % s
              for s in sorted(exported - declared)]
    return lines


def header_version(texts):
    """"MAJOR.MINOR.PATCH" from the TTT_VERSION_* lines of the headers, or None."""
    parts = []
    for part in ("MAJOR", "MINOR", "PATCH"):
        found = [m for t in texts.values()
                 for m in re.findall(r"^#define TTT_VERSION_%s (\d+)$" % part, t, flags=re.M)]
        if len(found) != 1:
            return None
        parts.append(found[0])
    return ".".join(parts)


def version_differences(lib_version, hdr_version):
    if hdr_version is None:
        return ["include/ttt: expected one '#define TTT_VERSION_MAJOR/MINOR/PATCH <n>' line each"]
    if lib_version != hdr_version:
        return ["ttt_version() of the library is %r, the header's TTT_VERSION_* make %r"
                % (lib_version, hdr_version)]
    return []


def library_version(lib):
    import ctypes
    f = ctypes.CDLL(os.path.abspath(lib)).ttt_version
    f.restype = ctypes.c_char_p
    return f().decode()


def self_check(declared):
    """The comparison and the header parser catch what they are meant to catch."""
    if "ttt_layer_new" not in declared or len(declared) < 10:
        return ["the header parser found %d functions (%s), expected ttt_layer_new among >= 10"
                % (len(declared), ", ".join(sorted(declared)))]
    fails = []
    removed = sorted(declared)[0]
    perturbed = (set(declared) - {removed}) | {"ttt_internal_helper"}
    got = differences(perturbed, declared)
    if not any(line.endswith(": " + removed) and "not exported" in line for line in got):
        fails.append("a missing %s was not reported: %s" % (removed, got))
    if not any(line.endswith(": ttt_internal_helper") and "not declared" in line for line in got):
        fails.append("an extra ttt_internal_helper was not reported: %s" % got)
    if len(got) != 2:
        fails.append("expected exactly 2 differences, got %s" % got)
    if differences(set(declared), declared):
        fails.append("equal lists were reported different")
    if len(version_differences("0.1.1", "0.1.0")) != 1 or version_differences("0.1.0", "0.1.0"):
        fails.append("a library version other than the header's was not reported")
    if header_version({"t.h": "#define TTT_VERSION_MAJOR 1\n#define TTT_VERSION_MINOR 2\n"
                              "#define TTT_VERSION_PATCH 3\n"}) != "1.2.3":
        fails.append("the header's version lines were not read as 1.2.3")
    _, problems = header_functions({"t.h": "TTT_API int ttt_a(void);\nint ttt_b(int x);\n"})
    if len(problems) != 1 or "ttt_b" not in problems[0]:
        fails.append("a declaration without TTT_API was not reported: %s" % problems)
    return fails


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: check_symbols.py LIBTTT_SO INCLUDE_TTT_DIR")
    lib, inc = sys.argv[1], sys.argv[2]
    texts = {}
    for f in sorted(os.listdir(inc)):
        if f.endswith(".h"):
            with open(os.path.join(inc, f), encoding="utf-8") as fh:
                texts[os.path.join(inc, f)] = fh.read()
    declared, problems = header_functions(texts)
    fails = self_check(declared)
    if fails:
        print("check_symbols: the check itself is broken:\n  " + "\n  ".join(fails))
        return 1
    exported = library_symbols(lib)
    problems += differences(exported, declared)
    if "ttt_version" in exported:
        problems += version_differences(library_version(lib), header_version(texts))
    if problems:
        print("check_symbols: %s against %s:\n  %s" % (lib, inc, "\n  ".join(problems)))
        return 1
    print("check_symbols: %s exports the %d functions of %s and nothing else; version %s"
          % (lib, len(exported), inc, header_version(texts)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
