"""Helpers shared by the tests: independent checkers and readers of traces, the ground-truth recorder, builders of small C extensions, target programs."""
