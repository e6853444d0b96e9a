"""Integrations: torch (drop-in, ops, traces it wrote), Jupyter, the pytest plugin."""
