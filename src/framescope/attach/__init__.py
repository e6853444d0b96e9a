"""``framescope attach PID``: the command side, gdb injection, the bootstrap and agent that run
in the target, and the listening socket."""
