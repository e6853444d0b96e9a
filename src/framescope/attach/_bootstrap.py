"""framescope attach's first code in the target: checks that this framescope can run there and
hands the control connection over to the agent (framescope.attach._agent).

Runs in the thread libframescope_inject.so starts in the target (it holds the GIL, taken the
ordinary way), in globals of its own: the program's modules and sys.path are not touched. Uses
the standard library only: the target has no framescope of its own. Its file lies inside the
framescope package, so none of its frames are recorded.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import json
import os
import socket
import sys
from typing import Any


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


def main(args: dict[str, Any]) -> None:
    """Connects to the attach command's socket, says what this interpreter is, and runs the
    agent if the command says go. Every error goes to the command, none to the program."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(10.0)
        try:
            sock.connect(args["socket"])
        except OSError:
            return  # the command gave up (timed out) before this thread got the GIL
        run_agent(sock, bytearray(), args["package"])
    finally:
        sock.close()


def run_agent(sock: socket.socket, buffered: bytearray, package_dir: str) -> None:
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
    agent.serve(sock, buffered, answer["go"])
