"""Many processes, one timeline: ranks, clock synchronisation, following child processes, the
process table and merging traces."""
