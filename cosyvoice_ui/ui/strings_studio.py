"""The labels and messages of the studio parts of the UI (the Script and Audiobook tabs, the glossary, the
Transcribe buttons, subtitles and take checks), in English and Chinese. `strings.py` merges them into its
tables; this module only keeps that file short."""

from __future__ import annotations

LABELS_EN: dict[str, str] = {}
LABELS_ZH: dict[str, str] = {}
# Chinese messages of the studio's InvalidRequest codes ({placeholders} from the error's params).
MESSAGES_ZH: dict[str, str] = {
    # audiobooks (studio/book.py, studio/audiobook.py, studio/chapters.py)
    "unsupported_book": "无法把 {extension} 文件当作书读取；请使用 EPUB（.epub）、纯文本（.txt）或 Markdown（.md）文件。",
    "bad_book": "书籍文件无法读取（已损坏、不完整或不是电子书）；请重新导出或上传。",
    "empty_book": "这本书没有可朗读的文字；请使用含有文字的书。",
    "drm_book": "这本 EPUB 受 DRM 保护（文字已加密），无法朗读；请使用无 DRM 的版本。",
    "bad_book_format": "不支持的有声书格式 {format}；请选择 m4b 或 mp3。",
    "book_encode_failed": "有声书写入失败；请重试，或换一种格式。",
    "book_piece_silent": "该段文字没有生成声音；请修改这一段或换一个声音。",
    "bad_piece_size": "每段至少 40 个字符。",
    # subtitles (studio/subtitles.py)
    "bad_subtitle_format": "不支持的字幕格式 {format}；请选择 srt 或 vtt。",
}
