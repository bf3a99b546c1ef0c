"""Registries, experiments and run folders from Python (docs/python.md "Experiments")."""
import csv
import json
import os
import re

from ._lib import check, ffi, lib

_REGISTRIES = {
    "optimizers": lib.TTT_REGISTRY_OPTIMIZERS, "models": lib.TTT_REGISTRY_MODELS,
    "losses": lib.TTT_REGISTRY_LOSSES, "presets": lib.TTT_REGISTRY_PRESETS,
    "forms": lib.TTT_REGISTRY_FORMS, "tasks": lib.TTT_REGISTRY_TASKS,
}


def registry(kind):
    """[(name, help)] of one registry: optimizers, models, losses, presets, forms or tasks."""
    if kind not in _REGISTRIES:
        raise ValueError("ttt.registry: unknown registry '%s'; expected one of %s"
                         % (kind, ", ".join(_REGISTRIES)))
    r = _REGISTRIES[kind]
    out = []
    name, hlp = ffi.new("char **"), ffi.new("char **")
    err = ffi.new("ttt_error *")
    for i in range(lib.ttt_registry_count(r)):
        check(lib.ttt_registry_entry(name, hlp, r, i, err), err)
        out.append((ffi.string(name[0]).decode(), ffi.string(hlp[0]).decode()))
    return out


def registries():
    """Every registry as {kind: {name: help}} (what `ttt list` prints)."""
    return {kind: dict(registry(kind)) for kind in _REGISTRIES}


def _sets(set):
    if not set:
        return []
    out = []
    for key, val in set.items():
        # JSON is YAML's flow syntax: lists, numbers, booleans and strings all parse as YAML
        out.append("%s=%s" % (key, val if isinstance(val, str) else json.dumps(val)))
    return out


def run(experiment, set=None, out=None):
    """Run an experiment: a YAML file's path, YAML text, or a dict (the YAML mapping).

    set: {"layer.optimizer.lr": 0.5, …} overrides as `ttt run --set`; out: the run folder (None:
    the experiment's `output`, else runs/<name>). Returns the run folder's path. Errors are
    ttt.Error with the located message of the library."""
    sets = _sets(set)
    c_sets = [ffi.new("char[]", s.encode()) for s in sets]
    arr = ffi.new("char *[]", c_sets) if c_sets else ffi.NULL
    c_out = ffi.new("char[]", out.encode()) if out else ffi.NULL
    err = ffi.new("ttt_error *")
    if isinstance(experiment, dict):
        text = json.dumps(experiment, indent=1)
        check(lib.ttt_experiment_run_string(text.encode(), b"<dict>", arr, len(sets), c_out,
                                            err), err)
    elif "\n" in experiment or (":" in experiment and not os.path.exists(experiment)):
        text = experiment
        check(lib.ttt_experiment_run_string(text.encode(), b"<string>", arr, len(sets), c_out,
                                            err), err)
    else:
        with open(experiment) as f:
            text = f.read()
        check(lib.ttt_experiment_run_file(experiment.encode(), arr, len(sets), c_out, err), err)
    return out or _output(text, set)


def _output(text, set):
    """The run folder an experiment without --out writes: `output`, else runs/<name>."""
    if set and "output" in set:
        return str(set["output"])
    m = re.search(r'^\s*"?output"?\s*:\s*"?([^",\n]+)"?', text, re.M)
    if m:
        return m.group(1).strip()
    m = re.search(r'^\s*"?name"?\s*:\s*"?([^",\n]+)"?', text, re.M)
    return os.path.join("runs", m.group(1).strip()) if m else None


class Run:
    """A run folder: metrics (one row per measurement), summary (one row per summary
    measurement) as pandas DataFrames when pandas is installed, else lists of dicts; config,
    the resolved YAML text."""

    def __init__(self, folder, metrics, summary, config):
        self.folder, self.metrics, self.summary, self.config = folder, metrics, summary, config

    def __repr__(self):
        return "ttt.Run(%r: %d metrics, %d summary rows)" % (self.folder, len(self.metrics),
                                                              len(self.summary))


def _num(x):
    try:
        return float(x) if any(c in x for c in ".eEn") else int(x)
    except ValueError:
        return x


def load_run(folder):
    """Read a run folder written by `ttt run` or ttt.run (see class Run)."""
    if not os.path.isdir(folder):
        raise FileNotFoundError("ttt.load_run: %s: no such run folder" % folder)
    metrics = []
    path = os.path.join(folder, "metrics.jsonl")
    if os.path.exists(path):
        with open(path) as f:
            metrics = [json.loads(line) for line in f if line.strip()]
    summary = []
    path = os.path.join(folder, "summary.csv")
    if os.path.exists(path):
        with open(path, newline="") as f:
            summary = [{k: _num(v) for k, v in row.items()} for row in csv.DictReader(f)]
    config = ""
    path = os.path.join(folder, "config.resolved.yaml")
    if os.path.exists(path):
        with open(path) as f:
            config = f.read()
    try:
        import pandas as pd
        metrics, summary = pd.DataFrame(metrics), pd.DataFrame(summary)
    except ImportError:
        pass
    return Run(folder, metrics, summary, config)
