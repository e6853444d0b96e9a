"""framescope attach: recording a running process through gdb."""
