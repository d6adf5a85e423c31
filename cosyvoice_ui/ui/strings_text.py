"""The labels of the text and instruction helpers (instruction picker, tag and pronunciation chips, the
Japanese kanji hint, what instruct mode speaks with), the Glossary tab, the Transcribe buttons, subtitle
downloads and bad-take checks, in English and Chinese, and the Chinese messages of the glossary, transcription
codes. `strings.py` merges them into its tables; this module only keeps that file short."""

from __future__ import annotations

import re

LABELS_EN: dict[str, str] = {
    "instruct_picker": "Known-good instructions for this model (pick one, or type your own below)",
    "instruct_ph_for": "e.g. {example}",
    "instr_dialect": "Dialect",
    "instr_emotion": "Emotion",
    "instr_rate": "Speaking rate",
    "instr_volume": "Volume",
    "instr_style": "Style",
    "instruct_unavailable": "This model cannot follow style instructions. Load {instruct_preset_models} (with its "
                            "preset speakers), or {instruct_voice_models} (with any voice sample).",
    "instruct_voice_note": "On this model an instruction is spoken in the voice of your sample (or a saved voice): "
                           "upload or record one above; no preset speaker is needed.",
    "preset_instruct_note": "Style instructions on this model take a voice sample, not a preset speaker: use the "
                            "“Cross-lingual / instruct” tab.",
    "chip_pinyin": "Pinyin [j][ǐ]",
    "chip_cmu": "English phonemes [R][EH1][D]",
    "pronunciation_help": "**Pronunciation hints:** write the reading in brackets instead of the word. Mandarin: "
                          "pinyin, the initial and the final with its tone mark, e.g. 对报道[j][ǐ]予好评 (给 read "
                          "jǐ). English: CMU phonemes with stress digits, e.g. I have [R][EH1][D] it.",
    "ja_kanji_note": "ℹ️ Japanese on this model: kana (hiragana, katakana) are read correctly, kanji may be read "
                     "with Chinese readings. Where the reading matters, write the word in kana (katakana works "
                     "best).",
    # transcription (ui/transcribe.py)
    "transcribe": "Transcribe",
    "stage_transcribe": "Transcribing",
    # results: subtitles and bad-take checks (tabs/controls.py, options.py)
    "download_subtitles": "Subtitles (SRT, VTT)",
    "check_takes": "Check takes",
    "check_takes_info": "Re-render a segment that sounds wrong for its text (too long, too short, repeated)",
    "check_takes_server_off": "Take checks are switched off on this server (--no-take-check)",
    "takes_off": "Take checks off.",
    "takes_ok": "✓ Takes checked: {total} segment(s), all plausible.",
    "takes_retried": "Segment {segment}/{total} re-rendered ({why}): good after {attempts} takes.",
    "takes_kept_best": "⚠️ Segment {segment}/{total} still sounds off ({why}) after {attempts} takes: kept the best "
                       "one; try another seed.",
    "takes_not_retried": "⚠️ Segment {segment}/{total} may sound off ({why}); not retried.",
    "take_reason_too_long": "too long for its text",
    "take_reason_too_short": "too short for its text",
    "take_reason_repeat": "repeated speech",
    "take_reason_asr_mismatch": "words not heard back",
    # progress events by code (ui/events.py)
    "progress_segment": "segment {segment}/{total}",
    "progress_queue_position": "Waiting in queue: position {n}",
    "progress_take_retry": "segment {segment}: retry {attempt} ({why})",
    "progress_take_will_retry": "segment {segment}: {why}; will retry",
    "progress_take_kept_best": "segment {segment}: kept the best of {takes} takes ({why})",
    "progress_take_not_retried": "segment {segment}: {why} (not retried)",
    "progress_done_takes": "{seconds} s of audio",
    # the glossary choice (options.py) and the Glossary tab (tabs/glossary.py)
    "glossary_choice": "Pronunciation glossary",
    "glossary_choice_info": "Applied to the text of every tab before it is spoken (edit them on the Glossary tab)",
    "tab_glossary": "Glossary",
    "glossary_saved_list": "Saved glossaries",
    "glossary_new": "New",
    "glossary_delete": "Delete",
    "glossary_name": "Name",
    "glossary_case": "Match case",
    "glossary_table": "Entries (one word per row; add rows with the + under the table)",
    "glossary_word": "Word",
    "glossary_pronunciation": "Pronunciation",
    "glossary_respelling": "Respelling (for models without hints)",
    "glossary_save": "Save glossary",
    "glossary_import": "Import JSON",
    "glossary_export": "Export JSON",
    "glossary_preview_text": "Try a sentence",
    "glossary_preview_ph": "Type a sentence with words from the glossary",
    "glossary_preview": "Preview",
    "glossary_reading": "**How it will be read** ({model}):",
    "glossary_reading_no_model": "**With the glossary applied** (load a model to see its own reading):",
    "glossary_skipped": "**Not used on {model}:** {words} (no hint this model reads and no respelling)",
    "glossary_unused_none": "No word of the glossary is in this sentence.",
    "glossary_saved_msg": "Glossary “{name}” saved.",
    "glossary_deleted_msg": "Glossary “{name}” deleted.",
    "glossary_imported_msg": "{count} entries imported: check them, then press Save.",
    "glossary_pick_first": "Pick a saved glossary first.",
    "glossary_model_reads": "The loaded model ({model}) reads: {kinds}.",
    "glossary_model_reads_respell": "The loaded model ({model}) reads respellings only: pinyin and CMU entries "
                                    "need a respelling to be used on it.",
    "glossary_kind_pinyin": "pinyin hints",
    "glossary_kind_cmu": "CMU phone hints",
    "glossary_kind_respell": "respellings",
    "glossary_help": "**How to write a pronunciation.** *Pinyin* (Mandarin, {pinyin_models}): the initial and the "
                     "final with its tone mark, one bracket each, e.g. 给 → `[j][ǐ]` (also accepted: `ji3`, `[jǐ]`). "
                     "*CMU phones* (English, {cmu_models}): ARPAbet phones with stress digits, e.g. read → "
                     "`[R][EH1][D]`. *Respelling* (every model): plain text spelled the way it sounds, e.g. Nguyen "
                     "→ `Win`, Xi'an → `Shee-ahn`. A pinyin or CMU row may also have a respelling: models that read "
                     "no hints ({plain_models}, the offline voice) use it instead. Longer words win; Latin "
                     "words match whole words only.",
}

LABELS_ZH: dict[str, str] = {
    "instruct_picker": "此模型的常用指令（选择一条，或在下方自行输入）",
    "instruct_ph_for": "例如：{example}",
    "instr_dialect": "方言",
    "instr_emotion": "情感",
    "instr_rate": "语速",
    "instr_volume": "音量",
    "instr_style": "风格",
    "instruct_unavailable": "此模型不支持风格指令。请加载 {instruct_preset_models}（使用其预训练音色），"
                            "或 {instruct_voice_models}（可使用任意声音样本）。",
    "instruct_voice_note": "此模型用你的声音样本（或已保存的声音）朗读指令：请在上方上传或录制样本，无需预训练音色。",
    "preset_instruct_note": "此模型的风格指令需要声音样本，而不是预训练音色：请使用“跨语种复刻 / 指令控制”页。",
    "chip_pinyin": "拼音 [j][ǐ]",
    "chip_cmu": "英文音素 [R][EH1][D]",
    "pronunciation_help": "**读音标注：**在词的位置用方括号写出读音。普通话：拼音的声母和带声调的韵母，例如 "
                          "对报道[j][ǐ]予好评（“给”读 jǐ）。英语：带重音数字的 CMU 音素，例如 I have [R][EH1][D] it。",
    "ja_kanji_note": "ℹ️ 此模型朗读日语时，假名（平假名、片假名）读音正确，汉字可能按中文读音朗读。"
                     "读音重要时请改写为假名（片假名效果最好）。",
    "transcribe": "识别文字",
    "stage_transcribe": "识别语音",
    "download_subtitles": "字幕（SRT、VTT）",
    "check_takes": "检查生成质量",
    "check_takes_info": "与文字不符的片段（太长、太短、重复）自动重新生成",
    "check_takes_server_off": "本服务器已关闭生成质量检查（--no-take-check）",
    "takes_off": "未检查生成质量。",
    "takes_ok": "✓ 已检查：{total} 个片段，全部正常。",
    "takes_retried": "第 {segment}/{total} 段已重新生成（{why}）：第 {attempts} 次生成后正常。",
    "takes_kept_best": "⚠️ 第 {segment}/{total} 段生成 {attempts} 次后仍不理想（{why}）：已保留最好的一次；"
                       "可换一个随机种子再试。",
    "takes_not_retried": "⚠️ 第 {segment}/{total} 段可能不理想（{why}）；未重新生成。",
    "take_reason_too_long": "与文字相比太长",
    "take_reason_too_short": "与文字相比太短",
    "take_reason_repeat": "语音重复",
    "take_reason_asr_mismatch": "回听文字不符",
    "progress_segment": "第 {segment}/{total} 段",
    "progress_queue_position": "排队中（第 {n} 位）",
    "progress_take_retry": "第 {segment} 段：第 {attempt} 次重试（{why}）",
    "progress_take_will_retry": "第 {segment} 段：{why}，将重试",
    "progress_take_kept_best": "第 {segment} 段：保留 {takes} 次中最好的一次（{why}）",
    "progress_take_not_retried": "第 {segment} 段：{why}（未重试）",
    "progress_done_takes": "{seconds} 秒音频",
    "glossary_choice": "读音词表",
    "glossary_choice_info": "朗读前应用到每个页面的文本（在“词表”页中编辑）",
    "tab_glossary": "词表",
    "glossary_saved_list": "已保存的词表",
    "glossary_new": "新建",
    "glossary_delete": "删除",
    "glossary_name": "名称",
    "glossary_case": "区分大小写",
    "glossary_table": "词条（每行一个词；用表格下方的 + 添加行）",
    "glossary_word": "词",
    "glossary_pronunciation": "读音",
    "glossary_respelling": "改写读法（供不支持标注的模型）",
    "glossary_save": "保存词表",
    "glossary_import": "导入 JSON",
    "glossary_export": "导出 JSON",
    "glossary_preview_text": "试读一句",
    "glossary_preview_ph": "输入一句含有词表中词语的话",
    "glossary_preview": "预览",
    "glossary_reading": "**朗读方式**（{model}）：",
    "glossary_reading_no_model": "**应用词表后的文本**（加载模型后可看到模型自己的读法）：",
    "glossary_skipped": "**在 {model} 上未使用：**{words}（此模型不读这种标注，且没有改写读法）",
    "glossary_unused_none": "这句话中没有词表里的词。",
    "glossary_saved_msg": "词表“{name}”已保存。",
    "glossary_deleted_msg": "词表“{name}”已删除。",
    "glossary_imported_msg": "已导入 {count} 个词条：检查后请点击“保存词表”。",
    "glossary_pick_first": "请先选择一个已保存的词表。",
    "glossary_model_reads": "当前模型（{model}）可读：{kinds}。",
    "glossary_model_reads_respell": "当前模型（{model}）只读改写读法：拼音和 CMU 词条需要填写改写读法才会生效。",
    "glossary_kind_pinyin": "拼音标注",
    "glossary_kind_cmu": "CMU 音素标注",
    "glossary_kind_respell": "改写读法",
    "glossary_help": "**如何填写读音。** *拼音*（普通话，{pinyin_models}）：声母和带声调的韵母各占一个方括号，例如 "
                     "给 → `[j][ǐ]`（也可写 `ji3`、`[jǐ]`）。*CMU 音素*（英语，{cmu_models}）：带重音数字的 "
                     "ARPAbet 音素，例如 read → `[R][EH1][D]`。*改写读法*（所有模型）：按发音拼写的普通文字，例如 "
                     "Nguyen → `Win`，Xi'an → `Shee-ahn`。拼音或 CMU 词条也可以再填改写读法：不读标注的模型"
                     "（{plain_models} 和离线声音）会改用它。较长的词优先；拉丁字母词只匹配完整的词。",
}

# What each pronunciation chip inserts (`EngineInfo.pronunciation` → text), and its label key.
PRONUNCIATION_CHIPS = {"pinyin": ("chip_pinyin", "[j][ǐ]"), "cmu": ("chip_cmu", "[R][EH1][D]")}

# Chinese messages of the glossary and transcription codes (serving/glossary.py, serving/transcription.py, asr/,
# ui/transcribe.py); {where_zh} is the row or entry the error is about (read from the English message).
MESSAGES_ZH: dict[str, str] = {
    "glossary_empty_word": "词表{where_zh}的词为空；请填写要替换的词，或删除这一行。",
    "glossary_value_too_long": "词表{where_zh}的内容太长；请控制在 {limit} 个字符以内。",
    "glossary_bad_word": "词表{where_zh}的词不能包含方括号、“<|”、“|>”或换行。",
    "glossary_missing_pronunciation": "词表{where_zh}的读音为空；请填写改写读法（如 Shee-ahn）、拼音（[x][ī][ān]）"
                                      "或 CMU 音素（[R][EH1][D]）。",
    "glossary_bad_kind": "词表{where_zh}的类型未知；可用：{kinds}。",
    "glossary_bad_hint": "词表{where_zh}的{kind}标注无效：拼音写作 [j][ǐ] 或 ji3，CMU 音素写作 [R][EH1][D]。",
    "glossary_bad_respelling": "词表{where_zh}的改写读法是普通文字：不能有方括号、“<|”、“|>”或换行"
                               "（标注请写在“读音”列）。",
    "glossary_invalid": "词表格式无效：每个词条包含词和读音（可选改写读法），或使用 {{\"词\": \"读音\"}} 形式的 JSON。",
    "glossary_empty": "词表中还没有词条：请在表格中填写词和它的读音。",
    "glossary_too_many": "一个词表最多 {limit} 个词条；请拆分为多个词表。",
    "glossary_duplicate": "“{word}”出现了两次；每个词只保留一个词条。",
    "glossary_invalid_json": "词表不是有效的 JSON；请检查文件的语法。",
    "glossary_file_too_large": "词表文件超过 {limit_mb} MB；一个词表最多只有 500 条简短的词条。",
    "glossary_unreadable": "无法读取词表文件 {file}；请提供 JSON 文件或已保存词表的 ID。",
    "glossary_unknown": "没有名为“{glossary}”的已保存词表；请在“词表”页中选择或保存一个。",
    "glossary_store_unwritable": "无法写入词表文件夹：请检查它是否可写、磁盘是否还有空间。",
    "glossary_name_taken": "已有 {limit} 个词表使用由“{name}”生成的 ID；请换一个名称，或删除一些词表。",
    "glossary_store_limit": "本服务器最多保存 {limit} 个词表，已经存满；请删除不再需要的词表，或请服务器管理员调高 --max-glossaries。",
    "voice_store_limit": "本服务器最多保存 {limit} 个声音，已经存满；请删除不再需要的声音，或请服务器管理员调高 --max-voices。",
    "project_store_limit": "本服务器最多保存 {limit} 个项目，已经存满；请删除不再需要的项目，或请服务器管理员调高 --max-projects。",
    "audiobook_store_limit": "本服务器最多保存 {limit} 个有声书任务，已经存满；请删除旧任务，或请服务器管理员调高 --max-projects。",
    "voice_name_taken": "以“{name}”命名的声音太多；请换一个名称。",
    "asr_unknown": "语音识别模型 {backend} 不可用；请先下载它，或用 --asr-model auto 启动。",
    "asr_unavailable": "没有可用的语音识别：请下载 Whisper 模型（python -m cosyvoice_ui download whisper-small，"
                       "约 1 GB，支持 99 种语言），或为英语安装 pocketsphinx。",
    "asr_language_unsupported": "当前的语音识别只懂英语，不支持 {language}；要识别其他语言，请下载多语种 Whisper 模型："
                                "python -m cosyvoice_ui download whisper-small（约 1 GB）。",
    "asr_language_unknown": "语音识别模型不认识语言 {language}；请不指定语言，让它自动检测。",
    "asr_no_speech": "录音中没有识别出文字；请确认录音中有清晰的语音，或手动输入文本。",
    "asr_audio_too_short": "录音只有 {seconds} 秒；请至少提供 0.3 秒语音。",
    "asr_audio_too_long": "录音长 {seconds} 秒；识别最多支持 600 秒（声音样本只需 3-30 秒）。",
    "asr_no_audio": "没有可识别的声音样本：请先上传或录制。",
    "transcript_mismatch": "样本文本与录音长度不符：{letters} 个字读出来需要 {fastest}-{slowest} 秒，而录音长 "
                           "{seconds} 秒。请填写录音中的原话，或点击“识别文字”。",
}


# --- reading the back ends' English back, to say it in Chinese ----------------------------------------------------

def _label(key: str, lang: str) -> str:
    return (LABELS_ZH if lang == "zh" else LABELS_EN).get(key, key.rsplit("_", 1)[-1])


def where_zh(message: str) -> str:
    """"glossary row 3 ('Xi'an'): ..." → "第 3 行（Xi'an）": where a glossary error is, for its Chinese message."""
    found = re.match(r"glossary (row|entry) (\d+)(?: \((.*?)\))?:", message)
    if not found:
        return ""
    kind, number, word = found.groups()
    word = (word or "").strip("'\"")
    return f"第 {number} {'行' if kind == 'row' else '项'}" + (f"（{word}）" if word else "")


def take_reasons(reasons, lang: str) -> str:
    """A take check's reasons ("too_long", "repeat", ...) as words in the user's language."""
    return ("、" if lang == "zh" else ", ").join(_label(f"take_reason_{r}", lang) for r in reasons) or "-"
