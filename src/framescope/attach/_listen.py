"""framescope attach without ptrace: a process started with ``framescope run --listen`` (or with
FRAMESCOPE_LISTEN=1 when framescope is imported) accepts the attach command on a Unix socket.

The socket is ``$XDG_RUNTIME_DIR/framescope/<pid>.sock`` when that directory is the user's,
else ``/tmp/framescope-<uid>/<pid>.sock``; the directory is the user's, mode 0700, and the
socket 0600, so only the same user (or root) can connect, as only they could ptrace the
process. A daemon thread, ``framescope-listen``, waits in accept() (the GIL released) and runs
each connection's window itself (framescope.attach._agent), one at a time.
"""

from __future__ import annotations

import atexit
import os
import socket
import stat
import threading

_listener: _Listener | None = None
_lock = threading.Lock()


def socket_dir(uid: int | None = None) -> str:
    """The directory of the listening sockets of ``uid``'s processes (default: this user's)."""
    uid = os.getuid() if uid is None else uid
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and uid == os.getuid():
        try:
            st = os.stat(runtime)
            if st.st_uid == uid and stat.S_ISDIR(st.st_mode):
                return os.path.join(runtime, "framescope")
        except OSError:
            pass
    return f"/tmp/framescope-{uid}"


def socket_paths(pid: int, uid: int) -> list[str]:
    """Where a process ``pid`` of user ``uid`` may listen, in the order the command tries."""
    candidates = [os.path.join(socket_dir(uid), f"{pid}.sock"),
                  # the target's XDG_RUNTIME_DIR may be set where this command's is not
                  f"/run/user/{uid}/framescope/{pid}.sock",
                  f"/tmp/framescope-{uid}/{pid}.sock"]
    return list(dict.fromkeys(candidates))


def _private_dir(path: str) -> None:
    """Creates ``path`` (0700) or checks that the existing one is this user's and private."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise PermissionError(f"{path} is not a private directory of this user")


class _Listener:
    def __init__(self) -> None:
        self.pid = os.getpid()
        folder = socket_dir()
        _private_dir(folder)
        self.path = os.path.join(folder, f"{self.pid}.sock")
        try:
            os.unlink(self.path)  # a dead process's with the same pid
        except FileNotFoundError:
            pass
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            self.sock.bind(self.path)
        finally:
            os.umask(old)
        self.sock.listen(4)
        self.thread = threading.Thread(target=self._serve, name="framescope-listen", daemon=True)
        self.thread.start()
        atexit.register(self.close)

    def _serve(self) -> None:
        from framescope.attach._bootstrap import ExitGuard, run_agent

        package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return  # closed
            # If the program exits during the connection, the guard ends the window and waits
            # for this thread to end (it does not go back to accept()): see ExitGuard.
            guard = ExitGuard(conn)
            atexit.register(guard)
            try:
                run_agent(conn, bytearray(), package, guard)
            except (OSError, ValueError):
                pass
            finally:
                guard.ended = True
                conn.close()
            if guard.exiting:
                return
            atexit.unregister(guard)

    def close(self) -> None:
        if os.getpid() != self.pid:
            return
        try:
            os.unlink(self.path)
        except OSError:
            pass
        try:
            self.sock.close()
        except OSError:
            pass


def listen() -> str:
    """Starts accepting ``framescope attach`` in this process (once); returns the socket path.

    Raises:
        OSError: the socket cannot be created (e.g. its directory is another user's).
    """
    global _listener
    with _lock:
        if _listener is None or _listener.pid != os.getpid():
            _listener = _Listener()
        return _listener.path


def _after_fork_in_child() -> None:
    """A forked child does not inherit the listener's thread: it listens on its own socket."""
    global _listener
    if _listener is None:
        return
    try:
        _listener.sock.close()  # the parent's (the file stays: it is the parent's)
    except OSError:
        pass
    _listener = None
    try:
        listen()
    except OSError:
        pass


os.register_at_fork(after_in_child=_after_fork_in_child)


def exec_listening(module: str | None, argv: list[str]) -> int:
    """``framescope run --listen``: becomes ``python [-m module] args`` (same process id) with
    FRAMESCOPE_LISTEN=1 and framescope's bootstrap on PYTHONPATH (framescope.processes._follow), so the
    program runs exactly as under python, unrecorded, and listens from its start-up on (its
    Python children too). Returns 1 only if the exec fails."""
    import sys

    from framescope.processes._follow import BOOTSTRAP_DIR

    old = os.environ.get("PYTHONPATH")
    env = dict(os.environ, FRAMESCOPE_LISTEN="1",
               PYTHONPATH=BOOTSTRAP_DIR + (os.pathsep + old if old else ""))
    args = [sys.executable, *(["-m", module] if module is not None else []), *argv]
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    try:
        os.execve(sys.executable, args, env)
    except OSError as exc:
        print(f"framescope run: cannot start {sys.executable}: {exc.strerror}", file=sys.stderr)
    return 1


def listen_from_environment() -> None:
    """``FRAMESCOPE_LISTEN=1``: listens, once, when framescope is imported; quietly does
    nothing when the socket cannot be made (the program must run the same)."""
    if os.environ.get("FRAMESCOPE_LISTEN", "") not in ("", "0"):
        try:
            listen()
        except OSError:
            pass
