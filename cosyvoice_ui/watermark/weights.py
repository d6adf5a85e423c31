"""Where the PerTh weights are, whether they are the pinned ones, and their tensors.

The wheel of `resemble-perth==1.0.1` carries the pretrained implicit watermarker (a 37 MB checkpoint) and its
hyperparameters. We locate both through the installed distribution's file list (`importlib.metadata`: no code of
the package runs), check the checkpoint against the sha256 the wheel's RECORD gives for it, and check that the
hyperparameters are the ones `spectral.py` and `network.py` implement. Nothing here imports torch at import time.
"""

from __future__ import annotations

import base64
import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path

from ..errors import CheckpointError

log = logging.getLogger(__name__)

DISTRIBUTION = "resemble-perth"
VERSION = "1.0.1"
FOLDER = "perth/perth_net/pretrained/implicit"
CHECKPOINT = f"{FOLDER}/perth_net_250000.pth.tar"
HPARAMS = f"{FOLDER}/hparams.yaml"
INSTALL_HINT = "pip install --require-hashes --no-deps -r requirements-offline.txt"

# The hyperparameters this package's code implements (hparams.yaml of the pinned wheel must say the same).
EXPECTED = {"sample_rate": 32000, "n_fft": 2048, "window_size": 2048, "hop_size": 320, "window_fn": "hann",
            "max_wmark_freq": 2000, "hidden_size": 256, "stft_magnitude_min": 1.0e-9}


@dataclass(frozen=True)
class Located:
    """The checkpoint's path and the sha256 (hex) the wheel's RECORD lists for it."""

    checkpoint: Path
    hparams: Path
    sha256: str


def locate() -> tuple[Located | None, str]:
    """(the weights, "") when the pinned distribution is installed, else (None, why not)."""
    from importlib import metadata

    try:
        dist = metadata.distribution(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return None, f"the watermark's weights are not installed ({DISTRIBUTION}=={VERSION}; {INSTALL_HINT})"
    if dist.version != VERSION:
        return None, (f"{DISTRIBUTION} {dist.version} is installed, but the watermark is built for {VERSION} "
                      f"({INSTALL_HINT})")
    listed = {str(f): f for f in (dist.files or ())}
    record = listed.get(CHECKPOINT)
    if record is None or record.hash is None or record.hash.mode != "sha256" or HPARAMS not in listed:
        return None, f"the installed {DISTRIBUTION} does not list its watermark weights ({INSTALL_HINT})"
    checkpoint = Path(dist.locate_file(CHECKPOINT))
    hparams = Path(dist.locate_file(HPARAMS))
    if not checkpoint.is_file() or not hparams.is_file():
        return None, f"the watermark's weight files are missing from the installed {DISTRIBUTION} ({INSTALL_HINT})"
    digest = base64.urlsafe_b64decode(record.hash.value + "=" * (-len(record.hash.value) % 4)).hex()
    return Located(checkpoint, hparams, digest), ""


def check_hparams(path: Path) -> None:
    """Refuse a hyperparameter file that describes another network or front end than ours."""
    import yaml

    try:
        values = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise CheckpointError(f"the watermark's hyperparameters could not be read ({type(exc).__name__})") from None
    wrong = sorted(k for k, v in EXPECTED.items() if values.get(k) != v)
    if wrong:
        raise CheckpointError(f"the watermark's hyperparameters differ from the ones implemented here: "
                              f"{', '.join(wrong)}")


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def load_tensors(located: Located) -> dict:
    """The checkpoint's state dict (tensors only: `weights_only`), after the hash and hyperparameter checks."""
    import torch

    check_hparams(located.hparams)
    if sha256_of(located.checkpoint) != located.sha256:
        raise CheckpointError(f"the watermark's weight file differs from the one {DISTRIBUTION}=={VERSION} "
                              f"installed (sha256 mismatch); reinstall it: {INSTALL_HINT}")
    try:
        checkpoint = torch.load(located.checkpoint, map_location="cpu", weights_only=True)
    except Exception as exc:  # a damaged file: pickle, zip or torch errors
        raise CheckpointError(f"the watermark's weight file could not be read ({type(exc).__name__})") from None
    state = checkpoint.get("model") if isinstance(checkpoint, dict) else None
    if not isinstance(state, dict):
        raise CheckpointError("the watermark's weight file holds no model state")
    return state
