"""The package inside a process's life: interpreter exit and fork after threaded calls.

Each case runs in a fresh interpreter, with OpenMP's workers really started (threads=2 and
OMP_NUM_THREADS=2, whatever the test environment sets), and its exit status checked: a crash at
exit or a hang is invisible inside the process that has it."""
import os
import signal
import subprocess
import sys

PYTHON_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def _run(code, timeout=120, **env):
    e = dict(os.environ)
    e["PYTHONPATH"] = PYTHON_DIR + os.pathsep + e.get("PYTHONPATH", "")
    e["OMP_NUM_THREADS"] = "2"
    e.update(env)
    # its own process group: a hung forked child is killed with its parent
    p = subprocess.Popen([sys.executable, "-c", code], env=e, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        return None, out, err
    return p.returncode, out, err


EXIT = """
import numpy as np, ttt
x = np.ones((1, 64, 2, 32), np.float32) / 32
ttt.Layer("deltanet", threads=2)(x, x, x, beta=np.full((1, 64, 2), 0.5, np.float32))
print("called")
"""


def test_interpreter_exits_cleanly_after_threaded_calls():
    # Unloading libttt at exit would unload the OpenMP runtime under its spinning workers
    # (OMP_WAIT_POLICY=active keeps them spinning): a segfault after the last line, 5 runs in 5
    # before the library was made undeletable. Several runs, since a crash there is a race.
    for i in range(4):
        rc, out, err = _run(EXIT, OMP_WAIT_POLICY="active")
        assert (rc, out.strip()) == (0, "called"), (i, rc, err[-2000:])


FORK = """
import os, numpy as np, ttt
x = np.ones((2, 64, 4, 32), np.float32) / 32
beta = np.full((2, 64, 4), 0.5, np.float32)
L = ttt.Layer("deltanet", threads=2)
o, _ = L(x, x, x, beta=beta)
pid = os.fork()
if pid == 0:
    oc, _ = L(x, x, x, beta=beta)          # one thread in the child: the same bits
    # the backward's parallel regions, outside any of the forward's: OpenMP's default count
    y = x[:1, :, :1]
    ttt.Layer("mamba2", form="scan", chunk=16).backward(
        y, y, y, y, log_alpha=np.full((1, 64, 1), -.1, np.float32))
    print("child", bool(np.array_equal(oc, o)), flush=True)
    os._exit(0)
_, status = os.waitpid(pid, 0)
o2, _ = L(x, x, x, beta=beta)              # the parent keeps its threads
print("parent", os.waitstatus_to_exitcode(status), bool(np.array_equal(o2, o)))
"""


def test_a_forked_child_runs_layers():
    # GCC's OpenMP runtime is not fork-safe: before the fix the child waited forever for the
    # parent's workers; so did the regions that take OpenMP's default count (the scan form's
    # backward).
    rc, out, err = _run(FORK, timeout=60)
    assert rc is not None, "the forked child hung (killed after 60 s): %s" % out
    assert rc == 0, err[-2000:]
    assert out.split() == ["child", "True", "parent", "0", "True"], (out, err[-2000:])
