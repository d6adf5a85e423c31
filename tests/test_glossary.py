"""The pronunciation glossary: entries and their checks, the JSON shape, the store, applying it per engine,
the preview, and — on the tiny v3 and v1 models — that what the model is fed really changes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cosyvoice_ui import InvalidRequest, Mode, SynthesisRequest, load_engine
from cosyvoice_ui.serving.glossary import (MAX_ENTRIES, MAX_PRONUNCIATION_CHARS, Glossary, GlossaryEntry,
                                           GlossaryStore, apply_glossary, applied, from_json, make_entry,
                                           make_glossary, parse_entries, preview, resolve_glossary, to_json,
                                           read_glossary_file, with_glossary)
from cosyvoice_ui.serving.glossary_hints import canonical_hint
from cosyvoice_ui.testing.fakes import FakeEngine
from cosyvoice_ui.testing.signals import voice_clip

V3_INFO = FakeEngine(name="v3-like", pronunciation=("pinyin", "cmu")).info
PLAIN_INFO = FakeEngine(name="v1-like").info
XIAN = {"word": "Xi'an", "pinyin": "[x][ī][ān]", "respell": "Shee-ahn"}
PROMPT = voice_clip(3.0, seed=1)


def names() -> Glossary:
    return make_glossary("Names", [XIAN, {"word": "GIF", "cmu": "JH IH1 F"}, {"word": "Nguyen", "respell": "Win"},
                                   {"word": "给", "pinyin": "ji3"}])


# --- entries and their checks --------------------------------------------------------------------------------

def test_kinds_are_inferred_and_hints_rewritten_to_the_form_the_model_reads() -> None:
    entries = parse_entries({"Xi'an": "[x][ī][ān]", "read": "[r][eh1][d]", "Nguyen": "Win",
                             "给": {"pinyin": "[jǐ]", "respell": "jee"}})
    assert [(e.kind, e.pronunciation, e.respell) for e in entries] == [
        ("pinyin", "[x][ī][ān]", ""), ("cmu", "[R][EH1][D]", ""), ("respell", "Win", ""),
        ("pinyin", "[j][ǐ]", "jee")]
    # tone digits, whole syllables and unbracketed phones all come out as one bracket per token
    assert canonical_hint("pinyin", "xi1 an1") == "[x][ī][ān]"
    assert canonical_hint("pinyin", "[lv4][nüè]") == "[l][ǜ][n][vè]"
    assert canonical_hint("pinyin", "gui4 liu2 er2") == "[g][uì][l][iú][ér]"
    assert canonical_hint("cmu", "R EH1 D") == "[R][EH1][D]"


def test_every_v3_hint_token_is_accepted_as_written() -> None:
    from cosyvoice_ui.cosyvoice.frontend.qwen_tokenizer import ARPABET, PINYIN

    for token in PINYIN:
        assert canonical_hint("pinyin", token) == token
    for token in ARPABET:
        assert canonical_hint("cmu", token) == token
    # full spellings come out as the v3 tokens spell them (iou → iu, uei → ui, uen → un, ü → u after j q x y)
    written = canonical_hint("pinyin", "zhong1 guo2 xue2 juan1 lv4 nve4 jiou3 guei4 luen2 qü4 er2 yue4 shi5")
    assert written == "[zh][ōng][g][uó][x][ué][j][uān][l][ǜ][n][vè][j][iǔ][g][uì][l][ún][q][ù][ér][y][uè][sh][i]"
    assert set(written[1:-1].split("][")) <= {token[1:-1] for token in PINYIN}


def test_a_table_from_the_ui_skips_blank_rows_and_reads_the_respelling_column() -> None:
    rows = [["Xi'an", "[x][ī][ān]", "Shee-ahn"], ["", "", ""], [None, None, None], ["Nguyen", "Win", ""]]
    assert parse_entries(rows) == (GlossaryEntry("Xi'an", "[x][ī][ān]", "pinyin", "Shee-ahn"),
                                   GlossaryEntry("Nguyen", "Win", "respell"))


@pytest.mark.parametrize(("rows", "code", "words"), [
    ([["", "Win"]], "glossary_empty_word", ["row 1", "word is empty"]),
    ([["Nguyen", ""]], "glossary_missing_pronunciation", ["'Nguyen'", "pronunciation is empty"]),
    ([["给", "[j][ǐǐ]"]], "glossary_bad_hint", ["2 tone marks"]),
    ([["给", "[jx][i3]"]], "glossary_bad_hint", ["[jx] is not pinyin"]),
    ([["归", "[g][úi]"]], "glossary_bad_hint", ["wrong vowel", "[uí]"]),
    ([["red", "[R][EH4][D]"]], "glossary_bad_hint", ["[EH4] is not a CMU phone", "0/1/2"]),
    ([["red", "[R1][EH1][D]"]], "glossary_bad_hint", ["only vowels take a stress digit", "[R]"]),
    ([["red", "[R][EH1][D"]], "glossary_bad_hint", ["every '[' has its ']'"]),
    ([["a", "b" * (MAX_PRONUNCIATION_CHARS + 1)]], "glossary_value_too_long", [str(MAX_PRONUNCIATION_CHARS)]),
    ([["w" * 65, "x"]], "glossary_value_too_long", ["64"]),
    ([["Nguyen", "<|en|>Win"]], "glossary_bad_respelling", ["plain text"]),
    ([{"word": "x", "kind": "ipa", "pronunciation": "ʃ"}], "glossary_bad_kind", ["ipa", "pinyin, cmu, respell"]),
    ([{"word": "x", "pinyin": "[x][ī]", "cmu": "[S]"}], "glossary_invalid", ["not both"]),
    ([{"word": "x", "sound": "y"}], "glossary_invalid", ["unknown field(s) sound"]),
])
def test_bad_entries_get_clear_messages(rows, code: str, words: list[str]) -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse_entries(rows)
    assert caught.value.code == code
    for word in words:
        assert word in caught.value.message


def test_too_many_entries_and_duplicates_are_refused() -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse_entries([[f"word{n}", "x"] for n in range(MAX_ENTRIES + 1)])
    assert caught.value.code == "glossary_too_many" and str(MAX_ENTRIES) in caught.value.message
    assert len(parse_entries([[f"word{n}", "x"] for n in range(MAX_ENTRIES)])) == MAX_ENTRIES
    with pytest.raises(InvalidRequest) as caught:
        make_glossary("x", [["GIF", "Jif"], ["gif", "Ghif"]])
    assert caught.value.code == "glossary_duplicate"
    assert len(make_glossary("x", [["GIF", "Jif"], ["gif", "Ghif"]], case_sensitive=True).entries) == 2


# --- JSON -----------------------------------------------------------------------------------------------------

def test_json_round_trip_and_the_short_shapes() -> None:
    glossary = names()
    data = json.loads(to_json(glossary))
    assert data["version"] == 1 and data["entries"][0] == XIAN
    assert data["entries"][1] == {"word": "GIF", "cmu": "[JH][IH1][F]"}
    assert from_json(to_json(glossary)) == glossary
    assert from_json(json.dumps(data["entries"])).entries == glossary.entries
    assert from_json('{"Nguyen": "Win"}').entries == (GlossaryEntry("Nguyen", "Win", "respell"),)
    with pytest.raises(InvalidRequest) as caught:
        from_json("{not json")
    assert caught.value.code == "glossary_invalid_json" and "1:2" in caught.value.message
    with pytest.raises(InvalidRequest, match="version 2"):
        from_json({"version": 2, "entries": []})


def test_a_glossary_file_as_the_cli_reads_it(tmp_path: Path) -> None:
    path = tmp_path / "places.json"
    path.write_text(json.dumps({"Xi'an": "[xi1][an1]"}), encoding="utf-8")
    glossary = read_glossary_file(path)
    assert glossary.name == "places" and glossary.entries[0].pronunciation == "[x][ī][ān]"
    with pytest.raises(InvalidRequest) as caught:
        read_glossary_file(tmp_path / "missing.json")
    assert caught.value.code == "glossary_unreadable" and str(tmp_path) not in caught.value.message


# --- the store --------------------------------------------------------------------------------------------------

def test_store_saves_lists_reads_back_and_removes(tmp_path: Path) -> None:
    store = GlossaryStore(tmp_path / "glossaries")
    assert store.list() == [] and store.get("names") is None
    saved = store.save(names())
    assert saved.id == "names" and store.get("names") == saved
    again = store.save(make_glossary("Names", {"Nguyen": "Win"}))
    assert again.id == "names-2"  # a new glossary of the same name never overwrites
    assert store.save(Glossary("names", "Names", (GlossaryEntry("Nguyen", "Nwin"),))).entries[0].pronunciation == "Nwin"
    assert [g.id for g in store.list()] == ["names", "names-2"]
    assert json.loads((tmp_path / "glossaries" / "names.json").read_text(encoding="utf-8"))["name"] == "Names"
    assert not list((tmp_path / "glossaries").glob(".*.tmp"))  # no temp file left beside
    with pytest.raises(InvalidRequest) as caught:
        store.require("places")
    assert caught.value.code == "glossary_unknown" and "names, names-2" in caught.value.message
    assert store.remove("names-2") and not store.remove("names-2") and store.ids() == ("names",)
    (tmp_path / "glossaries" / "broken.json").write_text("{", encoding="utf-8")
    assert store.get("broken") is None and [g.id for g in store.list()] == ["names"]
    with pytest.raises(InvalidRequest) as caught:
        store.save(Glossary("", "bad", (GlossaryEntry("red", "[R][EH9][D]", "cmu"),)))  # checked again on save
    assert caught.value.code == "glossary_bad_hint"


def test_resolve_takes_an_id_an_inline_object_or_nothing(tmp_path: Path) -> None:
    store = GlossaryStore(tmp_path)
    saved = store.save(names())
    assert resolve_glossary(store, None) is None and resolve_glossary(store, "") is None
    assert resolve_glossary(store, {}) is None
    assert resolve_glossary(store, "names") == saved
    inline = resolve_glossary(None, {"Nguyen": "Win"})
    assert inline is not None and inline.entries == (GlossaryEntry("Nguyen", "Win", "respell"),)
    assert resolve_glossary(None, [XIAN]).entries[0].respell == "Shee-ahn"
    assert resolve_glossary(None, json.loads(to_json(saved))).entries == saved.entries
    with pytest.raises(InvalidRequest) as caught:
        resolve_glossary(store, "nope")
    assert caught.value.code == "glossary_unknown"
    with pytest.raises(InvalidRequest) as caught:
        resolve_glossary(store, 42)
    assert caught.value.code == "glossary_invalid"


# --- applying -----------------------------------------------------------------------------------------------

def test_each_engine_gets_what_it_reads() -> None:
    text = "We flew to Xi'an, read about GIF files, met Nguyen and 给了他。"
    assert apply_glossary(text, names(), V3_INFO) == ("We flew to [x][ī][ān], read about [JH][IH1][F] files, "
                                                     "met Win and [j][ǐ]了他。")
    result = applied(text, names(), PLAIN_INFO)
    assert result.text == "We flew to Shee-ahn, read about GIF files, met Win and 给了他。"
    assert [e.word for e in result.used] == ["Xi'an", "Nguyen"]
    assert [(e.word, "does not read" in why) for e, why in result.skipped] == [("GIF", True), ("给", True)]
    assert apply_glossary(text, None, V3_INFO) == text


def test_longest_match_word_boundaries_case_and_protected_spans() -> None:
    glossary = make_glossary("g", {"New York": "Noo Yawk", "York": "Yoik", "AI": "A.I.", "西安": "[x][ī][ān]",
                                   "R": "Arr"})
    assert apply_glossary("New York and york", glossary, V3_INFO) == "Noo Yawk and Yoik"
    assert apply_glossary("AI, SAID, AIM, ai.", glossary, V3_INFO) == "A.I., SAID, AIM, A.I.."
    assert apply_glossary("去西安吧，Xi西安an", glossary, V3_INFO) == "去[x][ī][ān]吧，Xi[x][ī][ān]an"  # CJK anywhere
    assert apply_glossary("我爱AI。", glossary, V3_INFO) == "我爱A.I.。"  # CJK next to a Latin word is a boundary
    # hints and tags already in the text are left alone
    assert apply_glossary("I [R][EH1][D] R <|en|> <strong>York</strong>", glossary, V3_INFO) == \
        "I [R][EH1][D] Arr <|en|> <strong>Yoik</strong>"
    sensitive = make_glossary("g", {"AI": "A.I."}, case_sensitive=True)
    assert apply_glossary("AI ai", sensitive, V3_INFO) == "A.I. ai"


def test_with_glossary_rewrites_the_request_text_and_drops_an_earlier_check() -> None:
    from cosyvoice_ui.types import CheckedRequest

    request = CheckedRequest(Mode.SFT, text="Meet Nguyen.", speaker="A", seed=4, checked_against=PLAIN_INFO)
    rewritten = with_glossary(request, names(), PLAIN_INFO)
    assert type(rewritten) is SynthesisRequest and rewritten.text == "Meet Win."
    assert (rewritten.mode, rewritten.speaker, rewritten.seed) == (Mode.SFT, "A", 4)
    assert with_glossary(request, None, PLAIN_INFO) is request
    assert with_glossary(request, make_glossary("g", {"York": "Yoik"}), PLAIN_INFO) is request  # no match


def test_preview_without_and_with_an_engine() -> None:
    assert preview(None, "  Meet Nguyen.  ", names(), PLAIN_INFO) == ["Meet Win."]
    assert preview(None, "   ", names(), PLAIN_INFO) == []
    assert preview(FakeEngine(), "Meet Nguyen.", names()) == ["Meet Win."]  # Engine.reading's default


def test_offline_reading_splits_sentences_and_drops_what_it_cannot_read() -> None:
    from cosyvoice_ui.offline.engine import OfflineEngine

    engine = object.__new__(OfflineEngine)  # `reading` is text only: no model needed
    assert engine.reading("We went to meet Win. He came from Shee-ahn!") == ["We went to meet Win.",
                                                                            "He came from Shee-ahn!"]
    assert engine.reading("...") == []


# --- what the models are fed ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def v3_engine(tiny_v3: Path):
    return load_engine(tiny_v3, device="cpu")


def llm_text_ids(engine, text: str, monkeypatch: pytest.MonkeyPatch) -> list[list[int]]:
    """The text ids each segment feeds the LLM (the spy stops decoding at once: no speech is needed)."""
    fed: list[list[int]] = []

    def spy(text_ids, *args, **kwargs):
        fed.append(text_ids[0].tolist())
        return iter(())

    monkeypatch.setattr(engine.llm, "inference", spy)
    list(engine.synthesize(SynthesisRequest(Mode.CROSS_LINGUAL, text=text, prompt_audio=PROMPT, seed=1)))
    return fed


def contains(ids: list[int], part: list[int]) -> bool:
    return any(ids[i:i + len(part)] == part for i in range(len(ids) - len(part) + 1))


@pytest.mark.parametrize("text", ["我们明天去Xi'an玩。", "Tomorrow we fly to Xi'an with friends."])
def test_v3_llm_is_fed_the_hint_tokens(v3_engine, text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    glossary = make_glossary("places", [XIAN])
    hint_ids = v3_engine.tokenizer.encode("[x][ī][ān]")
    assert len(hint_ids) == 3 and all(151664 <= i <= 151923 for i in hint_ids)  # one phoneme token each
    plain = llm_text_ids(v3_engine, text, monkeypatch)
    rewritten = apply_glossary(text, glossary, v3_engine.info)
    assert rewritten != text and "[x][ī][ān]" in rewritten
    hinted = llm_text_ids(v3_engine, rewritten, monkeypatch)
    assert plain != hinted
    assert any(contains(ids, hint_ids) for ids in hinted)
    assert not any(contains(ids, hint_ids) for ids in plain)
    assert preview(v3_engine, text, glossary) == v3_engine.reading(rewritten)
    assert any("[x][ī][ān]" in segment for segment in preview(v3_engine, text, glossary))


def test_v3_cmu_hints_survive_normalisation(v3_engine) -> None:
    glossary = make_glossary("words", {"read": "[R][EH1][D]"})
    assert preview(v3_engine, "I have read it.", glossary) == ["I have [R][EH1][D] it."]


@pytest.fixture(scope="module")
def v1_engine(tiny_sft: Path):
    return load_engine(tiny_sft, device="cpu")


def test_v1_tokenizer_receives_the_respelling(v1_engine, monkeypatch: pytest.MonkeyPatch) -> None:
    encoded: list[str] = []
    real_encode = v1_engine.tokenizer.encode

    def spy(text: str, *args, **kwargs):
        encoded.append(text)
        return real_encode(text, *args, **kwargs)

    monkeypatch.setattr(v1_engine.tokenizer, "encode", spy)
    monkeypatch.setattr(v1_engine.llm, "inference", lambda *args, **kwargs: iter(()))
    text = apply_glossary("We flew to Xi'an.", make_glossary("places", [XIAN]), v1_engine.info)
    assert text == "We flew to Shee-ahn."
    speaker = v1_engine.info.speakers[0]
    list(v1_engine.synthesize(SynthesisRequest(Mode.SFT, text=text, speaker=speaker, seed=1)))
    spoken = [t for t in encoded if "flew" in t]
    assert spoken and all("Shee-ahn" in t and "Xi'an" not in t for t in spoken)
    assert v1_engine.reading(text) == ["We flew to Shee-ahn."]


def test_make_entry_keeps_a_respelling_only_for_hint_kinds() -> None:
    assert make_entry("Nguyen", "", "", "Win") == GlossaryEntry("Nguyen", "Win", "respell")
    assert make_entry("Xi'an", "xi1 an1", "pinyin", "Shee-ahn").to_dict() == XIAN
