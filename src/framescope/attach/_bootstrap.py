"""framescope attach's first code in the target: checks that this framescope can run there and
hands the control connection over to the agent (framescope.attach._agent).

Runs in the thread libframescope_inject.so starts in the target (it holds the GIL, taken the
ordinary way), in globals of its own: the program's modules and sys.path are not touched. Uses
the standard library only: the target has no framescope of its own. Its file lies inside the
framescope package, so none of its frames are recorded.
"""

from __future__ import annotations

import _thread
import atexit
import importlib
import importlib.machinery
import importlib.util
import json
import os
import socket
import sys
import time
from typing import Any, Callable

#: The longest the program's exit waits for framescope's thread to end (it takes milliseconds).
EXIT_WAIT = 5.0


def describe() -> dict[str, Any]:
    """This interpreter, as framescope attach compares it with its own."""
    return {
        "pid": os.getpid(),
        "version": "%d.%d.%d" % sys.version_info[:3],
        "cache_tag": sys.implementation.cache_tag,
        "extension_suffixes": list(importlib.machinery.EXTENSION_SUFFIXES),
        "executable": sys.executable,
    }


def send(sock: socket.socket, message: dict[str, Any]) -> None:
    sock.sendall(json.dumps(message).encode() + b"\n")


def receive(sock: socket.socket, buffered: bytearray) -> dict[str, Any] | None:
    """The next message (one JSON line), or None at the end of the connection."""
    while b"\n" not in buffered:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        buffered += chunk
    line, _, rest = bytes(buffered).partition(b"\n")
    buffered[:] = rest
    message = json.loads(line)
    return message if isinstance(message, dict) else None


def import_framescope(package_dir: str) -> Any:
    """framescope from ``package_dir`` (the attach command's own installation), imported by
    its location: no sys.path entry is added (its site-packages would otherwise shadow the
    program's own modules for every later import). A framescope the program imported already
    is used as it is."""
    module = sys.modules.get("framescope")
    if module is None:
        spec = importlib.util.spec_from_file_location(
            "framescope", os.path.join(package_dir, "__init__.py"),
            submodule_search_locations=[package_dir])
        if spec is None or spec.loader is None:
            raise ImportError(f"no framescope package in {package_dir}")
        module = importlib.util.module_from_spec(spec)
        sys.modules["framescope"] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            for name in [n for n in sys.modules if n == "framescope" or
                         n.startswith("framescope.")]:
                del sys.modules[name]
            raise
    # By name, at run time: this file runs outside the package (exec'd in the target, before
    # any framescope is importable there), so the agent is what the package it just loaded
    # provides, not an import of this module (the agent imports send/receive from here).
    return importlib.import_module("framescope.attach._agent")


class SwitchInterval:
    """Puts back the program's sys.setswitchinterval, which the injected bootstrap lowered
    from its first line until the window has started (or failed to): a CPU-bound main thread
    holds the GIL until asked to drop it, and asks come after one interval of waiting (5 ms by
    default); importing framescope gives up the GIL at each file access, hundreds of times, and
    on a loaded machine each such wait stretched to tens of milliseconds (an injected thread
    once did not connect in 15 s)."""

    def __init__(self, program_value: float | None) -> None:
        self.program_value = program_value
        self.ours = sys.getswitchinterval()

    def restore(self) -> None:
        if self.program_value is not None and sys.getswitchinterval() == self.ours:
            sys.setswitchinterval(self.program_value)  # (unless the program set its own since)
        self.program_value = None


class ExitGuard:
    """Registered with atexit while framescope's thread serves a connection: when the program
    exits meanwhile, it wakes the thread (shuts the connection down) and waits until the thread
    has ended, before the interpreter finalizes. (A window still recording is ended first, by
    the agent's own exit function: registered later, it runs earlier.)

    Why: CPython frees the thread states of the threads still alive when it finalizes
    (daemon threads), and a thread that wakes from a blocking call then asks for the GIL with a
    freed thread state, in code that reads it (drop_gil, the GIL drop request): the process can
    crash at its exit. framescope's thread waits in select() for the command, which closes the
    connection as soon as it has the exit's trace, so it did wake exactly then. With this guard,
    no thread of framescope's is left by the time atexit's functions have run."""

    def __init__(self, sock: socket.socket, interval: SwitchInterval | None = None) -> None:
        self.sock = sock
        #: the program's switch interval, to put back once the window has started
        self.interval = interval if interval is not None else SwitchInterval(None)
        self.tid = _thread.get_native_id()  # the serving thread's
        self.exiting = False
        self.ended = False  # the serving thread's Python code is done (where /proc is missing)

    def __call__(self) -> None:
        self.exiting = True
        self.interval.restore()
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # its recv/select returns at once
        except OSError:
            pass
        task = f"/proc/self/task/{self.tid}"
        have_proc = os.path.isdir("/proc/self/task")
        deadline = time.monotonic() + EXIT_WAIT
        # The thread is gone from /proc when it has really ended: after its thread state was
        # deleted and its thread-local destructors ran (framescope._core's among them).
        while time.monotonic() < deadline and (os.path.exists(task) if have_proc
                                               else not self.ended):
            time.sleep(0.002)


def main(args: dict[str, Any], program_interval: float | None = None,
         ) -> tuple[Callable[[Any], Any], ExitGuard] | None:
    """Connects to the attach command's socket, says what this interpreter is, and runs the
    agent if the command says go. Every error goes to the command, none to the program.

    Returns what the injected C code calls last, after this Python code (atexit.unregister
    and the exit guard): called from C, no bytecode runs between it and the thread giving up
    its thread state, so the interpreter cannot switch to a main thread that starts exiting in
    between (the guard would not be there to wait for this thread)."""
    interval = SwitchInterval(program_interval)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    guard = ExitGuard(sock, interval)
    atexit.register(guard)
    try:
        sock.settimeout(10.0)
        try:
            sock.connect(args["socket"])
        except OSError:
            return (atexit.unregister, guard)  # the command gave up before this thread ran
        run_agent(sock, bytearray(), args["package"], guard)
    except BaseException:  # noqa: BLE001, S110 - reported to the command, never to the program
        pass
    finally:
        interval.restore()
        guard.ended = True
        sock.close()
    return (atexit.unregister, guard)


def run_agent(sock: socket.socket, buffered: bytearray, package_dir: str,
              guard: ExitGuard) -> None:
    """The target's side of a control connection, from the hello on (also the listener's, in
    a process started with framescope run --listen)."""
    send(sock, {"hello": describe()})
    answer = receive(sock, buffered)
    if answer is None or "go" not in answer:
        return
    try:
        agent = import_framescope(package_dir)
    except BaseException as exc:  # noqa: BLE001 - reported to the command, not the program
        send(sock, {"error": f"cannot import framescope from {package_dir} in the target: "
                             f"{type(exc).__name__}: {exc}"})
        return
    agent.serve(sock, buffered, answer["go"], guard)
