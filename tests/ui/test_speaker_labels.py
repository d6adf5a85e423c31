"""Preset lists show presets alone, labelled: the offline voice's presets ("jf_gongitsune", "blend_kumo_nezumi")
get their gender and the language of their training data (Kokoro's name prefix: "jf" = Japanese female), in
English and Chinese, while the id stays what requests and the APIs use; a saved voice that the offline backend
also accepts as a speaker is listed as a saved voice, not among the presets."""

from __future__ import annotations

from pathlib import Path

import pytest

from cosyvoice_ui.offline.engine import describe_offline, offline_info
from cosyvoice_ui.offline.styles import blend_traits, stock_traits
from cosyvoice_ui.testing.fakes import FakeEngine
from cosyvoice_ui.types import EngineInfo, Mode
from cosyvoice_ui.ui.speaker_labels import display_name, preset_choices


@pytest.mark.parametrize("name, traits", [("jf_gongitsune", ("ja", "female")), ("jm_kumo", ("ja", "male")),
                                          ("af_heart", ("en-US", "female")), ("bm_george", ("en-GB", "male")),
                                          ("zf_xiaobei", ("zh", "female")), ("default", None), ("xf_what", None),
                                          ("jx_odd", None), ("jf_", None)])
def test_kokoros_prefix_tells_language_and_gender(name: str, traits) -> None:
    assert stock_traits(name) == traits


def test_a_blend_has_its_voices_traits_or_mixed() -> None:
    assert blend_traits({"jf_alpha": 0.5, "jf_tebukuro": 0.5}) == ("ja", "female")
    assert blend_traits({"jm_kumo": 0.6, "jf_nezumi": 0.4}) == ("ja", "mixed")
    assert blend_traits({"af_heart": 0.5, "jm_kumo": 0.5}) == ("mixed", "mixed")
    assert blend_traits({"mystery": 1.0}) is None


def test_every_offline_preset_is_labelled_in_both_languages_with_its_id_kept() -> None:
    info = describe_offline()
    assert {name for name, _, _ in info.speaker_traits} == set(info.speakers)
    en, zh = preset_choices(info, "en"), preset_choices(info, "zh")
    assert [value for _, value in en] == [value for _, value in zh] == list(info.speakers)  # ids unchanged
    labels = dict((value, label) for label, value in en)
    assert labels["jf_gongitsune"] == "Gongitsune · female, Japanese-trained voice (jf_gongitsune)"
    assert labels["jm_kumo"].startswith("Kumo · male, Japanese")
    assert labels["blend_kumo_nezumi"].startswith("Kumo + Nezumi · male/female blend, Japanese")
    zh_labels = dict((value, label) for label, value in zh)
    assert zh_labels["jf_gongitsune"] == "Gongitsune · 女声，日语训练的音色（jf_gongitsune）"
    assert "男女声混合" in zh_labels["blend_kumo_nezumi"] and "男声" in zh_labels["jm_kumo"]


def test_saved_voices_are_not_presets() -> None:
    presets = describe_offline().speakers
    info = offline_info(presets + ("jf_narrator", "my-voice"), ("jf_narrator", "my-voice"))
    assert info.presets == presets and "my-voice" in info.speakers  # still a speaker a request may name
    assert [value for _, value in preset_choices(info, "en")] == list(presets)
    assert "jf_narrator" not in {name for name, _, _ in info.speaker_traits}  # a saved voice's name tells nothing


def test_presets_that_name_themselves_are_shown_as_they_are() -> None:
    info = EngineInfo("CosyVoice-300M-SFT", "v1", 22050, (Mode.SFT,), speakers=("中文女", "英文男"))
    assert preset_choices(info, "zh") == [("中文女", "中文女"), ("英文男", "英文男")]
    assert preset_choices(None, "en") == []
    assert display_name("blend_alpha_tebukuro") == "Alpha + Tebukuro" and display_name("jm_kumo") == "Kumo"


def test_the_rest_listing_keeps_saved_voices_out_of_the_presets(tmp_path: Path) -> None:
    from tests.test_api import fake_client

    engine = FakeEngine(speakers=("A", "B", "narrator"), saved_voices=("narrator",))
    client, _, _ = fake_client(tmp_path, engine)
    kinds = {(e["id"], e["kind"]) for e in client.get("/v1/audio/voices").json()["data"]}
    assert {("A", "preset"), ("B", "preset")} <= kinds and ("narrator", "preset") not in kinds


def test_the_preset_tab_lists_labelled_presets_in_the_browsers_language(tmp_path: Path) -> None:
    gr = pytest.importorskip("gradio")
    from cosyvoice_ui.settings import Settings
    from cosyvoice_ui.ui.layout import build_ui

    from .test_layout import events, fake_manager, label_key, submode_of

    presets = describe_offline().speakers
    engine = FakeEngine(speakers=presets + ("my-voice",), saved_voices=("my-voice",),
                        speaker_traits=describe_offline().speaker_traits)
    app = build_ui(fake_manager(engine), Settings(), output_dir=tmp_path)
    adapt = events(app, "adapt")[0]
    lang = next(c for c in adapt.inputs if c is not submode_of(adapt))
    for browser, first in (("zh-CN", "Gongitsune · 女声，日语训练的音色（jf_gongitsune）"),
                           ("en-US", "Gongitsune · female, Japanese-trained voice (jf_gongitsune)")):
        updates = adapt.fn({submode_of(adapt): "cross", lang: browser})
        lists = [u for c, u in updates.items() if isinstance(c, gr.Dropdown) and label_key(c) == "speaker"
                 and isinstance(u, dict) and u.get("choices") and isinstance(u["choices"][0], tuple)]
        assert len(lists) == 1, lists  # the preset tab's list
        assert lists[0]["choices"][0] == (first, "jf_gongitsune") and lists[0]["value"] == "jf_gongitsune"
        assert [value for _, value in lists[0]["choices"]] == list(presets)  # no saved voice among them
