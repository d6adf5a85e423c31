"""The v1 whisper multilingual tokenizer against upstream's encodings (tokenizer_goldens.json)."""

from __future__ import annotations

import gzip
import json
import threading
from pathlib import Path

import pytest

from cosyvoice_ui.errors import CheckpointError
from cosyvoice_ui.cosyvoice.frontend.tokenizer import LANGUAGE_CODES, WhisperTokenizer, special_tokens


@pytest.fixture(scope="module")
def tokenizer() -> WhisperTokenizer:
    return WhisperTokenizer()


@pytest.fixture(scope="module")
def golden(v1_fixture: Path) -> dict:
    # Only the whisper_multilingual section: cosyvoice_25hz belongs to an unreleased model.
    return json.loads((v1_fixture / "tokenizer_goldens.json").read_text(encoding="utf-8"))["whisper_multilingual"]


def test_every_golden_case_encodes_exactly(tokenizer: WhisperTokenizer, golden: dict) -> None:
    assert len(golden["cases"]) >= 20
    for case in golden["cases"]:
        assert tokenizer.encode(case["text"]) == case["ids"], case["text"]


def test_decode_inverts_encode(tokenizer: WhisperTokenizer, golden: dict) -> None:
    for case in golden["cases"]:
        assert tokenizer.decode(case["ids"]) == case["text"]


def test_vocabulary_size(tokenizer: WhisperTokenizer, golden: dict) -> None:
    assert tokenizer.n_vocab == golden["n_vocab"] == 51866
    assert len(special_tokens()) == 51866 - 50257


def test_special_ids(tokenizer: WhisperTokenizer, golden: dict) -> None:
    specials = special_tokens()
    for name, expected in golden["special_token_ids"].items():
        assert specials[name] == expected, name
        assert tokenizer.encode(name) == [expected]
    assert specials["<|translate|>"] == 50359
    assert specials["<|startoflm|>"] == 50361
    assert specials["<|startofprev|>"] == 50362
    assert specials["<|nospeech|>"] == 50363
    assert specials["<|0.00|>"] == 50365
    assert specials["<|0.02|>"] == 50366
    assert specials["<|30.00|>"] == 51865


def test_language_tokens(tokenizer: WhisperTokenizer) -> None:
    assert len(LANGUAGE_CODES) == len(set(LANGUAGE_CODES)) == 100
    assert [tokenizer.language_token(c) for c in ("en", "zh", "de", "ko", "ja", "yue")] == [
        50259, 50260, 50261, 50264, 50266, 50358
    ]
    assert tokenizer.encode("<|ko|>") == [tokenizer.language_token("ko")]
    with pytest.raises(ValueError, match="yue"):
        tokenizer.language_token("xx")


def test_unregistered_markup_is_plain_text(tokenizer: WhisperTokenizer) -> None:
    ids = tokenizer.encode("<|endofprompt|>")
    assert len(ids) > 1 and all(i < 50257 for i in ids)
    assert tokenizer.count("Hello world.") == 3
    assert tokenizer.encode("") == []


def test_corrupt_or_missing_rank_file_is_reported(tmp_path: Path) -> None:
    bad = tmp_path / "multilingual.tiktoken.gz"
    bad.write_bytes(gzip.compress(b"IQ== 0\n"))
    tok = WhisperTokenizer(rank_file=bad)  # constructing reads nothing
    with pytest.raises(CheckpointError, match="sha256"):
        tok.encode("hi")
    bad.write_bytes(b"not gzip")
    with pytest.raises(CheckpointError, match="gzip"):
        WhisperTokenizer(rank_file=bad).encode("hi")
    with pytest.raises(CheckpointError, match="cannot be read"):
        WhisperTokenizer(rank_file=tmp_path / "absent.gz").encode("hi")


def test_first_use_from_many_threads(golden: dict) -> None:
    tok = WhisperTokenizer()
    case = golden["cases"][2]
    results: list[list[int]] = []
    threads = [threading.Thread(target=lambda: results.append(tok.encode(case["text"]))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [case["ids"]] * 8
