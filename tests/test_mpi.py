#!/usr/bin/env python3
"""A run shared among processes leaves the run folder a one-process run leaves
(docs/scaling.md). Two parts, each a ctest test:

  shards  (no MPI needed)  `ttt run --shard i/n` jobs + `ttt merge` = one `ttt run`; a merge
                           with a shard missing fails and names the points missing; a second
                           job of the same shard is refused (a sibling shard is not); a task of
                           `srun -n 4` that is not an MPI rank refuses to run the whole sweep.
  mpi     (needs a build with MPI and mpirun; exit 77 = skipped, with the reason)
          * a sweep over `mpirun -np 2`: the same files, config.resolved.yaml, summary rows,
            metrics and charts as one process (the timing fields seconds and tokens_per_s
            excepted: wall clock);
          * a sweep whose rank is killed (kill -9) mid-run keeps the points that ended, and the
            rerun runs only the rest (their summary rows carry the seconds of the first run)
            and ends as one process would;
          * data-parallel training: 1, 2 and 4 ranks with `shards: 4` give the same records, bit
            for bit (every number is printed with the digits that read back the same double),
            and `shards: 2` does not (so the comparison can fail); 3 ranks (an uneven split) on
            a model whose gradient crosses the chain in nine messages, likewise;
          * data-parallel stop (train.stop_at) and resume over 2 ranks, a resume on 1 rank of a
            checkpoint 2 ranks wrote, and kill -9 of rank 1 mid-training then rerun: the same
            records as the run never interrupted (resumed_from excepted).

usage: test_mpi.py shards|mpi TTT_BIN [MPIEXEC] [MPI_BUILT(ON|OFF)]
"""
import csv
import fcntl
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

TIMING = {"seconds", "tokens_per_s"}
SKIP = 77

SWEEP = """name: sw
seed: 0
task: {kind: mqar, vocab: 16, seq_len: 16, pairs: 2, train_examples: 64, test_examples: 16,
       eval_batch: 8}
model: {d_model: 8, layers: 1, heads: 1, mlp: 0}
layer: {preset: deltanet}
train: {steps: 6, batch: 8, shards: 2, log_every: 2, eval_every: 3, checkpoint_every: 2}
sweep:
  layer.preset: [deltanet, linear_attention, gla]
  train.lr: [1e-2, 3e-3]
"""

# one point: what the ranks train together
DATA = """name: dp
seed: 3
task: {kind: mqar, vocab: 16, seq_len: 16, pairs: 2, train_examples: 64, test_examples: 16,
       eval_batch: 8}
model: {d_model: 16, layers: 2, heads: 2, mlp: 0}
layer: {preset: deltanet}
train: {steps: 16, batch: 8, shards: 4, log_every: 1, eval_every: 5, checkpoint_every: 4,
        lr: 1e-2, warmup: 2}
"""


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


class Ctx:
    def __init__(self, ttt, mpiexec):
        self.ttt = ttt
        self.mpiexec = mpiexec
        self.tmp = tempfile.mkdtemp(prefix="ttt_mpi_")
        self.env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1",
                        OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_rmaps_base_oversubscribe="1",
                        OPENBLAS_NUM_THREADS="1")

    def file(self, name, text):
        p = os.path.join(self.tmp, name)
        with open(p, "w") as f:
            f.write(text)
        return p

    def run(self, args, ranks=0, check=True, background=False):
        cmd = [self.ttt] + args + ["--quiet"]
        env = self.env
        if ranks:
            cmd = [self.mpiexec, "-np", str(ranks), "--oversubscribe"] + cmd
            # In the sanitizer build, leak reports are off for the ranks only: Open MPI leaves
            # ~120 KB from MPI_Init in components it unloads at MPI_Finalize (frames of an
            # "<unknown module>", so no suppression can name them). Memory errors are still
            # reported, and every run without mpirun keeps leak detection.
            env = dict(env, ASAN_OPTIONS=(env.get("ASAN_OPTIONS", "") + ":detect_leaks=0")
                       .lstrip(":"))
        if background:
            return subprocess.Popen(cmd, cwd=self.tmp, env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
        r = subprocess.run(cmd, cwd=self.tmp, env=env, capture_output=True, text=True,
                           timeout=600)
        if check and r.returncode != 0:
            fail("%s exited %d:\n%s%s" % (" ".join(cmd), r.returncode, r.stdout, r.stderr))
        return r

    def path(self, *p):
        return os.path.join(self.tmp, *p)


def listing(d, stale_ok=False):
    """Every file under d. stale_ok: without the temporary files a process killed while writing
    leaves (".<name>.tmp.<pid>", never renamed into place) — what kill -9 of one process leaves
    too, with or without MPI."""
    out = []
    for root, _, names in os.walk(d):
        for n in names:
            if stale_ok and n.startswith(".") and ".tmp." in n:
                continue
            out.append(os.path.relpath(os.path.join(root, n), d))
    return sorted(out)


def metrics(d, drop=()):
    rows = []
    with open(os.path.join(d, "metrics.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            for k in TIMING | set(drop):
                r.pop(k, None)
            rows.append(r)
    return rows


def summary(d, drop=()):
    with open(os.path.join(d, "summary.csv")) as f:
        rows = list(csv.DictReader(f))
    timing = []
    for r in rows:
        for k in TIMING | set(drop):
            if k in r:
                timing.append(r.pop(k))
    return rows, timing


def page(d, drop=()):
    """index.html with the summary table's cells of the timing (and dropped) columns blanked."""
    import re
    with open(os.path.join(d, "index.html")) as f:
        html = f.read()
    head = re.search(r"<table class=\"summary\">\s*<thead><tr>(.*?)</tr></thead>", html)
    if not head:
        return html
    cols = re.findall(r"<th>(.*?)</th>", head.group(1))
    blank = [i for i, c in enumerate(cols) if c in TIMING | set(drop)]

    def row(m):
        cells = re.findall(r"<td[^>]*>.*?</td>", m.group(1))
        for i in blank:
            if i < len(cells):
                cells[i] = "<td>T</td>"
        return "<tr>" + "".join(cells) + "</tr>"
    return re.sub(r"<tr>(<td.*?)</tr>", row, html)


def same_folder(a, b, what, drop=(), killed=False):
    la, lb = listing(a, killed), listing(b, killed)
    if la != lb:
        fail("%s: files differ:\n  %s\n  %s" % (what, la, lb))
    for name in la:
        if name.endswith(".svg") or name == "config.resolved.yaml":
            if open(os.path.join(a, name)).read() != open(os.path.join(b, name)).read():
                fail("%s: %s differs" % (what, name))
    if summary(a, drop)[0] != summary(b, drop)[0]:
        fail("%s: summary rows differ:\n%s\n%s" % (what, summary(a, drop)[0], summary(b, drop)[0]))
    ma, mb = metrics(a, drop), metrics(b, drop)
    if ma != mb:
        for x, y in zip(ma, mb):
            if x != y:
                fail("%s: metrics differ first at\n  %s\n  %s" % (what, x, y))
        fail("%s: metrics differ in length (%d, %d)" % (what, len(ma), len(mb)))
    if page(a, drop) != page(b, drop):
        fail("%s: index.html differs beyond the timing cells" % what)


def test_shards(c):
    exp = c.file("sweep.yaml", SWEEP)
    c.run(["run", exp, "--out", "one"])
    c.run(["run", exp, "--out", "sh", "--shard", "0/3"])
    c.run(["run", exp, "--out", "sh", "--shard", "2/3"])
    r = c.run(["merge", exp, "--out", "sh"], check=False)
    if r.returncode == 0 or "points" not in r.stderr:
        fail("a merge with shard 1/3 missing must fail naming the points: %s" % r.stderr)
    parts = sorted(os.listdir(c.path("sh", "parts")))
    recs = [p for p in parts if p.endswith(".rec")]
    if len(recs) != 4:  # 6 points of equal cost over 3 shards: 2 each
        fail("two shards of three should leave 4 parts, found %s" % parts)

    # The lock under --shard (docs/scaling.md "Run folders shared by ranks and jobs"): sibling
    # shard jobs share the folder (.ttt-lock shared), each shard has one job (.ttt-lock.shard<i>
    # exclusive); this process stands for a live job of shard 1/3.
    me = "pid %d on host test: a job of shard 1/3" % os.getpid()
    with open(c.path("sh", ".ttt-lock"), "a") as main, \
            open(c.path("sh", ".ttt-lock.shard1"), "a+") as own:
        fcntl.flock(main, fcntl.LOCK_SH)
        fcntl.flock(own, fcntl.LOCK_EX)
        own.truncate(0)
        own.write(me + "\n")
        own.flush()
        r = c.run(["run", exp, "--out", "sh", "--shard", "1/3"], check=False)
        if r.returncode == 0 or "shard 1/3" not in r.stderr or me not in r.stderr:
            fail("a second job of shard 1/3 must be refused naming the first: exit %d, %s"
                 % (r.returncode, r.stderr))
        left = [p for p in os.listdir(c.path("sh", "parts")) if p.endswith(".rec")]
        if len(left) != 4:
            fail("the refused job of shard 1/3 wrote parts: %s" % sorted(left))
        for args in (["merge", exp, "--out", "sh"], ["run", exp, "--out", "sh"]):
            r = c.run(args, check=False)
            if r.returncode == 0 or "in use by another ttt run" not in r.stderr:
                fail("`ttt %s` while a shard job runs must be refused: exit %d, %s"
                     % (args[0], r.returncode, r.stderr))
        c.run(["run", exp, "--out", "sh", "--shard", "0/3"])  # a sibling shard: not refused
    print("ok: a second job of the same shard is refused naming the first; a sibling shard "
          "runs; merge and a whole run wait for the shard jobs")

    c.run(["run", exp, "--out", "sh", "--shard", "1/3"])
    c.run(["merge", exp, "--out", "sh"])
    if any(n.startswith(".ttt-lock.shard") for n in os.listdir(c.path("sh"))):
        fail("the merge must remove the shard jobs' lock files: %s" % os.listdir(c.path("sh")))
    same_folder(c.path("one"), c.path("sh"), "3 shards + merge vs one process")
    print("ok: --shard 0/3, 1/3, 2/3 + merge == one process; a merge with a shard missing fails")

    # one of several srun tasks that is not an MPI rank refuses to run the whole sweep
    env = dict(c.env, SLURM_STEP_NUM_TASKS="4")
    r = subprocess.run([c.ttt, "run", exp, "--out", "srun", "--quiet"], cwd=c.tmp, env=env,
                       capture_output=True, text=True)
    if r.returncode != 2 or "--shard" not in r.stderr or os.path.exists(c.path("srun")):
        fail("4 srun tasks without MPI must each refuse (exit 2, naming --shard) and write "
             "nothing: exit %d, %s" % (r.returncode, r.stderr))
    print("ok: one of 4 srun tasks without MPI refuses to run the whole sweep")


def wait_for(pred, proc, what, limit=120):
    t0 = time.time()
    while not pred():
        if proc.poll() is not None:
            fail("the run ended before %s:\n%s" % (what, proc.stderr.read()))
        if time.time() - t0 > limit:
            proc.kill()
            fail("timed out waiting for %s" % what)
        time.sleep(0.02)


def kill_one_rank(proc, which):
    """kill -9 one rank (a child of mpirun started by this test), then wait for mpirun."""
    out = subprocess.run(["ps", "-o", "pid=,comm=", "--ppid", str(proc.pid)],
                         capture_output=True, text=True).stdout.split("\n")
    ranks = sorted(int(l.split()[0]) for l in out if l.strip().endswith("ttt"))
    if len(ranks) < 2:
        fail("expected 2 rank processes under mpirun, found %s" % out)
    os.kill(ranks[which], signal.SIGKILL)
    try:
        proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        fail("mpirun did not end after a rank was killed")
    if proc.returncode == 0:
        fail("mpirun reported success although a rank was killed")


def test_mpi(c):
    exp = c.file("sweep.yaml", SWEEP)
    c.run(["run", exp, "--out", "one"])
    c.run(["run", exp, "--out", "two"], ranks=2)
    same_folder(c.path("one"), c.path("two"), "sweep on 2 ranks vs one process")
    if os.path.exists(c.path("two", "parts")):
        fail("the parts folder outlived a successful run")
    print("ok: a sweep over 2 ranks leaves the folder one process leaves")

    # The run folder's lock and completion mark under MPI (docs/scaling.md "Run folders shared
    # by ranks and jobs"): rank 0 holds the lock; a completed run is left as it is by every
    # rank; a second writer is refused on every rank, and nothing is written.
    def stamps():  # every file but the lock, which records its holder
        return {n: os.stat(c.path("two", n)).st_mtime_ns for n in listing(c.path("two"))
                if n != ".ttt-lock"}
    before = stamps()
    r = c.run(["run", exp, "--out", "two"], ranks=2)
    after = stamps()
    if "completed run" not in r.stderr or before != after:
        fail("a rerun of a completed run over 2 ranks must change nothing: %s" % r.stderr)
    os.unlink(c.path("two", ".ttt-complete"))
    with open(c.path("two", ".ttt-lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        r = c.run(["run", exp, "--out", "two"], ranks=2, check=False)
        if r.returncode == 0 or "in use by another ttt run" not in r.stderr:
            fail("a run over 2 ranks into a locked folder must be refused: exit %d, %s"
                 % (r.returncode, r.stderr))
        if os.path.exists(c.path("two", "parts")):
            fail("a refused run over 2 ranks wrote parts")
    print("ok: over 2 ranks, a completed run is left as it is, and a locked folder is refused")

    # train.data_parallel decides how the ranks share a sweep, and --parallel overrides it: with
    # one shard per batch, 2 ranks cannot split a batch, so data-parallel must refuse and
    # points-over-ranks must run
    r = c.run(["run", exp, "--out", "dpt", "--set", "train.data_parallel=true", "--set",
               "train.shards=1"], ranks=2, check=False)
    if r.returncode == 0 or "train.shards is 1" not in r.stderr:
        fail("train.data_parallel: true with shards 1 on 2 ranks must refuse: %s" % r.stderr)
    c.run(["run", exp, "--out", "dpf", "--set", "train.data_parallel=false", "--set",
           "train.shards=1"], ranks=2)
    c.run(["run", exp, "--out", "dpo", "--set", "train.data_parallel=true", "--set",
           "train.shards=1", "--parallel", "points"], ranks=2)
    print("ok: train.data_parallel true/false chooses how 2 ranks share a sweep; --parallel "
          "overrides it")

    # a longer sweep, one rank killed once some points have ended
    long_exp = c.file("long.yaml", SWEEP.replace("steps: 6,", "steps: 150,")
                      .replace("train.lr: [1e-2, 3e-3]", "train.lr: [1e-2, 3e-3, 1e-3]"))
    c.run(["run", long_exp, "--out", "long1"])
    p = c.run(["run", long_exp, "--out", "longk"], ranks=2, background=True)
    parts = c.path("longk", "parts")
    wait_for(lambda: os.path.isdir(parts) and
             len([f for f in os.listdir(parts) if f.endswith(".rec")]) >= 2, p,
             "two points to end")
    kill_one_rank(p, 1)
    kept = sorted(f for f in os.listdir(parts) if f.endswith(".rec"))
    if not 2 <= len(kept) < 9:
        fail("after the kill, expected some but not all of 9 points kept, found %s" % kept)
    kept_seconds = {}
    for f in kept:
        with open(os.path.join(parts, f)) as fh:
            for line in fh:
                if line.startswith("S"):
                    # the fields, without the line's checksum ("\t#<16 hex>", point_records.h)
                    cols = line.rstrip("\n").split("\t")[1:]
                    fields = dict(x.split("=", 1) for x in cols if not x.startswith("#"))
                    kept_seconds[int(f[5:-4])] = float.fromhex(fields["nseconds"])
    c.run(["run", long_exp, "--out", "longk"], ranks=2)
    same_folder(c.path("long1"), c.path("longk"), "killed sweep rerun vs one process",
                drop=("resumed_from",), killed=True)
    with open(c.path("longk", "metrics.jsonl")) as f:
        again = {int(r["point"]): r["seconds"] for r in map(json.loads, f)
                 if r.get("kind") == "summary"}
    for pt, sec in kept_seconds.items():
        if again[pt] != sec:
            fail("point %d ended before the kill but was run again" % pt)
    print("ok: kill -9 of a rank keeps %d ended points; the rerun runs only the rest" % len(kept))

    # data-parallel training: 1, 2, 4 ranks with shards 4
    dp = c.file("dp.yaml", DATA)
    c.run(["run", dp, "--out", "dp1"])
    for n in (2, 4):
        c.run(["run", dp, "--out", "dp%d" % n], ranks=n)
        same_folder(c.path("dp1"), c.path("dp%d" % n), "data-parallel over %d ranks vs one" % n)
    # 3 ranks (shards 1, 1, 2) on a model whose gradient (98 308 floats) travels the chain in
    # nine messages of 12 288 floats (the last shorter)
    big = c.file("big.yaml", DATA.replace("d_model: 16", "d_model: 96").replace("steps: 16,",
                                                                              "steps: 4,"))
    c.run(["run", big, "--out", "big1"])
    c.run(["run", big, "--out", "big3"], ranks=3)
    same_folder(c.path("big1"), c.path("big3"), "data-parallel over 3 ranks, 9 messages, vs one")
    c.run(["run", dp, "--out", "dps2", "--set", "train.shards=2"])
    if metrics(c.path("dp1")) == metrics(c.path("dps2")):
        fail("shards 2 gave the records of shards 4: the comparison cannot tell runs apart")
    print("ok: data-parallel over 1, 2, 3, 4 ranks: the same records bit for bit (shards: 4)")

    # stop and resume over 2 ranks; resume on 1 rank
    c.run(["run", dp, "--out", "dpr", "--set", "train.stop_at=6"], ranks=2)
    c.run(["run", dp, "--out", "dpr"], ranks=2)
    same_folder(c.path("dp1"), c.path("dpr"), "2 ranks stopped and resumed",
                drop=("resumed_from",))
    c.run(["run", dp, "--out", "dpr1", "--set", "train.stop_at=6"], ranks=2)
    c.run(["run", dp, "--out", "dpr1"])
    same_folder(c.path("dp1"), c.path("dpr1"), "2 ranks stopped, resumed on 1",
                drop=("resumed_from",))
    print("ok: data-parallel stop/resume (2 → 2 ranks, 2 → 1 rank) == uninterrupted")

    # kill -9 of rank 1 during data-parallel training, then rerun
    dpl = c.file("dpl.yaml", DATA.replace("steps: 16,", "steps: 400,")
                 .replace("checkpoint_every: 4", "checkpoint_every: 20"))
    c.run(["run", dpl, "--out", "dpl1"])
    p = c.run(["run", dpl, "--out", "dplk"], ranks=2, background=True)
    ck = c.path("dplk", "checkpoints", "point0", "ckpt-prev.safetensors")
    wait_for(lambda: os.path.exists(ck), p, "two checkpoints")
    kill_one_rank(p, 1)
    r = c.run(["run", dpl, "--out", "dplk"], ranks=2)
    with open(c.path("dplk", "metrics.jsonl")) as f:
        resumed = [json.loads(l).get("resumed_from") for l in f if '"summary"' in l][0]
    if not resumed or resumed <= 0:
        fail("the rerun after kill -9 did not resume from a checkpoint (resumed_from %s)" % resumed)
    same_folder(c.path("dpl1"), c.path("dplk"), "kill -9 of rank 1 then rerun",
                drop=("resumed_from",), killed=True)
    print("ok: kill -9 of a rank in data-parallel training; the rerun resumes from step %d and "
          "ends as the uninterrupted run" % resumed)


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    part, ttt = sys.argv[1], os.path.abspath(sys.argv[2])
    mpiexec = sys.argv[3] if len(sys.argv) > 3 else ""
    built = (sys.argv[4] if len(sys.argv) > 4 else "OFF").upper() in ("ON", "1", "TRUE")
    if part == "mpi" and not (built and mpiexec and shutil.which(mpiexec)):
        print("SKIPPED: the MPI tests need ttt built with MPI and mpirun (install openmpi-bin "
              "libopenmpi-dev, as .ci/deps does, and rebuild): built with MPI = %s, mpirun = "
              "'%s'" % ("yes" if built else "no", mpiexec))
        return SKIP
    c = Ctx(ttt, mpiexec)
    try:
        (test_shards if part == "shards" else test_mpi)(c)
    finally:
        shutil.rmtree(c.tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
