"""framescope attach's injector: has gdb load libframescope_inject.so into the target, which
starts the bootstrap thread there (cpp/attach/inject.c, _gdb_script.gdbpy).

ptrace subtleties handled here, in the command:
- gdb stops every thread of the target while it is attached (a few hundred milliseconds), which
  interrupts their blocking system calls: each is restarted, or returns EINTR, which Python
  retries (PEP 475), exactly as when any signal arrives. The program sees no other difference.
- Everything is bounded. gdb runs in batch mode. If it has not finished in ``timeout`` seconds
  the command sends the target SIGCONT, a no-op for a running process that the gdb session
  intercepts (``handle SIGCONT stop nopass``) as "give up": it removes its breakpoints, unwinds a
  call in progress (unwindonsignal) and detaches. Only if gdb still does not exit is it killed;
  killing gdb makes the kernel detach it, and the target runs on.
- A target that is stopped (SIGSTOP, Ctrl-Z) or already traced by a debugger is refused
  before gdb is started (gdb would wait for it, or fail): see _target.check_target.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess

_HERE = os.path.dirname(os.path.abspath(__file__))
GDB_SCRIPT = os.path.join(_HERE, "_gdb_script.gdbpy")
INJECT_LIB = os.path.join(os.path.dirname(_HERE), "libframescope_inject.so")


class InjectError(Exception):
    """Why the bootstrap could not be started in the target (one line)."""


def gdb_path() -> str:
    path = shutil.which("gdb")
    if path is None:
        raise InjectError("gdb is not installed (it is needed to attach to a process started "
                          "without --listen: apt-get install gdb, dnf install gdb...)")
    return path


def _explain(pid: int, output: str) -> str:
    statuses = [line.split(":", 1)[1].strip() for line in output.splitlines()
                if line.startswith("FRAMESCOPE:")]
    errors = [s[len("error "):] for s in statuses if s.startswith("error")]
    if "attached" not in statuses:
        if "Operation not permitted" in output or "ptrace:" in output:
            return (f"not permitted to trace process {pid} (ptrace): see "
                    "/proc/sys/kernel/yama/ptrace_scope, or CAP_SYS_PTRACE in a container; a "
                    "process started with framescope run --listen needs no ptrace")
        if "No such process" in output:
            return f"no process {pid}"
        last = [line for line in output.splitlines() if line.strip()][-1:] or ["no output"]
        return f"gdb could not attach to process {pid}: {last[0]}"
    if not errors:
        return f"gdb gave no result for process {pid}"
    kind = errors[0].split(" ", 1)
    detail = kind[1] if len(kind) > 1 else ""
    if kind[0] == "not-python":
        return f"process {pid} is not a Python process (no CPython C API in it)"
    if kind[0] == "no-safe-point":
        return (f"process {pid} reached no point where code can be loaded safely in time (no "
                "thread waiting in a system call, none allocating); nothing was changed in it")
    if kind[0] == "dlopen":
        return f"the target could not load {INJECT_LIB}: {detail}"
    return f"injection into process {pid} failed: {errors[0]}"


def inject(pid: int, source: str, filename: str, timeout: float = 10.0) -> str:
    """Runs ``source`` (compiled as ``filename``) in a new thread of process ``pid`` that holds
    the GIL. Returns where gdb stopped the target to load it. Raises InjectError (one line)."""
    if not os.path.exists(INJECT_LIB):
        raise InjectError(f"{INJECT_LIB} is missing: reinstall framescope")
    env = dict(os.environ, FRAMESCOPE_INJECT_LIB=INJECT_LIB, FRAMESCOPE_INJECT_SOURCE=source,
               FRAMESCOPE_INJECT_FILENAME=filename)
    env.pop("PYTHONPATH", None)  # gdb's own Python
    env.pop("PYTHONHOME", None)
    # --readnever: no DWARF (libpython often has it: seconds to read); the ELF symbols suffice.
    cmd = [gdb_path(), "-batch", "-nx", "-nw", "--readnever", "-p", str(pid),
           "-iex", "set auto-solib-add off", "-iex", "set auto-load off",
           "-iex", "set debuginfod enabled off", "-iex", "set startup-with-shell off",
           "-ex", f"python exec(compile(open({GDB_SCRIPT!r}).read(), {GDB_SCRIPT!r}, 'exec'))"]
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, env=env, text=True,
                            start_new_session=True)  # the user's Ctrl-C is the command's alone
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        output = _give_up(proc, pid)
    except KeyboardInterrupt:
        _give_up(proc, pid)  # the target is left as it was before gdb is left behind
        raise
    statuses = [line for line in output.splitlines() if line.startswith("FRAMESCOPE: injected")]
    if statuses:
        return statuses[0].split("injected", 1)[1].strip()
    if proc.returncode is not None and proc.returncode < 0 and "attached" not in output:
        raise InjectError(f"gdb did not attach to process {pid} in {timeout:g} s")
    raise InjectError(_explain(pid, output))


def _give_up(proc: subprocess.Popen[str], pid: int) -> str:
    """gdb ran out of time: has its session give up (SIGCONT to the target, see above; sent
    again every second, as one sent before gdb attached, or before it set up its handling, is
    only the no-op it is for a running process), then kills gdb if it still does not exit."""
    for _ in range(15):
        try:
            os.kill(pid, signal.SIGCONT)
        except OSError:
            pass
        try:
            output, _ = proc.communicate(timeout=1.0)
            return output + "\nFRAMESCOPE: error no-safe-point"
        except subprocess.TimeoutExpired:
            continue
    proc.kill()
    output, _ = proc.communicate()
    return output + "\nFRAMESCOPE: error timeout"
