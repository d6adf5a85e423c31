"""The labels of the text and instruction helpers (instruction picker, tag and pronunciation chips, the
Japanese kanji hint, what instruct mode speaks with), in English and Chinese. `strings.py` merges them
into its tables; this module only keeps that file short."""

from __future__ import annotations

LABELS_EN: dict[str, str] = {
    "instruct_picker": "Known-good instructions for this model (pick one, or type your own below)",
    "instruct_ph_for": "e.g. {example}",
    "instr_dialect": "Dialect",
    "instr_emotion": "Emotion",
    "instr_rate": "Speaking rate",
    "instr_volume": "Volume",
    "instr_style": "Style",
    "instruct_unavailable": "This model cannot follow style instructions. Load CosyVoice-300M-Instruct (with its "
                            "preset speakers), or CosyVoice2-0.5B or Fun-CosyVoice3-0.5B (with any voice sample).",
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
}

LABELS_ZH: dict[str, str] = {
    "instruct_picker": "此模型的常用指令（选择一条，或在下方自行输入）",
    "instruct_ph_for": "例如：{example}",
    "instr_dialect": "方言",
    "instr_emotion": "情感",
    "instr_rate": "语速",
    "instr_volume": "音量",
    "instr_style": "风格",
    "instruct_unavailable": "此模型不支持风格指令。请加载 CosyVoice-300M-Instruct（使用其预训练音色），"
                            "或 CosyVoice2-0.5B、Fun-CosyVoice3-0.5B（可使用任意声音样本）。",
    "instruct_voice_note": "此模型用你的声音样本（或已保存的声音）朗读指令：请在上方上传或录制样本，无需预训练音色。",
    "preset_instruct_note": "此模型的风格指令需要声音样本，而不是预训练音色：请使用“跨语种复刻 / 指令控制”页。",
    "chip_pinyin": "拼音 [j][ǐ]",
    "chip_cmu": "英文音素 [R][EH1][D]",
    "pronunciation_help": "**读音标注：**在词的位置用方括号写出读音。普通话：拼音的声母和带声调的韵母，例如 "
                          "对报道[j][ǐ]予好评（“给”读 jǐ）。英语：带重音数字的 CMU 音素，例如 I have [R][EH1][D] it。",
    "ja_kanji_note": "ℹ️ 此模型朗读日语时，假名（平假名、片假名）读音正确，汉字可能按中文读音朗读。"
                     "读音重要时请改写为假名（片假名效果最好）。",
}

# What each pronunciation chip inserts (`EngineInfo.pronunciation` → text), and its label key.
PRONUNCIATION_CHIPS = {"pinyin": ("chip_pinyin", "[j][ǐ]"), "cmu": ("chip_cmu", "[R][EH1][D]")}
