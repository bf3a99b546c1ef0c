#!/usr/bin/env python3
"""A run's index.html in a real browser (docs/results.md "Charts"): headless Chromium loads the
page and dumps the DOM it built; the test checks that every chart of the run folder (each
<name>.svg) is in it as an inline <svg> with its title, that the pivot table of the main metric
and the summary table are there with a row per configuration, and that the browser logged no
script error. A tiny sweep with seeds (memory task, a second or two) makes the run.

usage: test_page_browser.py TTT_BIN        exit 77 (skipped) when Chromium is not installed
                                           (`bash .ci/deps test` installs it)
"""
import html.parser
import os
import re
import shutil
import subprocess
import sys
import tempfile

SKIP = 77

EXPERIMENT = """name: page
seed: 0
seeds: 2
task: {kind: memory, pairs: [4, 8, 16], key_dim: 8, value_dim: 8, trials: 1}
layer: {preset: linear_attention}
sweep:
  task.value_dim: [8, 16]
  layer.optimizer.lr: [0.5, 1.0]
"""


class Dom(html.parser.HTMLParser):
    """What the check needs from the dumped DOM: the titles of top-level <svg> elements, and the
    rows of each table by its class."""

    def __init__(self):
        super().__init__()
        self.svg_titles, self.tables = [], {}
        self._svg_depth, self._in_title, self._table, self._rows = 0, False, None, 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "svg":
            self._svg_depth += 1
            if self._svg_depth == 1:
                self.svg_titles.append("")
        elif tag == "title" and self._svg_depth == 1 and self.svg_titles[-1] == "":
            self._in_title = True
        elif tag == "table":
            self._table = a.get("class", "")
            self.tables[self._table] = 0
        elif tag == "tr" and self._table is not None:
            self.tables[self._table] += 1

    def handle_endtag(self, tag):
        if tag == "svg":
            self._svg_depth -= 1
        elif tag == "title":
            self._in_title = False
        elif tag == "table":
            self._table = None

    def handle_data(self, data):
        if self._in_title:
            self.svg_titles[-1] += data


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    ttt = os.path.abspath(sys.argv[1])
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if not browser:
        print("skipped: Chromium is not installed (bash .ci/deps test installs it)")
        return SKIP
    tmp = tempfile.mkdtemp(prefix="ttt-page-")
    try:
        exp = os.path.join(tmp, "page.yaml")
        with open(exp, "w") as f:
            f.write(EXPERIMENT)
        run_dir = os.path.join(tmp, "run")
        r = subprocess.run([ttt, "run", exp, "--out", run_dir, "--quiet"], capture_output=True,
                           text=True, timeout=300)
        if r.returncode != 0:
            fail("ttt run: exit %d: %s" % (r.returncode, r.stderr))
        page = os.path.join(run_dir, "index.html")
        # --no-sandbox: the test may run as root (containers, CI), where the sandbox refuses to
        # start; the page is a local file the test wrote
        cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu",
               "--user-data-dir=" + os.path.join(tmp, "profile"), "--enable-logging=stderr",
               "--v=0", "--dump-dom", "file://" + page]
        b = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if b.returncode != 0 or "</html>" not in b.stdout:
            fail("chromium: exit %d, no page: %s" % (b.returncode, b.stderr[-2000:]))
        errors = [l for l in b.stderr.splitlines() if ":CONSOLE" in l or "Uncaught" in l]
        if errors:
            fail("the browser logged script errors:\n" + "\n".join(errors))
        dom = Dom()
        dom.feed(b.stdout)
        charts = sorted(f[:-4] for f in os.listdir(run_dir) if f.endswith(".svg"))
        if len(charts) < 2:
            fail("the run wrote %d charts: %s" % (len(charts), charts))
        if len(dom.svg_titles) != len(charts):
            fail("%d charts in the folder (%s), %d <svg> in the page: %s"
                 % (len(charts), charts, len(dom.svg_titles), dom.svg_titles))
        for name in charts:
            with open(os.path.join(run_dir, name + ".svg")) as f:
                title = re.search(r"<title>(.*?)</title>", f.read()).group(1)
            title = html.unescape(title)
            if title not in dom.svg_titles:
                fail("chart %s (%r) is not in the page: %s" % (name, title, dom.svg_titles))
        # 2 × 2 configurations: the pivot has a header row and one row per value_dim / lr pair
        # that is not spread over its columns; the summary table a header and 4 × 3 rows
        if dom.tables.get("pivot", 0) < 3:
            fail("no pivot table of the main metric with rows: %s" % dom.tables)
        if dom.tables.get("summary", 0) != 1 + 4 * 3:
            fail("the summary table has %d rows, expected 13: %s"
                 % (dom.tables.get("summary", 0), dom.tables))
        if "±" not in b.stdout:
            fail("no mean ± std in the page of a run with seeds")
        print("ok: %d charts, tables %s, no script errors" % (len(charts), dom.tables))
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
