#!/usr/bin/env python3
"""The public layer descriptor, the library's own, api.c and docs/api.md agree.

    python3 tests/check_api_doc.py            # from the repository root

docs/api.md documents `ttt_layer_descriptor` (include/ttt/ttt.h) in the table of its section
"Layer descriptor" and says, in "Inside the library", how it differs from the library's own
`ttt_layer_desc` (layers/layer.h). This check holds both statements to the code:

* every field of `ttt_layer_descriptor` has a row in the table, and every field the table names
  is a field of the struct;
* the public fields, without those only the public struct has (PUBLIC_ONLY) and with the renamed
  ones under their internal names (RENAMED), are the fields of `ttt_layer_desc`, in its order;
* each of those differences is named in the "Inside the library" text (both names of a rename);
* `ttt_layer_new` (src/app/api.c) assigns every field of `ttt_layer_desc` from the public field
  of the same meaning (`d.x = ...desc->y...`), so a field added to both structs is also passed on;
* the number of exported functions "Versions and the ABI" states is the number of `TTT_API`
  declarations in include/ttt/ttt.h and status.h (test_symbols holds those to the library).

Before it reads the tree it checks itself on planted copies of the real files: a field added to
the header, a row removed from the table, a field added to the internal struct only, an
assignment removed from api.c, a rename left out of the text and a function declared but not
counted must each be reported, and the unchanged files must not be. If either goes the wrong way, the check itself is broken and fails.
"""
import re
import sys

HEADER, INTERNAL, API_C, DOC = ("include/ttt/ttt.h", "layers/layer.h", "src/app/api.c",
                                "docs/api.md")
STATUS_H = "include/ttt/status.h"  # its TTT_API declarations count too
PUBLIC_ONLY = {"size"}  # sizeof the caller's struct (docs/api.md "Versions and the ABI")
RENAMED = {"options": "opts", "n_options": "n_opts"}  # public name: internal name


def struct_fields(text, name):
    """Field names of `typedef struct name { ... } name;`, in order."""
    m = re.search(r"typedef\s+struct\s+%s\s*\{(.*?)\}\s*%s\s*;" % (name, name), text, re.S)
    if not m:
        raise SystemExit("check_api_doc: struct %s not found" % name)
    body = re.sub(r"/\*.*?\*/", "", m.group(1), flags=re.S)
    body = re.sub(r"//[^\n]*", "", body)
    fields = []
    for decl in body.split(";"):
        decl = decl.strip()
        if not decl:
            continue
        # "const char *model, *loss" -> model, loss; the first declarator follows the type
        parts = decl.split(",")
        for i, part in enumerate(parts):
            words = re.findall(r"[A-Za-z_]\w*", part)
            if words:
                fields.append(words[-1])
    return fields


def section(doc, heading):
    """The text of the section `heading` (## or ###) up to the next heading of its level."""
    m = re.search(r"^(#+) %s\s*$" % re.escape(heading), doc, re.M)
    if not m:
        raise SystemExit("check_api_doc: docs/api.md has no section %r" % heading)
    level = len(m.group(1))
    rest = doc[m.end():]
    end = re.search(r"^#{1,%d} " % level, rest, re.M)
    return rest[:end.start()] if end else rest


def table_fields(doc):
    """The field names of the first table of "Layer descriptor": the `names` of column one."""
    names, in_table = [], False
    for line in section(doc, "Layer descriptor").splitlines():
        if line.startswith("|"):
            in_table = True
            first = line.split("|")[1]
            if first.strip() in ("field",) or set(first.strip()) <= set("-: "):
                continue
            names += re.findall(r"`(\w+)`", first)
        elif in_table:
            break
    return names


def assigned(api_c):
    """{internal field: public field} of the assignments `d.x = ...desc->y...` in ttt_layer_new."""
    m = re.search(r"ttt_status ttt_layer_new\(.*?\n\}", api_c, re.S)
    if not m:
        raise SystemExit("check_api_doc: ttt_layer_new not found in src/app/api.c")
    out = {}
    for x, rhs in re.findall(r"\bd\.(\w+)\s*=\s*([^;]*);", m.group(0)):
        y = re.search(r"desc->(\w+)", rhs)
        if y:
            out[x] = y.group(1)
    return out


def problems(header, internal, api_c, doc, status_h=""):
    out = []
    declared = len(re.findall(r"^TTT_API\b", header + "\n" + status_h, re.M))
    stated = re.search(r"nothing else \((\d+) functions\)", section(doc, "Versions and the ABI"))
    if not stated or int(stated.group(1)) != declared:
        out.append("docs/api.md \"Versions and the ABI\" states %s exported functions; the headers "
                   "declare %d with TTT_API" % (stated.group(1) if stated else "no number of",
                                                declared))
    public = struct_fields(header, "ttt_layer_descriptor")
    inner = struct_fields(internal, "ttt_layer_desc")
    table = table_fields(doc)
    for f in public:
        if f not in table:
            out.append("%s: field %s of ttt_layer_descriptor has no row in docs/api.md "
                       "\"Layer descriptor\"" % (HEADER, f))
    for f in table:
        if f not in public:
            out.append("docs/api.md \"Layer descriptor\": %s is no field of "
                       "ttt_layer_descriptor" % f)
    mapped = [RENAMED.get(f, f) for f in public if f not in PUBLIC_ONLY]
    if mapped != inner:
        extra = [f for f in mapped if f not in inner]
        missing = [f for f in inner if f not in mapped]
        out.append("ttt_layer_descriptor (less %s, renamed %s) is not ttt_layer_desc field for "
                   "field: only public %s, only internal %s%s"
                   % (sorted(PUBLIC_ONLY), RENAMED, extra, missing,
                      "" if extra or missing else ", order differs"))
    inside = section(doc, "Inside the library")
    for f in PUBLIC_ONLY:
        if "`%s`" % f not in inside:
            out.append("docs/api.md \"Inside the library\" does not name `%s`, a field only the "
                       "public descriptor has" % f)
    for pub, inn in RENAMED.items():
        if "`%s`" % pub not in inside or "`%s`" % inn not in inside:
            out.append("docs/api.md \"Inside the library\" does not name the rename `%s` -> "
                       "`%s`" % (pub, inn))
    wired = assigned(api_c)
    back = {v: k for k, v in RENAMED.items()}
    for f in inner:
        want = back.get(f, f)
        if wired.get(f) != want:
            out.append("%s: ttt_layer_new does not set d.%s from desc->%s (%s)"
                       % (API_C, f, want, "sets it from desc->%s" % wired[f] if f in wired
                          else "not set"))
    return out


def self_check(files):
    """Each planted change must be reported; the real files must not be."""
    header, internal, api_c, doc, status_h = files
    base = problems(*files)
    field = ("    int feature_gate;", "    int feature_gate;\n    int planted;")
    plants = {
        "a header field": (header.replace(*field, 1), internal, api_c, doc, status_h),
        "a table row removed": (header, internal, api_c,
                                re.sub(r"^\| `features` \|.*\n", "", doc, count=1, flags=re.M),
                                status_h),
        "an internal field": (header, internal.replace(*field, 1), api_c, doc, status_h),
        "an assignment removed": (header, internal,
                                  re.sub(r"\n\s*d\.feature_seed = [^;]*;", "", api_c, count=1),
                                  doc, status_h),
        "a rename not named": (header, internal, api_c, doc.replace("`n_opts`", "n_opts"),
                               status_h),
        "a function not counted": (header + "\nTTT_API int ttt_planted(void);\n", internal,
                                   api_c, doc, status_h),
    }
    broken = []
    for what, planted in plants.items():
        if planted == files:
            broken.append("the plant %r changed nothing (the real files moved on)" % what)
        elif not set(problems(*planted)) - set(base):
            broken.append("the plant %r was not reported" % what)
    return broken


def main():
    files = tuple(open(p, encoding="utf-8").read()
                  for p in (HEADER, INTERNAL, API_C, DOC, STATUS_H))
    broken = self_check(files)
    if broken:
        for b in broken:
            print("check_api_doc is broken: " + b)
        return 1
    found = problems(*files)
    for p in found:
        print(p)
    if found:
        return 1
    print("check_api_doc: %d public descriptor fields, table, ttt_layer_desc and api.c agree"
          % len(struct_fields(files[0], "ttt_layer_descriptor")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
