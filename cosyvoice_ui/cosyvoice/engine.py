"""The CosyVoice engine: `load_engine(model_dir)` and `CosyVoiceEngine`, for any family the registry has.

One request: validate → prompt features (cached) → normalise + split text → per segment: the family's
input recipe → LLM speech tokens → flow + vocoder (whole, or streamed by the family's chunker) →
`AudioChunk`s. Nothing here depends on the family: what differs comes in the `ModelParts`.
"""

from __future__ import annotations

import gc
import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from .. import audio as audio_utils
from ..engine import Engine, raise_if_cancelled, report
from ..errors import InvalidRequest
from ..types import (Audio, AudioChunk, CheckedRequest, EngineInfo, Mode, ProgressCallback, SpeakerEmbedder,
                     SynthesisRequest)
from ..validation import DEFAULT_MAX_TEXT_CHARS
from .families import StreamingSpec, folder_info
from .frontend import text as text_frontend
from .frontend.prompt import PromptEncoder, PromptFeatures
from .loader import ModelParts, load_parts
from .models.decode_batcher import DecodeBatcher, batches
from . import thread_fit
from ..heap import trim_heap
from ..openmp import release_threads
from .render_turns import RenderTurns
from .precision import FastSettings, llm_step_precision, stock_llm_for_rows, trim_flow_prompt
from .recipes import ModelInput, check_transcript_length
from .streaming import FlowPrompt

log = logging.getLogger(__name__)

# Two recordings whose CAM++ vectors are closer than this (cosine distance) are one voice: 3D-Speaker's own
# average-linkage clustering of CAM++ vectors stops at a cosine similarity of 0.4 (speakerlab's AHCluster
# default). Not measured here: no released campplus.onnx was at hand, only the tests' stand-ins.
CAMPPLUS_SAME_VOICE = 0.6


class CosyVoiceEngine(Engine):
    """A loaded CosyVoice model (v1 300M / -SFT / -Instruct, CosyVoice2-0.5B, Fun-CosyVoice3-0.5B) behind the
    `Engine` interface.

    Not responsible for: loading (see `loader.load_parts`), knowing its family (the parts carry the
    family's recipe and chunker), queueing or idle unload (`manager`), loudness and file formats (`audio`).
    """

    def __init__(self, parts: ModelParts, max_text_chars: int = DEFAULT_MAX_TEXT_CHARS, batch_width: int = 1) -> None:
        """batch_width: how many requests' LLM steps may run together (continuous batching, where the LLM
        can: `models/decode_batcher.py`); 1 decodes each request alone."""
        self.folder = parts.folder
        self.device = torch.device(parts.device)
        self.llm = parts.llm
        self.flow = parts.flow
        self.hift = parts.hift
        self.tokenizer = parts.tokenizer
        self.prompts: PromptEncoder = parts.prompt_encoder
        self.spk2info: dict[str, dict] = parts.spk2info
        self.sampler = parts.sampler
        self.config = parts.config
        self.recipe = parts.recipe
        self.chunker = parts.chunker
        self.max_text_chars = max_text_chars
        self.precision = parts.precision
        self.n_timesteps = self.precision.flow_steps  # None: the yaml's
        self.flow_prompt_seconds = self.precision.flow_prompt_seconds  # fast mode: the prompt's last seconds only
        self.streaming_spec = self.folder.family.streaming  # ours; parity streams with `upstream_streaming`
        self.saved_voices: dict[str, tuple[PromptFeatures, str]] = {}
        self._info = folder_info(self.folder, tuple(self.spk2info), str(self.device), self.precision)
        # What decodes speech tokens: the LLM itself, or the loop that batches concurrent requests' steps.
        # On a CPU the threads that decode and render follow the cores other processes leave free (thread_fit.py).
        self.thread_fit = thread_fit.shared() if self.device.type == "cpu" else None
        self.token_decoder = self.llm
        self.render_turns: RenderTurns | None = None
        self._recording: threading.Thread | None = None
        self.set_batch_width(batch_width)

    def set_batch_width(self, width: int) -> None:
        """How many requests' LLM steps run as one batch (`DecodeBatcher`, where the LLM can), with their renders
        taking turns, first chunks first (render_turns.py); 1: each request decodes and renders on its own thread.
        Call it while no request runs (the previous batcher is closed)."""
        if isinstance(self.token_decoder, DecodeBatcher):
            self.token_decoder.close()
        batched = width > 1 and batches(self.llm)
        if self.precision.mode == "stock" and batched:  # several rows a step: the packed layout is faster
            relaid = stock_llm_for_rows(self.llm, width, self.device.type)
            if relaid is not None:  # the re-layout dropped a recorded step: a lone request's steps still take one
                recorded = llm_step_precision(self.llm, self.device.type).get("llm_step", "")
                self.precision = replace(self.precision, llm=relaid, llm_step=recorded)
                self._info = replace(self._info, precision=self.precision)
        if batched and self.precision.llm_step:
            # Steps of 2 .. width rows get graphs too, recorded on a thread of their own (~2.5 s each for v3 on 2
            # cores): the engine serves at once, and a row count steps eagerly until its graph is there.
            self._recording = threading.Thread(target=self._record_rows, args=(width,), name="record-decode-rows",
                                               daemon=True)
            self._recording.start()
        tick = self.thread_fit.tick if self.thread_fit is not None else None
        self.render_turns = RenderTurns() if width > 1 else None
        self.token_decoder = (DecodeBatcher(self.llm, width, tick=tick, hold=self.render_turns.first_chunks_pending)
                              if batched else self.llm)

    def _record_rows(self, width: int) -> None:
        try:
            recorded = self.llm.record_decode_rows(width)
            log.info("decoding steps of 2-%d rows recorded (%d row counts)", width, recorded)
        finally:
            release_threads()  # this thread's OpenMP team would throttle the threads that serve (openmp.py)

    def wait_for_recorded_steps(self, timeout: float | None = None) -> None:
        """Wait until the decoding steps of several rows that `set_batch_width` records are recorded (benchmarks
        and tests time the engine as it serves once they are)."""
        if self._recording is not None:
            self._recording.join(timeout)

    # --- interface ------------------------------------------------------------------------------

    @property
    def info(self) -> EngineInfo:
        return self._info

    def _check_model(self, request: CheckedRequest) -> None:
        if request.mode is Mode.ZERO_SHOT and request.prompt_audio is None and request.speaker in self.saved_voices:
            if not (request.prompt_text.strip() or self.saved_voices[request.speaker][1]):
                raise InvalidRequest("transcript_missing", "this saved voice has no transcript; use cross-lingual "
                                     "mode, or save the voice again with its transcript")

    def _synthesize(self, request: CheckedRequest, progress: ProgressCallback | None,
                    cancel: threading.Event | None) -> Iterator[AudioChunk]:
        generator = torch.Generator().manual_seed(int(request.seed))
        report(progress, "frontend", 0.0, "preparing")
        with torch.inference_mode():
            jobs = self._segment_jobs(request)
            total = len(jobs)
            for index, (segment_text, model_input, source_tokens) in enumerate(jobs):
                raise_if_cancelled(cancel)
                spoken: list[int] = []  # the segment's speech tokens, for the take checks (`take_check`)
                for wave, last_of_segment in self._render_segment(model_input, source_tokens, generator, progress,
                                                                  cancel, index, total, request.stream,
                                                                  request.speed, record=spoken):
                    samples = wave.squeeze(0).float().cpu().numpy()
                    final = last_of_segment and index == total - 1
                    yield AudioChunk(samples, self._info.sample_rate, index, total, final, segment_text,
                                     tuple(spoken) if last_of_segment else ())

    def close(self) -> None:
        if isinstance(self.token_decoder, DecodeBatcher):
            self.token_decoder.close()
        self.token_decoder = None
        for name in ("llm", "flow", "hift", "prompts", "tokenizer"):
            setattr(self, name, None)
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    def speaker_embedder(self) -> SpeakerEmbedder:
        """The folder's CAM++ network (campplus.onnx, the same features and session prompts use): a 192-d vector
        per recording, for telling the voices of a dub's transcribed cues apart."""

        def embed(audio: Audio) -> np.ndarray:
            try:
                return self.prompts.speaker_embedding(self.prompts.to_16k(audio)).numpy().reshape(-1)
            finally:
                release_threads()  # a dub's worker thread: its OpenMP team would throttle the renders' (openmp.py)

        return SpeakerEmbedder("campplus", embed, CAMPPLUS_SAME_VOICE)

    # --- saved voices -----------------------------------------------------------------------------

    def encode_voice(self, audio: Audio) -> PromptFeatures:
        """Features of a (checked) voice recording; cached by audio hash."""
        try:
            return self.prompts.encode(audio_utils.check_prompt(audio))
        finally:
            release_threads()  # as `synthesize` does (openmp.py)

    def add_voice(self, voice_id: str, features: PromptFeatures, transcript: str) -> None:
        """Make a saved voice usable as `speaker` in zero-shot, cross-lingual and vc requests."""
        self.saved_voices[voice_id] = (features, transcript)
        self._info = _with_voices(self._info, tuple(self.saved_voices))

    def remove_voice(self, voice_id: str) -> None:
        self.saved_voices.pop(voice_id, None)
        self._info = _with_voices(self._info, tuple(self.saved_voices))

    def register_voice(self, voice_id: str, audio: Audio, transcript: str, cache_dir: Path) -> None:
        """Load the voice's features from `cache_dir` (computing and storing them the first time)."""
        from dataclasses import fields

        from .voice_features import file_fingerprint, load_features, save_features

        if getattr(self, "_frontend_fingerprint", None) is None:
            # The features depend only on these two networks (and the family's mel settings, in the file name).
            self._frontend_fingerprint = file_fingerprint(
                self.folder.path / "campplus.onnx", self.folder.path / self.folder.family.speech_tokenizer_file)
        path = Path(cache_dir) / f"features-{self.folder.family.name}.safetensors"
        stored = load_features(path, self._frontend_fingerprint)
        names = [f.name for f in fields(PromptFeatures)]
        if stored is not None and set(stored) == set(names):
            features = PromptFeatures(**stored)
        else:
            features = self.encode_voice(audio)
            try:
                save_features(path, {n: getattr(features, n) for n in names}, self._frontend_fingerprint)
            except OSError as exc:  # a read-only voices folder still works, it just recomputes next time
                log.warning("cannot store the features of voice %s in %s (%s)", voice_id, path, exc)
        self.add_voice(voice_id, features, transcript)

    def unregister_voice(self, voice_id: str) -> None:
        self.remove_voice(voice_id)

    def reading(self, text: str) -> list[str]:
        """The normalised, split segments this model reads for `text` ([] when nothing is speakable)."""
        try:
            return self._segments(SynthesisRequest(Mode.CROSS_LINGUAL, text=text))
        except InvalidRequest:
            return []

    # --- internals --------------------------------------------------------------------------------

    def _encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text)

    def _prompt(self, request: SynthesisRequest, audio: Audio | None) -> tuple[PromptFeatures, str]:
        if request.speaker and request.speaker in self.saved_voices and audio is None:
            return self.saved_voices[request.speaker]
        return self.prompts.encode(audio), request.prompt_text  # checked and trimmed by `check`

    def _segments(self, request: SynthesisRequest) -> list[str]:
        text = request.text.strip()
        if not request.text_frontend:
            return [text]
        segments = text_frontend.normalize(text, split=True, count_tokens=lambda s: len(self._encode(s)))
        segments = [s for s in segments if s.strip()]
        if not segments:
            raise InvalidRequest("text_unspeakable", "the text has nothing to speak (only punctuation or symbols)")
        return segments

    def _segment_jobs(self, request: SynthesisRequest) -> list[tuple[str, ModelInput | None, torch.Tensor | None]]:
        mode = request.mode
        recipe = self.recipe
        if mode is Mode.VC:
            prompt, _ = self._prompt(request, request.prompt_audio)
            tokens = self.prompts.speech_tokens(self.prompts.to_16k(request.source_audio))
            return [("", recipe.voice_conversion(tokens, prompt), tokens)]
        segments = self._segments(request)
        speaker = None
        # instruct takes a voice like zero-shot where the family says so (v2/v3 instruct2), else a preset
        voice_instruct = mode is Mode.INSTRUCT and self._info.instruct_voice
        if mode is Mode.SFT or (mode is Mode.INSTRUCT and not voice_instruct):
            speaker = self.spk2info[request.speaker]["embedding"].float().reshape(1, -1)
        prompt = None
        prompt_ids: list[int] | None = None
        if mode in (Mode.ZERO_SHOT, Mode.CROSS_LINGUAL) or voice_instruct:
            prompt, transcript = self._prompt(request, request.prompt_audio)
            if mode is Mode.ZERO_SHOT:
                transcript = request.prompt_text.strip() or transcript
                if self.folder.family.check_transcript_length:
                    check_transcript_length(transcript, prompt.speech_tokens.shape[1] / self.folder.family.token_rate)
                normalized = text_frontend.normalize(transcript, split=False) if request.text_frontend else transcript
                prompt_ids = self._encode(recipe.prompt_text(mode, normalized))
        if mode is Mode.INSTRUCT:
            instruct = request.instruct_text.strip()
            if request.text_frontend:
                instruct = text_frontend.normalize(instruct, split=False)
            prompt_ids = self._encode(recipe.prompt_text(mode, instruct))
        jobs = []
        for segment in segments:
            ids = self._encode(recipe.spoken_text(mode, segment))
            jobs.append((segment, recipe.assemble(mode, ids, prompt_text_ids=prompt_ids, prompt=prompt,
                                                  speaker_embedding=speaker), None))
        return jobs

    def render_input(self, model_input: ModelInput, generator: torch.Generator, stream: bool = False,
                     forced_tokens: int | None = None) -> Iterator[tuple[torch.Tensor, bool]]:
        """Speech for one already assembled segment: (wave [1, S], is_last) chunks, as `synthesize`
        renders each segment (same precision, flow prompt cap and chunk schedule).

        forced_tokens: decode exactly this many speech tokens, ignoring EOS, so that every run does
        the same work (benchmarks). None decodes until EOS as usual.
        """
        try:
            with torch.inference_mode():
                yield from self._render_segment(model_input, None, generator, None, None, 0, 1, stream, 1.0,
                                                forced_tokens)
        finally:
            release_threads()  # as `synthesize` does (openmp.py)

    def _flow_prompt(self, model_input: ModelInput) -> FlowPrompt:
        tokens, mel = model_input.flow_prompt_tokens, model_input.prompt_mel
        if self.flow_prompt_seconds is not None:
            spec = self.streaming_spec
            first_hop = ((spec.token_first_hop_len, spec.token_min_first_hop_len)
                         if spec.token_min_first_hop_len and spec.pre_lookahead_len else None)
            tokens, mel = trim_flow_prompt(tokens, mel, self.flow_prompt_seconds, self.folder.family.token_rate,
                                           first_hop)
        device = self.device
        return FlowPrompt(tokens.to(device), mel.to(device), model_input.flow_embedding.to(device))

    def _render_segment(self, model_input: ModelInput, source_tokens: torch.Tensor | None,
                        generator: torch.Generator, progress: ProgressCallback | None,
                        cancel: threading.Event | None, index: int, total: int, stream: bool, speed: float,
                        forced_tokens: int | None = None,
                        record: list[int] | None = None) -> Iterator[tuple[torch.Tensor, bool]]:
        streamed = stream and speed == 1.0
        render_generator = generator
        if streamed and source_tokens is None and isinstance(self.token_decoder, DecodeBatcher):
            # The batched decoder samples on its own thread while this one renders chunks: each needs its own
            # generator (the same seed's state), or the two would draw from one in an order set by timing.
            render_generator = torch.Generator()
            render_generator.set_state(generator.get_state())
        render = self.chunker.renderer(self.flow, self.hift, self.config_streaming, self._flow_prompt(model_input),
                                       render_generator, self.n_timesteps)
        if hasattr(render, "chunked_last_pass"):
            render.chunked_last_pass = self.precision.flow_chunked_last_pass
        if self.render_turns is not None:
            render = self.render_turns.wrap(render)
        base = index / total

        def stage(name: str, within: float, message: str) -> None:
            report(progress, name, base + within / total, f"segment {index + 1}/{total}: {message}", "segment",
                   segment=index + 1, total=total)

        if source_tokens is not None:
            tokens_iter = iter(source_tokens[0].tolist())
        else:
            urgent = getattr(render, "waiting_for_tokens", None)  # taking turns: first chunks first
            tokens_iter = self.llm.tokens_for_flow(self._llm_tokens(model_input, generator, cancel, stage,
                                                                    forced_tokens, urgent))
        if record is not None:  # `record` receives every token the flow is given
            tokens_iter = _recorded(tokens_iter, record)
        if streamed:
            self._fit_threads()
            for speech, last in self.chunker.schedule(tokens_iter, render, self.config_streaming):
                raise_if_cancelled(cancel)
                stage("vocoder", 0.9, "audio chunk ready")
                yield speech, last
                self._fit_threads()  # for the next chunk's render on this thread (the decoder may run on another)
            return
        tokens = list(tokens_iter)
        raise_if_cancelled(cancel)
        if not tokens:
            yield torch.zeros(1, 0), True
            return
        # The decode's KV cache and step temporaries are free now but stay resident in glibc's arenas: handed back
        # before the flow (v1 stock: resident after a render ~0.15 GB lower, its peak 0.03-0.06 GB lower)
        trim_heap()
        stage("flow", 0.7, f"{len(tokens)} speech tokens → mel")
        self._fit_threads()
        speech = render(torch.tensor([tokens], dtype=torch.long), True, speed)
        stage("vocoder", 1.0, "done")
        yield speech, True

    def _fit_threads(self) -> None:
        if self.thread_fit is not None:
            self.thread_fit.tick()

    def _llm_tokens(self, model_input: ModelInput, generator: torch.Generator, cancel: threading.Event | None,
                    stage, forced_tokens: int | None = None,
                    urgent: Callable[[], bool] | None = None) -> Iterator[int]:
        device = self.device
        expected = max(1, 12 * model_input.text.shape[1])
        count = 0
        batched = {"urgent": urgent} if isinstance(self.token_decoder, DecodeBatcher) and urgent else {}
        for token in self.token_decoder.inference(
            model_input.text.to(device), model_input.prompt_text.to(device),
            model_input.llm_prompt_tokens.to(device), model_input.llm_embedding.to(device),
            sampler=self.sampler, generator=generator, max_len=forced_tokens, ignore_eos=forced_tokens is not None,
            **batched,
        ):
            count += 1
            self._fit_threads()
            if count % 25 == 0:
                raise_if_cancelled(cancel)
                stage("llm", min(0.65, 0.65 * count / expected), f"{count} speech tokens")
            yield token

    @property
    def config_streaming(self) -> StreamingSpec:
        return self.streaming_spec


def _recorded(tokens: Iterator[int], into: list[int]) -> Iterator[int]:
    for token in tokens:
        into.append(token)
        yield token


def _with_voices(info: EngineInfo, voices: tuple[str, ...]) -> EngineInfo:
    return replace(info, saved_voices=voices)


def load_engine(model_dir: str | Path, device: str = "auto", progress: ProgressCallback | None = None, *,
                max_text_chars: int = DEFAULT_MAX_TEXT_CHARS, precision: str = "stock", threads: int | None = None,
                n_timesteps: int | None = None, fast: FastSettings | None = None,
                batch_width: int = 1) -> CosyVoiceEngine:
    """Load the model in `model_dir` (a CosyVoice folder) and return its engine.

    device: auto | cpu | cuda; precision: "stock" (the default in code: upstream's numbers) | "fast" |
    "extra-fast" | "auto" (fast on a CPU, stock on a GPU: the app's and the CLI's default) (`fast` tunes what
    fast changes); threads caps the ONNX sessions; n_timesteps overrides the flow's Euler steps (see
    `loader.load_parts`); batch_width: concurrent requests whose LLM steps run together (the server's
    `--concurrency`).
    """
    parts = load_parts(Path(model_dir), device=device, progress=progress, precision=precision, threads=threads,
                       n_timesteps=n_timesteps, fast=fast)
    release_threads()  # the loading thread's OpenMP workers: requests run on other threads (openmp.py)
    return CosyVoiceEngine(parts, max_text_chars=max_text_chars, batch_width=batch_width)
