"""Continuous batching of speech-token decodes: several requests' LLM steps share one read of the weights.

A decode step of one sequence reads every weight of the backbone once (hundreds of MB) to produce one token, so on
a CPU it is bound by memory bandwidth; B sequences stepped together read the weights once for B tokens. One
thread owns the LLM while any decode runs: each loop admits waiting sequences (their prefill runs alone, between
steps), steps every active sequence together (`forward_rows`: the projections and MLPs on B rows, attention per
row over its own cache), samples each row with that request's own sampler and generator, and hands the tokens to
the requests' iterators. A sequence leaves when it stops, reaches its length, or its consumer goes away; a new one
joins at the next step. At most `width` sequences step together; the others wait in order.

First chunks first: with a `hold` (the engine's: a request's first render is running or waiting for its turn),
the loop does not step while no running sequence is `urgent` (its request still waits for the tokens of its first
chunk). On a CPU a decode step beside a render splits the cores, so holding the steps of requests that already
play hands the cores to the render a new listener is waiting for; prefills of new requests always run.

Numbers: in stock (float32) a row's result equals its decode alone up to the summation order of a B-row product.
In fast, the int8 linears quantise each step's activations with one scale for all rows, so a request decoded
beside others can differ slightly from the same seed decoded alone (within fast's own deviation; see
benchmarks/deviation.py). Width 1 (the default) never enters this module.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch

from ...openmp import release_threads
from .sampling import Sampler
from .speech_lm import SpeechTokenLM

log = logging.getLogger(__name__)

_END = object()
HOLD_POLL_S = 0.005  # how often a held loop looks again (a first render takes ~0.3 s)


def batches(lm: SpeechTokenLM) -> bool:
    """Whether this LLM's backbone can step several decodes at once (v2/v3's Qwen2; v1 decodes alone)."""
    return hasattr(lm.llm, "forward_rows")


@dataclass(eq=False)
class _Sequence:
    prefix: torch.Tensor  # [1, L, D]: the assembled input, consumed by the prefill
    sampler: Sampler
    generator: torch.Generator
    min_len: int
    max_len: int
    ignore_eos: bool
    out: queue.SimpleQueue = field(default_factory=queue.SimpleQueue)
    decoded: list[int] = field(default_factory=list)
    cache: object = None
    next_input: torch.Tensor | None = None  # [1, 1, D]: the last token's embedding
    gone: bool = False  # the consumer stopped reading
    urgent: Callable[[], bool] | None = None  # True while its request waits for its first chunk's tokens

    def finish(self, item: object = _END) -> None:
        self.out.put(item)


class DecodeBatcher:
    """The shared decode loop of one loaded LLM (see the module docstring). `inference` has the LLM's signature;
    `close` stops the loop (sequences still running end with an error)."""

    def __init__(self, lm: SpeechTokenLM, width: int, tick: Callable[[], object] | None = None,
                 hold: Callable[[], bool] | None = None) -> None:
        """tick: called before each step on the loop's thread (the engine fits that thread's intra-op threads
        to the free cores: `thread_fit.py`). hold: when true and no running sequence is urgent, the loop waits
        instead of stepping (module docstring)."""
        if not batches(lm):
            raise ValueError("this LLM's backbone cannot step several decodes at once")
        self.lm = lm
        self.width = max(1, width)
        self.tick = tick
        self.hold = hold
        self.held = 0  # loop turns spent waiting for a first render (a benchmark reads it)
        self._waiting: deque[_Sequence] = deque()
        self._active: list[_Sequence] = []
        self._wake = threading.Condition()
        self._closed = False
        self._thread: threading.Thread | None = None
        self.steps = 0  # batched steps run (a benchmark reads the mean width from these two)
        self.rows = 0

    def inference(self, text: torch.Tensor, prompt_text: torch.Tensor, prompt_speech_token: torch.Tensor,
                  embedding: torch.Tensor | None, sampler: Sampler, generator: torch.Generator | None = None,
                  max_len: int | None = None, min_len: int | None = None, ignore_eos: bool = False,
                  urgent: Callable[[], bool] | None = None) -> Iterator[int]:
        """As `SpeechTokenLM.inference`: checked now; decoding starts when the iterator is first read. urgent:
        whether the request still waits for its first chunk's tokens (None: always, as far as `hold` goes)."""
        generator, min_len, max_len = self.lm.decode_setup(text, prompt_text, generator, min_len, max_len)
        with torch.inference_mode():
            prefix = self.lm.build_input(text, prompt_text, prompt_speech_token, embedding)
        sequence = _Sequence(prefix, sampler, generator, min_len, max_len, ignore_eos, urgent=urgent)
        return self._tokens(sequence)

    def _tokens(self, sequence: _Sequence) -> Iterator[int]:
        self._submit(sequence)
        try:
            while True:
                if sequence.out.empty():
                    release_threads()  # about to wait: this thread's OpenMP team would throttle the loop's
                item = sequence.out.get()
                if item is _END:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            sequence.gone = True  # the loop drops it before its next step

    def _submit(self, sequence: _Sequence) -> None:
        with self._wake:
            if self._closed:
                raise RuntimeError("the model was unloaded")
            self._waiting.append(sequence)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="decode-batcher", daemon=True)
                self._thread.start()
            self._wake.notify()

    def close(self) -> None:
        with self._wake:
            self._closed = True
            self._wake.notify()
        if self._thread is not None:
            self._thread.join(timeout=30)

    # --- the loop (its own thread) -----------------------------------------------------------------------

    def _loop(self) -> None:
        held = False
        while True:
            with self._wake:
                if not self._closed and not self._waiting and not self._active:
                    release_threads()  # idle: the render threads' OpenMP teams run unthrottled (openmp.py)
                while not self._closed and not self._waiting and not self._active:
                    self._wake.wait()
                if self._closed:
                    for sequence in [*self._waiting, *self._active]:
                        sequence.finish(RuntimeError("the model was unloaded"))
                    self._waiting.clear()
                    self._active.clear()
                    return
                joining = []
                while self._waiting and len(self._active) + len(joining) < self.width:
                    joining.append(self._waiting.popleft())
            if self.tick is not None:
                self.tick()
            with torch.inference_mode():
                for sequence in joining:
                    if not sequence.gone:  # its listener left while it waited
                        self._guarded([sequence], self._prefill)
                running = [s for s in self._active if not s.gone]
                if running and self._holding(running):
                    if not held:  # the render takes both cores: this thread's OpenMP team would throttle it
                        release_threads()
                    held = True
                    self.held += 1
                    with self._wake:
                        self._wake.wait(HOLD_POLL_S)  # a new request wakes it at once
                elif running:
                    held = False
                    self._guarded(running, self._step)
            with self._wake:
                self._active = [s for s in [*self._active, *joining] if s.next_input is not None and not s.gone]

    def _holding(self, running: list[_Sequence]) -> bool:
        if self.hold is None or any(s.urgent is None or s.urgent() for s in running):
            return False
        try:
            return bool(self.hold())
        except Exception:  # noqa: BLE001  (a failing hint must not stop decoding)
            return False

    def _guarded(self, sequences: list[_Sequence], run) -> None:
        try:
            run(sequences)
        except Exception as exc:  # noqa: BLE001  (every waiting consumer gets the error; the loop lives on)
            log.warning("a batched decode step failed: %s", exc)
            for sequence in sequences:
                sequence.next_input = None
                sequence.finish(exc)

    def _prefill(self, sequences: list[_Sequence]) -> None:
        (sequence,) = sequences
        sequence.cache = self.lm.llm.new_cache(reserve=sequence.prefix.size(1) + sequence.max_len)
        hidden = self.lm.llm.forward_step(sequence.prefix, sequence.cache)
        sequence.prefix = sequence.prefix[:, :0]  # the prefix lives on in the cache only
        self._advance(sequence, self.lm._next_logp(hidden))

    def _step(self, sequences: list[_Sequence]) -> None:
        inputs = torch.cat([s.next_input for s in sequences])
        hidden = self.lm.llm.forward_rows(inputs, [s.cache for s in sequences])
        logits = self.lm.llm_decoder(hidden[:, -1]).float().log_softmax(dim=-1).cpu()
        self.steps += 1
        self.rows += len(sequences)
        for row, sequence in enumerate(sequences):
            self._advance(sequence, logits[row])

    def _advance(self, sequence: _Sequence, logp: torch.Tensor) -> None:
        step = len(sequence.decoded)
        token = None
        if step < sequence.max_len:
            token = self.lm.pick(logp, step, sequence.decoded, sequence.sampler, sequence.generator,
                                 sequence.min_len, sequence.ignore_eos)
        if token is None:
            sequence.next_input = None
            sequence.cache = None
            sequence.finish()
            return
        sequence.decoded.append(token)
        sequence.out.put(token)
        if len(sequence.decoded) >= sequence.max_len:
            sequence.next_input = None
            sequence.cache = None
            sequence.finish()
            return
        sequence.next_input = self.lm.step_input(token)
