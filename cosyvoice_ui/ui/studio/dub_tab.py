"""The Dubbing tab (issue 28): a video and its subtitles in the target language in, the same voices speaking them
on cue out. Each speaker speaks in their own voice cut from the video; the fit settings say how a line is fitted to
its cue. Outputs: the dubbed video (its video stream copied, the dub and the original as two tagged audio tracks),
a preview player, the speech track, the adjusted SRT/VTT, and the cue table with each cue's fit or overrun.
Running it again with the same video continues it: only new or edited cues render.

Under the cue table a cue is regenerated (a new seed), given an earlier take back, locked or unlocked, or given its
own fit (speed range, overflow; or the project's again: its take is fitted anew, nothing renders); the dub is
exported again each time. The widgets live here; the work is `studio/dub_jobs.dub_here` and `dub_cue_here` over
`studio/dub*.py`.
"""

# No `from __future__ import annotations`: Gradio finds `request: gr.Request` by its evaluated annotation.
from dataclasses import dataclass, replace
from pathlib import Path

from ...errors import InvalidRequest
from ...studio.dub import DubSettings
from ...studio.dub_cues import FitPolicy
from ...studio.dub_jobs import MEDIA_SUFFIXES, dub_cue_here, dub_here
from ...types import EngineInfo
from .. import clicks, strings
from ..markup import MARKDOWN_OPTIONS
from ..page import Page
from .events import chosen_options, guarded, live, option_inputs, raise_shown, workspace_for


@dataclass(frozen=True)
class DubTab:
    media: object
    cues: object
    start: object
    stop: object
    status: object
    table: object
    preview: object
    outputs: object
    current: object  # the dubbed video's project (its name), for the per-cue actions
    cue_number: object
    take_number: object
    regenerate: object
    use_take: object
    lock: object
    unlock: object
    cue_text: object  # new words for the cue numbered in cue_number (a translation fixed here)
    change_text: object
    cue_min_speed: object  # the cue's own fit
    cue_max_speed: object
    cue_overflow: object
    set_fit: object
    clear_fit: object

    def adapt(self, info: EngineInfo | None, data: dict) -> dict:
        return {}  # nothing here depends on the model: every family clones cross-lingually or says why not


# Table headers are plain text (gr.I18n does not reach them): both languages, as in the glossary's table.
HEADERS = ["#", "Start · 开始", "End · 结束", "Speaker · 说话人", "Text · 文本", "Fit · 对齐", "Take · 版本"]


def cue_rows(result, lang: str) -> list[list]:
    """The cue table: start, end (as spoken), speaker, words, the fit ("fits" or the overrun, and the cue's own
    fit when it has one), and the chosen take of how many (and whether it is locked)."""
    rows = []
    for piece in result.placed:
        fit, cue = piece.fit, piece.cue
        verdict = strings.label("dub_fit_overrun", lang).format(seconds=fit.overrun) if fit.flagged \
            else strings.label("dub_fit_ok", lang)
        if cue.fit:
            own = piece.policy
            key = "dub_fit_own" if own.overflow else "dub_fit_own_no_gap"
            verdict += " · " + strings.label(key, lang).format(low=own.min_speed, high=own.max_speed)
        take = f"{cue.chosen}/{len(cue.takes)}" + (f" · {strings.label('dub_locked', lang)}" if cue.locked else "")
        rows.append([piece.number, round(piece.start, 3), round(piece.start + fit.placed, 3), cue.speaker, cue.text,
                     f"{fit.speed:.2f}x · {verdict}", take])
    return rows


def build_dub(page: Page) -> DubTab:
    import gradio as gr

    t = page.t
    options = page.options
    workspace = workspace_for(page)
    with gr.Tab(t("tab_dub"), id="dub"):
        with gr.Row():
            media = gr.File(label=t("dub_media"), file_types=list(MEDIA_SUFFIXES), type="filepath")
            cues = gr.File(label=t("dub_cues"), file_types=[".srt", ".vtt"], type="filepath")
        with gr.Row():
            source_lang = gr.Textbox(label=t("dub_source_lang"), max_lines=1, max_length=8)
            target_lang = gr.Textbox(label=t("dub_target_lang"), max_lines=1, max_length=8)
        with gr.Row():
            min_speed = gr.Slider(0.5, 1.0, value=0.85, step=0.05, label=t("dub_min_speed"))
            max_speed = gr.Slider(1.0, 2.0, value=1.2, step=0.05, label=t("dub_max_speed"))
            overflow = gr.Checkbox(value=True, label=t("dub_overflow"))
        with gr.Row():
            original = gr.Radio([(t("dub_original_duck"), "duck"), (t("dub_original_replace"), "replace")],
                                value="duck", label=t("dub_original"))
            duck_db = gr.Slider(0, 40, value=12, step=1, label=t("dub_duck_db"))
        consent = gr.Checkbox(value=False, label=t("dub_consent"))
        with gr.Row():
            start = gr.Button(t("dub_start"), variant="primary")
            stop = gr.Button(t("stop"), variant="stop")
        click = clicks.field()
        status = gr.Markdown(elem_classes=["dub-status"], **MARKDOWN_OPTIONS)
        table = gr.Dataframe(headers=HEADERS, label=t("dub_table"), interactive=False, wrap=True)
        with gr.Row():
            cue_number = gr.Number(label=t("dub_cue_number"), value=1, precision=0, minimum=1, min_width=120)
            take_number = gr.Number(label=t("dub_take_number"), value=1, precision=0, minimum=1, min_width=120)
        with gr.Row():
            cue_text = gr.Textbox(label=t("dub_cue_text"), max_lines=3, max_length=2000, scale=4)
            change_text = gr.Button(t("dub_change_text"), size="sm", scale=1)
        with gr.Row():
            regenerate = gr.Button(t("dub_regenerate"), size="sm")
            use_take = gr.Button(t("dub_use_take"), size="sm")
            lock = gr.Button(t("dub_lock"), size="sm")
            unlock = gr.Button(t("dub_unlock"), size="sm")
        with gr.Row():
            cue_min_speed = gr.Slider(0.5, 1.0, value=0.85, step=0.05, label=t("dub_cue_min_speed"))
            cue_max_speed = gr.Slider(1.0, 2.0, value=1.2, step=0.05, label=t("dub_cue_max_speed"))
            cue_overflow = gr.Checkbox(value=True, label=t("dub_cue_overflow"))
        with gr.Row():
            set_fit = gr.Button(t("dub_set_fit"), size="sm")
            clear_fit = gr.Button(t("dub_clear_fit"), size="sm")
        current = gr.State("")
        preview = gr.Video(label=t("dub_preview"), interactive=False, height=320)
        outputs = gr.File(label=t("dub_outputs"), file_count="multiple", interactive=False)

    def settings_of(data: dict, lang: str) -> DubSettings:
        policy = guarded(lang, lambda: FitPolicy(float(data[min_speed]), float(data[max_speed]),
                                                 bool(data[overflow])))
        return guarded(lang, lambda: DubSettings(
            source_lang=str(data[source_lang] or "").strip().lower() or "und",
            target_lang=str(data[target_lang] or "").strip().lower(), policy=policy,
            original=str(data[original] or "duck"), duck_db=float(data[duck_db])))

    def start_dub(data: dict, request: gr.Request, progress=gr.Progress()):
        lang = options.language(data)
        if not data[media] or not data[cues]:
            raise_shown(InvalidRequest("dub_inputs_missing", "upload the video and its subtitles (SRT or WebVTT in "
                                       "the target language) first"), lang)
        settings = settings_of(data, lang)
        chosen = replace(chosen_options(page, data, request, "dub"), consent=bool(data[consent]))

        def work(report, cancel):
            return dub_here(workspace, data[media], data[cues], settings, chosen, report, cancel)

        yield from shown(live(page, request, progress, lang, work, data[click]), lang, Path(str(data[media])).stem)

    def shown(steps, lang: str, name: str):
        """The job's status lines as they come, then the files, the cue table, the preview and the project."""
        for kind, value in steps:
            if kind == "status":
                yield gr.skip(), value, gr.skip(), gr.skip(), gr.skip()
            else:
                result, out = value
                files = [str(out), *(str(path) for path in result.files if path != out)]
                done = strings.label("dub_done", lang).format(cues=len(result.placed), overrun=len(result.flagged))
                yield files, done, cue_rows(result, lang), str(out), name

    def on_cue(action: str):
        def act(data: dict, request: gr.Request, progress=gr.Progress()):
            lang = options.language(data)
            chosen = chosen_options(page, data, request, "dub")

            fit = {"min_speed": float(data[cue_min_speed]), "max_speed": float(data[cue_max_speed]),
                   "overflow": bool(data[cue_overflow])} if action == "fit" else None

            def work(report, cancel):
                return dub_cue_here(workspace, data[current], data[cue_number], action, data[take_number], chosen,
                                    report, cancel, text=data[cue_text], fit=fit)

            yield from shown(live(page, request, progress, lang, work, data[click]), lang, data[current])

        act.__name__ = f"dub_cue_{action}"
        return act

    def stop_dub(data: dict, request: gr.Request) -> None:
        page.handlers.stop(request, data[click])

    private = dict(api_visibility="private")
    job = dict(outputs=[outputs, status, table, preview, current], concurrency_limit=page.settings.concurrency,
               concurrency_id="synthesis", **private)
    inputs = {media, cues, source_lang, target_lang, min_speed, max_speed, overflow, original, duck_db, consent,
              click, *option_inputs(page)}
    running = [start.click(start_dub, inputs=inputs, js=clicks.making(inputs, click), **job)]
    cue_inputs = {current, cue_number, take_number, cue_text, cue_min_speed, cue_max_speed, cue_overflow, click,
                  *option_inputs(page)}
    for button, action in ((regenerate, "regenerate"), (use_take, "take"), (lock, "lock"), (unlock, "unlock"),
                           (change_text, "text"), (set_fit, "fit"), (clear_fit, "fit_clear")):
        running.append(button.click(on_cue(action), inputs=cue_inputs, js=clicks.making(cue_inputs, click), **job))
    stop.click(stop_dub, inputs={click}, js=clicks.sending({click}, click), cancels=running, queue=False, **private)
    return DubTab(media, cues, start, stop, status, table, preview, outputs, current, cue_number, take_number,
                  regenerate, use_take, lock, unlock, cue_text, change_text, cue_min_speed, cue_max_speed,
                  cue_overflow, set_fit, clear_fit)
