"""Reading a recorded trace: events, the summary table, key_averages and its table, name
fitting and host-code classification."""
