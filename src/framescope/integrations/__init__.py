"""framescope inside other tools: torch ops, Jupyter magics, the pytest plugin, asyncio tasks."""
