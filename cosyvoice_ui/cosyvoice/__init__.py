"""The CosyVoice backend: official CosyVoice model folders (v1 300M / -SFT / -Instruct) behind the `Engine`
interface, with our own PyTorch models, frontend, loader, streaming and parity check. What differs between
the generations is data in `families.py` and a class map in `registry.py`; nothing else branches on them.

A peer of `offline/`: it imports the root modules (types, errors, engine, audio, validation, settings) and
nothing of `serving/`, `api/`, `ui/`, `cli/` or `web/`.
"""
