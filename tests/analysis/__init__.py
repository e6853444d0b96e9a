"""Analysis over stored traces: key_averages and its table."""
