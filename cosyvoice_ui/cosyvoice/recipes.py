"""Input recipes: how a family turns one segment of a request into its `ModelInput` (cosyvoice-models.md
§2.8): which ids, tokens and x-vectors go where, and the text decorations the family was trained with
(v1: a whisper language tag on cross-lingual text, `<|endofprompt|>` after instruct text; v2: `<|endofprompt|>`
after instruct text; v3: the system prompt "You are a helpful assistant." and `<|endofprompt|>`, and both align
the prompt to two mel frames per token).

Pure bookkeeping on texts and on tensors that the tokenizer and `PromptEncoder` already produced. The
registry says which recipe a family uses; the engine only calls the `InputRecipe` methods.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol

import torch

from ..errors import InvalidRequest
from ..types import Mode
from .frontend.prompt import PromptFeatures

END_OF_PROMPT = "<|endofprompt|>"
_TAG = re.compile(r"<\|[a-z]{2,3}\|>")
_HANGUL = re.compile(r"[\uac00-\ud7af\u1100-\u11ff\u3130-\u318f]")
_KANA = re.compile(r"[\u3040-\u30ff]")
_CJK = re.compile(r"[\u4e00-\u9fff]")


@dataclass(frozen=True)
class ModelInput:
    """Everything one segment needs; empty tensors mean "absent" (not zero-filled)."""

    text: torch.Tensor  # [1, Tt] tts text ids
    prompt_text: torch.Tensor  # [1, Tp] ids prefixed to the text (transcript or instruct text)
    llm_prompt_tokens: torch.Tensor  # [1, Ts] prompt speech tokens the LLM continues from
    llm_embedding: torch.Tensor  # [1, 192] or [0, 192] (no speaker slot)
    flow_prompt_tokens: torch.Tensor  # [1, T1]
    prompt_mel: torch.Tensor  # [1, mel_len1, 80]
    flow_embedding: torch.Tensor  # [1, 192]


def _ids(values: list[int]) -> torch.Tensor:
    return torch.tensor([values], dtype=torch.long)


def empty_ids() -> torch.Tensor:
    return torch.zeros(1, 0, dtype=torch.long)


def has_language_tag(text: str) -> bool:
    return bool(_TAG.search(text))


def language_tag(text: str) -> str:
    """The whisper language tag v1 expects in cross-lingual text, guessed from the script."""
    if _HANGUL.search(text):
        return "<|ko|>"
    if _KANA.search(text):
        return "<|ja|>"
    if _CJK.search(text):
        return "<|zh|>"
    return "<|en|>"


def with_end_of_prompt(instruct_text: str) -> str:
    """v1-Instruct was trained with instruct text ending in the literal `<|endofprompt|>`."""
    text = instruct_text.strip()
    return text if text.endswith(END_OF_PROMPT) else text + END_OF_PROMPT


class InputRecipe(Protocol):
    """What the engine asks a family's recipe (one instance per loaded model)."""

    def prompt_text(self, mode: Mode, text: str) -> str:
        """The text to tokenise as the prompt prefix: a (normalised) zero-shot transcript or instruct text."""
        ...

    def spoken_text(self, mode: Mode, segment: str) -> str:
        """The text to tokenise for one (normalised) segment to speak."""
        ...

    def assemble(self, mode: Mode, text_ids: list[int], *, prompt_text_ids: list[int] | None = None,
                 prompt: PromptFeatures | None = None,
                 speaker_embedding: torch.Tensor | None = None) -> ModelInput:
        """The model inputs of a text mode for one segment."""
        ...

    def voice_conversion(self, source_tokens: torch.Tensor, prompt: PromptFeatures) -> ModelInput:
        """The flow inputs of voice conversion: the source's tokens in the prompt's voice (no LLM)."""
        ...


@dataclass(frozen=True)
class V1InputRecipe:
    """The CosyVoice-300M family's inputs. The LLM takes an x-vector slot (none in instruct mode), the
    flow the prompt's tokens and mel; text gets a language tag (cross-lingual) or `<|endofprompt|>`
    (instruct), as the v1 models were trained."""

    n_mels: int  # mel bins of the prompt features (for empty prompt mels)

    def prompt_text(self, mode: Mode, text: str) -> str:
        return with_end_of_prompt(text) if mode is Mode.INSTRUCT else text

    def spoken_text(self, mode: Mode, segment: str) -> str:
        if mode is Mode.CROSS_LINGUAL and not has_language_tag(segment):
            return language_tag(segment) + segment  # v1 was trained with a language tag here
        return segment

    def voice_conversion(self, source_tokens: torch.Tensor, prompt: PromptFeatures) -> ModelInput:
        none = source_tokens[:, :0]
        return ModelInput(source_tokens, none, none, prompt.embedding, prompt.speech_tokens, prompt.mel,
                          prompt.embedding)

    def assemble(self, mode: Mode, text_ids: list[int], *, prompt_text_ids: list[int] | None = None,
                 prompt: PromptFeatures | None = None,
                 speaker_embedding: torch.Tensor | None = None) -> ModelInput:
        """Build the v1 model inputs of `mode` for one text segment (`text_ids`: its spoken text's ids)."""
        no_tokens = empty_ids()
        no_mel = torch.zeros(1, 0, self.n_mels)
        no_embedding = torch.zeros(0, 192)
        text = _ids(text_ids)
        if mode is Mode.SFT:
            assert speaker_embedding is not None, "sft needs a speaker embedding"
            return ModelInput(text, no_tokens, no_tokens, speaker_embedding, no_tokens, no_mel, speaker_embedding)
        if mode is Mode.INSTRUCT:
            assert speaker_embedding is not None and prompt_text_ids is not None, "instruct needs speaker + instruct ids"
            # No x-vector in the LLM: upstream drops it so the instruct text, not the speaker, sets the style.
            return ModelInput(text, _ids(prompt_text_ids), no_tokens,
                              no_embedding.new_zeros(0, speaker_embedding.shape[1]), no_tokens, no_mel,
                              speaker_embedding)
        assert prompt is not None, f"{mode.value} needs prompt features"
        if mode is Mode.ZERO_SHOT:
            assert prompt_text_ids is not None, "zero_shot needs the prompt transcript ids"
            return ModelInput(text, _ids(prompt_text_ids), prompt.speech_tokens, prompt.embedding,
                              prompt.speech_tokens, prompt.mel, prompt.embedding)
        if mode is Mode.CROSS_LINGUAL:
            return ModelInput(text, no_tokens, no_tokens, prompt.embedding, prompt.speech_tokens, prompt.mel,
                              prompt.embedding)
        raise ValueError(f"mode {mode.value} has no LLM input (vc uses the source tokens directly)")


# --------------------------------------------------------------------------------------------- v2 / v3

# The system prompt Fun-CosyVoice3 was trained with (upstream example.py and `instruct_list`): zero-shot
# transcripts and cross-lingual text start with SYSTEM_PREFIX, instruct texts with "You are a helpful assistant. ".
SYSTEM_PROMPT = "You are a helpful assistant."
SYSTEM_PREFIX = SYSTEM_PROMPT + END_OF_PROMPT


def ensure_end_of_prompt(text: str) -> str:
    """`text` with `<|endofprompt|>` at its end, unless the user already typed it somewhere (never doubled)."""
    text = text.strip()
    return text if END_OF_PROMPT in text else text + END_OF_PROMPT


def with_system_prefix(text: str) -> str:
    """v3's zero-shot / cross-lingual / sft text: SYSTEM_PREFIX in front, unless `<|endofprompt|>` is typed."""
    return text if END_OF_PROMPT in text else SYSTEM_PREFIX + text


def system_instruction(instruct_text: str) -> str:
    """v3's instruct text: "You are a helpful assistant. <instruction><|endofprompt|>", adding only the missing
    parts (a typed system prompt or `<|endofprompt|>` is kept, not doubled)."""
    text = instruct_text.strip()
    if not text.startswith(SYSTEM_PROMPT):
        text = f"{SYSTEM_PROMPT} {text}"
    return ensure_end_of_prompt(text)


# A zero-shot transcript is "obviously" not the prompt's when it has fewer than this many letters per second
# of prompt speech, or more (plus a slack for short prompts); people speak ~3-8 CJK characters or ~10-18
# Latin letters a second.
TRANSCRIPT_CHARS_PER_SECOND = (0.5, 40.0)
TRANSCRIPT_SLACK_CHARS = 10


def check_transcript_length(transcript: str, seconds: float) -> None:
    """Raise InvalidRequest when a zero-shot transcript is missing or cannot be what `seconds` of prompt
    speech say (a length-ratio check: Fun-CosyVoice3 speaks a mismatched transcript badly)."""
    letters = sum(1 for ch in transcript.replace(END_OF_PROMPT, "") if ch.isalnum())
    if letters == 0:
        raise InvalidRequest("transcript_missing", "this model needs the transcript of the prompt audio (exactly "
                             "what is said in it); type it, or use cross-lingual mode, which needs none")
    low, high = TRANSCRIPT_CHARS_PER_SECOND
    if letters < low * seconds or letters > high * seconds + TRANSCRIPT_SLACK_CHARS:
        raise InvalidRequest("transcript_mismatch", f"the transcript ({letters} letters) does not fit the "
                             f"{seconds:.1f} s prompt audio; type exactly what is said in the recording, or use "
                             "cross-lingual mode, which needs no transcript", letters=str(letters),
                             seconds=f"{seconds:.1f}")


def align_prompt(prompt: PromptFeatures, token_mel_ratio: int) -> PromptFeatures:
    """§2.7: keep the first n tokens and ratio·n mel frames, n = min(mel frames // ratio, tokens): the causal
    flows derive the generated length from exactly this ratio. The same (cached) object when already aligned."""
    n = min(prompt.mel.shape[1] // token_mel_ratio, prompt.speech_tokens.shape[1])
    if prompt.speech_tokens.shape[1] == n and prompt.mel.shape[1] == n * token_mel_ratio:
        return prompt
    return PromptFeatures(speech_tokens=prompt.speech_tokens[:, :n], mel=prompt.mel[:, : n * token_mel_ratio],
                          embedding=prompt.embedding)


@dataclass(frozen=True)
class _QwenInputs:
    """What the Qwen2-LM generations' inputs share (§2.8): the LLM takes no x-vector (the slot is filled but
    ignored), instruct is upstream's instruct2 (instruct text + a voice recording, no LLM prompt speech), and every
    prompt is aligned to `token_mel_ratio` mel frames per token, voice conversion included (upstream skips it
    there, a quirk: its flow then mis-sizes the output)."""

    n_mels: int  # mel bins of the prompt features (for empty prompt mels)
    token_mel_ratio: int  # the yaml's `token_mel_ratio` (`ModelConfig.chunking`)

    def voice_conversion(self, source_tokens: torch.Tensor, prompt: PromptFeatures) -> ModelInput:
        prompt = align_prompt(prompt, self.token_mel_ratio)
        none = source_tokens[:, :0]
        return ModelInput(source_tokens, none, none, prompt.embedding, prompt.speech_tokens, prompt.mel,
                          prompt.embedding)

    def assemble(self, mode: Mode, text_ids: list[int], *, prompt_text_ids: list[int] | None = None,
                 prompt: PromptFeatures | None = None,
                 speaker_embedding: torch.Tensor | None = None) -> ModelInput:
        """Build the model inputs of `mode` for one text segment (`text_ids`: its spoken text's ids)."""
        no_tokens = empty_ids()
        text = _ids(text_ids)
        if mode is Mode.SFT:
            assert speaker_embedding is not None, "sft needs a speaker embedding"
            return ModelInput(text, no_tokens, no_tokens, speaker_embedding, no_tokens,
                              torch.zeros(1, 0, self.n_mels), speaker_embedding)
        assert prompt is not None, f"{mode.value} needs prompt features"
        prompt = align_prompt(prompt, self.token_mel_ratio)
        if mode is Mode.ZERO_SHOT:
            assert prompt_text_ids is not None, "zero_shot needs the prompt transcript ids"
            return ModelInput(text, _ids(prompt_text_ids), prompt.speech_tokens, prompt.embedding,
                              prompt.speech_tokens, prompt.mel, prompt.embedding)
        if mode is Mode.CROSS_LINGUAL:
            return ModelInput(text, no_tokens, no_tokens, prompt.embedding, prompt.speech_tokens, prompt.mel,
                              prompt.embedding)
        if mode is Mode.INSTRUCT:
            assert prompt_text_ids is not None, "instruct needs the instruct text ids"
            return ModelInput(text, _ids(prompt_text_ids), no_tokens, prompt.embedding, prompt.speech_tokens,
                              prompt.mel, prompt.embedding)
        raise ValueError(f"mode {mode.value} has no LLM input (vc uses the source tokens directly)")


@dataclass(frozen=True)
class V2InputRecipe(_QwenInputs):
    """The CosyVoice2-0.5B family's inputs: plain transcripts and text (no language tags: the Qwen vocabulary
    has none, and a typed one stays ordinary text, as upstream), instruct text ending in `<|endofprompt|>`
    (since Dec 2025 upstream leaves adding it to the caller; we add it once)."""

    def prompt_text(self, mode: Mode, text: str) -> str:
        return ensure_end_of_prompt(text) if mode is Mode.INSTRUCT else text

    def spoken_text(self, mode: Mode, segment: str) -> str:
        return segment


@dataclass(frozen=True)
class V3InputRecipe(_QwenInputs):
    """The Fun-CosyVoice3-0.5B family's inputs: the system prompt and `<|endofprompt|>` (whose id the v3 LLM
    requires in prompt text + text) go in front of the zero-shot transcript, in front of the spoken text when
    there is no prompt text (cross-lingual, sft), and around the instruct text; never twice."""

    def prompt_text(self, mode: Mode, text: str) -> str:
        if mode is Mode.INSTRUCT:
            return system_instruction(text)
        return with_system_prefix(text) if mode is Mode.ZERO_SHOT else text

    def spoken_text(self, mode: Mode, segment: str) -> str:
        return with_system_prefix(segment) if mode in (Mode.CROSS_LINGUAL, Mode.SFT) else segment
