"""A plain Python program for the attach tests (run by an interpreter without framescope).

Starts a worker thread and a waiting one (not with --single) and enters a long-running function
before anything attaches, prints "ready PID", then loops until a line "stop" arrives on stdin
(or the --stop-file FILE exists; then no thread reads stdin) or "exit": then it exits at once,
with status 5 (during a capture), and its exit handler says how many threads of framescope's
are still alive then. With --main-waits the loop runs in a thread of its own and the
main thread waits for it in join(). At the end it prints what it computed and
whether its state is as before the attach (threads, sys.path, open files, profile/trace
functions, sys.monitoring tools, the frame evaluation function, signal handlers, the
superinstructions of its running functions), and exits with status 7.
"""

import atexit
import ctypes
import os
import signal
import sys
import threading
import time

stop = threading.Event()
exit_now = threading.Event()
OWN = ("spin-worker", "sleepy-waiter", "commands", "looper")
counts = {"main": 0, "worker": 0}


def spin_step(n):
    total = 0
    for i in range(n):
        total += i * i
    return total


def spin_worker():
    while True:  # one step at least: "worked" says the thread ran, however early "stop" came
        spin_step(200)
        counts["worker"] += 1
        if stop.is_set():
            return


def sleepy_waiter():
    stop.wait()


def eval_frame_function():
    api = ctypes.pythonapi
    get = getattr(api, "_PyInterpreterState_GetEvalFrameFunc", None)
    if get is None:
        return None
    api.PyInterpreterState_Get.restype = ctypes.c_void_p
    get.restype = ctypes.c_void_p
    get.argtypes = [ctypes.c_void_p]
    return get(api.PyInterpreterState_Get())


def state():
    tools = []
    if hasattr(sys, "monitoring"):
        tools = [sys.monitoring.get_tool(i) for i in range(6)]
    return {
        # Other threads than the program's own, and the OS's count of them.
        "threads": sorted(t.name for t in threading.enumerate() if t.name not in OWN),
        "os_threads": len(os.listdir("/proc/self/task")) - sum(
            t.is_alive() for t in threading.enumerate() if t.name in OWN),
        "path": list(sys.path),
        "switch_interval": sys.getswitchinterval(),
        "fds": sorted(os.listdir("/proc/self/fd")),
        "profile": repr(sys.getprofile()),
        "trace": repr(sys.gettrace()),
        "tools": tools,
        "eval_frame": eval_frame_function(),
        "signals": {int(s): repr(signal.getsignal(s)) for s in signal.valid_signals()
                    if s not in (signal.SIGKILL, signal.SIGSTOP)},
        "main_names": sorted(k for k in vars(sys.modules["__main__"])),
        # The superinstructions of the functions running at attach (3.12 names them A__B): they
        # must still be there after the window, or those loops run slower for good.
        "superinstructions": {f.__name__: superinstructions(f) for f in (
            main, long_running_frame, spin_worker, spin_step, sleepy_waiter)},
    }


def superinstructions(function):
    # 3.12 forms them when a code is made (3.11 when it warms up: the running functions get
    # theirs during the window, attach or not; 3.13's are the compiler's).
    if sys.version_info[:2] != (3, 12):
        return []
    import dis
    return [i.opname for i in dis.get_instructions(function, adaptive=True) if "__" in i.opname]


def long_running_frame(stop_file):
    while True:  # one step at least, as spin_worker
        spin_step(300)
        counts["main"] += 1
        if exit_now.is_set():
            print("exiting by itself", flush=True)
            stop.set()
            sys.exit(5)
        if stop_file is not None and counts["main"] % 64 == 0 and os.path.exists(stop_file):
            stop.set()
        if stop.is_set():
            return


def read_commands():
    for line in sys.stdin:
        if line.strip() == "stop":
            stop.set()
            return
        if line.strip() == "exit":
            exit_now.set()
            return


def framescope_threads_at_exit():
    """On "exit": the threads of framescope's still alive when the program's own exit handlers
    run (registered before any attach, so they run after framescope's): there must be none, as
    a thread left to wake during the interpreter's finalization can crash the process."""
    if not exit_now.is_set():
        return
    names = []
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/comm") as f:
                names.append(f.read().strip())
        except OSError:
            pass
    print("framescope threads at exit:", sum(n.startswith("framescope") for n in names),
          flush=True)


def main():
    atexit.register(framescope_threads_at_exit)
    args = sys.argv[1:]
    stop_file = args[args.index("--stop-file") + 1] if "--stop-file" in args else None
    threads = []
    if "--single" not in args:  # else only the main thread runs (and the commands reader)
        threads = [threading.Thread(target=spin_worker, name="spin-worker"),
                   threading.Thread(target=sleepy_waiter, name="sleepy-waiter")]
    for t in threads:
        t.start()
    before = state()
    commands = threading.Thread(target=read_commands, name="commands", daemon=True)
    if stop_file is None:  # else no thread waits anywhere: only the main thread, busy
        commands.start()
    print("ready", os.getpid(), flush=True)
    if "--main-waits" in args:  # the loop runs in a thread; the main thread waits in join()
        looper = threading.Thread(target=long_running_frame, args=(stop_file,), name="looper")
        looper.start()
        looper.join()
    else:
        long_running_frame(stop_file)
    for t in threads:
        t.join()
    if stop_file is None:
        commands.join()
    if "--single" in args:
        counts["worker"] = 1
    after = state()
    for _ in range(40):  # the attach thread may be a few ms from its exit
        if after == before:
            break
        time.sleep(0.05)
        after = state()
    print("state unchanged" if after == before else f"state changed: {before} -> {after}")
    print("worked", counts["main"] > 0 and counts["worker"] > 0, flush=True)
    return 7


if __name__ == "__main__":
    sys.exit(main())
