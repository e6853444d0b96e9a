"""framescope.eval_frame: the PEP 523 frame-evaluation API, against torch's where installed."""
