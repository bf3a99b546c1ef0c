"""ttt.run and ttt.load_run: experiments from a file, YAML text or a dict; located errors."""
import os

import pytest

import ttt

TINY = {"name": "tiny", "seed": 0,
        "task": {"kind": "memory", "pairs": [4, 8], "key_dim": 8, "value_dim": 8, "trials": 1},
        "layer": {"preset": "deltanet"}}


def test_run_a_dict_and_load_it(tmp_path):
    out = str(tmp_path / "run")
    folder = ttt.run(TINY, set={"layer.preset": "linear_attention", "task.pairs": [4, 8, 16]},
                     out=out)
    assert folder == out
    r = ttt.load_run(out)
    # the overrides reached the run: the resolved file and the rows say so
    assert "pairs: [4, 8, 16]" in r.config and "preset: linear_attention" in r.config
    rows = r.summary.to_dict("records") if hasattr(r.summary, "to_dict") else r.summary
    assert [row["N"] for row in rows] == [4, 8, 16]
    assert {row["layer"] for row in rows} == {"linear_attention"}
    assert len(r.metrics) == 3


def test_run_a_file(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text("name: f\ntask: {kind: memory, pairs: [4], key_dim: 8, value_dim: 8, "
                    "trials: 1}\nlayer: {preset: retnet}\n")
    out = str(tmp_path / "out")
    assert ttt.run(str(path), out=out) == out
    assert os.path.exists(os.path.join(out, "summary.csv"))
    # without out: the experiment's own output, which run returns
    path.write_text(path.read_text() + "output: %s\n" % (tmp_path / "own"))
    assert ttt.run(str(path)) == str(tmp_path / "own")
    assert os.path.exists(os.path.join(str(tmp_path / "own"), "summary.csv"))


def test_errors_are_located(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("name: b\ntask: {kind: memory, pairz: [4]}\nlayer: {preset: deltanet}\n")
    with pytest.raises(ttt.Error, match=r"bad.yaml:2:\d+: .*pairz"):
        ttt.run(str(path), out=str(tmp_path / "x"))
    assert not os.path.exists(tmp_path / "x")
    with pytest.raises(ttt.Error, match="lrr"):
        ttt.run(TINY, set={"layer.optimizer.lrr": 1}, out=str(tmp_path / "y"))


def test_load_run_of_a_missing_folder(tmp_path):
    with pytest.raises(FileNotFoundError):
        ttt.load_run(str(tmp_path / "nothing"))


def test_load_run_without_pandas(tmp_path, monkeypatch):
    import sys
    out = str(tmp_path / "run")
    ttt.run(TINY, out=out)
    monkeypatch.setitem(sys.modules, "pandas", None)  # import pandas now raises ImportError
    r = ttt.load_run(out)
    assert isinstance(r.summary, list) and [row["N"] for row in r.summary] == [4, 8]
    assert isinstance(r.summary[0]["recall_error"], float)
    assert isinstance(r.metrics, list) and len(r.metrics) == 2
