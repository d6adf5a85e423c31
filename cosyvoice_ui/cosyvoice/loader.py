"""Build a `CosyVoiceEngine` from an official model folder, reporting progress per component."""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from pathlib import Path

import torch

from ..engine import report
from .checkpoint import read_state_dict
from .config import parse_v1, read_yaml
from ..errors import CheckpointError, ConfigError
from .families import detect
from .frontend.onnx_models import SpeakerEncoder, SpeechTokenizer
from .frontend.prompt import PromptEncoder
from .frontend.tokenizer import WhisperTokenizer
from .models.flow import load_flow
from .models.hift import load_hift
from .models.llm import load_llm
from .models.sampling import RasSampler
from .models.speed import PRECISIONS, FastSettings, apply_precision
from ..settings import resolve_device
from ..types import ProgressCallback

log = logging.getLogger(__name__)


def read_spk2info(path: Path) -> dict[str, dict]:
    """Preset speakers: `{speaker: {"embedding": [1, 192] tensor, ...}}`; a missing file means none."""
    if not path.is_file():
        return {}
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise CheckpointError(f"spk2info.pt cannot be read ({type(exc).__name__}: {exc}); delete or re-download "
                              "it") from exc
    if not isinstance(data, dict):
        raise CheckpointError("spk2info.pt should map speaker names to records with an 'embedding'")
    speakers = {}
    for name, record in data.items():
        if isinstance(record, dict) and isinstance(record.get("embedding"), torch.Tensor):
            speakers[str(name)] = record
        else:
            log.warning("spk2info.pt: speaker %r has no embedding tensor; skipped", name)
    return speakers


def describe_cosyvoice(model_dir: Path):
    """EngineInfo of a folder without loading its weights (only the small spk2info.pt is read)."""
    from .engine import folder_info

    folder = detect(model_dir)
    return folder_info(folder, tuple(read_spk2info(folder.path / "spk2info.pt")))


def load_cosyvoice(model_dir: Path, device: str = "auto", progress: ProgressCallback | None = None,
                   max_text_chars: int = 5000, precision: str = "stock", threads: int | None = None,
                   n_timesteps: int | None = None, fast: FastSettings | None = None):
    """Load every component of a v1 folder (strict state dicts, ONNX sessions) onto `device`.

    precision: "stock" computes what upstream computes (float32; only memory layouts differ);
    "fast" trades accuracy for speed as `fast` (default `FastSettings()`) says: int8 LLM linears,
    bf16 flow estimator where the CPU supports it, fewer flow steps, a shorter flow prompt. An explicit
    `n_timesteps` overrides either mode's flow steps.
    """
    from .engine import CosyVoiceEngine

    started = time.perf_counter()
    folder = detect(model_dir)
    device = resolve_device(device)
    if precision not in PRECISIONS:
        raise ConfigError(f"unknown precision {precision!r}; choose one of {', '.join(PRECISIONS)}")
    report(progress, "load", 0.02, f"reading {folder.family.yaml_name}")
    config = parse_v1(read_yaml(folder.path / folder.family.yaml_name), folder.family.yaml_name)
    if config.llm_class != folder.family.llm_class:
        raise ConfigError(f"{folder.family.yaml_name} declares llm {config.llm_class}, expected "
                          f"{folder.family.llm_class}; the yaml does not belong to a {folder.family.title} folder")

    report(progress, "load", 0.05, "loading llm.pt")
    llm = load_llm(config.llm, read_state_dict(folder.path / "llm.pt")).to(device)
    report(progress, "load", 0.50, "loading flow.pt")
    flow = load_flow(config.flow, read_state_dict(folder.path / "flow.pt")).to(device)
    report(progress, "load", 0.70, "loading hift.pt")
    hift = load_hift(config.hift, read_state_dict(folder.path / "hift.pt")).to(device)
    fast = fast or FastSettings()
    applied = apply_precision(llm, flow, precision, device, fast, hift=hift)
    if n_timesteps is not None:  # an explicit step count wins over either mode's
        applied = replace(applied, flow_steps=n_timesteps)
    report(progress, "load", 0.80, "loading speaker encoder and speech tokenizer (ONNX)")
    onnx_threads = max(1, min(2, threads or torch.get_num_threads()))
    use_cuda = device.startswith("cuda")
    prompt_encoder = PromptEncoder(
        SpeakerEncoder(folder.path / "campplus.onnx", onnx_threads, use_cuda),
        SpeechTokenizer(folder.path / folder.family.speech_tokenizer_file, onnx_threads, use_cuda),
        config.mel,
    )
    report(progress, "load", 0.92, "loading text tokenizer and preset speakers")
    tokenizer = WhisperTokenizer()
    spk2info = read_spk2info(folder.path / "spk2info.pt")
    parts = {
        "llm": llm, "flow": flow, "hift": hift, "tokenizer": tokenizer, "prompt_encoder": prompt_encoder,
        "spk2info": spk2info, "config": config, "sampler": RasSampler.from_config(config.llm.sampling),
    }
    engine = CosyVoiceEngine(folder, parts, device, max_text_chars=max_text_chars, precision=applied)
    elapsed = time.perf_counter() - started
    report(progress, "load", 1.0, f"{folder.name} loaded in {elapsed:.1f} s")
    log.info("loaded %s (%s) on %s in %.1f s", folder.name, folder.family.title, device, elapsed)
    return engine
