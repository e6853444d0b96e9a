"""`framescope run` follows child processes: multiprocessing (spawn, forkserver, fork) and
subprocesses of sys.executable record with the parent's options and are merged into one trace,
a process per pid, on one clock. Read back with the official Perfetto classes and as JSON."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from tests.support import perfetto_reader
from tests.support.programs import FORK_OUTLIVES_PARENT, write

def framescope_run(tmp_path: Path, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("FRAMESCOPE_FOLLOW", None)
    return subprocess.run([sys.executable, "-m", "framescope", "run", "--limit", "0", *args],
                          capture_output=True, text=True, cwd=tmp_path, timeout=timeout, env=env)


def process_names(path: Path) -> dict[int, str]:
    """pid -> process name, from the ProcessDescriptors of a .pftrace."""
    trace = pb.Trace()
    trace.ParseFromString(path.read_bytes())
    return {p.track_descriptor.process.pid: p.track_descriptor.process.process_name
            for p in trace.packet
            if p.HasField("track_descriptor") and p.track_descriptor.HasField("process")}


def slices_by_pid(path: Path) -> dict[int, list[perfetto_reader.PSlice]]:
    t = perfetto_reader.read(str(path))
    out: dict[int, list[perfetto_reader.PSlice]] = defaultdict(list)
    for s in t.slices:
        pid = t.tracks[s.track].pid
        assert pid is not None
        out[pid].append(s)
    return out


POOL = """
    import multiprocessing as mp
    import sys

    _barrier = None

    def init(barrier):
        global _barrier
        _barrier = barrier

    def pool_task(n):
        _barrier.wait(timeout=60)  # so that each of the 4 workers runs one task
        return sum(i * i for i in range(n))

    if __name__ == "__main__":
        ctx = mp.get_context(sys.argv[1])
        barrier = ctx.Barrier(4)
        with ctx.Pool(4, initializer=init, initargs=(barrier,)) as pool:
            print(pool.map(pool_task, [1000] * 4, chunksize=1))
"""

_WORKER_NAMES = {"spawn": "SpawnPoolWorker", "forkserver": "ForkServerPoolWorker",
                 "fork": "ForkPoolWorker"}


@pytest.mark.parametrize("method", ["spawn", "forkserver", "fork"])
def test_pool_workers_on_their_own_process_tracks(tmp_path: Path, method: str) -> None:
    # GIVEN a Pool(4) program whose four workers each run one task
    write(tmp_path / "pool.py", POOL)
    # WHEN it runs under framescope run
    r = framescope_run(tmp_path, "-o", "t.pftrace", "pool.py", method)
    # THEN it runs as without framescope, and nothing is missing
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str([sum(i * i for i in range(1000))] * 4)
    assert "missing" not in r.stderr, r.stderr
    names = process_names(tmp_path / "t.pftrace")
    by_pid = slices_by_pid(tmp_path / "t.pftrace")
    workers = {pid for pid, name in names.items()
               if re.fullmatch(_WORKER_NAMES[method] + r"-\d+", name)}
    # AND each worker is a process of its own, whose track holds its task
    assert len(workers) == 4, names
    for pid in workers:
        tasks = [s for s in by_pid[pid] if s.name.endswith(": pool_task")]
        assert len(tasks) == 1, (names[pid], sorted({s.name for s in by_pid[pid]})[:20])
    # AND the parent is there too, named by its command, and runs no task
    parent = [pid for pid, name in names.items() if name.startswith("python") and "pool.py" in name]
    assert len(parent) == 1, names
    assert not [s for s in by_pid[parent[0]] if s.name.endswith(": pool_task")]


def test_subprocess_child_on_one_clock(tmp_path: Path) -> None:
    # GIVEN a script that runs another Python script as a subprocess and waits for it
    write(tmp_path / "child.py", """
        import sys
        def child_work():
            return sum(range(10000))
        child_work()
        print("child", sys.argv[1:])
    """)
    write(tmp_path / "parent.py", """
        import subprocess, sys
        def launch():
            subprocess.run([sys.executable, "child.py", "a1"], check=True)
        launch()
    """)
    r = framescope_run(tmp_path, "-o", "t.json", "parent.py")
    assert r.returncode == 0, r.stderr
    assert "child ['a1']" in r.stdout
    data = json.loads((tmp_path / "t.json").read_text())
    names = {e["pid"]: e["args"]["name"] for e in data["traceEvents"]
             if e["ph"] == "M" and e["name"] == "process_name"}
    assert len(names) == 2, names
    child_pid = next(pid for pid, n in names.items() if "child.py" in n)
    parent_pid = next(pid for pid in names if pid != child_pid)
    xs = [e for e in data["traceEvents"] if e["ph"] == "X"]
    work = [e for e in xs if e["name"].endswith(": child_work")]
    launch = [e for e in xs if e["name"].endswith(": launch")]
    assert [e["pid"] for e in work] == [child_pid]
    assert [e["pid"] for e in launch] == [parent_pid]
    # THEN the child's call lies inside the parent's call that waited for it: one clock
    assert launch[0]["ts"] <= work[0]["ts"]
    assert work[0]["ts"] + work[0]["dur"] <= launch[0]["ts"] + launch[0]["dur"]


def test_no_follow_records_the_parent_only(tmp_path: Path) -> None:
    write(tmp_path / "pool.py", POOL)
    r = framescope_run(tmp_path, "--no-follow", "-o", "t.pftrace", "pool.py", "spawn")
    assert r.returncode == 0, r.stderr
    assert len(process_names(tmp_path / "t.pftrace")) == 1


def test_killed_child_loses_only_its_part(tmp_path: Path) -> None:
    # GIVEN one child that is killed (SIGKILL) and one that ends normally
    write(tmp_path / "kill.py", """
        import multiprocessing as mp, os, signal

        def victim():
            os.kill(os.getpid(), signal.SIGKILL)

        def survivor_task():
            return sum(range(1000))

        if __name__ == "__main__":
            ctx = mp.get_context("spawn")
            a = ctx.Process(target=victim, name="Victim"); a.start(); a.join()
            b = ctx.Process(target=survivor_task, name="Survivor"); b.start(); b.join()
            print(a.exitcode, b.exitcode)
            raise SystemExit(3)
    """)
    r = framescope_run(tmp_path, "-o", "t.pftrace", "kill.py")
    # THEN the program's exit code and output are kept, the killed child gets a warning
    assert r.returncode == 3, r.stderr
    assert r.stdout.split() == ["-9", "0"]
    assert re.search(r"child process \d+ .* ended without saving its trace", r.stderr), r.stderr
    # AND the other processes are complete
    names = process_names(tmp_path / "t.pftrace")
    assert "Survivor" in names.values() and "Victim" not in names.values()
    by_pid = slices_by_pid(tmp_path / "t.pftrace")
    survivor = next(pid for pid, n in names.items() if n == "Survivor")
    assert any(s.name.endswith(": survivor_task") for s in by_pid[survivor])


def test_terminated_child_saves_and_keeps_its_exit_status(tmp_path: Path) -> None:
    # GIVEN a child blocked in a lock that the parent ends with terminate() (SIGTERM)
    write(tmp_path / "term.py", """
        import multiprocessing as mp, time

        def blocked(lock, ready):
            ready.set()
            lock.acquire()

        if __name__ == "__main__":
            ctx = mp.get_context("spawn")
            lock, ready = ctx.Lock(), ctx.Event()
            lock.acquire()
            p = ctx.Process(target=blocked, args=(lock, ready), name="Blocked")
            p.start(); ready.wait(60); time.sleep(0.2)
            p.terminate(); p.join(60)
            print(p.exitcode)
    """)
    r = framescope_run(tmp_path, "-o", "t.pftrace", "term.py")
    assert r.returncode == 0, r.stderr
    # THEN it ends by SIGTERM as without framescope, and its part is in the trace
    assert r.stdout.strip() == str(-signal.SIGTERM)
    assert "missing" not in r.stderr, r.stderr
    names = process_names(tmp_path / "t.pftrace")
    blocked = [pid for pid, n in names.items() if n == "Blocked"]
    assert len(blocked) == 1, names
    by_pid = slices_by_pid(tmp_path / "t.pftrace")
    assert any(s.name.endswith(": blocked") for s in by_pid[blocked[0]])
    # AND framescope's own SIGTERM work is not in it: the child has its main thread only
    t = perfetto_reader.read(str(tmp_path / "t.pftrace"))
    child_threads = {tr.tid for tr in t.tracks.values() if tr.pid == blocked[0] and tr.tid}
    assert len(child_threads) == 1, child_threads


def test_other_sitecustomize_still_runs_in_children(tmp_path: Path) -> None:
    # GIVEN a sitecustomize of the user's on PYTHONPATH
    site_dir = tmp_path / "site"
    site_dir.mkdir()
    write(site_dir / "sitecustomize.py", "import os\nos.environ['USER_SITECUSTOMIZE'] = 'ran'\n")
    write(tmp_path / "parent.py", """
        import subprocess, sys
        out = subprocess.run([sys.executable, "-c",
                              "import os, sys; print(os.environ.get('USER_SITECUSTOMIZE'), "
                              "[p for p in sys.path if 'framescope' in p and '_bootstrap' in p])"],
                             capture_output=True, text=True, check=True).stdout
        print(out.strip())
    """)
    env = dict(os.environ, PYTHONPATH=str(site_dir))
    env.pop("FRAMESCOPE_FOLLOW", None)
    r = subprocess.run([sys.executable, "-m", "framescope", "run", "--limit", "0", "-o", "t.json",
                        "parent.py"], capture_output=True, text=True, cwd=tmp_path, env=env,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    # THEN the child ran it, and sees no trace of framescope's bootstrap on its sys.path
    assert r.stdout.strip() == "ran []"
    names = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    assert len({e["pid"] for e in names if e["ph"] == "M" and e["name"] == "process_name"}) == 2


def test_children_get_the_parents_options(tmp_path: Path) -> None:
    # GIVEN --c-calls: builtins are recorded in the child too
    write(tmp_path / "parent.py", """
        import subprocess, sys
        subprocess.run([sys.executable, "-c", "sorted([3, 1, 2])"], check=True)
    """)
    r = framescope_run(tmp_path, "--c-calls", "-o", "t.json", "parent.py")
    assert r.returncode == 0, r.stderr
    data = json.loads((tmp_path / "t.json").read_text())
    names = {e["pid"]: e["args"]["name"] for e in data["traceEvents"]
             if e["ph"] == "M" and e["name"] == "process_name"}
    child = next(pid for pid, n in names.items() if "sorted" in n)
    assert any(e["ph"] == "X" and e["pid"] == child and "sorted" in e["name"]
               for e in data["traceEvents"])


OS_FORK = """
    import os, sys

    def before_fork():
        return 1

    def in_child():
        return sum(range(1000))

    def in_parent():
        return 2

    before_fork()
    pid = os.fork()
    if pid == 0:
        in_child()
        if sys.argv[1] == "_exit":
            os._exit(0)
        sys.exit(0)  # atexit runs in the child too
    in_parent()
    _, status = os.waitpid(pid, 0)
    print(os.waitstatus_to_exitcode(status))
"""


@pytest.mark.parametrize("how", ["_exit", "exit"])
def test_os_fork_child_records_from_the_fork(tmp_path: Path, how: str) -> None:
    # GIVEN a program that forks with os.fork(); the child ends with os._exit or sys.exit
    write(tmp_path / "forks.py", OS_FORK)
    r = framescope_run(tmp_path, "-o", "t.json", "forks.py", how)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "0"
    assert "missing" not in r.stderr, r.stderr
    data = json.loads((tmp_path / "t.json").read_text())
    xs = [e for e in data["traceEvents"] if e["ph"] == "X"]
    names = {e["pid"]: e["args"]["name"] for e in data["traceEvents"]
             if e["ph"] == "M" and e["name"] == "process_name"}
    assert len(names) == 2, names
    by_name: dict[str, set[int]] = defaultdict(set)
    for e in xs:
        by_name[e["name"].split(": ")[-1]].add(e["pid"])
    parent, child = by_name["in_parent"], by_name["in_child"]
    assert len(parent) == len(child) == 1 and parent != child
    # THEN the child's trace starts at the fork: what ran before it is the parent's only
    assert by_name["before_fork"] == parent
    child_pid = next(iter(child))
    child_start = min(e["ts"] for e in xs if e["pid"] == child_pid)
    before = next(e for e in xs if e["name"].endswith(": before_fork"))
    assert child_start >= before["ts"] + before["dur"]


def test_no_follow_fork_child_leaves_the_parents_trace_alone(tmp_path: Path) -> None:
    # GIVEN --no-follow and a forked child that exits through sys.exit (running atexit)
    write(tmp_path / "forks.py", OS_FORK)
    r = framescope_run(tmp_path, "--no-follow", "-o", "t.json", "forks.py", "exit")
    assert r.returncode == 0, r.stderr
    # THEN the trace is the parent's, not overwritten by the child's
    data = json.loads((tmp_path / "t.json").read_text())
    pids = {e["pid"] for e in data["traceEvents"] if e["ph"] == "X"}
    names = {e["name"].split(": ")[-1] for e in data["traceEvents"] if e["ph"] == "X"}
    assert len(pids) == 1 and "in_parent" in names and "in_child" not in names


def test_grandchildren_are_followed(tmp_path: Path) -> None:
    # GIVEN a spawned child that forks a worker of its own
    write(tmp_path / "nested.py", """
        import multiprocessing as mp

        def grandchild_task():
            return 3

        def child_task():
            p = mp.get_context("fork").Process(target=grandchild_task, name="Grandchild")
            p.start(); p.join()

        if __name__ == "__main__":
            p = mp.get_context("spawn").Process(target=child_task, name="Child")
            p.start(); p.join()
    """)
    r = framescope_run(tmp_path, "-o", "t.pftrace", "nested.py")
    assert r.returncode == 0, r.stderr
    names = process_names(tmp_path / "t.pftrace")
    by_pid = slices_by_pid(tmp_path / "t.pftrace")
    assert sorted(n for n in names.values() if not n.startswith("python")) == ["Child", "Grandchild"]
    grandchild = next(pid for pid, n in names.items() if n == "Grandchild")
    assert any(s.name.endswith(": grandchild_task") for s in by_pid[grandchild])


def test_torch_ops_in_a_child_once_it_imports_torch(tmp_path: Path) -> None:
    if not os.environ.get("CI"):
        pytest.importorskip("torch")
    elif sys.version_info[:2] == (3, 11):
        import torch  # noqa: F401  (CI installs torch on 3.11: there it must be present)
    else:
        pytest.skip("torch is installed on Python 3.11 only")
    # GIVEN --torch-ops and a spawned child that imports torch only inside its task
    write(tmp_path / "tchild.py", """
        import multiprocessing as mp

        def work():
            import torch
            x = torch.ones(4, 4)
            return float((x @ x).sum())

        if __name__ == "__main__":
            p = mp.get_context("spawn").Process(target=work, name="TorchChild")
            p.start(); p.join()
    """)
    r = framescope_run(tmp_path, "--torch-ops", "-o", "t.json", "tchild.py")
    assert r.returncode == 0, r.stderr
    data = json.loads((tmp_path / "t.json").read_text())
    names = {e["pid"]: e["args"]["name"] for e in data["traceEvents"]
             if e["ph"] == "M" and e["name"] == "process_name"}
    child = next(pid for pid, n in names.items() if n == "TorchChild")
    ops = {e["name"] for e in data["traceEvents"] if e.get("ph") == "X" and e["pid"] == child}
    # THEN the child's torch operators are recorded, in its process
    assert {"aten::ones", "aten::matmul"} <= ops, sorted(ops)[:30]


def test_report_names_the_processes_of_a_followed_run(tmp_path: Path) -> None:
    import framescope
    from framescope.export import _report as report

    write(tmp_path / "pool.py", POOL)
    r = framescope_run(tmp_path, "-o", "t.fstrace", "pool.py", "spawn")
    assert r.returncode == 0, r.stderr
    prof = framescope.load(tmp_path / "t.fstrace")
    prof.export(tmp_path / "t.json")
    # The flame graph of each thread says which process it belongs to, from the trace and
    # from its Chrome JSON alike.
    for data in (report.from_trace(prof.trace), report.load(str(tmp_path / "t.json"))):
        labels = [t.label for t in data.threads]
        assert sum(bool(re.search(r"SpawnPoolWorker-\d, pid \d+\)$", lb)) for lb in labels) >= 4, labels


def test_child_still_running_at_the_end_gets_a_warning(tmp_path: Path) -> None:
    # GIVEN a child the program does not wait for, which outlives it
    write(tmp_path / "leave.py", """
        import subprocess, sys
        child = subprocess.Popen([sys.executable, "-c", "print('up', flush=True); "
                                  "import time; time.sleep(8)"], stdout=subprocess.PIPE)
        child.stdout.readline()  # it runs (and records) now; the program ends without it
    """)
    r = framescope_run(tmp_path, "-o", "t.json", "leave.py")
    # THEN the run ends (after a short wait) with the parent's trace and a warning for it
    assert r.returncode == 0, r.stderr
    assert re.search(r"child process \d+ \(python\S* -c .*time\.sleep\(8\).*\) ended without "
                     r"saving its trace \(it crashed, was killed, or still runs\)", r.stderr), r.stderr
    data = json.loads((tmp_path / "t.json").read_text())
    assert len({e["pid"] for e in data["traceEvents"] if e["ph"] == "X"}) == 1


def test_forked_child_that_outlives_the_parent_is_merged_as_its_own_process(tmp_path: Path) -> None:
    # GIVEN a forked child that ends half a second after the parent (within the parent's wait)
    write(tmp_path / "forks.py", FORK_OUTLIVES_PARENT)

    r = framescope_run(tmp_path, "-o", "t.json", "forks.py")
    assert r.returncode == 0, r.stderr
    assert "missing" not in r.stderr, r.stderr
    # THEN the trace is the parent's, with the child's part beside it: not replaced by it
    xs = [e for e in json.loads((tmp_path / "t.json").read_text())["traceEvents"] if e["ph"] == "X"]
    parent = {e["pid"] for e in xs if e["name"].endswith(": parent_work")}
    child = {e["pid"] for e in xs if e["name"].endswith(": child_work")}
    assert len(parent) == len(child) == 1 and parent != child


def test_subprocess_with_preexec_fn_is_not_a_lost_fork(tmp_path: Path) -> None:
    # GIVEN subprocesses started with a preexec_fn (their fork runs the fork hooks, then execs)
    write(tmp_path / "pre.py", """
        import os, subprocess, sys
        subprocess.run(["true"], preexec_fn=os.setpgrp, check=True)
        subprocess.run([sys.executable, "-c", "def exec_child(): pass\\nexec_child()"],
                       preexec_fn=os.setpgrp, check=True)
    """)
    r = framescope_run(tmp_path, "-o", "t.json", "pre.py")
    assert r.returncode == 0, r.stderr
    # THEN no part is reported missing, and the Python program it ran is followed
    assert "missing" not in r.stderr and "not following" not in r.stderr, r.stderr
    xs = [e for e in json.loads((tmp_path / "t.json").read_text())["traceEvents"] if e["ph"] == "X"]
    assert len({e["pid"] for e in xs}) == 2
    assert any(e["name"].endswith(": exec_child") for e in xs)


STREAMED = """
    import concurrent.futures, multiprocessing as mp, os, subprocess, sys

    def executor_task(n):
        return sum(range(n))

    if __name__ == "__main__":
        ctx = mp.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(2, mp_context=ctx) as ex:
            print(sum(ex.map(executor_task, [100] * 4)))
        subprocess.run([sys.executable, "-c", "def dash_c_task():\\n    return 1\\ndash_c_task()"],
                       check=True)
        pid = os.fork()
        if pid == 0:
            executor_task(10)
            os._exit(0)
        os.waitpid(pid, 0)
"""


@pytest.mark.parametrize("output", ["t.fstrace", "t.pftrace"])
def test_streamed_run_keeps_its_children(tmp_path: Path, output: str) -> None:
    # GIVEN a program with executor workers (spawn), a `python -c` child and an os.fork child
    write(tmp_path / "streamed.py", STREAMED)
    # WHEN it runs with --stream (to the output itself, or to a temporary .fstrace)
    r = framescope_run(tmp_path, "--stream", "-o", output, "streamed.py")
    assert r.returncode == 0, r.stderr
    assert "missing" not in r.stderr, r.stderr
    if output.endswith(".fstrace"):
        c = subprocess.run([sys.executable, "-m", "framescope", "convert", output, "t.pftrace"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert c.returncode == 0, c.stderr
    # THEN every process is in the trace, named, with its own functions on its own track
    names = process_names(tmp_path / "t.pftrace")
    assert len(names) == 5, names
    by_pid = slices_by_pid(tmp_path / "t.pftrace")
    def pids_running(fn: str) -> set[int]:
        return {pid for pid, ss in by_pid.items() if any(s.name.endswith(": " + fn) for s in ss)}
    workers = {pid for pid, n in names.items() if n.startswith("SpawnProcess-")}
    dash_c = pids_running("dash_c_task")
    assert len(workers) == 2 and len(dash_c) == 1
    assert names[next(iter(dash_c))].startswith("python") and "-c 'def dash_c_task():" in \
        names[next(iter(dash_c))]
    parent = next(pid for pid, n in names.items() if "streamed.py" in n and pid not in dash_c
                  and not pids_running("executor_task") & {pid})
    forked = pids_running("executor_task") - workers
    assert len(forked) == 1 and parent not in forked and parent not in workers
    assert pids_running("executor_task") & workers  # the workers ran the tasks


def test_children_are_named_by_their_command(tmp_path: Path) -> None:
    # GIVEN a child run with -m, and one (with multi-line -c code) that is killed
    write(tmp_path / "helper_mod.py", """
        def module_task():
            return 2
        module_task()
    """)
    write(tmp_path / "named.py", """
        import subprocess, sys, signal
        subprocess.run([sys.executable, "-m", "helper_mod"], check=True)
        p = subprocess.Popen([sys.executable, "-c",
                              "import os, signal\\ndef doomed():\\n    os.kill(os.getpid(), signal.SIGKILL)\\ndoomed()"])
        p.wait()
    """)
    r = framescope_run(tmp_path, "-o", "t.pftrace", "named.py")
    assert r.returncode == 0, r.stderr
    # THEN the -m child is named as it was started, not by its file
    names = process_names(tmp_path / "t.pftrace")
    assert sorted(n.split(" ", 1)[1] for n in names.values()) == ["-m helper_mod", "named.py"]
    # AND the warning for the killed child names its command on one line
    (line,) = [ln for ln in r.stderr.splitlines() if "ended without saving" in ln]
    assert "(python -c 'import os, signal def doomed(): os.kill(os.getpid(), signal…')" in line, line
