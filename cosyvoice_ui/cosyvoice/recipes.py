"""Input recipes: how a family turns one segment of a request into its `ModelInput` (cosyvoice-models.md
§2.8): which ids, tokens and x-vectors go where, and the text decorations the family was trained with
(v1: a whisper language tag on cross-lingual text, `<|endofprompt|>` after instruct text).

Pure bookkeeping on texts and on tensors that the tokenizer and `PromptEncoder` already produced. The
registry says which recipe a family uses; the engine only calls the `InputRecipe` methods.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol

import torch

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
