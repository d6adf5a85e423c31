"""The v2/v3 Qwen2 tokenizer (cosyvoice-models.md §2.3) on a byte-level BPE vocabulary the test trains itself,
saved in the official CosyVoice-BlankEN layout (no Qwen tokenizer files ship with the fixtures)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cosyvoice_ui.cosyvoice.frontend.qwen_tokenizer import (ADDED_SPECIALS, ARPABET, PINYIN, QWEN_FOLDER,
                                                            QwenTokenizer, added_special_tokens)
from cosyvoice_ui.errors import CheckpointError
from cosyvoice_ui.testing.qwen_vocab import trained_vocabulary, write_qwen_vocab

from ..conftest import fixture_dir

V2_SPECIALS = {
    "<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645, "<|endofprompt|>": 151646,
    "[breath]": 151647, "<strong>": 151648, "</strong>": 151649, "[noise]": 151650, "[laughter]": 151651,
    "[cough]": 151652, "[clucking]": 151653, "[accent]": 151654, "[quick_breath]": 151655, "<laughter>": 151656,
    "</laughter>": 151657, "[hissing]": 151658, "[sigh]": 151659, "[vocalized-noise]": 151660,
    "[lipsmack]": 151661, "[mn]": 151662,
}
PLAIN = [
    "Hello world, this is a tiny tokenizer.",
    "收到好友从远方寄来的生日礼物。",
    "Mixed 中文 and English; numbers 2024!\nNew line\ttab  two spaces",
    "emoji 🙂 and accents café naïve",
    "",
]


@pytest.fixture(scope="module")
def blank_en(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """vocab.json + merges.txt + tokenizer_config.json, as the official folders ship."""
    return write_qwen_vocab(tmp_path_factory.mktemp("qwen") / QWEN_FOLDER)


@pytest.fixture(scope="module")
def blank_en_json(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same vocabulary as a single tokenizer.json."""
    return write_qwen_vocab(tmp_path_factory.mktemp("qwen_json") / QWEN_FOLDER, layout="json")


@pytest.fixture(scope="module")
def v2(blank_en: Path) -> QwenTokenizer:
    return QwenTokenizer(blank_en, added_special_tokens("cosyvoice2"))


@pytest.fixture(scope="module")
def v3(blank_en: Path) -> QwenTokenizer:
    return QwenTokenizer(blank_en, added_special_tokens("cosyvoice3"))


@pytest.mark.parametrize("text", PLAIN)
def test_plain_text_round_trips_with_the_reference_ids(v2: QwenTokenizer, v3: QwenTokenizer, text: str) -> None:
    reference = trained_vocabulary().encode(text, add_special_tokens=False).ids
    assert v2.encode(text) == reference == v3.encode(text)  # Qwen2's pipeline, no BOS/EOS
    assert v2.decode(v2.encode(text)) == text
    assert all(i < 151643 for i in reference)


def test_digits_are_one_token_each(v2: QwenTokenizer) -> None:
    ids = v2.encode("2024")
    assert len(ids) == 4 and v2.decode(ids[:1]) == "2"


def test_v2_specials_have_their_official_ids(v2: QwenTokenizer) -> None:
    assert v2.n_vocab == 151663
    assert v2.special_ids() == V2_SPECIALS
    for token, token_id in V2_SPECIALS.items():
        assert v2.encode(token) == [token_id], token
    assert v2.token_id("<|endofsystem|>") is None and v2.token_id("[j]") is None


def test_v3_specials_match_the_fixture_table(v3: QwenTokenizer) -> None:
    manifest = json.loads((fixture_dir("cosyvoice3-tiny") / "manifest.json").read_text(encoding="utf-8"))
    table = manifest["special_token_ids"]
    assert v3.n_vocab == 151924
    for token, token_id in {**table["text"], **table["used_in_inputs"]}.items():
        assert v3.encode(token) == [token_id], token
    assert len(ARPABET) == 84 and len(PINYIN) == 176
    assert [v3.token_id(t) for t in ARPABET] == list(range(151664, 151748))
    assert [v3.token_id(t) for t in PINYIN] == list(range(151748, 151924))
    assert (v3.token_id("[AA]"), v3.token_id("[ZH]"), v3.token_id("[a]"), v3.token_id("[ǜ]")) == (
        151664, 151747, 151748, 151923)
    assert {k: v for k, v in v3.special_ids().items() if k in V2_SPECIALS} == V2_SPECIALS


def test_a_typed_end_of_prompt_is_one_id(v2: QwenTokenizer, v3: QwenTokenizer) -> None:
    for tok in (v2, v3):
        ids = tok.encode("You are a helpful assistant.<|endofprompt|>希望你以后")
        assert ids.count(151646) == 1 and tok.end_of_prompt_id == 151646
        head = tok.encode("You are a helpful assistant.")
        assert ids[: len(head)] == head and ids[len(head)] == 151646
        assert ids[len(head) + 1:] == tok.encode("希望你以后")


def test_pronunciation_hints_map_as_upstream(v2: QwenTokenizer, v3: QwenTokenizer) -> None:
    text = "对报道[j][ǐ]予好评"
    ids = v3.encode(text)
    assert ids == v3.encode("对报道") + [151797, 151913] + v3.encode("予好评")
    # The v2 list has no phoneme tokens: the same text is plain byte-level BPE there, as upstream.
    assert v2.encode(text) == trained_vocabulary().encode(text, add_special_tokens=False).ids
    assert v3.encode("[HH][AH0][L][OW1]") == [v3.token_id(t) for t in ("[HH]", "[AH0]", "[L]", "[OW1]")]
    assert len(v2.encode("[AH0]")) > 1


def test_tags_and_language_tags(v2: QwenTokenizer, v3: QwenTokenizer) -> None:
    for tok in (v2, v3):
        ids = tok.encode("他突然[laughter]停下来，<strong>勇气</strong>[breath]")
        assert ids[len(tok.encode("他突然"))] == 151651
        assert 151648 in ids and 151649 in ids and ids[-1] == 151647
        # Qwen's vocabulary has no whisper language tags: `<|en|>` is ordinary text (several ids).
        assert len(tok.encode("<|en|>")) > 1 and all(i < 151643 for i in tok.encode("<|en|>"))


def test_decode_skips_specials_unless_asked(blank_en: Path, v3: QwenTokenizer) -> None:
    ids = v3.encode("[breath]Hello<|endofprompt|> world")
    assert v3.decode(ids) == "Hello world"
    keep = QwenTokenizer(blank_en, added_special_tokens("cosyvoice3"), skip_special_tokens=False)
    assert keep.decode(ids) == "[breath]Hello<|endofprompt|> world"


def test_tokenizer_json_layout_gives_the_same_ids(blank_en_json: Path, v3: QwenTokenizer) -> None:
    other = QwenTokenizer(blank_en_json, added_special_tokens("cosyvoice3"))
    for text in [*PLAIN, "You are a helpful assistant.<|endofprompt|>[j][ǐ]予好评[breath]"]:
        assert other.encode(text) == v3.encode(text)
    assert other.n_vocab == v3.n_vocab


def test_version_picks_the_list(blank_en: Path) -> None:
    assert added_special_tokens(None) == ADDED_SPECIALS["cosyvoice2"]
    assert len(added_special_tokens("cosyvoice3")) == len(added_special_tokens("cosyvoice2")) + 261
    with pytest.raises(CheckpointError, match="unknown text tokenizer version"):
        added_special_tokens("cosyvoice9")
    model_dir = blank_en.parent
    tok = QwenTokenizer.for_model(model_dir, {"token_path": "", "skip_special_tokens": True, "version": "cosyvoice3"})
    assert tok.encode("[j]") == [151797]
    assert QwenTokenizer.for_model(model_dir, {"skip_special_tokens": True}).n_vocab == 151663


def test_missing_files_are_checkpoint_errors(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="missing"):
        QwenTokenizer(tmp_path / "absent").encode("x")
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match="neither tokenizer.json nor vocab.json"):
        QwenTokenizer(tmp_path / "empty").encode("x")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "tokenizer.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(CheckpointError, match="cannot be read"):
        QwenTokenizer(bad).n_vocab


def test_without_tokenizer_config_the_ids_are_the_same(tmp_path: Path, blank_en: Path, v3: QwenTokenizer) -> None:
    """Qwen's three specials then come first in upstream's list (eos = <|endoftext|>, <|im_start|>, <|im_end|>)."""
    bare = tmp_path / QWEN_FOLDER
    bare.mkdir()
    for name in ("vocab.json", "merges.txt"):
        (bare / name).write_bytes((blank_en / name).read_bytes())
    tok = QwenTokenizer(bare, added_special_tokens("cosyvoice3"))
    assert tok.special_ids() == v3.special_ids() and tok.n_vocab == 151924


def test_a_tokenizer_config_that_disagrees_with_the_vocabulary_is_refused(tmp_path: Path, blank_en: Path) -> None:
    wrong = tmp_path / QWEN_FOLDER
    wrong.mkdir()
    for name in ("vocab.json", "merges.txt"):
        (wrong / name).write_bytes((blank_en / name).read_bytes())
    config = json.loads((blank_en / "tokenizer_config.json").read_text(encoding="utf-8"))
    config["added_tokens_decoder"] = {"151650": config["added_tokens_decoder"]["151643"]}
    (wrong / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    with pytest.raises(CheckpointError, match="puts <\\|endoftext\\|> at id 151650"):
        QwenTokenizer(wrong).encode("x")
