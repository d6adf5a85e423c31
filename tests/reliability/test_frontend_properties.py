"""Property tests of every family's text frontend (issue 13, item 2): any unicode string through
normalisation → splitting → tokenisation either gives well-formed output or raises our typed error.

"Any string" means every code point hypothesis can make, lone surrogates included (a JSON body can carry
`"\\ud800"`), plus strings built from the pieces that have broken text frontends before: special-token syntax,
inline tags, digits of other scripts, control characters, bidi marks, combining marks, emoji sequences and
very long repeats. Well-formed output is a list of str segments and, for each, ids inside the tokenizer's
vocabulary (CosyVoice v1/v2/v3) or phoneme chunks of the Kokoro vocabulary within the model's limit (the
offline default voice). Anything else raised is a defect.

The runs are reproducible (`derandomize=True`, no example database) and bounded; for a longer local run set
FRONTEND_EXAMPLES, e.g. `FRONTEND_EXAMPLES=5000 nice -n 19 .venv/bin/python -m pytest -q
tests/reliability/test_frontend_properties.py`.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cosyvoice_ui.cosyvoice.config import read_yaml
from cosyvoice_ui.cosyvoice.families import detect
from cosyvoice_ui.cosyvoice.frontend import text as text_frontend
from cosyvoice_ui.cosyvoice.registry import backend_for
from cosyvoice_ui.errors import CosyVoiceError, InvalidRequest
from cosyvoice_ui.types import Mode

EXAMPLES = int(os.environ.get("FRONTEND_EXAMPLES", "200"))
PROPERTY = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture])

ANY_CHAR = st.characters(exclude_categories=())  # every code point, surrogates (Cs) included
FRAGMENTS = (
    # special-token syntax and inline tags of each family
    "<|", "|>", "<|en|>", "<|zh|>", "<|endofprompt|>", "<|endoftext|>", "<|endofsystem|>", "<|0.00|>",
    "[breath]", "[laughter]", "<strong>", "</strong>", "[j][ǐ]", "[AA1]", "[R][EH1][D]", "[", "]", "<", ">",
    # digits, numbers and what the TN rules rewrite
    "0", "2024", "3.14", "-7", "$5", "5%", "1e308", "9" * 60, "١٢٣", "٣.٥", "໓", "Ⅻ", "½", "²", "³", "１２",
    "——", " - ", "（", "）", "【", "】", "`", "，", "、", "。", "!!", "?\"", "”", "...", "…", "Mr.", "e.g.",
    # scripts, marks and controls
    "你好", "世界", "こんにちは", "한국어", "Привет", "مرحبا", "שלום", "ﬁ", "ｆｕｌｌ", "café", "e\u0301",
    "\u0301\u0302\u0303", "\u200b", "\u200d", "\u200e", "\u200f", "\u202e", "\u2066", "\ufeff", "\ufffd",
    "\x00", "\x07", "\x1b[31m", "\x7f", "\x85", "\u2028", "\r\n", "\n\n", "\t", " ", "  ",
    "\ud800", "\udfff", "\udbff\udc00", "👍🏽", "👨‍👩‍👧", "🇫🇷", "🙂",
    # look like markup or code
    "<script>alert(1)</script>", "'; DROP TABLE voices;--", "&amp;", "%s%n", "{0}", "../../etc/passwd",
)
FRAGMENT = st.sampled_from(FRAGMENTS) | st.text(ANY_CHAR, max_size=4)
TEXTS = st.one_of(
    st.text(ANY_CHAR, max_size=200),
    st.lists(FRAGMENT, max_size=40).map("".join),
    # very long: a few pieces repeated into thousands of characters
    st.builds(lambda parts, times: "".join(parts) * times, st.lists(FRAGMENT, min_size=1, max_size=4),
              st.integers(min_value=50, max_value=400)),
)
SPEAKING_MODES = tuple(m for m in Mode if m is not Mode.VC)
# The offline G2P spends ~50 ms on each word its dictionaries do not know (a neural fallback), and random text
# is mostly such words: fewer and shorter examples there keep the file within a minute of one core.
OFFLINE_PROPERTY = settings(PROPERTY, max_examples=max(1, EXAMPLES // 4))
OFFLINE_TEXTS = st.one_of(st.text(ANY_CHAR, max_size=40), st.lists(FRAGMENT, max_size=10).map("".join))


def assert_typed(exc: BaseException) -> None:
    """What may be raised: our own error, with a readable message (never a repr or a bare type name)."""
    assert isinstance(exc, CosyVoiceError), f"{type(exc).__name__}: {exc}"
    assert str(exc).strip() and "object at 0x" not in str(exc) and "Traceback" not in str(exc)
    if isinstance(exc, InvalidRequest):
        assert exc.code and exc.message


# --- CosyVoice v1 / v2 / v3 ---------------------------------------------------------------------------------


class CosyVoiceFrontend:
    """The frontend of one model folder as the engine runs it: the family's tokenizer and input recipe,
    built through the registry from the folder's own yaml (no weights are loaded)."""

    def __init__(self, model_dir: Path) -> None:
        folder = detect(model_dir)
        backend = backend_for(folder.family)
        config = backend.parse_config(read_yaml(folder.path / folder.family.yaml_name), folder.family.yaml_name)
        self.tokenizer = backend.text_tokenizer(folder.path, config)
        self.recipe = backend.input_recipe(config)
        self.n_vocab = self.tokenizer.n_vocab

    def encode(self, text: str) -> list[int]:
        ids = self.tokenizer.encode(text)
        assert isinstance(ids, list) and all(type(i) is int and 0 <= i < self.n_vocab for i in ids), ids[:20]
        return ids

    def run(self, text: str) -> None:
        """Segments (as `CosyVoiceEngine._segments`), then every mode's model text ids; raises on a bad shape."""
        segments = text_frontend.normalize(text.strip(), split=True, count_tokens=self.tokenizer.count)
        assert isinstance(segments, list) and all(isinstance(s, str) for s in segments), segments
        for segment in segments:
            for mode in SPEAKING_MODES:
                self.encode(self.recipe.spoken_text(mode, segment))
        whole = text_frontend.normalize(text, split=False)  # prompt transcripts and instructions
        assert isinstance(whole, str)
        for mode in (Mode.ZERO_SHOT, Mode.INSTRUCT):
            self.encode(self.recipe.prompt_text(mode, whole))
        self.encode(text)  # text_frontend=False: the raw text goes straight to the tokenizer


@pytest.fixture(scope="module", params=["v1", "v2", "v3"])
def cosyvoice_frontend(request: pytest.FixtureRequest) -> CosyVoiceFrontend:
    folder = request.getfixturevalue({"v1": "tiny_base", "v2": "tiny_v2", "v3": "tiny_v3"}[request.param])
    return CosyVoiceFrontend(folder)


@PROPERTY
@given(text=TEXTS)
def test_cosyvoice_frontend_works_or_raises_typed(cosyvoice_frontend: CosyVoiceFrontend, text: str) -> None:
    try:
        cosyvoice_frontend.run(text)
    except AssertionError:
        raise
    except Exception as exc:  # noqa: BLE001 - the property is about which exceptions escape
        assert_typed(exc)


def test_the_property_sees_surrogates_and_typed_errors(cosyvoice_frontend: CosyVoiceFrontend) -> None:
    """A lone surrogate is refused with a specific message on every family, plain text still works."""
    with pytest.raises(InvalidRequest) as raised:
        cosyvoice_frontend.run("broken \ud800 text")
    assert raised.value.code == "text_invalid" and "U+D800" in raised.value.message
    cosyvoice_frontend.run("Hello world, 2024! 你好，世界。")


# --- the offline default voice (Kokoro-82M) ------------------------------------------------------------------


@pytest.fixture(scope="module")
def offline_frontend():
    from cosyvoice_ui.offline.assets import load_assets, offline_available

    ok, reason = offline_available()
    if not ok:
        pytest.skip(reason)
    from cosyvoice_ui.offline.frontend import OfflineFrontend

    frontend = OfflineFrontend(load_assets().vocab)
    frontend.phonemizer.warm_up()
    return frontend


def run_offline(frontend, text: str) -> None:
    """As `OfflineEngine` does: the speakable check, then sentences → language runs → G2P → chunks."""
    from cosyvoice_ui.offline.validation import check_speakable

    check_speakable(text)
    ids_in_vocab = set(frontend.phonemizer.vocab.values())
    for split in (True, False):
        sentences = frontend.prepare(text, split=split)
        assert isinstance(sentences, list)
        for sentence in sentences:
            assert sentence.ids and len(sentence.ids) == len(sentence.phonemes)
            for ids in sentence.ids:
                assert 0 < len(ids) <= frontend.max_phonemes and set(ids) <= ids_in_vocab, ids


@OFFLINE_PROPERTY
@given(text=OFFLINE_TEXTS)
def test_offline_frontend_works_or_raises_typed(offline_frontend, text: str) -> None:
    try:
        run_offline(offline_frontend, text)
    except AssertionError:
        raise
    except Exception as exc:  # noqa: BLE001 - the property is about which exceptions escape
        assert_typed(exc)


def test_offline_property_sees_typed_errors(offline_frontend) -> None:
    with pytest.raises(InvalidRequest) as raised:
        run_offline(offline_frontend, "Привет 👍🏽")
    assert raised.value.code == "text_unsupported_language"
    run_offline(offline_frontend, "Hello world, 2024! 你好，世界。" * 60)  # long, in the dictionaries


def test_offline_reads_what_its_g2p_libraries_refuse(offline_frontend) -> None:
    """Found by the property: a number of 19+ digits (the English G2P raised NumberError) and a rare Han
    character misaki cannot turn into IPA (it raised ValueError for the whole run)."""
    (sentence,) = offline_frontend.prepare("Call 1234567890123456789012 now")
    assert sentence.ids
    (sentence,) = offline_frontend.prepare("你好龴世界")
    assert "ʂɨ↘ʨje↘" in sentence.phonemes[0]  # the rest of the run is still read (世界)
