"""Plain records shared by the engine, the UI, the REST API and the CLI.

Nothing here imports torch: the UI and API layers build and read these records without pulling in
model code. Audio is always mono float32 numpy in [-1, 1].
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np


class Mode(str, enum.Enum):
    """What the user asks for; each backend says which of these it can do (`EngineInfo.modes`)."""

    SFT = "sft"  # a preset speaker from the model's spk2info
    ZERO_SHOT = "zero_shot"  # clone a voice from a prompt recording + its transcript
    CROSS_LINGUAL = "cross_lingual"  # clone a voice, speak text in another language (no transcript)
    INSTRUCT = "instruct"  # style described in words (v1: -Instruct model with a preset speaker)
    VC = "vc"  # voice conversion: say the source recording's words in the prompt's voice

    @classmethod
    def parse(cls, value: str | Mode) -> Mode:
        """Accept a Mode or its value ("zero_shot", also "zero-shot"); raise ValueError listing options."""
        if isinstance(value, Mode):
            return value
        key = str(value).strip().lower().replace("-", "_")
        for mode in cls:
            if mode.value == key:
                return mode
        options = ", ".join(m.value for m in cls)
        raise ValueError(f"unknown mode {value!r}; choose one of: {options}")


@dataclass(frozen=True)
class Audio:
    """A mono recording: float32 samples in [-1, 1] at `sample_rate` Hz."""

    samples: np.ndarray  # [N] float32
    sample_rate: int

    @property
    def duration(self) -> float:
        return float(len(self.samples)) / float(self.sample_rate) if self.sample_rate else 0.0


@dataclass(frozen=True)
class SynthesisRequest:
    """One synthesis job. Which fields matter depends on `mode` (see `Engine.check`).

    Attributes:
        text: what to say (all modes except vc).
        prompt_audio: the voice to clone (zero_shot, cross_lingual, vc target voice).
        prompt_text: transcript of `prompt_audio` (zero_shot).
        instruct_text: the style description (instruct).
        speaker: a preset or saved speaker id (sft, instruct; or a saved voice in zero_shot/cross_lingual).
        source_audio: the recording whose words are re-voiced (vc).
        speed: tempo factor, 0.5-2.0.
        seed: makes the sampling reproducible; None draws a fresh seed.
        stream: yield audio segment by segment and chunk by chunk as it is produced.
        text_frontend: normalise and split text (turn off to feed the model raw text).
        voice_match: for backends that only approximate a prompt's voice (EngineInfo.voice_match ==
            "approximate"): "quick" (seconds) or "refine" (a longer search).
    """

    mode: Mode
    text: str = ""
    prompt_audio: Audio | None = None
    prompt_text: str = ""
    instruct_text: str = ""
    speaker: str | None = None
    source_audio: Audio | None = None
    speed: float = 1.0
    seed: int | None = None
    stream: bool = False
    text_frontend: bool = True
    voice_match: str = "quick"


@dataclass(frozen=True)
class CheckedRequest(SynthesisRequest):
    """A request that passed the shared checks against `checked_against`; its recordings are the checked,
    silence-trimmed ones. An engine whose `info` equals `checked_against` does not check it again."""

    checked_against: EngineInfo | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class AudioChunk:
    """A piece of synthesised audio, yielded in playback order."""

    samples: np.ndarray  # [N] float32
    sample_rate: int
    segment: int  # 0-based index of the text segment this chunk belongs to
    segments: int  # number of text segments in the request
    final: bool  # True on the last chunk of the whole request
    text: str = ""  # the (normalised) text of the segment
    tokens: tuple[int, ...] = ()  # the segment's speech tokens, on its last chunk (CosyVoice engines; else empty)


@dataclass(frozen=True)
class ProgressEvent:
    """A progress report. `fraction` is the overall share done (0..1) of the current operation.

    Events are codes, like errors: `code` says what happened ("segment", "take_retry", "line", "queue_position",
    ...; "" = only the stage is known) and `params` the numbers and names it mentions, so each surface says it
    in its user's language (`ui/strings.progress_text`); `message` is the same in English, for logs and the CLI."""

    stage: str  # "load", "download", "frontend", "llm", "flow", "vocoder", "segment", "done"
    fraction: float
    message: str = ""
    code: str = ""
    params: dict = field(default_factory=dict, compare=False)


ProgressCallback = Callable[[ProgressEvent], None]


@dataclass(frozen=True)
class SpeakerEmbedder:
    """A speaker network a backend lends (`Engine.speaker_embedder`), to tell voices apart: `embed` turns a
    recording into a vector; two recordings whose vectors are closer than `threshold` (cosine distance) are
    taken for one voice. `name` says which network, for logs."""

    name: str
    embed: Callable[[Audio], np.ndarray]
    threshold: float


@dataclass(frozen=True)
class Precision:
    """How a loaded model computes: "stock" (upstream's numbers) or "fast" (opt-in speed for accuracy),
    and what each stage runs as. Backends without a precision switch report None in `EngineInfo`."""

    mode: str = "stock"  # "stock" | "fast" | "extra-fast"
    llm: str = "fp32"  # e.g. "fp32 (oneDNN packed, 96 linears, q/k/v fused)", "int8 dynamic (...)"
    llm_rows: str = ""  # fast where the CPU has AMX: the int8 LLM's many-row calls (prefills) on oneDNN; "" none
    llm_attention: str = ""  # fast on a CPU: "own kernel, ..." when decoding steps' attention runs on kernels/; "" torch
    llm_step: str = ""  # on a CPU, v2/v3: "recorded graph" when one-row decoding steps run as a TorchScript trace
    # "fp32" | "fp32 (oneDNN packed estimator, N linears)" | "bf16 estimator" | "int8 estimator (N linears)"
    flow: str = "fp32"
    flow_attention: str = "sdpa"  # "sdpa" | "matmul" (bf16 estimator)
    hift: str = "fp32"  # "fp32" | "bf16 convolutions (...)", + ", time-major" on a CPU (conv_layout.py)
    flow_steps: int | None = None  # Euler steps when not the yaml's
    flow_prompt_seconds: float | None = None  # fast mode keeps only the prompt's last seconds in the flow
    flow_guidance: bool = True  # classifier-free guidance in the flow (extra-fast turns it off)
    flow_chunked_last_pass: bool = False  # a stream's last flow pass in chunk attention from the kept frames (fast)
    prepared: str = ""  # "read" / "written" / "partly read": the prepared copies (fast on a CPU); "" none

    @property
    def bf16_flow(self) -> bool:
        return self.flow.startswith("bf16")

    @property
    def int8_flow(self) -> bool:
        return self.flow.startswith("int8")

    @property
    def bf16_hift(self) -> bool:
        return self.hift.startswith("bf16")


@dataclass(frozen=True)
class SpeechDecoder:
    """Facts of a speech-token decoder that bound how long a take of a text can be (the bad-take checks): speech
    tokens per second, the LLM's least and most speech tokens per text token, and text tokens per spoken
    character by language ("en" letters, "zh" Hanzi, ...). Backends without such a decoder have none."""

    token_rate: int
    min_token_text_ratio: float = 2.0
    max_token_text_ratio: float = 20.0
    text_tokens_per_char: tuple[tuple[str, float], ...] = ()

    def tokens_per_char(self, language: str) -> float:
        return dict(self.text_tokens_per_char).get(language, 0.4)


@dataclass(frozen=True)
class Instruction:
    """A known-good style instruction of a model family, offered by the instruct tab's picker and /v1/models."""

    category: str  # "dialect" | "emotion" | "rate" | "volume" | "style"
    zh: str  # its name in Chinese, e.g. "四川话"
    en: str  # its name in English, e.g. "Sichuanese"
    text: str  # the instruction the model reads (recipes add `<|endofprompt|>` and any system prompt)


@dataclass(frozen=True)
class EngineInfo:
    """What a loaded backend can do; the UI and API adapt to this instead of checking types."""

    name: str  # display name, e.g. "CosyVoice-300M-SFT"
    family: str  # "v1", "v2", "v3" or "offline"
    sample_rate: int
    modes: tuple[Mode, ...]
    speakers: tuple[str, ...] = ()
    device: str = "cpu"
    streaming: bool = True
    instruct_examples: tuple[str, ...] = ()
    notes: str = ""  # shown to the user (e.g. what an approximate backend can and cannot do)
    # The key of a localised `notes` (summary + details) in the UI's string tables (ui/strings.py);
    # empty: the UI shows `notes` as it is. REST clients keep reading the English `notes`.
    notes_key: str = ""
    saved_voices: tuple[str, ...] = ()  # saved-voice ids registered with this engine (usable as `speaker`)
    voice_match: str = "clone"  # "clone": real cloning; "approximate": a nearest-voice match (offline)
    match_levels: tuple[str, ...] = ()  # approximate backends: the `voice_match` levels of a request
    default_speaker: str = ""  # the backend's own default preset ("" = its first)
    speaker_genders: tuple[tuple[str, str], ...] = ()  # (preset, "female" | "male") where the backend knows
    # (preset, language of its training data ("ja", "en-US", "mixed"), "female" | "male" | "mixed") where the
    # backend knows: the UI labels presets whose names say neither (the offline voice's "jf_gongitsune").
    speaker_traits: tuple[tuple[str, str, str], ...] = ()
    languages: tuple[str, ...] = ()  # languages it speaks, where it is limited (empty: the model's own)
    precision: Precision | None = None  # None: no precision switch (offline, remote)
    backend: str = ""  # what runs it, e.g. "kokoro-82m-int8-onnx", "espeak-ng", "remote http://host:7860"
    instructions: tuple[Instruction, ...] = ()  # the family's known-good instructions (instruct mode)
    text_tags: tuple[str, ...] = ()  # inline tags the model was trained on, e.g. "[breath]", "<strong></strong>"
    pronunciation: tuple[str, ...] = ()  # inline pronunciation hints it reads: "pinyin" ([j][ǐ]), "cmu" ([R][EH1][D])
    text_caveats: tuple[str, ...] = ()  # known text limits the UI warns about: "ja_kanji" (kana right, kanji maybe not)
    # True: instruct mode takes a voice (recording or saved voice) like zero-shot (CosyVoice2/3's instruct2);
    # False: it takes a preset speaker (CosyVoice-300M-Instruct).
    instruct_voice: bool = False
    decoder: SpeechDecoder | None = None  # the speech-token decoder's length facts (CosyVoice), for take checks

    def supports(self, mode: Mode) -> bool:
        return mode in self.modes

    @property
    def presets(self) -> tuple[str, ...]:
        """The preset speakers alone: `speakers` less the saved voices a backend also accepts there (offline)."""
        saved = set(self.saved_voices)
        return tuple(name for name in self.speakers if name not in saved)
