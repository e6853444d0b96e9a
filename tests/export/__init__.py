"""Writers and readers of traces: Chrome JSON, Perfetto, pstats, speedscope, the HTML report, .fstrace files."""
