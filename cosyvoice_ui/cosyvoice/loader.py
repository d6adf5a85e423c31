"""Load an official model folder into a `ModelParts` record, reporting progress per component.

Which classes a folder's family uses comes from `registry.py`; which inference transforms run, from
`precision.py`. The engine (`engine.load_engine`) is built on the parts; this module does not know it.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from torch import nn

from ..engine import report
from ..errors import CheckpointError, ConfigError
from ..heap import trim_heap
from ..types import EngineInfo, Precision, ProgressCallback
from . import kernels
from .checkpoint import mapped_pages_dropped, read_state_dict
from .config import ModelConfig, read_yaml
from .device import resolve_device
from .families import ModelFolder, detect, folder_info
from .frontend.onnx_models import SpeakerEncoder, SpeechTokenizer
from .frontend.prompt import PromptEncoder
from .models.sampling import RasSampler
from .models.linears import int4_kernels_available
from .precision import (PRECISIONS, FastSettings, bf16_is_native, bf16_matrix_units, flow_precision,
                        flow_run_time, llm_attention_precision, llm_precision, llm_rows_precision, llm_step_precision,
                        precision_record, resolve_precision, settings_for, vocoder_precision, vocoder_run_time)
from .prepared import PreparedModels
from .prepared import enabled as prepared_enabled
from .recipes import InputRecipe
from .registry import TextTokenizer, backend_for
from .streaming import Chunker

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ModelParts:
    """Everything loaded from one folder, on `device`, with `precision` applied: what the engine runs.

    The modules are the family's classes (`registry.py`); `recipe` builds each segment's inputs and
    `chunker` turns speech tokens into wave chunks, both the family's too.
    """

    folder: ModelFolder
    config: ModelConfig
    llm: nn.Module  # `TransformerLM` (v1), `Qwen2LM` / `CosyVoice3LM`
    flow: nn.Module  # `MaskedDiffWithXvec` (v1), the causal / DiT flows
    hift: nn.Module  # `HiFTGenerator` or `CausalHiFTGenerator`
    tokenizer: TextTokenizer
    prompt_encoder: PromptEncoder
    spk2info: dict[str, dict]  # preset speakers: name → {"embedding": [1, 192] tensor, ...}
    sampler: RasSampler
    recipe: InputRecipe
    chunker: Chunker
    device: str
    precision: Precision


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


def _prepared_models(model_dir: Path, precision: str, device: str, fast: FastSettings | None,
                     wanted: bool) -> PreparedModels | None:
    """The folder's prepared copies for a CPU load at a precision that changes weights; None for stock (its
    transforms keep the float file's bytes) and GPUs (fast does not apply there)."""
    if not wanted or not prepared_enabled() or precision == "stock" or device != "cpu":
        return None
    settings = fast or settings_for(precision)
    return PreparedModels.for_folder(model_dir, precision, settings, {
        "bf16_native": bf16_is_native(), "bf16_matrix_units": bf16_matrix_units(),
        "int4_kernels": int4_kernels_available()})


def _load_model(path: Path, prepared: PreparedModels | None, converting: bool, build: Callable[[], nn.Module],
                load: Callable[[bool], nn.Module], transform: Callable[[nn.Module], dict]) -> tuple[nn.Module, dict, str]:
    """(model, its precision record fields, "read" | "written" | "float"): from the prepared copy when there is
    one, else the float file, transformed (and then stored as the copy for next time). converting: the
    transform replaces the float weights, so the file is read mapped and its pages let go as they are used."""
    if prepared is not None:
        try:
            found = prepared.load(path.name, build, transform)
        except OSError as exc:  # an unreadable cache place: load as if there were none
            log.warning("cannot read the prepared copy of %s (%s)", path.name, exc)
            found = None
        if found is not None:
            return (*found, "read")
    with mapped_pages_dropped(path) if converting else contextlib.nullcontext():
        model = load(converting)
        done = transform(model)
        gc.collect()  # the replaced float layers sit in reference cycles (torch.ao's swap): free them now
        trim_heap()  # and their heap pages go back before the copy is written and the next file arrives
        if prepared is not None:  # writing reads every kept float tensor once: its pages go too
            prepared.save(path.name, model)
            trim_heap()  # the int8 layers' unpacked copies, one per layer, that writing made
    return model, done, "float" if prepared is None else "written"


def describe_cosyvoice(model_dir: Path) -> EngineInfo:
    """EngineInfo of a folder without loading its weights (only the small spk2info.pt is read)."""
    folder = detect(model_dir)
    return folder_info(folder, tuple(read_spk2info(folder.path / "spk2info.pt")))


def load_parts(model_dir: Path, device: str = "auto", progress: ProgressCallback | None = None,
               precision: str = "stock", threads: int | None = None, n_timesteps: int | None = None,
               fast: FastSettings | None = None, prepared_cache: bool = True) -> ModelParts:
    """Load every component of a folder (strict state dicts, ONNX sessions) onto `device`.

    precision: "stock" computes what upstream computes (float32; only memory layouts differ);
    "fast" trades accuracy for speed as `fast` (default `FastSettings()`) says: int8 LLM linears,
    bf16 flow estimator where the CPU supports it, fewer flow steps, a shorter flow prompt; "auto" is fast on a
    CPU and stock on a GPU (`resolve_precision`). An explicit `n_timesteps` overrides either mode's flow steps.
    threads: caps the ONNX sessions' threads.
    prepared_cache: read and write prepared copies of a fast load (prepared.py; also off when the environment
    sets COSYVOICE_PREPARED_MODELS=0).
    """
    started = time.perf_counter()
    folder = detect(model_dir)
    family = folder.family
    backend = backend_for(family)
    device = resolve_device(device)
    precision = resolve_precision(precision, device)
    if precision not in PRECISIONS:
        raise ConfigError(f"unknown precision {precision!r}; choose one of {', '.join(PRECISIONS)}")
    report(progress, "load", 0.02, f"reading {family.yaml_name}")
    config = backend.parse_config(read_yaml(folder.path / family.yaml_name), family.yaml_name)
    backend.check_classes(config, family.yaml_name)

    # Each model gets its precision transform before the next file is read: fast mode's float weights
    # are released before the next model arrives (a lower peak of memory). A prepared copy (prepared.py)
    # skips the float file altogether.
    prepared = _prepared_models(folder.path, precision, device, fast, prepared_cache)
    # On a CPU every precision re-lays the weights (stock packs them for oneDNN, fast quantises them), so the
    # float file is read through a memory map whose pages are let go as they are used (`mapped_pages_dropped`):
    # it never sits in memory whole beside its new layout.
    converting = device == "cpu"
    # The vocoder comes first: folding its weight norms makes a whole float copy (~80 MB for every family) before
    # its bf16 layout replaces it, and that passing copy adds least to the peak while nothing else is loaded yet.
    report(progress, "load", 0.05, "loading hift.pt")
    hift, done, source = _load_model(
        folder.path / "hift.pt", prepared, converting, lambda: backend.build_vocoder(config.hift, config),
        lambda mapped: backend.load_vocoder(config.hift, read_state_dict(folder.path / "hift.pt", mapped),
                                            config).to(device),
        lambda model: vocoder_precision(model, precision, device, fast))
    done = {"mode": precision, **done}
    done.update(vocoder_run_time(hift, precision, device, done, fast))
    sources = [source]
    report(progress, "load", 0.10, "loading llm.pt")
    llm, llm_done, source = _load_model(
        folder.path / "llm.pt", prepared, converting, lambda: backend.build_llm(config.llm, folder.path),
        lambda mapped: backend.load_llm(config.llm, read_state_dict(folder.path / "llm.pt", mapped),
                                        folder.path).to(device),
        lambda model: llm_precision(model, precision, device, fast))
    done.update(llm_done)
    if precision != "stock" and converting and kernels.builds_now():
        report(progress, "load", 0.45, "building the decoding kernels for this CPU (once per machine, ~30 s)")
    done.update(llm_rows_precision(llm, precision, device, fast))
    done.update(llm_attention_precision(llm, precision, device, fast))
    done.update(llm_step_precision(llm, device))  # after every re-layout of the LLM's weights
    trim_heap()  # the oneDNN copies were made from unpacked int8 weights, one layer at a time
    sources.append(source)
    report(progress, "load", 0.55, "loading flow.pt")
    flow, flow_done, source = _load_model(
        folder.path / "flow.pt", prepared, converting, lambda: backend.build_flow(config.flow),
        lambda mapped: backend.load_flow(config.flow, read_state_dict(folder.path / "flow.pt", mapped)).to(device),
        lambda model: flow_precision(model, precision, device, fast))
    done.update(flow_done)
    done.update(flow_run_time(flow, precision, device, done))
    sources.append(source)
    if prepared is not None:
        done["prepared"] = "read" if set(sources) == {"read"} else "written" if "written" in sources else "partly read"
    applied = precision_record(done)
    if n_timesteps is not None:  # an explicit step count wins over either mode's
        applied = replace(applied, flow_steps=n_timesteps)
    report(progress, "load", 0.80, "loading speaker encoder and speech tokenizer (ONNX)")
    onnx_threads = max(1, min(2, threads or torch.get_num_threads()))
    use_cuda = device.startswith("cuda")
    prompt_encoder = PromptEncoder(
        SpeakerEncoder(folder.path / "campplus.onnx", onnx_threads, use_cuda),
        SpeechTokenizer(folder.path / family.speech_tokenizer_file, onnx_threads, use_cuda),
        config.mel,
    )
    report(progress, "load", 0.92, "loading text tokenizer and preset speakers")
    parts = ModelParts(
        folder=folder, config=config, llm=llm, flow=flow, hift=hift,
        tokenizer=backend.text_tokenizer(folder.path, config),
        prompt_encoder=prompt_encoder, spk2info=read_spk2info(folder.path / "spk2info.pt"),
        sampler=RasSampler.from_config(config.llm.sampling), recipe=backend.input_recipe(config),
        chunker=backend.chunker, device=device, precision=applied,
    )
    elapsed = time.perf_counter() - started
    report(progress, "load", 1.0, f"{folder.name} loaded in {elapsed:.1f} s")
    log.info("loaded %s (%s) on %s in %.1f s", folder.name, family.title, device, elapsed)
    return parts
