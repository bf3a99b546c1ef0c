#!/usr/bin/env python3
"""No registry name decides behaviour outside its registry (docs/design.md, "Extending is local").

    python3 tests/check_names.py            # from the repository root

A registered name (a preset, model, loss, optimizer, form or form family, feature map, mixer,
task or tape op) is the key by which the registry finds its entry; code elsewhere asks the entry
for a trait instead of comparing the name (a new entry then behaves by its own answers, not by
whether someone remembered to add its name to a list). The check reads each registry's names from
its list in the source, then finds every strcmp / strncmp / strcasecmp in the library's C and CUDA
files (src/, layers/, optim/) whose operand is a string literal that is one of those names, and
fails on each one outside the registry's own folder, naming the file, line and registry.

A literal that only happens to spell a registered name (an option's value that is not a registry
key) is listed in ALLOWED below with the reason, by the call's other operand and the literal, so
that the exception survives moves between files and nothing else passes with it.

Before it looks at the tree, it checks itself on planted sources: a preset name compared outside
the presets' folder and a tape op name compared (strncmp, operands swapped) outside src/core must
both be reported; the same comparison inside the registry's folder, a literal that is no
registered name, and a comparison inside a comment must not be. If any of these goes the wrong
way, the check itself is broken and fails.
"""
import os
import re
import sys

# (list file, how a name is written there, the folder the registry's code lives in)
REGISTRIES = [
    ("preset", "layers", r'preset_names\[\]\s*=\s*\{(?P<body>[^}]*)\}', "layers/*"),
    ("model", "layers/models/model_list.h", r'TTT_MODEL\((\w+)\)', "layers/models/"),
    ("loss", "layers/models/model_list.h", r'TTT_LOSS\((\w+)\)', "layers/models/"),
    ("optimizer", "optim/optim_list.h", r'TTT_OPTIM\((\w+)\)', "optim/"),
    ("form family", "layers/forms/form_list.h", r'TTT_FORM_ENTRY\((\w+),\s*\w+\)',
     "layers/forms/"),
    ("form", "layers/forms/form_list.h", r'TTT_FORM_ENTRY\(\w+,\s*(\w+)\)', "layers/forms/"),
    ("feature map", "layers/forms/linear_attention/feature_maps.c",
     r'map_names\[\]\s*=\s*\{(?P<body>[^}]*)\}', "layers/forms/linear_attention/"),
    ("mixer", "src/train/mixers/mixer_list.h", r'TTT_MIXER\((\w+),\s*\w+\)', "src/train/mixers/"),
    ("task", "src/tasks/task_list.h", r'TTT_TASK\((\w+)\)', "src/tasks/"),
    # the names ops record on the tape (src/core/ops.c RECORD / record_named / binary)
    ("tape op", "src/core", None, "src/core/"),
]

# (the compared expression, the literal): why it is not a registry name.
ALLOWED = {
    ("pos", "learned"): "model.positions: learned (a value of that option, not the optimizer)",
    ("pos", "rope"): "model.positions: rope (a value of that option, not the tape op)",
    ("s", "lact"): "optimizer muon's coefficients: lact (Newton-Schulz coefficient set, not the "
                   "preset)",
    ("text", "cuda"): "train.device: cuda (a device, ttt_train_parse_device, not the form)",
    ("dev->scalar", "cuda"): "train.device: cuda (the configuration hash's cuda:0, not the form)",
}

SOURCE_ROOTS = ("src", "layers", "optim")
SOURCE_EXT = (".c", ".h", ".cu", ".cuh")


def strip_comments(text):
    """The text with comments blanked (newlines kept, so line numbers hold); strings kept."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if c == '"' or c == "'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(text[i:j + 1])
            i = j + 1
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def quoted(body):
    return re.findall(r'"(\w+)"', body)


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def source_files(root="."):
    for top in SOURCE_ROOTS:
        for d, _, files in os.walk(os.path.join(root, top)):
            for f in sorted(files):
                if f.endswith(SOURCE_EXT):
                    p = os.path.relpath(os.path.join(d, f), root)
                    yield p.replace(os.sep, "/")


def tape_op_names(root):
    names = set()
    core = os.path.join(root, "src/core")
    for f in sorted(os.listdir(core)):
        if not f.endswith(".c"):
            continue
        text = strip_comments(read(os.path.join(core, f)))
        for m in re.finditer(r'\b(?:RECORD|record_named)\s*\(\s*\w+\s*,([^;]*)', text):
            # the name argument: a literal or a choice of literals (the rest are identifiers)
            names.update(quoted(m.group(1).split(",")[0]))
        for m in re.finditer(r'\bbinary\s*\([^;]*?"(\w+)"\s*\)', text):
            names.add(m.group(1))
        for m in re.finditer(r'->name\s*=\s*"(\w+)"', text):
            names.add(m.group(1))
    names.discard("custom")  # the tape's placeholder for an unnamed op (autograd.c)
    return names


def registry_names(root="."):
    """{registry: (set of names, home folder)}; exits when a list cannot be read."""
    out = {}
    for reg, where, pattern, home in REGISTRIES:
        if pattern is None:
            names = tape_op_names(root)
        else:
            path = os.path.join(root, where)
            files = ([os.path.join(path, f) for f in sorted(os.listdir(path))
                      if f.endswith(".c")] if os.path.isdir(path) else [path])
            names = set()
            for f in files:
                for m in re.finditer(pattern, strip_comments(read(f))):
                    names.update(quoted(m.group("body")) if "body" in m.groupdict()
                                 else [m.group(1)])
        if len(names) < 2:
            sys.exit("check_names: found %d %s names in %s; the list moved or changed form: "
                     "update REGISTRIES in tests/check_names.py" % (len(names), reg, where))
        out[reg] = (names, home)
    return out


def in_home(path, home):
    if home.endswith("/*"):  # the folder's own files, not its subfolders
        folder = home[:-1]
        return path.startswith(folder) and "/" not in path[len(folder):]
    return path.startswith(home)


def call_args(text, start):
    """The top-level arguments of the call whose '(' is at text[start], and the end index."""
    args, depth, cur, i = [], 0, [], start
    while i < len(text):
        c = text[i]
        if c == '"':
            j = i + 1
            while j < len(text) and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            cur.append(text[i:j + 1])
            i = j + 1
            continue
        if c == "(":
            depth += 1
            if depth == 1:
                i += 1
                continue
        elif c == ")":
            depth -= 1
            if depth == 0:
                args.append("".join(cur).strip())
                return args, i
        elif c == "," and depth == 1:
            args.append("".join(cur).strip())
            cur = []
            i += 1
            continue
        cur.append(c)
        i += 1
    return args, i


def findings(path, text, registries):
    """[(line, message)] for the registry names compared as strings in one file."""
    found = []
    clean = strip_comments(text)
    for m in re.finditer(r'\bstr(?:n)?(?:case)?cmp\s*\(', clean):
        args, _ = call_args(clean, m.end() - 1)
        if len(args) < 2:
            continue
        for k, lit in ((0, args[0]), (1, args[1])):
            lm = re.fullmatch(r'"(\w+)"', lit)
            if not lm:
                continue
            name, other = lm.group(1), args[1 - k]
            regs = [r for r, (names, _) in registries.items() if name in names]
            if not regs or (other, name) in ALLOWED:
                continue
            if any(in_home(path, registries[r][1]) for r in regs):
                continue
            line = clean.count("\n", 0, m.start()) + 1
            found.append((line, '%s:%d: "%s" is a %s name compared as a string (%s); ask the '
                          'entry for a trait instead' % (path, line, name, " / ".join(regs),
                                                         "%s(%s, %s)" % (m.group(0)[:-1].strip(),
                                                                         args[0], args[1]))))
    return found


def self_check(registries):
    preset = sorted(registries["preset"][0])[0]
    op = sorted(registries["tape op"][0])[0]
    must = {
        "src/tasks/planted_a.c":
            'int f(const ttt_layer *L) { return strcmp(L->preset, "%s") == 0; }\n' % preset,
        "src/train/planted_b.c":
            'int g(const ttt_tape_entry *e) {\n  return !strncmp("%s", e->name, 3);\n}\n' % op,
    }
    must_not = {
        "layers/planted_c.c":
            'int f(const ttt_layer *L) { return strcmp(L->preset, "%s") == 0; }\n' % preset,
        "src/tasks/planted_d.c": 'int h(const char *x) { return strcmp(x, "no_such_entry"); }\n',
        "src/tasks/planted_e.c":
            '/* was: strcmp(L->preset, "%s") */\nint k(void) { return 0; }\n' % preset,
    }
    broken = []
    for path, text in must.items():
        if not findings(path, text, registries):
            broken.append("a planted comparison in %s was not reported" % path)
    for path, text in must_not.items():
        got = findings(path, text, registries)
        if got:
            broken.append("%s was reported but must not be: %s" % (path, got[0][1]))
    return broken


def main():
    root = "."
    registries = registry_names(root)
    broken = self_check(registries)
    if broken:
        print("check_names: the check itself is broken:")
        for b in broken:
            print("  " + b)
        return 1
    problems = []
    for path in source_files(root):
        problems += [msg for _, msg in findings(path, read(os.path.join(root, path)), registries)]
    if problems:
        print("check_names: registry names decide behaviour outside their registries:")
        for p in problems:
            print("  " + p)
        return 1
    total = sum(len(n) for n, _ in registries.values())
    print("check_names: %d names of %d registries; no comparison outside a registry"
          % (total, len(registries)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
