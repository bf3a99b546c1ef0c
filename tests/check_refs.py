#!/usr/bin/env python3
"""Every reference to a document in the repository resolves.

Code comments, help texts, experiments and the docs cite the project's documents as
    docs/math.md §5.3            a numbered section ("## 5." / "### 5.3 ..." heading)
    docs/math.md §3 "momentum"   a section, and a word that must occur inside it
    docs/design.md "Data flow"   a heading
    README "Hardening"           a heading of README.md
and a bare "§6" continues the nearest document named on the same or one of the five lines before
(inside a document, a § more than 60 characters after the last name is the document's own).
This check fails on: a cited .md file that is not in the repository, a section or heading that
does not exist, a bare § with no document before it, and any mention of a document that lives
outside the repository. Run from the repository root (ctest does): python3 tests/check_refs.py
"""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SELF = "tests/check_refs.py"
# The folder beside a checkout that a clone does not have (spelled in two pieces so that this
# file does not itself contain the path it looks for).
OUTSIDE = "../" "shared"


def tracked_files():
    try:
        out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split("\n")
        files = [f for f in out if f]
    except (OSError, subprocess.CalledProcessError):
        files = []
        for d, _, names in os.walk(ROOT):
            if "/." in d or "/build" in d:
                continue
            files += [os.path.relpath(os.path.join(d, n), ROOT) for n in names]
    text_ext = (".c", ".h", ".md", ".py", ".yaml", ".txt", ".sh", ".dict")
    return [f for f in files if f.endswith(text_ext) or f.startswith(".ci/")
            or f == "CMakeLists.txt"]


class Doc:
    def __init__(self, path):
        self.path = path
        with open(os.path.join(ROOT, path), encoding="utf-8") as fh:
            self.lines = fh.read().split("\n")
        self.headings = []  # (line index, level, text)
        fence = False
        for i, line in enumerate(self.lines):
            if line.startswith("```"):
                fence = not fence
            m = re.match(r"^(#+)\s+(.*)$", line)
            if m and not fence:
                self.headings.append((i, len(m.group(1)), m.group(2).strip()))

    def section(self, number):
        """Lines of the section numbered `number` ("5" or "5.3"), or None."""
        for idx, (i, level, text) in enumerate(self.headings):
            m = re.match(r"^(\d+(?:\.\d+)*)\.?\s", text + " ")
            if m and m.group(1) == number:
                end = len(self.lines)
                for j, lv, _ in self.headings[idx + 1:]:
                    if lv <= level:
                        end = j
                        break
                return self.lines[i:end]
        return None

    def has_heading(self, words):
        w = words.lower()
        return any(w in text.lower() for _, _, text in self.headings)


DOC_RE = re.compile(r'(docs/[A-Za-z0-9_-]+\.md|README(?:\.md)?)')
SECTION_RE = re.compile(r'§\s?(\d+(?:\.\d+)*)(?:\s+"([^"]+)")?')
HEADING_RE = re.compile(r'(docs/[A-Za-z0-9_-]+\.md|README(?:\.md)?)\s+"([^"]+)"')
MD_RE = re.compile(r'(?<![\w/.-])([A-Za-z0-9_./-]*[A-Za-z0-9_-]+\.md)\b')


def main():
    files = tracked_files()
    present = set(files)
    docs = {}

    def doc(path):
        if path in ("README", "README.md"):
            path = "README.md"
        if path not in docs:
            docs[path] = Doc(path) if path in present else None
        return docs[path]

    errors = []
    for f in files:
        if f == SELF:
            continue
        try:
            with open(os.path.join(ROOT, f), encoding="utf-8") as fh:
                lines = fh.read().split("\n")
        except (UnicodeDecodeError, OSError):
            continue
        last_doc = None  # (path, line number)
        for n, line in enumerate(lines, 1):
            where = f"{f}:{n}"
            for m in re.finditer(r"\b(MATH|DESIGN)\.md\b", line):
                errors.append(f"{where}: cites {m.group(0)}, which is not part of the repository")
            if OUTSIDE in line and not f.startswith(".ci/"):
                errors.append(f"{where}: refers to {OUTSIDE}, a folder outside the repository")
            # every cited .md file exists (relative to the repository root or to the file)
            for m in MD_RE.finditer(line):
                name = m.group(1)
                if name.startswith(("http", "www.")) or "://" in line[max(0, m.start() - 8):m.start()]:
                    continue
                cand = {name, os.path.normpath(os.path.join(os.path.dirname(f), name))}
                if not any(c in present for c in cand) and not any(
                        p.endswith("/" + name) or p == name for p in present):
                    errors.append(f"{where}: cites {name}, which is not in the repository")
            # sections and headings
            pos_docs = [(m.start(), m.group(1)) for m in DOC_RE.finditer(line)]
            for m in HEADING_RE.finditer(line):
                d = doc(m.group(1))
                if d is not None and not d.has_heading(m.group(2)):
                    errors.append(f'{where}: {m.group(1)} has no heading "{m.group(2)}"')
            for m in SECTION_RE.finditer(line):
                before = [p for p in pos_docs if p[0] < m.start()]
                if f.endswith(".md") and not (before and m.start() - before[-1][0] <= 60):
                    before = [(0, f)]  # inside a document, a § far from a name is its own
                if before:
                    target = before[-1][1]
                elif last_doc and n - last_doc[1] <= 5:
                    target = last_doc[0]
                else:
                    errors.append(f"{where}: §{m.group(1)} without a document before it")
                    continue
                d = doc(target)
                if d is None:
                    continue  # reported above as a missing file
                sec = d.section(m.group(1))
                if sec is None:
                    errors.append(f"{where}: {target} has no section §{m.group(1)}")
                elif m.group(2) and not any(m.group(2).lower() in s.lower() for s in sec):
                    errors.append(f'{where}: {target} §{m.group(1)} does not mention "{m.group(2)}"')
            if pos_docs:
                last_doc = (pos_docs[-1][1], n)
    for e in errors:
        print(e)
    print(f"{len(files)} files checked, {len(errors)} dangling references")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
