"""The CosyVoice backend: official CosyVoice model folders (v1 300M / -SFT / -Instruct) behind the `Engine`
interface, with our own PyTorch models, frontend, loader, streaming and parity check.

A peer of `offline/`: it imports the root modules (types, errors, engine, audio, validation, settings) and
nothing of `serving/`, `api/`, `ui/`, `cli/` or `web/`.
"""
