"""Several processes: fork, followed children, ranks, launchers and merging."""
