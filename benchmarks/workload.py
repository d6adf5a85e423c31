"""The fixed benchmark workload and the per-stage clock used by `bench_engine.py`.

Workload (performance-facts.md §7 and §12, so numbers compare with upstream measured there): zero-shot,
text 40 + prompt text 20 ids, a 5 s prompt and exactly 5 s of output tokens (EOS ignored), so every run does
the same work whatever the weights: v1 250 prompt tokens, 430 mel frames, 250 output tokens; v2/v3 (25 Hz
tokens, 50 Hz mel) 125, 250 and 125.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch

from cosyvoice_ui.cosyvoice.frontend.prompt import PromptFeatures
from cosyvoice_ui.openmp import release_threads
from cosyvoice_ui.cosyvoice.recipes import ModelInput
from cosyvoice_ui.types import Mode

TEXT = ("The quick brown fox jumps over the lazy dog while the orchestra tunes up, and everyone in the hall "
        "waits quietly for the first note of the evening concert.")
PROMPT_TEXT = "Hope you can do even better than me in the future, my friend."


@dataclass(frozen=True)
class Workload:
    """Sizes of one benchmark request."""

    text_tokens: int = 40
    prompt_text_tokens: int = 20
    prompt_speech_tokens: int = 250
    prompt_mel_frames: int = 430
    prompt_seconds: float = 5.0
    output_tokens: int = 250

    @classmethod
    def for_family(cls, token_rate: int, mel_rate: float, output_tokens: int | None = None) -> Workload:
        """The same 5 s prompt and 5 s of output at a family's token and mel rates (v1: 250 tokens and 430
        frames; v2/v3: 125 tokens and 250 frames, as upstream was measured in performance-facts.md §7 and §12)."""
        seconds = cls.prompt_seconds
        return cls(prompt_speech_tokens=int(token_rate * seconds), prompt_mel_frames=int(mel_rate * seconds),
                   output_tokens=output_tokens if output_tokens is not None else int(token_rate * seconds))

    def describe(self) -> str:
        return (f"zero-shot, text {self.text_tokens} + prompt text {self.prompt_text_tokens} ids, "
                f"{self.prompt_seconds:g} s prompt ({self.prompt_speech_tokens} tokens, {self.prompt_mel_frames} mel "
                f"frames), {self.output_tokens} output tokens forced")


def _fit_ids(ids: list[int], n: int) -> list[int]:
    """Repeat and cut `ids` to exactly n ids."""
    assert ids, "the tokenizer returned no ids"
    return (ids * (n // len(ids) + 1))[:n]


def _fit_time(x: torch.Tensor, n: int) -> torch.Tensor:
    """Repeat and cut a [1, T, ...] tensor along T to exactly n steps."""
    reps = n // x.size(1) + 1
    return x.repeat(1, reps, *([1] * (x.dim() - 2)))[:, :n]


def build_input(engine, features: PromptFeatures, workload: Workload) -> ModelInput:
    """The workload's model input, from real prompt features cut or repeated to the exact sizes."""
    ids = _fit_ids(engine.tokenizer.encode(engine.recipe.spoken_text(Mode.ZERO_SHOT, TEXT)), workload.text_tokens)
    # The family's own prompt text (v3: the system prompt and <|endofprompt|> in front), cut at the end.
    prompt_text = engine.recipe.prompt_text(Mode.ZERO_SHOT, PROMPT_TEXT)
    prompt_ids = _fit_ids(engine.tokenizer.encode(prompt_text), workload.prompt_text_tokens)
    prompt = PromptFeatures(_fit_time(features.speech_tokens, workload.prompt_speech_tokens),
                            _fit_time(features.mel, workload.prompt_mel_frames), features.embedding)
    return engine.recipe.assemble(Mode.ZERO_SHOT, ids, prompt_text_ids=prompt_ids, prompt=prompt)


@dataclass
class StageTimes:
    """Seconds spent per stage in one render (sums over calls)."""

    llm_prefill_s: float = 0.0  # call → first token (text encoder, prefill, first sample)
    llm_decode_s: float = 0.0  # first → last token
    tokens: int = 0
    flow_s: float = 0.0
    hift_s: float = 0.0
    flow_calls: int = 0
    token_ids: list[int] = field(default_factory=list)


class StageClock:
    """Times an engine's LLM, flow and vocoder by wrapping their `inference` methods (instance
    attributes, removed on exit). Only meaningful for offline renders: when streaming, the flow runs
    between two tokens and would be counted as decode time."""

    def __init__(self, engine) -> None:
        self.engine = engine
        self.times = StageTimes()

    def __enter__(self) -> StageClock:
        llm, flow, hift = self.engine.llm, self.engine.flow, self.engine.hift
        times = self.times
        llm_inference, flow_inference, hift_inference = llm.inference, flow.inference, hift.inference

        def timed_tokens(*args, **kwargs) -> Iterator[int]:
            start = time.perf_counter()
            iterator = llm_inference(*args, **kwargs)

            def gen() -> Iterator[int]:
                last = start
                for token in iterator:
                    now = time.perf_counter()
                    if times.tokens == 0:
                        times.llm_prefill_s += now - start
                    else:
                        times.llm_decode_s += now - last
                    times.tokens += 1
                    times.token_ids.append(token)
                    yield token
                    last = time.perf_counter()  # the consumer's time between tokens is not the LLM's

            return gen()

        def timed(fn, attr: str):
            def call(*args, **kwargs):
                start = time.perf_counter()
                out = fn(*args, **kwargs)
                setattr(times, attr, getattr(times, attr) + time.perf_counter() - start)
                if attr == "flow_s":
                    times.flow_calls += 1
                return out
            return call

        llm.inference = timed_tokens
        flow.inference = timed(flow_inference, "flow_s")
        hift.inference = timed(hift_inference, "hift_s")
        return self

    def __exit__(self, *exc) -> None:
        for module in (self.engine.llm, self.engine.flow, self.engine.hift):
            module.__dict__.pop("inference", None)


def render_offline(engine, model_input: ModelInput, tokens: int, seed: int) -> tuple[float, StageTimes, torch.Tensor]:
    """One whole-utterance render with per-stage times: (wall seconds, stage times, wave [S])."""
    generator = torch.Generator().manual_seed(seed)
    with StageClock(engine) as clock:
        start = time.perf_counter()
        pieces = [wave for wave, _ in engine.render_input(model_input, generator, stream=False, forced_tokens=tokens)]
        wall = time.perf_counter() - start
    return wall, clock.times, torch.cat([p.reshape(-1) for p in pieces])


def render_streaming(engine, model_input: ModelInput, tokens: int, seed: int) -> tuple[float, float, int, torch.Tensor]:
    """One streamed render: (seconds to the first chunk, total seconds, chunk count, wave [S])."""
    generator = torch.Generator().manual_seed(seed)
    start = time.perf_counter()
    first = None
    pieces = []
    for wave, _ in engine.render_input(model_input, generator, stream=True, forced_tokens=tokens):
        if first is None and wave.numel():
            first = time.perf_counter() - start
        pieces.append(wave.reshape(-1))
    total = time.perf_counter() - start
    wave = torch.cat(pieces)
    release_threads()  # as a server's job slot does after its own torch work (cosyvoice_ui/openmp.py)
    return first if first is not None else total, total, len(pieces), wave


@contextlib.contextmanager
def kept_frames(on: bool) -> Iterator[None]:
    """v3 streams started inside keep (on) or recompute (off) what earlier flow passes computed
    (`COSYVOICE_FLOW_STREAM_CACHE_MB`, read when each stream starts)."""
    from cosyvoice_ui.cosyvoice.models.flow_dit import CACHE_ENV

    saved = os.environ.get(CACHE_ENV)
    if not on:
        os.environ[CACHE_ENV] = "0"
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(CACHE_ENV, None)
        else:
            os.environ[CACHE_ENV] = saved


def int8_estimator_copy(engine):
    """The engine's DiT estimator as fast mode builds it where the CPU has no bf16 matrix units (int8 linears,
    float32 attention, a stream's keys/values kept in bf16), for timing the two in one run on a CPU that has them;
    None when the engine already runs that one (or its estimator has no int8 form). Made from the loaded bf16
    weights: the same speed as the engine's own int8 estimator, not quite its numbers."""
    import copy

    estimator = engine.flow.decoder.estimator
    if not hasattr(estimator, "to_int8") or not engine.info.precision.bf16_flow:
        return None
    from cosyvoice_ui.cosyvoice.models.linears import unpack_linears

    converted = copy.deepcopy(estimator)
    unpack_linears(converted)  # fast's fused GELU layers (oneDNN's opaque packed weights) back to plain ones
    converted = converted.float()
    converted.compute_dtype = torch.float32
    converted.to_int8(kept_dtype=torch.bfloat16)
    return converted.eval()


@contextlib.contextmanager
def estimator_swapped(engine, estimator) -> Iterator[None]:
    """The engine's flow runs `estimator` inside (None: its own)."""
    decoder = engine.flow.decoder
    saved = decoder.estimator
    if estimator is not None:
        decoder.estimator = estimator
    try:
        yield
    finally:
        decoder.estimator = saved


@contextlib.contextmanager
def fbgemm_rows(engine, on: bool) -> Iterator[None]:
    """Inside (on): the int8 LLM's many-row calls go to fbgemm as before `Int8RowsOnOneDNN` (a no-op where the
    engine has none of those, or when off)."""
    from cosyvoice_ui.cosyvoice.models.linears import Int8RowsOnOneDNN

    wrapped = [m for m in engine.llm.modules() if isinstance(m, Int8RowsOnOneDNN)] if on else []
    saved = [m.min_rows for m in wrapped]
    for m in wrapped:
        m.min_rows = 1 << 30
    try:
        yield
    finally:
        for m, rows in zip(wrapped, saved):
            m.min_rows = rows


def has_onednn_rows(engine) -> bool:
    from cosyvoice_ui.cosyvoice.models.linears import Int8RowsOnOneDNN

    return any(isinstance(m, Int8RowsOnOneDNN) for m in engine.llm.modules())


def bench_folder(family: str, scratch, model_dir=None, tiny: bool = False, cache_dir=None):
    """`model_dir`, or a tiny random folder written to `scratch`, or the full-size random one (bench_engine's cache)."""
    from pathlib import Path

    from bench_engine import DEFAULT_CACHE, full_size_folder, tiny_folder

    return model_dir or (tiny_folder(Path(scratch), family) if tiny
                         else full_size_folder(cache_dir or DEFAULT_CACHE, family))


@dataclass
class StreamBench:
    """What the streaming benchmarks (first_chunk, stream_kept, concurrency, worker_thread) time: one family's
    folder loaded at a precision, and the workload's input for a voice encoded from a test clip."""

    folder: object  # Path
    engine: object  # CosyVoiceEngine
    family: object  # bench_engine.FAMILIES entry
    workload: Workload
    model_input: ModelInput

    @classmethod
    def open(cls, family: str, precision: str, scratch, model_dir=None, tiny: bool = False,
             cache_dir=None) -> StreamBench:
        """The engine on `bench_folder(...)`'s folder at `precision`, with the workload's input for a test voice."""
        from bench_engine import FAMILIES

        from cosyvoice_ui.cosyvoice.engine import load_engine
        from cosyvoice_ui.testing.signals import voice_clip

        folder = bench_folder(family, scratch, model_dir, tiny, cache_dir)
        engine = load_engine(folder, device="cpu", precision=precision)
        spec = FAMILIES[family]
        workload = Workload.for_family(spec.token_rate, spec.mel_rate)
        features = engine.encode_voice(voice_clip(workload.prompt_seconds, rate=16000))
        return cls(folder, engine, spec, workload, build_input(engine, features, workload))
