"""Synthesis that catches bad takes: each segment is checked and a bad one re-rendered with a new seed.

`guarded_synthesis` runs a request like `Engine.synthesize` and yields the same chunks in the same order, but
checks every finished segment with `take_check.check_take` (seconds per character, repeated speech tokens,
optionally a word-recall round trip through an ASR the caller passes as `RetryPolicy.verify`). A bad segment is
rendered again alone (its segment text as a new request, a seed derived from the request's seed and the attempt)
up to `retries` times; the first good take is kept, else the least bad. Streamed requests, voice conversion (its
length comes from the source) and `RetryPolicy(enabled=False)` are checked and reported but never retried.
Nothing here imports torch.
"""

from __future__ import annotations

import logging
import secrets
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np

from ..engine import Engine, raise_if_cancelled, report as send_progress
from ..settings import DEFAULT_TAKE_RETRIES
from ..take_check import REASON_TEXT, TakeCheck, check_take, language_of, word_recall
from ..types import Audio, AudioChunk, Mode, ProgressCallback, ProgressEvent, SpeechDecoder, SynthesisRequest

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RetryPolicy:
    """How bad takes are handled. `verify(audio, text) -> word recall in [0, 1]` (e.g. an offline ASR round
    trip) flags a take whose recall is under `min_recall`; None skips that check."""

    enabled: bool = True
    retries: int = DEFAULT_TAKE_RETRIES
    verify: Callable[[Audio, str], float] | None = None
    min_recall: float = 0.5
    verify_languages: tuple[str, ...] = ()  # `take_check.language_of` codes the verifier reads; () = all


def recall_verifier(transcribe: Callable[[Audio, str], str]) -> Callable[[Audio, str], float]:
    """A `RetryPolicy.verify` from a transcriber: `transcribe(audio, language) -> text` (e.g. H4's
    `Transcriber.transcribe(...).text`), scored with `take_check.word_recall` against the segment's text."""

    def verify(audio: Audio, text: str) -> float:
        return word_recall(text, transcribe(audio, language_of(text)))

    return verify


@dataclass(frozen=True)
class SegmentReport:
    """The outcome of one segment: how many takes it took, the seed of the kept one and its check."""

    segment: int
    text: str
    attempts: int
    seed: int
    check: TakeCheck
    streamed: bool = False  # checked only: a streamed segment is never retried

    def as_dict(self) -> dict:
        return {"segment": self.segment, "text": self.text, "attempts": self.attempts, "seed": self.seed,
                "streamed": self.streamed, "check": self.check.as_dict()}


def policy_from_settings(settings) -> RetryPolicy:
    """The process's policy: `Settings.check_takes` (off: no checks, no retries) and `Settings.take_retries`."""
    return RetryPolicy(enabled=bool(getattr(settings, "check_takes", True)),
                       retries=max(0, int(getattr(settings, "take_retries", DEFAULT_TAKE_RETRIES))))


def retry_seed(seed: int, segment: int, attempt: int) -> int:
    """A new seed for `attempt` (1, 2, ...) of `segment`, reproducible from the request's seed."""
    return (int(seed) * 1_000_003 + (segment + 1) * 7_919 + attempt * 104_729) % (2 ** 31)


class Bands(NamedTuple):
    """What picks a take's band: the engine's family ("offline" has its own, measured) and its decoder facts."""

    family: str
    decoder: SpeechDecoder | None = None


def _family(engine: Engine) -> Bands:
    """The bands of `engine`: its `info.family` and `info.decoder`, but the espeak-ng fallback (family "offline",
    whose rate was not measured) and unknown engines get the generic, wider band "*"."""
    try:
        info = engine.info
    except Exception:  # an engine without info still gets the generic band
        return Bands("*")
    if str(getattr(info, "backend", "")).startswith("espeak"):
        return Bands("*")
    return Bands(str(info.family), getattr(info, "decoder", None))


def _check(chunks: list[AudioChunk], text: str, family: Bands, speed: float, policy: RetryPolicy) -> TakeCheck:
    rate = chunks[0].sample_rate if chunks else 0
    samples = sum(len(c.samples) for c in chunks)
    seconds = samples / rate if rate else 0.0
    tokens: tuple[int, ...] = ()
    for chunk in chunks:
        tokens += tuple(getattr(chunk, "tokens", ()) or ())
    check = check_take(text, seconds, family.family, tokens, speed=speed, decoder=family.decoder)
    if (policy.verify is not None and check.ok and text.strip() and samples
            and (not policy.verify_languages or language_of(text) in policy.verify_languages)):
        audio = Audio(np.concatenate([c.samples for c in chunks]).astype(np.float32), rate)
        try:
            recall = float(policy.verify(audio, text))
        except Exception as exc:  # the round trip is advisory: a failing ASR must not fail the take
            log.warning("take verification failed (%s); keeping the take unverified", type(exc).__name__)
        else:
            check = check_take(text, seconds, family.family, tokens, speed=speed, recall=recall,
                               min_recall=policy.min_recall, decoder=family.decoder)
    return check


def _why(check: TakeCheck) -> str:
    return ", ".join(REASON_TEXT.get(r, r) for r in check.reasons) or "ok"


def _sub_progress(progress: ProgressCallback | None, base: float, width: float, prefix: str,
                  params: dict) -> ProgressCallback | None:
    """Progress of a retry mapped into its segment's share of the whole request, as a "take_retry" event (the
    retry's `params`) with the inner stage; its "done" is dropped."""
    if progress is None:
        return None

    def forward(event: ProgressEvent) -> None:
        if event.stage == "done":
            return
        inner = event.message.split(": ", 1)[-1] if event.message.startswith("segment ") else event.message
        message = f"{prefix} · {inner}" if inner else prefix
        progress(ProgressEvent(event.stage, min(1.0, base + width * event.fraction), message, "take_retry", params))

    return forward


def _relabel(chunks: list[AudioChunk], segment: int, total: int, last_segment: bool) -> list[AudioChunk]:
    out = []
    for i, chunk in enumerate(chunks):
        final = last_segment and i == len(chunks) - 1
        out.append(replace(chunk, segment=segment, segments=total, final=final))
    return out


def guarded_synthesis(engine: Engine, request: SynthesisRequest, policy: RetryPolicy | None = None,
                      progress: ProgressCallback | None = None, cancel: threading.Event | None = None,
                      report: list[SegmentReport] | None = None) -> Iterator[AudioChunk]:
    """Yield the audio of `request` like `engine.synthesize`, re-rendering bad segments (see the module).

    `report`, when given, receives one `SegmentReport` per segment in order. Segments after a bad one are held
    back until it is settled, so the chunks keep their order and segment indexes.
    """
    policy = policy or RetryPolicy()
    if request.seed is None:
        request = replace(request, seed=secrets.randbits(31))
    family = _family(engine)
    # vc: the length and tokens come from the source recording, a new seed cannot change them
    if not policy.enabled or request.stream or request.mode is Mode.VC:
        yield from _checked_stream(engine, request, policy, family, progress, cancel, report,
                                   streamed=request.stream)
        return

    def main_progress(event: ProgressEvent) -> None:
        if progress is not None and event.stage != "done":
            progress(event)

    current: list[AudioChunk] = []
    total = 1
    settled: dict[int, tuple[list[AudioChunk], SegmentReport]] = {}
    bad: list[int] = []
    emitted = 0

    def finish(chunks: list[AudioChunk]) -> None:
        index = chunks[0].segment
        check = _check(chunks, chunks[0].text or (request.text if total == 1 else ""), family, request.speed, policy)
        entry = SegmentReport(index, chunks[0].text, 1, int(request.seed), check)
        settled[index] = (chunks, entry)
        if not check.ok:
            bad.append(index)
            send_progress(progress, "segment", (index + 1) / total * 0.999,
                          f"segment {index + 1}/{total}: {_why(check)}; will retry", "take_will_retry",
                          segment=index + 1, total=total, reasons=list(check.reasons))

    for chunk in engine.synthesize(request, main_progress, cancel):
        total = chunk.segments
        if current and chunk.segment != current[0].segment:
            finish(current)
            current = []
        current.append(chunk)
        if chunk.final:
            finish(current)
            current = []
        # yield every settled good segment that is next in line
        while emitted in settled and not _waits(emitted, bad):
            yield from _emit(settled, emitted, total, report)
            emitted += 1
    if current:
        finish(current)
    for index in range(emitted, total):
        if index not in settled:
            continue
        chunks, entry = settled[index]
        if not entry.check.ok:
            settled[index] = _retry(engine, request, policy, family, index, total, chunks, entry, progress, cancel)
        yield from _emit(settled, index, total, report)
    seconds = sum(len(c.samples) / c.sample_rate for chunks, _ in settled.values() for c in chunks if c.sample_rate)
    retried = sum(entry.attempts > 1 for _, entry in settled.values())
    send_progress(progress, "done", 1.0, f"{seconds:.1f} s of audio" + (f", {retried} segment(s) re-rendered"
                                                                         if retried else ""),
                  "done_takes", seconds=round(seconds, 1), retried=retried)


def _waits(index: int, bad: list[int]) -> bool:
    """True when `index` must wait: it is bad or comes after a bad segment not yet retried."""
    return any(b <= index for b in bad)


def _emit(settled: dict, index: int, total: int, report: list[SegmentReport] | None) -> Iterator[AudioChunk]:
    chunks, entry = settled[index]
    if report is not None:
        report.append(entry)
    yield from _relabel(chunks, index, total, index == total - 1)


def _retry(engine: Engine, request: SynthesisRequest, policy: RetryPolicy, family: Bands, index: int, total: int,
           chunks: list[AudioChunk], entry: SegmentReport, progress: ProgressCallback | None,
           cancel: threading.Event | None) -> tuple[list[AudioChunk], SegmentReport]:
    """Re-render segment `index` alone up to `policy.retries` times; the first good take, else the least bad."""
    best_chunks, best = chunks, entry
    text = entry.text or request.text
    alone = total == 1 or bool(entry.text)
    if not alone:  # the engine did not say what the segment's text was: nothing to re-render alone
        return best_chunks, best
    check = entry.check
    for attempt in range(1, policy.retries + 1):
        raise_if_cancelled(cancel)
        seed = retry_seed(int(request.seed), index, attempt)
        prefix = f"segment {index + 1}/{total}: retry {attempt}/{policy.retries} ({_why(check)})"
        params = dict(segment=index + 1, total=total, attempt=attempt, retries=policy.retries,
                      reasons=list(check.reasons))
        send_progress(progress, "segment", index / total, prefix, "take_retry", **params)
        sub = replace(request, seed=seed) if total == 1 else replace(request, text=text, seed=seed)
        takes = list(engine.synthesize(sub, _sub_progress(progress, index / total, 1.0 / total, prefix, params),
                                       cancel))
        check = _check(takes, text, family, request.speed, policy)
        candidate = SegmentReport(index, entry.text, attempt + 1, seed, check)
        log.info("segment %d/%d retry %d: %s", index + 1, total, attempt, check.detail)
        if check.ok:
            return takes, candidate
        if check.severity < best.check.severity:
            best_chunks, best = takes, candidate
        else:
            best = replace(best, attempts=attempt + 1)
    best = replace(best, attempts=policy.retries + 1)
    send_progress(progress, "segment", (index + 1) / total,
                  f"segment {index + 1}/{total}: kept the best of {policy.retries + 1} takes ({_why(best.check)})",
                  "take_kept_best", segment=index + 1, total=total, takes=policy.retries + 1,
                  reasons=list(best.check.reasons))
    return best_chunks, best


def _checked_stream(engine: Engine, request: SynthesisRequest, policy: RetryPolicy, family: Bands,
                    progress: ProgressCallback | None, cancel: threading.Event | None,
                    report: list[SegmentReport] | None, streamed: bool) -> Iterator[AudioChunk]:
    """The request's chunks pass through untouched (streamed, or retries switched off); each finished
    segment is still checked (without the verify round trip) and reported."""
    current: list[AudioChunk] = []

    def finish() -> None:
        check = _check(current, current[0].text or request.text, family, request.speed,
                       replace(policy, verify=None))
        entry = SegmentReport(current[0].segment, current[0].text, 1, int(request.seed), check, streamed=streamed)
        if report is not None:
            report.append(entry)
        if not check.ok:
            segment, total = current[0].segment + 1, current[0].segments
            send_progress(progress, "segment", segment / total, f"segment {segment}/{total}: {_why(check)} "
                          + ("(streamed: not retried)" if streamed else "(not retried)"), "take_not_retried",
                          segment=segment, total=total, reasons=list(check.reasons), streamed=streamed)

    for chunk in engine.synthesize(request, progress, cancel):
        if current and chunk.segment != current[0].segment:
            finish()
            current = []
        current.append(chunk)
        yield chunk
        if chunk.final:
            finish()
            current = []
    if current:
        finish()
