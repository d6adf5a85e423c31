"""`build_ui(manager, settings) -> gr.Blocks`: the tabs, the model panel and the history panel.

A factory: nothing happens at import. Widgets are mapped to requests in `handlers.py`; this file
only arranges components and wires events.
"""

# No `from __future__ import annotations` here: Gradio finds `request: gr.Request` and
# `progress=gr.Progress()` parameters by their evaluated annotations.
import inspect
import random
from pathlib import Path

from ..serving.backends import OFFLINE_ID
from ..serving.manager import ModelManager
from ..settings import Settings
from ..types import EngineInfo, Mode
from . import strings
from .examples import EXAMPLE_TEXT, example_available, example_voice
from ..audio import ensure_ffmpeg
from ..errors import InvalidRequest
from .handlers import Handlers, OutputOptions
from ..serving.voice_service import save_voice
from .requests import clone_meta, cross_meta, field_of, prompt_from_file, request_from_meta, sft_meta, vc_meta
from .model_panel import build_model_panel
from .api_tools import add_endpoints

RECOMMENDED_MODEL = "CosyVoice-300M-SFT"  # presets + cloning: what the "get real cloning" button downloads
TAGS = ("[laughter]", "[breath]", "<strong></strong>", "<laughter></laughter>", "[noise]", "[cough]")
CLONE_EXAMPLES = [
    ["Hello! This voice was cloned from just a few seconds of audio.", 1],
    ["收到好友从远方寄来的生日礼物，那份意外的惊喜让我心中充满了快乐。", 2],
]
CROSS_EXAMPLES = [  # text in another language than the sample (v1 adds the language tag itself)
    ["Cross-lingual cloning keeps the voice and changes the language."],
    ["今天的天气非常好，我们一起去公园散步吧。"],
    ["こんにちは、今日はいい天気ですね。"],
    ["안녕하세요, 만나서 반갑습니다."],
]
SFT_EXAMPLES = [  # text only: the speaker list depends on the loaded model
    ["你好，欢迎使用语音合成工作室。今天天气真不错。"],
    ["Welcome! This is a preset speaker reading a short sentence."],
]


def approximate(info: "EngineInfo | None") -> bool:
    """Backends that only approximate a prompt's voice offer a quick/refine switch."""
    return bool(info and info.voice_match == "approximate")


def _example_label(text: str, extra: object) -> str:
    return f"{text[:48]}{'…' if len(text) > 48 else ''} ({extra})"


def _controls(t, can_stream: bool = True):
    """Speed, seed + dice, stream, Generate/Stop, and the outputs every tab has."""
    import gradio as gr

    with gr.Row():
        speed = gr.Slider(0.5, 2.0, value=1.0, step=0.05, label=t("speed"))
        seed = gr.Number(value=0, precision=0, minimum=0, label=t("seed"), scale=1)
        dice = gr.Button(t("dice"), scale=0, min_width=60)
        stream = gr.Checkbox(value=False, label=t("stream"), visible=can_stream)
    with gr.Row():
        generate = gr.Button(t("generate"), variant="primary")
        stop = gr.Button(t("stop"), variant="stop")
    audio = gr.Audio(label=t("output"), streaming=True, autoplay=True, interactive=False, elem_classes=["result"])
    file = gr.File(label=t("download_file"), interactive=False, elem_classes=["result-file"])
    info = gr.Markdown()
    dice.click(lambda: random.randint(1, 100_000_000), outputs=seed, queue=False, api_visibility="private")
    return speed, seed, stream, generate, stop, audio, file, info


def build_ui(manager: "ModelManager", settings: "Settings", output_dir: "Path | None" = None, voices=None, share=None,
             service=None):
    """The Gradio Blocks app for one `ModelManager` (`share`: a server.ShareStatus to display).

    `service`: the REST API's `ApiService`, which the public Gradio API and MCP tools run through
    (`api_tools.py`); one is made when not given.
    """
    import gradio as gr

    t = strings.i18n()
    can_stream = ensure_ffmpeg()

    def voice_choices() -> list[tuple[str, str]]:
        saved = [(f"{v.name} ({v.id})" if v.name != v.id else v.id, v.id) for v in voices.list()] if voices else []
        return [("—", "")] + saved

    def precision_switchable(current: "EngineInfo | None") -> bool:
        """Local CosyVoice models can reload in fast mode; remote and offline backends cannot."""
        return bool(current and current.precision is not None)

    handlers = Handlers(manager, settings, output_dir or Path("outputs"), voices=voices)

    def default_preset(current: "EngineInfo | None") -> "str | None":
        """The preset the preset tab starts on: the default voice when it is a preset."""
        ref = handlers.resolver.default(current)
        return ref.id if ref is not None and ref.is_preset else None
    info = manager.info()

    with gr.Blocks(title="CosyVoice Studio", fill_width=True) as demo:
        gr.Markdown(t("title"), elem_id="title")
        gr.Markdown(t("subtitle"))
        gr.Markdown(t("public_warning"), visible=settings.is_public and not settings.auth, elem_id="public-warning")
        gr.Markdown(t("no_model"), visible=manager.model_id == OFFLINE_ID and info is None, elem_id="no-model")
        # Text and button share a line where both fit (text >= 300 px, button >= 220 px); on a phone the
        # row wraps and the button, growing, takes the full width under the text.
        with gr.Row(visible=bool(strings.notes_markdown(info, t)), elem_id="backend-notes") as notes_row:
            with gr.Column(scale=4, min_width=300):  # a Markdown ignores min_width; its column does not
                notes = gr.Markdown(strings.notes_markdown(info, t), elem_id="backend-notes-text")
            get_real = gr.Button(t("get_cosyvoice"), size="sm", scale=1, min_width=220, elem_id="get-cosyvoice")
        if share is not None and settings.share:
            share_md = gr.Markdown(t("share_pending"), elem_id="share-status")
            share_timer = gr.Timer(1.0)

            def share_text():
                # One translated key per string: Gradio's frontend translates the first key it finds.
                if share.url:
                    return f"{t('share_ready')} [{share.url}]({share.url})", gr.Timer(active=False)
                if share.error:
                    return (f"<details><summary>{t('share_failed')}</summary>\n\n{share.error}\n\n</details>",
                            gr.Timer(active=False))
                return gr.skip(), gr.skip()

            share_timer.tick(share_text, outputs=[share_md, share_timer], queue=False, api_visibility="private")
        panel = build_model_panel(manager, settings, t, page=demo)
        with gr.Accordion(t("options"), open=False):
            with gr.Row():
                normalize = gr.Checkbox(value=True, label=t("normalize"))
                fmt = gr.Dropdown(["wav", "mp3", "flac"], value="wav", label=t("format"))
                fast = gr.Checkbox(value=manager.load_options.precision == "fast", label=t("fast"),
                                   visible=precision_switchable(info))
        history = gr.BrowserState([], storage_key="cosyvoice_history")
        # The browser's language, filled in on page load: error messages follow it (labels use gr.I18n).
        browser_lang = gr.Textbox(value="en", visible=False)
        option_inputs = [normalize, fmt, browser_lang, history]

        with gr.Tabs():
            with gr.Tab(t("tab_clone"), id="clone"):
                c_prompt = gr.Audio(sources=["upload", "microphone"], type="filepath", label=t("prompt_audio"))
                c_example = gr.Button(t("try_example"), size="sm", visible=example_available())
                c_saved = gr.Dropdown(voice_choices(), value="", label=t("saved_voice"))
                c_match = gr.Radio([(t("match_quick"), "quick"), (t("match_refine"), "refine")], value="quick",
                                   label=t("voice_match"), visible=approximate(info))
                c_transcript = gr.Textbox(label=t("prompt_text"), placeholder=t("prompt_text_ph"), lines=1)
                c_text = gr.Textbox(label=t("text"), placeholder=t("text_ph"), lines=3)
                with gr.Accordion(t("save_voice"), open=False, visible=voices is not None):
                    with gr.Row():
                        c_voice_name = gr.Textbox(label=t("voice_name"), scale=3)
                        c_save = gr.Button(t("save_voice"), scale=1)
                c_speed, c_seed, c_stream, c_go, c_stop, c_audio, c_file, c_info = _controls(t, can_stream)
                gr.Examples(CLONE_EXAMPLES, inputs=[c_text, c_seed], label=t("examples"),
                            example_labels=[_example_label(text, f"seed {seed}") for text, seed in CLONE_EXAMPLES])

            with gr.Tab(t("tab_cross"), id="cross"):
                x_sub = gr.Radio([(t("submode_cross"), "cross"), (t("submode_instruct"), "instruct")], value="cross",
                                 label=t("submode"))
                x_prompt = gr.Audio(sources=["upload", "microphone"], type="filepath", label=t("prompt_audio"))
                x_saved = gr.Dropdown(voice_choices(), value="", label=t("saved_voice"))
                x_match = gr.Radio([(t("match_quick"), "quick"), (t("match_refine"), "refine")], value="quick",
                                   label=t("voice_match"), visible=approximate(info))
                x_speaker = gr.Dropdown(list(info.speakers) if info else [], label=t("speaker"), visible=False)
                x_instruct = gr.Textbox(label=t("instruct_text"), placeholder=t("instruct_ph"), visible=False)
                x_instruct_examples = gr.Dataset(components=[gr.Textbox(visible=False)], label=t("instruct_examples"),
                                                 samples=[[e] for e in (info.instruct_examples if info else ())],
                                                 visible=False)
                x_note = gr.Markdown(t("instruct_unavailable"), visible=False)
                x_text = gr.Textbox(label=t("text"), placeholder=t("cross_text_ph"), lines=3)
                with gr.Row():
                    tag_buttons = [gr.Button(tag, size="sm", min_width=40) for tag in TAGS]
                x_speed, x_seed, x_stream, x_go, x_stop, x_audio, x_file, x_info = _controls(t, can_stream)
                gr.Examples(CROSS_EXAMPLES, inputs=[x_text], label=t("examples"))

            with gr.Tab(t("tab_sft"), id="sft"):
                s_note = gr.Markdown(t("no_speakers_note"), visible=not (info and info.speakers))
                s_speaker = gr.Dropdown(list(info.speakers) if info else [], label=t("speaker"),
                                        value=default_preset(info))
                s_text = gr.Textbox(label=t("text"), placeholder=t("text_ph"), lines=3)
                s_speed, s_seed, s_stream, s_go, s_stop, s_audio, s_file, s_info = _controls(t, can_stream)
                gr.Examples(SFT_EXAMPLES, inputs=[s_text], label=t("examples"))

            with gr.Tab(t("tab_vc"), id="vc"):
                v_source = gr.Audio(sources=["upload", "microphone"], type="filepath", label=t("source_audio"))
                v_target = gr.Audio(sources=["upload", "microphone"], type="filepath", label=t("target_audio"))
                v_saved = gr.Dropdown(voice_choices(), value="", label=t("saved_voice"))
                v_example = gr.Button(t("try_example_vc"), size="sm", visible=example_available())
                v_speed, v_seed, v_stream, v_go, v_stop, v_audio, v_file, v_info = _controls(t, can_stream)

            with gr.Tab(t("tab_history"), id="history"):
                clear = gr.Button(t("clear_history"), size="sm")

                @gr.render(inputs=history)
                def show_history(entries):
                    if not entries:
                        gr.Markdown(t("history_empty"))
                        return
                    for entry in entries:
                        with gr.Row(variant="panel"):
                            gr.Markdown(f"**{entry.get('time', '')}** · {entry.get('mode', '')} · "
                                        f"{entry.get('voice') or '-'} · seed {entry.get('seed')}\n\n"
                                        f"{entry.get('text', '')}")
                            gr.Audio(entry.get("file"), interactive=False, show_label=False)
                            rerun = gr.Button(t("rerun"), size="sm", scale=0)
                            rerun.click(rerun_entry(entry), inputs=[normalize, fmt, browser_lang, history],
                                        outputs=history, api_visibility="private")

                clear.click(lambda: [], outputs=history, queue=False, api_visibility="private")

        # --- events ---------------------------------------------------------------------------------

        def options(normalize_v, fmt_v) -> OutputOptions:
            return OutputOptions(bool(normalize_v), fmt_v or "wav")

        def tab(make_meta, fields: list[str]):
            """The handler and validator of a tab whose first inputs are `fields` (passed to `make_meta`)."""
            n = len(fields)
            names = fields + ["speed", "seed", "stream", "normalize", "fmt", "lang", "history"]

            def run(*values):
                *values, request, progress = values
                meta = make_meta(*values[:n])
                speed, seed, stream, normalize_v, fmt_v, lang, hist = values[n:]
                req = request_from_meta(meta, speed, seed, stream)
                yield from handlers.run(req, options(normalize_v, fmt_v), hist, request, progress, meta,
                                        strings.language_of(lang))

            def validate(*values):
                verdicts = [gr.validate(True, "") for _ in names]
                try:
                    meta = make_meta(*values[:n])
                    handlers.check(request_from_meta(meta, values[n], values[n + 1], values[n + 2]))
                except InvalidRequest as exc:
                    target = field_of(exc)
                    index = names.index(target) if target in names else 0
                    lang = strings.language_of(values[names.index("lang")])
                    verdicts[index] = gr.validate(False, strings.message(exc, lang))
                return verdicts

            # Gradio injects gr.Request / gr.Progress by the signature it sees, so spell the inputs out.
            widgets = [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD) for name in names]
            req_param = inspect.Parameter("request", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=gr.Request)
            prog_param = inspect.Parameter("progress", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=gr.Progress())
            run.__signature__ = inspect.Signature(widgets + [req_param, prog_param])
            run.__annotations__ = {"request": gr.Request}  # Gradio reads type hints from here
            validate.__signature__ = inspect.Signature(widgets)
            return run, validate

        def rerun_entry(entry: dict):
            def rerun(normalize_v, fmt_v, lang, hist, request: gr.Request, progress=gr.Progress()):
                meta = entry.get("request") or {}
                req = request_from_meta(meta, entry.get("speed"), entry.get("seed"))
                result = None
                for result in handlers.run(req, options(normalize_v, fmt_v), hist, request, progress, meta,
                                           strings.language_of(lang)):
                    pass
                return result[3] if result else hist

            return rerun

        def wire(button, stop_button, make_meta, fields, inputs, outputs, trigger=None):
            run, validate = tab(make_meta, fields)
            # Private: the tab events carry browser state (history, language); the public API is api_tools.py.
            event = button.click(run, inputs=inputs + option_inputs, outputs=outputs + [history], validator=validate,
                                 concurrency_limit=settings.concurrency, concurrency_id="synthesis",
                                 api_visibility="private")
            cancels = [event]
            if trigger is not None:  # another event that fills the inputs and then generates
                cancels.append(trigger.then(run, inputs=inputs + option_inputs, outputs=outputs + [history],
                                            concurrency_limit=settings.concurrency, concurrency_id="synthesis",
                                            api_visibility="private"))
            stop_button.click(handlers.stop, cancels=cancels, queue=False, api_visibility="private")
            return event

        def fill_example(text: str):
            path, transcript = example_voice(handlers.output_dir / "examples")
            return path, "", transcript, text if (text or "").strip() else EXAMPLE_TEXT

        example_event = c_example.click(fill_example, inputs=c_text, outputs=[c_prompt, c_saved, c_transcript, c_text],
                                        api_visibility="private")

        wire(c_go, c_stop, clone_meta, ["prompt", "saved", "prompt_text", "text", "voice_match"],
             [c_prompt, c_saved, c_transcript, c_text, c_match, c_speed, c_seed, c_stream], [c_audio, c_file, c_info],
             trigger=example_event)
        wire(x_go, x_stop, cross_meta, ["submode", "prompt", "saved", "speaker", "instruct_text", "text", "voice_match"],
             [x_sub, x_prompt, x_saved, x_speaker, x_instruct, x_text, x_match, x_speed, x_seed, x_stream],
             [x_audio, x_file, x_info])
        wire(s_go, s_stop, sft_meta, ["speaker", "text"], [s_speaker, s_text, s_speed, s_seed, s_stream],
             [s_audio, s_file, s_info])
        def fill_vc_example():
            source, _ = example_voice(handlers.output_dir / "examples", which=1)
            target, _ = example_voice(handlers.output_dir / "examples", which=0)
            return source, target, ""

        vc_example_event = v_example.click(fill_vc_example, outputs=[v_source, v_target, v_saved],
                                           api_visibility="private")
        wire(v_go, v_stop, vc_meta, ["source", "prompt", "saved"], [v_source, v_target, v_saved, v_speed, v_seed, v_stream],
             [v_audio, v_file, v_info], trigger=vc_example_event)

        saved_dropdowns = [c_saved, x_saved, v_saved]

        def refresh_voices():
            return [gr.update(choices=voice_choices()) for _ in saved_dropdowns]

        def save_current_voice(prompt, transcript, name, lang, progress=gr.Progress()):
            lang = strings.language_of(lang)
            if not (name or "").strip():
                raise gr.Error(strings.label("voice_name_missing", lang))
            try:
                audio = prompt_from_file(prompt)
                if audio is None:
                    raise InvalidRequest("prompt_missing", "no prompt audio was given: upload or record the voice "
                                         "(3-30 seconds of clear speech)", what="prompt audio")
                voice, ready = save_voice(manager, voices, name.strip(), audio, transcript or "")
            except InvalidRequest as exc:
                raise gr.Error(strings.message(exc, lang)) from None
            gr.Info(strings.label("voice_saved", lang).format(name=voice.name))
            return [gr.update(choices=voice_choices(), value=voice.id if d is c_saved else None)
                    for d in saved_dropdowns]

        c_save.click(save_current_voice, inputs=[c_prompt, c_transcript, c_voice_name, browser_lang],
                     outputs=saved_dropdowns, api_visibility="private")
        demo.load(refresh_voices, outputs=saved_dropdowns, queue=False, api_visibility="private")

        def switch_precision(enabled: bool, lang: str):
            if manager.set_load_options(precision="fast" if enabled else "stock"):
                gr.Info(strings.label("precision_switched", strings.language_of(lang)))

        fast.change(switch_precision, inputs=[fast, browser_lang], api_visibility="private")

        def download_recommended(request: gr.Request, progress=gr.Progress()):
            return panel.download(RECOMMENDED_MODEL, progress, request)

        get_real.click(download_recommended, outputs=[panel.model, panel.state], api_visibility="private")

        for button in tag_buttons:
            button.click(lambda text, tag=button.value: (text or "") + tag, inputs=x_text, outputs=x_text,
                         queue=False, api_visibility="private")
        x_instruct_examples.click(lambda sample: sample[0], inputs=x_instruct_examples, outputs=x_instruct,
                                  queue=False, api_visibility="private")

        def adapt(sub: str | None = None):
            """Show what the current model can do (called on page load, submode change and model change)."""
            current = manager.info()
            preset = default_preset(current)
            can_instruct = bool(current and Mode.INSTRUCT in current.modes)
            speakers = list(current.speakers) if current else []
            instruct = sub == "instruct"
            return (
                gr.update(visible=not instruct),  # prompt audio
                gr.update(visible=instruct and can_instruct, choices=speakers,
                          value=speakers[0] if speakers else None),
                gr.update(visible=instruct and can_instruct),
                gr.update(visible=instruct and can_instruct,
                          samples=[[e] for e in (current.instruct_examples if current else ())]),
                gr.update(visible=instruct and not can_instruct),
                gr.update(choices=speakers, value=preset),
                gr.update(visible=not speakers),
                gr.update(visible=precision_switchable(current)),
                gr.update(visible=bool(strings.notes_markdown(current, t))),
                gr.update(value=strings.notes_markdown(current, t)),
                gr.update(visible=approximate(current)),
                gr.update(visible=approximate(current) and not instruct),
            )

        adapt_outputs = [x_prompt, x_speaker, x_instruct, x_instruct_examples, x_note, s_speaker, s_note, fast,
                         notes_row, notes, c_match, x_match]
        x_sub.change(adapt, inputs=x_sub, outputs=adapt_outputs, queue=False, api_visibility="private")
        panel.changed.then(adapt, inputs=x_sub, outputs=adapt_outputs, queue=False, api_visibility="private")
        demo.load(adapt, inputs=x_sub, outputs=adapt_outputs, queue=False, api_visibility="private")
        demo.load(None, js="() => navigator.language || 'en'", outputs=browser_lang, api_visibility="private")

        # The public API ("Use via API", gradio_client) and the MCP tools: API-only endpoints.
        if service is None:
            from ..api.service import ApiService

            service = ApiService(manager, settings, library=voices)
        add_endpoints(service, handlers.output_dir, concurrency=settings.concurrency)

    demo.queue(max_size=settings.queue_size, default_concurrency_limit=settings.concurrency)
    return demo


def describe_info(info: "EngineInfo | None") -> str:
    if info is None:
        return "-"
    modes = ", ".join(m.value for m in info.modes)
    return f"**{info.name}** ({info.family}, {info.sample_rate} Hz) · modes: {modes}"
