"""`python -m cosyvoice_ui ...`: the command line (synth, voices, download, list-models, parity, serve)."""

from .main import main

__all__ = ["main"]
