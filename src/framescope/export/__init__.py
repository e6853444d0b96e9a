"""Writing traces: the export-format registry, the HTML report (with its assets), Chrome JSON
input, and torch.profiler-compatible JSON and exports."""
