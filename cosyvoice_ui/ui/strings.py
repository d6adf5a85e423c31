"""Every text the web UI shows, in English and Chinese.

Labels go through `gr.I18n` (the browser's language picks the table); messages raised from handlers
are translated by `message(code, params, lang)` with the language read from the request headers.
"""

from __future__ import annotations

from ..errors import InvalidRequest

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
    "fast": "Fast mode (int8 LLM, fewer diffusion steps; slightly different sound)",
    "options": "Output options",
    "examples": "Examples (click one, then Generate)",
    "try_example": "Try an example voice",
    "try_example_vc": "Try example recordings",
    "history_empty": "Nothing generated in this browser yet.",
    "rerun": "Re-run",
    "clear_history": "Clear history",
    "no_speakers_note": "This model has no preset speakers. Load CosyVoice-300M-SFT (or -Instruct) for them, "
                        "or save a voice from the clone tab.",
    "instruct_unavailable": "This model cannot follow style instructions; load CosyVoice-300M-Instruct for that.",
    "public_warning": "⚠️ This app is reachable beyond this computer (shared link or network bind) without a "
                      "password. Anyone with the address can use it. Start it with --auth user:password.",
    "no_model": "No model is installed yet. Download one in the Model panel below (needs internet), or copy an "
                "official CosyVoice folder into pretrained_models/.",
    "stopped": "Stopped.",
    "voice_name_missing": "Give the voice a name before saving it.",
    "precision_switched": "The model will be reloaded with the new precision on the next request.",
    "voice_saved": "Saved the voice “{name}”; pick it under “Saved voice” in any tab.",
    "get_cosyvoice": "Download CosyVoice-300M-SFT (1.7 GB)",
    "voice_match": "Voice match (offline default voice)",
    "match_quick": "Quick (seconds)",
    "match_refine": "Refine (about a minute, closer)",
    "save_voice": "Save this voice",
    "voice_name": "Name for the saved voice",
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
    "fast": "快速模式（int8 LLM、更少扩散步数；音色略有差异）",
    "options": "输出选项",
    "examples": "示例（点击后再点生成）",
    "try_example": "试用示例声音",
    "try_example_vc": "试用示例录音",
    "history_empty": "此浏览器中还没有生成记录。",
    "rerun": "重新生成",
    "clear_history": "清空历史",
    "no_speakers_note": "此模型没有预训练音色。请加载 CosyVoice-300M-SFT（或 -Instruct），或在复刻页保存一个声音。",
    "instruct_unavailable": "此模型不支持风格指令；请加载 CosyVoice-300M-Instruct。",
    "public_warning": "⚠️ 本应用可从本机以外访问（分享链接或网络地址），且未设置密码。任何知道地址的人都能使用。"
                      "请用 --auth 用户名:密码 启动。",
    "no_model": "尚未安装模型。请在下方“模型”面板下载（需要联网），或把官方 CosyVoice 文件夹复制到 pretrained_models/。",
    "stopped": "已停止。",
    "voice_name_missing": "请先为声音命名再保存。",
    "precision_switched": "下次生成时将以新的精度重新加载模型。",
    "voice_saved": "已保存声音“{name}”，可在各页的“已保存的声音”中选择。",
    "get_cosyvoice": "下载 CosyVoice-300M-SFT（1.7 GB）",
    "voice_match": "声音匹配（离线默认声音）",
    "match_quick": "快速（几秒）",
    "match_refine": "精细（约一分钟，更接近）",
    "save_voice": "保存此声音",
    "voice_name": "保存的声音名称",
}

# Messages for InvalidRequest codes; {placeholders} come from the error's params.
MESSAGES_ZH: dict[str, str] = {
    "prompt_missing": "未提供{what_zh}：请上传或录制一段 3-30 秒的清晰语音。",
    "prompt_too_short": "{what_zh}只有 {seconds} 秒有效声音；请至少录制 3 秒语音。",
    "prompt_too_long": "{what_zh}长 {seconds} 秒，超过 {max_seconds:.0f} 秒上限；请剪成一两句清晰的话。",
    "prompt_low_rate": "{what_zh}的采样率为 {rate} Hz，低于 {min_rate} Hz；请重新录制或以 16 kHz 以上导出。",
    "prompt_silent": "{what_zh}是静音；请检查麦克风后重新录制。",
    "audio_unreadable": "无法读取{what_zh}；请上传 WAV、FLAC、MP3 或 OGG 文件。",
    "audio_too_short": "录音太短，无法提取语音特征。",
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
}

WHAT_ZH = {"prompt audio": "声音样本", "source audio": "待转换语音"}


def language_of(accept_language: str | None) -> str:
    """'zh' when the browser prefers Chinese, else 'en'."""
    first = (accept_language or "").split(",")[0].strip().lower()
    return "zh" if first.startswith("zh") else "en"


def message(error: InvalidRequest, lang: str) -> str:
    """The error in the user's language (English is the error's own message)."""
    if lang != "zh" or error.code not in MESSAGES_ZH:
        return error.message[:1].upper() + error.message[1:]
    params = dict(error.params)
    params["what_zh"] = WHAT_ZH.get(str(params.get("what", "prompt audio")), "音频")
    try:
        return MESSAGES_ZH[error.code].format(**params)
    except (KeyError, ValueError, IndexError):
        return error.message


def label(key: str, lang: str) -> str:
    return (LABELS_ZH if lang == "zh" else LABELS_EN).get(key, LABELS_EN.get(key, key))


def i18n():
    """The gr.I18n table for component labels (Chinese for zh-* browsers)."""
    import gradio as gr

    return gr.I18n(en=LABELS_EN, zh=LABELS_ZH, **{"zh-CN": LABELS_ZH, "zh-TW": LABELS_ZH})
