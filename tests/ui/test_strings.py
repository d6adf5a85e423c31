"""The UI's string tables: every English text has a Chinese one, notices are short with folded
details, backends' notes and progress labels come out in the user's language; every code the dubbing modules raise
or report has its Chinese text."""

from __future__ import annotations

import ast
import re
import string
from pathlib import Path

import pytest

from cosyvoice_ui.serving.manager import ManagerStatus
from cosyvoice_ui.types import EngineInfo, Mode, ProgressEvent
from cosyvoice_ui.ui import strings
from cosyvoice_ui.ui.events import event_text
from cosyvoice_ui.ui.model_panel import state_markdown

CJK = re.compile(r"[\u3400-\u9fff\uff00-\uffef]")
NOTICES = ("public_warning", "no_model", "notes_offline", "notes_fallback")


def fields(text: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(text) if name}


def test_every_english_label_has_a_chinese_one() -> None:
    assert set(strings.LABELS_EN) == set(strings.LABELS_ZH)
    for key, english in strings.LABELS_EN.items():
        chinese = strings.LABELS_ZH[key]
        assert chinese.strip(), key
        assert fields(chinese) == fields(english), f"{key}: placeholders differ"
        assert CJK.search(chinese), f"{key} is not translated: {chinese!r}"


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("key", NOTICES)
def test_notices_are_one_short_line_with_folded_details(key: str, lang: str) -> None:
    text = strings.label(key, lang)
    found = re.fullmatch(r"<details><summary>(.+?)</summary>\n\n(.+)\n\n</details>", text, re.S)
    assert found, text
    summary, details = found.groups()
    assert "\n" not in summary and len(summary) <= (32 if lang == "zh" else 70), summary
    assert len(details) > len(summary)
    assert bool(CJK.search(summary)) == (lang == "zh") and bool(CJK.search(details)) == (lang == "zh")


def test_offline_backends_have_localised_notes_and_keep_english_ones_for_the_api() -> None:
    from cosyvoice_ui.offline.engine import describe_offline
    from cosyvoice_ui.offline.fallback import describe_fallback

    for info in (describe_offline(), describe_fallback()):
        assert info.notes_key in strings.LABELS_EN and info.notes_key in strings.LABELS_ZH
        assert isinstance(info.notes, str) and info.notes and not CJK.search(info.notes)
        value = strings.notes_markdown(info, strings.i18n())
        assert value.key == info.notes_key  # a gr.I18n key: the browser picks zh or en


def test_notes_without_a_key_show_the_backend_text_under_a_localised_summary() -> None:
    t = strings.i18n()
    plain = EngineInfo("remote", "v1", 22050, (Mode.SFT,), notes="Runs on another machine.")
    value = strings.notes_markdown(plain, t)
    assert value.startswith("<details><summary>__i18n__") and '"key": "notes_other"' in value
    assert "Runs on another machine." in value and value.endswith("</details>")
    assert strings.notes_markdown(EngineInfo("m", "v1", 22050, (Mode.SFT,)), t) == ""
    assert strings.notes_markdown(None, t) == ""


@pytest.mark.parametrize(("event", "en", "zh"), [
    (ProgressEvent("segment", 0.5, "sentence 2/4", "segment", {"segment": 2, "total": 4}),
     "Speaking: segment 2/4", "朗读 · 第 2/4 段"),
    (ProgressEvent("llm", 0.2, "segment 1/3: speech tokens", "segment", {"segment": 1, "total": 3}),
     "Speech tokens: segment 1/3", "生成语音标记 · 第 1/3 段"),
    (ProgressEvent("queue", 0.0, "queue position 3", "queue_position", {"n": 3}), "Waiting in queue: position 3",
     "排队中（第 3 位）"),
    (ProgressEvent("segment", 0.9, "segment 2/3: too long for its text; will retry", "take_will_retry",
                   {"segment": 2, "total": 3, "reasons": ["too_long"]}),
     "Speaking: segment 2/3: too long for its text; will retry", "朗读 · 第 2/3 段：与文字相比太长，将重试"),
    (ProgressEvent("llm", 0.2, "an English detail without a code"), "Speech tokens: an English detail without a code",
     "生成语音标记"),
    (ProgressEvent("load", 0.5, "loading flow.pt"), "Loading model: loading flow.pt", "加载模型"),
    (ProgressEvent("voice_match", 0.1, "listening to the prompt"), "Matching the voice: listening to the prompt",
     "匹配声音"),
    (ProgressEvent("done", 1.0), "Done", "完成"),
    (ProgressEvent("something_new", 0.3, "step"), "Working: step", "处理中"),
])
def test_progress_labels(event: ProgressEvent, en: str, zh: str) -> None:
    assert event_text(event, "en") == en
    assert event_text(event, "zh") == zh


class StubManager:
    idle_unload_s = 300.0

    def __init__(self, **status) -> None:
        self._status = ManagerStatus(**({
            "state": "loaded", "model_id": "m", "model": "CosyVoice-300M-SFT", "model_key": "", "device": "cpu",
            "error": "",
            "load_fraction": 0.0, "load_message": "", "running": 1, "queued": 2, "rss_mb": 812.4,
            "baseline_rss_mb": 400.0, "idle_unload_s": 300.0, "idle_for_s": 100.0} | status))

    def status(self) -> ManagerStatus:
        return self._status


def test_model_state_line_in_both_languages() -> None:
    manager = StubManager()
    assert state_markdown(manager, "en") == ("**CosyVoice-300M-SFT** — loaded · on cpu · 1 running, 2 queued · "
                                             "process memory 812 MB · released after 200 s idle")
    assert state_markdown(manager, "zh") == ("**CosyVoice-300M-SFT** — 已加载 · 运行于 cpu · 1 个运行中，2 个排队 · "
                                             "进程内存 812 MB · 空闲 200 秒后释放")
    loading = StubManager(state="loading", model="offline-default", model_key="offline_choice", load_fraction=0.5,
                          load_message="starting the offline voice", running=0, queued=0)
    assert "50% starting the offline voice" in state_markdown(loading, "en")
    zh = state_markdown(loading, "zh")
    assert zh.startswith("**离线默认声音（无需下载）** — 加载中 · 50%") and "starting" not in zh
    failed = StubManager(state="error", error="llm.pt is missing", running=0, queued=0)
    assert state_markdown(failed, "zh").endswith("\n\n加载失败：llm.pt is missing")
    assert state_markdown(failed, "en").endswith("\n\nLoading failed: llm.pt is missing")


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_generation_progress_and_result_line_follow_the_language(lang: str, tmp_path) -> None:
    from cosyvoice_ui.serving.manager import ModelManager
    from cosyvoice_ui.settings import Settings
    from cosyvoice_ui.testing.fakes import FakeEngine
    from cosyvoice_ui.types import SynthesisRequest
    from cosyvoice_ui.ui.handlers import Handlers, OutputOptions

    manager = ModelManager("fake", loader=lambda mid, options, progress: FakeEngine(), idle_unload_s=0)
    handlers = Handlers(manager, Settings(), tmp_path / "out")
    bars: list[str] = []
    request = SynthesisRequest(Mode.SFT, text="one two three", speaker="A", seed=7)
    *_, (_, path, info, history) = handlers.run(request, OutputOptions(), [], None,
                                                lambda fraction, desc="": bars.append(desc), lang=lang)
    assert bars and all(bool(CJK.search(bar)) == (lang == "zh") for bar in bars), bars
    if lang == "zh":
        assert "声码器" in bars  # the engine's "chunk 1" is English and has no counter: the stage alone
        assert info.startswith("0.8 秒 · 种子 7 · 生成用时") and "RTF" in info
    else:
        assert "Vocoder: chunk 1" in bars
        assert info.startswith("0.8 s · seed 7 · ") and "s to generate (RTF" in info
    assert history[0]["seed"] == 7 and path.endswith(".wav")


@pytest.mark.parametrize(("lang", "line"), [
    ("en", "**12:00:01** · Voice clone · your sample · seed 7"),
    ("zh", "**12:00:01** · 声音复刻 · 上传的样本 · 种子 7"),
])
def test_history_entries_and_example_labels_follow_the_language(lang: str, line: str) -> None:
    entry = {"time": "12:00:01", "mode": "zero_shot", "voice": "sample", "seed": 7, "text": "hello"}
    assert strings.history_line(entry, lang) == line
    preset = strings.history_line({"time": "t", "mode": "sft", "voice": "英文女", "seed": 1}, lang)
    assert "英文女" in preset and ("预训练音色" in preset) == (lang == "zh")
    label = strings.example_label("Hello! " * 10, 2, lang)
    assert label.startswith("Hello! Hello!") and "…" in label and ("种子 2" in label) == (lang == "zh")


def test_model_names_are_localised_by_the_key_the_serving_layer_gives() -> None:
    from types import SimpleNamespace

    assert strings.name_key(SimpleNamespace(label="CosyVoice-300M", label_key="")) == ""
    assert strings.name_key(SimpleNamespace(label="x", label_key="offline_choice")) == "offline_choice"
    assert strings.name_key(SimpleNamespace(model="x", model_key="offline_choice")) == "offline_choice"
    # The serving layer gives the key for the offline voice, in the model list and in the status.
    from cosyvoice_ui.serving.backends import OFFLINE_ID, model_choices
    from cosyvoice_ui.serving.manager import ModelManager

    offline = [c for c in model_choices(None, OFFLINE_ID) if c.model_id == OFFLINE_ID]
    assert [strings.name_key(c) for c in offline] == ["offline_choice"]
    manager = ModelManager(OFFLINE_ID, idle_unload_s=0)
    assert strings.name_key(manager.status()) == "offline_choice"
    assert strings.label("offline_choice", "zh") in state_markdown(manager, "zh")


# --- dubbing: every code its modules raise or report has Chinese text, with the placeholders they give ---------

PACKAGE = Path(strings.__file__).resolve().parents[1]
ZH_EXTRAS = {"what_zh", "where_zh"}  # added by `strings.message` to every error's params


def dub_modules() -> list[Path]:
    """Every module of the dubbing feature (studio, CLI, REST, tab; a new dub*.py module joins by its name)."""
    return sorted(path for path in PACKAGE.rglob("*.py") if "dub" in path.stem)


def coded_calls(path: Path) -> list[tuple[str, str, set[str] | None]]:
    """(kind, code, keyword names given) of each coded message in `path`: "error" for `InvalidRequest(code, ...)`
    and an error record's {"code": ...}; "progress" for `report(progress, stage, fraction, message, code, ...)`,
    `ProgressEvent(stage, fraction, message, code, ...)` and a `code=` keyword. The names are None where the call
    passes **params (not known here)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values):
                if isinstance(key, ast.Constant) and key.value == "code" and isinstance(value, ast.Constant):
                    found.append(("error", value.value, None))
        if not isinstance(node, ast.Call):
            continue
        name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
        names = None if any(k.arg is None for k in node.keywords) else {k.arg for k in node.keywords}
        position = {"InvalidRequest": 0, "report": 4, "ProgressEvent": 3}.get(name)
        if name == "ProgressEvent":  # its params are the dict after the code
            given = node.args[4] if len(node.args) > 4 else None
            names = {k.value for k in given.keys} if isinstance(given, ast.Dict) and all(
                isinstance(k, ast.Constant) for k in given.keys) else None
        if position is not None and len(node.args) > position and isinstance(node.args[position], ast.Constant):
            found.append(("error" if name == "InvalidRequest" else "progress", node.args[position].value, names))
        for keyword in node.keywords:
            if keyword.arg == "code" and isinstance(keyword.value, ast.Constant) and name != "InvalidRequest":
                found.append(("progress", keyword.value.value, None))
    return found


def test_every_dub_code_has_chinese_text_with_the_placeholders_it_is_given() -> None:
    modules = dub_modules()
    assert {"dub.py", "dub_cues.py", "dub_jobs.py", "dub_render.py", "dub_media.py", "routes_dub.py",
            "dub_tab.py"} <= {path.name for path in modules}
    calls = [(path.name, *call) for path in modules for call in coded_calls(path)]
    codes = {code for _, kind, code, _ in calls}
    assert {"dub_speed_range", "dub_fit_invalid", "dub_cue", "dub_interrupted", "dub_failed"} <= codes
    missing, unfilled = [], []
    for module, kind, code, names in calls:
        table, key = (strings.MESSAGES_ZH, code) if kind == "error" else (strings.LABELS_ZH, f"progress_{code}")
        if key not in table:
            missing.append(f"{module}: {key}")
        elif names is not None and not fields(table[key]) <= names | ZH_EXTRAS:
            unfilled.append(f"{module}: {key} needs {sorted(fields(table[key]) - names)}")
    assert not missing, missing
    assert not unfilled, unfilled


def test_the_dubbing_tab_names_only_labels_both_tables_have() -> None:
    source = (PACKAGE / "ui" / "studio" / "dub_tab.py").read_text(encoding="utf-8")
    keys = set(re.findall(r"""\bt\(["'](\w+)["']\)""", source)) | set(re.findall(
        r"""strings\.label\(["'](\w+)["']""", source))
    assert {"dub_set_fit", "dub_cue_min_speed", "dub_original_duck", "dub_fit_overrun"} <= keys
    for key in sorted(keys):
        assert key in strings.LABELS_EN, key
        assert CJK.search(strings.LABELS_ZH[key]), key


@pytest.mark.parametrize(("code", "params", "zh"), [
    ("dub_speed_range", {"min": 0.9, "max": 2.5, "cue": 4}, "语速范围 0.9-2.5 不可用"),
    ("dub_fit_invalid", {"cue": 4, "field": "speed"}, "第 4 条的对齐设置无效"),
    ("dub_busy", {"job": "0123456789abcdef"}, "这个配音任务正在渲染"),
])
def test_dub_refusals_read_in_chinese(code: str, params: dict, zh: str) -> None:
    from cosyvoice_ui.errors import InvalidRequest

    assert strings.message(InvalidRequest(code, "english", **params), "zh").startswith(zh)


@pytest.mark.parametrize(("event", "en", "zh"), [
    (ProgressEvent("dub", 0.4, "cue 2/5", "dub_cue", {"cue": 2, "cues": 5, "speaker": "Bob"}),
     "Dubbing: cue 2/5 · Bob", "配音 · 第 2/5 条 · Bob"),
    (ProgressEvent("dub", 0.4, "", "dub_interrupted", {"rendered": 2, "cues": 5}),
     "Dubbing: interrupted by a server restart: 2 of 5 cues rendered; resume to render the rest",
     "配音 · 服务器重启时中断：已渲染 2/5 条；继续即可渲染其余字幕"),
])
def test_dub_progress_labels(event: ProgressEvent, en: str, zh: str) -> None:
    assert event_text(event, "en") == en
    assert event_text(event, "zh") == zh
