"""The app's public Gradio API ("Use via API", `gradio_client`) and, with `--mcp`, its MCP tools.

Every endpoint here is API-only (no button triggers it) and runs through the REST API's `ApiService`
(`POST /tts`): the same validation, default voice, seeds, result cache and model queue. The UI's own
tab events stay private, because they carry browser state (history, language, streaming) that API
callers neither have nor need.

    clone          3-second voice cloning: a recording + its transcript (or a saved voice) reads a text
    cross_lingual  a recording's voice (or a saved voice) reads a text in another language, no transcript
    instruct       a preset speaker reads a text in a style described in words
    preset         a preset speaker reads a text
    convert        re-speak a recording in another voice (voice conversion)
    synthesize     text → speech with any voice (preset, saved or the default) [MCP tool]
    list_voices    the loaded model's preset speakers and the saved voices [MCP tool]
    save_voice     store a recording as a reusable voice [MCP tool]

Parameter descriptions are written once, in each function's `Args:` docstring: Gradio reads them for
the MCP tool schemas, and `_inputs` copies them into the API page / `view_api()`.
"""

# No `from __future__ import annotations`: the endpoint signatures are read at runtime.
import base64
import contextlib
import inspect
import json
import logging
import secrets
import time
import typing
from pathlib import Path

from .. import audio as audio_utils
from ..api.schemas import TTSBody
from ..api.service import PayloadTooLarge
from ..errors import Cancelled, CosyVoiceError, InvalidRequest
from ..known_models import models_for, name_list
from ..serving.audit import Caller
from ..types import Mode

log = logging.getLogger(__name__)

ENDPOINTS = ("clone", "cross_lingual", "instruct", "preset", "convert", "synthesize", "list_voices", "save_voice")
MCP_TOOLS = ("synthesize", "list_voices", "save_voice")
FILE_FORMATS = ("wav", "mp3", "flac")

# The words of the REST body that messages and pydantic errors mention → this API's parameter names.
_FIELD_NAMES = {"prompt_text": "transcript", "instruct_text": "instructions", "voice_id": "voice"}

_TEXT = "What to say (required)."
_SPEED = "Tempo from 0.5 to 2.0 (1.0 = normal speed)."
_SEED = ("Random seed, 0-2147483647: the same seed and inputs give the same audio; leave empty for a fresh one "
         "(it is returned in the details).")
_FORMAT = "File format of the result: wav, mp3 or flac."
_MATCH = ("Only for the offline default voice: quick (seconds) or refine (about a minute) matching of the "
          "recorded voice.")
_CONSENT = ("true: you confirm that the speaker of the recording agreed to have their voice cloned. A shared server "
            "(a public address or share link) refuses a new recording without it; not needed for a saved voice.")
_DETAILS = ("The audio file, and details: seed (pass it again to reproduce), sample_rate, duration_s, format and "
            "cached (true when a recent identical request was replayed).")


def _doc(summary: str, returns: str, **params: str):
    """Give a function the docstring Gradio parses: a summary, one `name: description` line per parameter."""
    def decorate(fn):
        lines = [summary, "", "Args:"] + [f"    {name}: {text}" for name, text in params.items()]
        fn.__doc__ = "\n".join(lines + ["", "Returns:", f"    {returns}"])
        return fn

    return decorate


# --- endpoints (plain functions of an `ApiService`; Gradio wiring is in `add_endpoints`) -------------------


class Endpoints:
    """The API functions over one `ApiService`; results are written into `output_dir`."""

    def __init__(self, service, output_dir: Path) -> None:
        self.service = service
        self.output_dir = Path(output_dir)

    def run(self, caller: Caller = Caller("gradio_api"), **fields) -> tuple[dict, dict]:  # noqa: B008
        """Build a `TTSBody`, run it like `POST /tts` and write the audio file: (file, details)."""
        fmt = (fields.pop("format", None) or "wav").strip().lower()
        if fmt not in FILE_FORMATS:
            raise InvalidRequest("bad_format", f"unsupported audio format {fmt!r}; choose one of "
                                 f"{', '.join(FILE_FORMATS)}", format=fmt)
        with _clear_errors():
            body = TTSBody(format=fmt, **{k: v for k, v in fields.items() if v is not None})
            job = self.service.tts_request(body, caller)
            result = self.service.run(job)
            path = self._write(audio_utils.encode(result.samples, result.sample_rate, job.fmt), job.fmt)
        details = {"seed": result.seed, "sample_rate": result.sample_rate, "format": job.fmt, "cached": result.cached,
                   "duration_s": round(len(result.samples) / result.sample_rate, 3) if result.sample_rate else 0.0}
        return _file_data(path, job.fmt), details

    def _write(self, data: bytes, fmt: str) -> Path:
        self.output_dir.mkdir(parents=True, exist_ok=True)
        path = self.output_dir / f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}.{fmt}"
        path.write_bytes(data)
        return path

    def voice_list(self) -> dict:
        info = self.service.manager.info()
        saved = [{"id": v.id, "name": v.name, "transcript": v.transcript, "duration_s": v.duration_s}
                 for v in self.service.library.list()]
        return {
            "model": info.name if info else None,
            "presets": list(info.presets) if info else [],
            "saved": saved,
            "instructions_supported": bool(info and Mode.INSTRUCT in info.modes),
            # what instruct speaks with: a preset speaker, or a saved voice (CosyVoice2/3)
            "instruct_needs": ("voice" if info.instruct_voice else "preset")
            if info and Mode.INSTRUCT in info.modes else None,
            "default_voice": default.id if (default := self.service.default_voice(info)) else None,
        }

    def upload(self, value, name: str, what: str) -> bytes | None:
        """An uploaded file parameter → its bytes; one over the upload limit is refused before it is read."""
        return _upload_bytes(value, name, what, getattr(self.service, "max_upload_bytes", None))

    def upload_b64(self, value, name: str, what: str) -> str | None:
        data = self.upload(value, name, what)
        return base64.b64encode(data).decode() if data is not None else None

    def add_voice(self, name: str, audio, transcript: str, consent: bool = False,
                  caller: Caller = Caller("gradio_api")) -> dict:  # noqa: B008 (a frozen record)
        if not (name or "").strip():
            raise InvalidRequest("voice_name_missing", "the voice needs a name: set `name`, e.g. \"narrator\"")
        data = self.upload(audio, "audio", "the recording of the voice (3-30 seconds of clear speech)")
        if data is None:
            raise InvalidRequest("prompt_missing", "no recording was sent: set `audio` to the recording of the "
                                 "voice (3-30 seconds of clear speech)")
        voice, ready = self.service.add_voice(name.strip(), data, transcript or "", bool(consent), caller)
        return {"id": voice.id, "name": voice.name, "transcript": voice.transcript, "duration_s": voice.duration_s,
                "features_ready": ready}


def caller_of(request) -> Caller:
    """Who calls an endpoint (the login, or the API key's id the key gate logged it in as) and how: MCP's tool
    calls reach the endpoint through Gradio's own client, which says so in `x-gradio-user`."""
    headers = getattr(request, "headers", None) or {}
    surface = "mcp" if str(headers.get("x-gradio-user") or "") == "mcp" else "gradio_api"
    return Caller(surface, getattr(request, "username", None) or None)


def _file_data(path: Path, fmt: str) -> dict:
    """A result file as Gradio's FileData (Gradio moves it into its cache and serves it by URL)."""
    return {"path": str(path), "orig_name": path.name, "mime_type": audio_utils.MEDIA_TYPES[fmt],
            "meta": {"_type": "gradio.FileData"}}


def _upload_bytes(value, name: str, what: str, max_bytes: int | None = None) -> bytes | None:
    """An uploaded file parameter → its bytes (None when empty); over `max_bytes`, refused unread.

    Only Gradio's FileData form is accepted: Gradio has checked that such a file was uploaded to it (or
    fetched from a URL); a bare string could name any file on the server. A file Gradio fetched from a URL
    passed no upload limit, so its size is checked here before it is read.
    """
    if value in (None, "", {}):
        return None
    meta = value.get("meta") if isinstance(value, dict) else None
    if not (isinstance(meta, dict) and meta.get("_type") == "gradio.FileData" and value.get("path")):
        raise InvalidRequest("audio_not_uploaded", f"`{name}` must be an uploaded audio file ({what}): with "
                             "gradio_client pass handle_file(\"voice.wav\"); over MCP pass an http(s) URL or a "
                             "data:audio/...;base64 URL", what=name)
    try:
        path = Path(value["path"])
        size = path.stat().st_size
        if max_bytes is not None and size > max_bytes:
            raise PayloadTooLarge(f"the uploaded `{name}` is {size / 2**20:.1f} MB; the limit is "
                                  f"{max_bytes / 2**20:g} MB (--max-upload-mb)", what=name,
                                  size_mb=round(size / 2**20, 1), limit_mb=round(max_bytes / 2**20, 1))
        return path.read_bytes()
    except OSError:
        raise InvalidRequest("audio_unreadable", f"the uploaded `{name}` could not be read; upload it again",
                             what=name) from None


@contextlib.contextmanager
def _clear_errors():
    """pydantic's verdict on a `TTSBody` → an `InvalidRequest` naming this API's parameters."""
    from pydantic import ValidationError

    try:
        yield
    except ValidationError as exc:
        problems = [f"{_FIELD_NAMES.get(str(err['loc'][0]), err['loc'][0]) if err.get('loc') else 'input'}: "
                    f"{err.get('msg')}" for err in exc.errors()]
        raise InvalidRequest("invalid_field", "; ".join(problems) or "the request is invalid") from None


def _message(exc: BaseException) -> str:
    if isinstance(exc, InvalidRequest):
        return exc.message
    if isinstance(exc, Cancelled):
        return "the job was stopped before it finished; send it again"
    return str(exc)


def _public(fn, name: str):
    """Wrap an endpoint so every failure reaches the client as one clear sentence (gr.Error)."""
    import functools

    import gradio as gr

    @functools.wraps(fn)
    def endpoint(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except CosyVoiceError as exc:  # the service raises domain errors only (no HTTP statuses)
            refused = isinstance(exc, InvalidRequest)
            raise gr.Error(_message(exc), title="Request refused" if refused else "Synthesis failed",
                           print_exception=False) from None
        except gr.Error:
            raise
        except Exception:
            log.exception("API endpoint %s failed", name)
            raise gr.Error(f"{name} failed unexpectedly; the server log has the details. Try again, or report "
                           "it if it keeps happening.", print_exception=False) from None

    endpoint.__name__ = name  # MCP tool names are function names
    return endpoint


# --- the Gradio side ---------------------------------------------------------------------------------


def _file_schema(description: str) -> dict:
    from gradio.data_classes import FileData

    schema = FileData.model_json_schema()
    schema.pop("description", None)
    return {**schema, "additional_description": description}


def _inputs(fn, files: tuple[str, ...] = ()) -> list:
    """One API input per parameter of `fn`, named and described from its signature and `Args:` docstring.

    Gradio's own `gr.api` labels inputs "1st", "2nd"... and leaves them undescribed on the API page;
    these carry the parameter name as label and the docstring line as description.
    """
    from gradio.components.api_component import Api
    from gradio.utils import get_function_description
    from gradio_client.utils import python_type_to_json_schema

    import gradio as gr

    _, described, _ = get_function_description(fn)
    components = []
    for name, param in inspect.signature(fn).parameters.items():
        if param.annotation is gr.Request:  # Gradio fills it with the caller's request: no API input
            continue
        default = None if param.default is inspect.Parameter.empty else param.default
        if name in files:
            schema = _file_schema(described[name])
        else:  # `int | None = None` is shown as the plain type with default None (not "None | int | None")
            args = [a for a in typing.get_args(param.annotation) if a is not type(None)]
            hint = args[0] if default is None and len(args) == 1 else param.annotation
            schema = {**python_type_to_json_schema(hint), "additional_description": described[name]}
        components.append(Api(default, schema, label=name))
    return components


def _outputs(kind: str) -> list:
    """Result components: "audio" (file + details object), "file" (the audio file alone), "json" (JSON text)."""
    from gradio.components.api_component import Api

    def described(schema: dict, text: str) -> dict:
        return {**schema, "description": text, "additional_description": text}

    details = "seed (send it again to reproduce), sample_rate, duration_s, format, cached"
    if kind == "json":
        return [Api(None, described({"type": "string"}, "JSON text"), label="result")]
    audio = Api(None, {**_file_schema("the synthesised speech"), "description": "the synthesised speech"},
                label="audio")
    if kind == "file":
        return [audio]
    return [audio, Api(None, described({"type": "object"}, details), label="details")]


def build_functions(endpoints: Endpoints) -> dict:
    """The public functions by API name (their signatures and docstrings are what clients see)."""
    from typing import Literal

    import gradio as gr

    Request = gr.Request  # Gradio passes the caller's request to a parameter of this type (not an API input)
    Fmt = Literal["wav", "mp3", "flac"]
    Match = Literal["quick", "refine"]
    run = endpoints.run
    _b64 = endpoints.upload_b64

    @_doc("Clone a voice from a 3-30 s recording and its transcript (or a saved voice) and read a text with it.",
          _DETAILS, prompt_audio="Recording of the voice to clone: 3-30 s of clear speech (WAV, FLAC, MP3 or "
          "OGG). Not needed when `voice` names a saved voice.",
          transcript="The exact words spoken in prompt_audio (a saved voice uses its stored transcript).",
          text=_TEXT, voice="Id of a saved voice to use instead of prompt_audio (see list_voices); empty: use "
          "prompt_audio.", speed=_SPEED, seed=_SEED, format=_FORMAT, voice_match=_MATCH, consent=_CONSENT)
    def clone(text: str, prompt_audio: dict | None = None, transcript: str = "", voice: str = "",
              speed: float = 1.0, seed: int | None = None, format: Fmt = "wav", voice_match: Match = "quick",
              consent: bool = False, request: Request = None):
        return run(caller_of(request), mode=Mode.ZERO_SHOT.value, text=text, prompt_text=transcript or "",
                   voice_id=voice or None,
                   prompt_audio=None if voice else _b64(prompt_audio, "prompt_audio", "the voice to clone"),
                   speed=speed, seed=seed, format=format, voice_match=voice_match or "quick", consent=bool(consent))

    @_doc("Read a text in another language with the voice of a recording (or a saved voice); no transcript needed.",
          _DETAILS, prompt_audio="Recording of the voice: 3-30 s of clear speech (WAV, FLAC, MP3 or OGG). Not "
          "needed when `voice` names a saved voice.", text=_TEXT + " Any language the model speaks.",
          voice="Id of a saved voice to use instead of prompt_audio (see list_voices); empty: use prompt_audio.",
          speed=_SPEED, seed=_SEED, format=_FORMAT, voice_match=_MATCH, consent=_CONSENT)
    def cross_lingual(text: str, prompt_audio: dict | None = None, voice: str = "", speed: float = 1.0,
                      seed: int | None = None, format: Fmt = "wav", voice_match: Match = "quick",
                      consent: bool = False, request: Request = None):
        return run(caller_of(request), mode=Mode.CROSS_LINGUAL.value, text=text, voice_id=voice or None,
                   prompt_audio=None if voice else _b64(prompt_audio, "prompt_audio", "the voice to use"),
                   speed=speed, seed=seed, format=format, voice_match=voice_match or "quick", consent=bool(consent))

    @_doc("Read a text in a speaking style described in words: with a preset speaker "
          f"({name_list(models_for(Mode.INSTRUCT, instruct_voice=False))}) or a saved voice "
          f"({name_list(models_for(Mode.INSTRUCT, instruct_voice=True))}; list_voices says which, in instruct_needs).",
          _DETAILS, speaker="Preset speaker of the loaded model (see list_voices).",
          instructions="The speaking style, e.g. \"A cheerful young woman, speaking quickly\".", text=_TEXT,
          speed=_SPEED, seed=_SEED, format=_FORMAT, voice="Saved voice id, where instruct takes a voice.")
    def instruct(text: str, instructions: str, speaker: str = "", speed: float = 1.0,
                 seed: int | None = None, format: Fmt = "wav", voice: str = "", request: Request = None):
        return run(caller_of(request), mode=Mode.INSTRUCT.value, text=text, speaker=speaker or None, instruct_text=instructions or "",
                   speed=speed, seed=seed, format=format, voice_id=(voice or "").strip() or None)

    @_doc("Read a text with one of the loaded model's preset speakers.", _DETAILS,
          speaker="Preset speaker of the loaded model (see list_voices); empty: the server's default voice.",
          text=_TEXT, speed=_SPEED, seed=_SEED, format=_FORMAT)
    def preset(text: str, speaker: str = "", speed: float = 1.0, seed: int | None = None, format: Fmt = "wav",
               request: Request = None):
        return run(caller_of(request), mode=Mode.SFT.value, text=text, speaker=speaker or None, speed=speed, seed=seed, format=format)

    @_doc("Voice conversion: re-speak the words of a recording in another voice.", _DETAILS,
          source_audio="Recording whose words are kept (WAV, FLAC, MP3 or OGG).",
          target_audio="Recording of the voice to convert to (3-30 s). Not needed when `voice` names a saved "
          "voice.", voice="Id of a saved voice to convert to instead of target_audio (see list_voices).",
          speed=_SPEED, seed=_SEED, format=_FORMAT, consent=_CONSENT.replace("the recording", "target_audio"))
    def convert(source_audio: dict, target_audio: dict | None = None, voice: str = "",
                speed: float = 1.0, seed: int | None = None, format: Fmt = "wav", consent: bool = False,
                request: Request = None):
        source = _b64(source_audio, "source_audio", "the recording whose words are kept")
        if source is None:
            raise InvalidRequest("source_missing", "no source recording was sent: set `source_audio` to the "
                                 "recording whose words should be re-spoken")
        return run(caller_of(request), mode=Mode.VC.value, source_audio=source, voice_id=voice or None,
                   prompt_audio=None if voice else _b64(target_audio, "target_audio", "the voice to convert to"),
                   speed=speed, seed=seed, format=format, consent=bool(consent))

    @_doc("Turn text into speech with this server's voices and return an audio file (WAV, MP3 or FLAC). "
          "Call list_voices first to see the preset speakers and saved voices.",
          "The audio file (over MCP: its URL on this server).",
          text=_TEXT, voice="A preset speaker or a saved voice id from list_voices; empty: the server's default "
          "voice.", instructions="Optional speaking style in words, e.g. \"Speak slowly and calmly\" (needs an "
          "instruct model and a preset speaker).", speed=_SPEED, seed=_SEED, format=_FORMAT)
    def synthesize(text: str, voice: str = "", instructions: str = "", speed: float = 1.0, seed: int | None = None,
                   format: Fmt = "wav", request: Request = None):
        # One result only: Gradio's MCP server flattens several results of a queued tool into one repr.
        audio, _ = run(caller_of(request), text=text, speaker=(voice or "").strip() or None, instruct_text=instructions or "",
                       speed=speed, seed=seed, format=format)
        return audio

    @_doc("List the voices this server can speak with: the loaded model's preset speakers and the saved (cloned) "
          "voices, by the names synthesize accepts as `voice`.",
          "JSON text: model, presets (speaker names), saved (id, name, transcript, duration_s), "
          "instructions_supported and default_voice.")
    def list_voices():
        return json.dumps(endpoints.voice_list(), ensure_ascii=False)

    @_doc("Save a recording as a reusable voice; then pass its id as `voice` to synthesize.",
          "JSON text: id, name, transcript, duration_s and features_ready (false when the loaded model cannot "
          "use saved voices yet).", name="Display name of the voice; its id is made from it (e.g. \"My "
          "Narrator\" → my-narrator).", audio="Recording of the voice: 3-30 s of clear speech (WAV, FLAC, MP3 "
          "or OGG); over MCP an http(s) URL or a data:audio/wav;base64,... URL.",
          transcript="The exact words spoken in the recording (lets the voice clone in zero-shot mode; optional).",
          consent=_CONSENT)
    def save_voice(name: str, audio: dict, transcript: str = "", consent: bool = False, request: Request = None):
        return json.dumps(endpoints.add_voice(name, audio, transcript, bool(consent), caller_of(request)),
                          ensure_ascii=False)

    return {"clone": clone, "cross_lingual": cross_lingual, "instruct": instruct, "preset": preset,
            "convert": convert, "synthesize": synthesize, "list_voices": list_voices, "save_voice": save_voice}


FILE_PARAMS = {"clone": ("prompt_audio",), "cross_lingual": ("prompt_audio",), "convert": ("source_audio",
               "target_audio"), "save_voice": ("audio",)}


def add_endpoints(service, output_dir: Path) -> dict:
    """Register the API-only endpoints in the current `gr.Blocks` (call inside its `with` block).

    Their jobs go straight to the model queue (the manager's FIFO, shared with REST, which also refuses
    them when full) rather than one at a time through a Gradio concurrency limit: in front of a busy
    REST queue, that limit made each Gradio job wait for the whole queue once per Gradio job ahead of it.
    """
    import gradio as gr

    functions = build_functions(Endpoints(service, output_dir))
    for name, fn in functions.items():
        public = _public(fn, name)
        synthesis = name not in ("list_voices",)
        kind = {"synthesize": "file", "list_voices": "json", "save_voice": "json"}.get(name, "audio")
        # No trigger: an API-only event (as gr.api makes, but with the named, described inputs above).
        gr.on(triggers=[], fn=public, inputs=_inputs(fn, FILE_PARAMS.get(name, ())), outputs=_outputs(kind),
              api_name=name, queue=synthesis, concurrency_limit=None, show_progress="hidden")
    return functions


def restrict_mcp_tools(demo) -> None:
    """Offer only `MCP_TOOLS` over MCP (Gradio would expose every public endpoint as a tool)."""
    server = getattr(demo, "mcp_server_obj", None)
    if server is not None:
        server.tool_to_endpoint = {name: endpoint for name, endpoint in server.tool_to_endpoint.items()
                                   if name in MCP_TOOLS}


def forward_mcp_credentials(demo) -> None:
    """Let MCP tools run behind a login. Gradio's MCP server runs a queued tool through a gradio_client of its own,
    built at the first call without credentials, so behind a login (web/access.py's gate) that build was refused
    and no MCP tool could run. It is built here with the first caller's Authorization header (a key the gate
    accepted for that very call); every call still goes out with its own caller's headers, so the audit trail
    names each caller's key."""
    server = getattr(demo, "mcp_server_obj", None)
    if server is None or not hasattr(server, "_get_or_create_client"):
        return
    import threading

    import gradio.mcp as gradio_mcp

    build = server._get_or_create_client
    building = threading.Lock()

    def with_credentials():
        if getattr(server, "_client_instance", None) is not None:
            return server._client_instance
        request = server.mcp_server.request_context.request
        authorization = request.headers.get("authorization") if request is not None else None
        if not authorization:
            return build()
        with building:  # Gradio's module-level Client is swapped only for this one build
            plain = gradio_mcp.Client

            def keyed(*args, headers: dict | None = None, **kwargs):
                return plain(*args, headers={**(headers or {}), "Authorization": authorization}, **kwargs)

            gradio_mcp.Client = keyed
            try:
                return build()
            finally:
                gradio_mcp.Client = plain

    server._get_or_create_client = with_credentials
