"""The v1 input recipe (cosyvoice-models.md §2.8): text decorations and which tensors go where, per mode."""

from __future__ import annotations

import pytest
import torch

from cosyvoice_ui.cosyvoice.frontend.prompt import PromptFeatures
from cosyvoice_ui.cosyvoice.recipes import END_OF_PROMPT, V1InputRecipe
from cosyvoice_ui.types import Mode

RECIPE = V1InputRecipe(n_mels=80)
PROMPT = PromptFeatures(speech_tokens=torch.arange(25).unsqueeze(0), mel=torch.randn(1, 43, 80),
                        embedding=torch.randn(1, 192))
SPEAKER = torch.randn(1, 192)


@pytest.mark.parametrize(("text", "tagged"), [
    ("Hello there.", "<|en|>Hello there."),
    ("你好，世界。", "<|zh|>你好，世界。"),
    ("こんにちは世界", "<|ja|>こんにちは世界"),  # kana wins over the shared CJK ideographs
    ("안녕하세요", "<|ko|>안녕하세요"),
    ("<|yue|>早晨", "<|yue|>早晨"),  # a tag the user typed is kept, not doubled
])
def test_cross_lingual_text_gets_a_language_tag(text: str, tagged: str) -> None:
    assert RECIPE.spoken_text(Mode.CROSS_LINGUAL, text) == tagged
    assert RECIPE.spoken_text(Mode.ZERO_SHOT, text) == text  # only cross-lingual was trained with tags


def test_instruct_text_ends_with_end_of_prompt_once() -> None:
    assert RECIPE.prompt_text(Mode.INSTRUCT, " A calm voice. ") == "A calm voice." + END_OF_PROMPT
    assert RECIPE.prompt_text(Mode.INSTRUCT, "Sad." + END_OF_PROMPT) == "Sad." + END_OF_PROMPT
    assert RECIPE.prompt_text(Mode.ZERO_SHOT, "a transcript") == "a transcript"


def test_each_mode_puts_its_tensors_where_v1_expects_them() -> None:
    ids, prompt_ids = [5, 6, 7], [1, 2]
    sft = RECIPE.assemble(Mode.SFT, ids, speaker_embedding=SPEAKER)
    assert sft.text.tolist() == [ids] and sft.prompt_text.shape == (1, 0) and sft.llm_prompt_tokens.shape == (1, 0)
    assert sft.llm_embedding is SPEAKER and sft.flow_embedding is SPEAKER and sft.prompt_mel.shape == (1, 0, 80)

    instruct = RECIPE.assemble(Mode.INSTRUCT, ids, prompt_text_ids=prompt_ids, speaker_embedding=SPEAKER)
    assert instruct.prompt_text.tolist() == [prompt_ids]
    assert instruct.llm_embedding.shape == (0, 192) and instruct.flow_embedding is SPEAKER  # no x-vector in the LLM

    zero_shot = RECIPE.assemble(Mode.ZERO_SHOT, ids, prompt_text_ids=prompt_ids, prompt=PROMPT)
    assert zero_shot.llm_prompt_tokens is PROMPT.speech_tokens and zero_shot.flow_prompt_tokens is PROMPT.speech_tokens
    assert zero_shot.prompt_mel is PROMPT.mel and zero_shot.llm_embedding is PROMPT.embedding

    cross = RECIPE.assemble(Mode.CROSS_LINGUAL, ids, prompt=PROMPT)
    assert cross.prompt_text.shape == (1, 0) and cross.llm_prompt_tokens.shape == (1, 0)
    assert cross.flow_prompt_tokens is PROMPT.speech_tokens and cross.flow_embedding is PROMPT.embedding


def test_voice_conversion_skips_the_llm_inputs() -> None:
    source = torch.arange(40).unsqueeze(0)
    vc = RECIPE.voice_conversion(source, PROMPT)
    assert vc.text is source and vc.prompt_text.shape == (1, 0) and vc.llm_prompt_tokens.shape == (1, 0)
    assert vc.flow_prompt_tokens is PROMPT.speech_tokens and vc.flow_embedding is PROMPT.embedding
    with pytest.raises(ValueError, match="no LLM input"):
        RECIPE.assemble(Mode.VC, [1], prompt=PROMPT)
