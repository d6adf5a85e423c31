"""Gradio's own error texts, in our words: they name the server's working folder, its blocked folders and Python
types ("Cannot move /srv/app/secret.txt to the gradio cache dir because it is located in one of the
blocked_paths (/srv/app/voices, ...)", "Value: 'x' (type: <class 'str'>) is not in the list of choices").

`GradioErrorText` rewrites the `error` (and `detail`) strings in what `/gradio_api/...` answers, in event
streams and JSON alike: a known Gradio text becomes our message (in the page's language), any other loses its
paths (`redact.without_paths`). Our own refusals (`gr.Error` with our texts) pass unchanged: they name no path.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ..redact import without_paths

GRADIO_API = "/gradio_api/"
REWRITTEN_KEYS = ("error", "detail")


@dataclass(frozen=True)
class KnownError:
    pattern: re.Pattern[str]
    en: str
    zh: str


KNOWN = (
    KnownError(re.compile(r"^Cannot move .* to the gradio cache dir because", re.S),
               "A file this request names was not uploaded to this page, so it cannot be used: upload the file "
               "first (with gradio_client, pass handle_file(\"voice.wav\")).",
               "请求中的文件不是通过本页面上传的，不能使用：请先上传该文件（gradio_client 请使用 handle_file(\"voice.wav\")）。"),
    KnownError(re.compile(r"^Value: .* is not in the list of choices", re.S),
               "A value of this request is not one of the choices the page offers: pick one from the list "
               "(GET /gradio_api/info lists them).",
               "请求中的某个值不在页面提供的选项中：请从列表中选择（GET /gradio_api/info 列出了可选值）。"),
    KnownError(re.compile(r"File not allowed|not allowed to access|is not in the upload folder", re.S),
               "That file is not one this server hands out.",
               "该文件不可访问。"),
)


def rewrite_message(message: str, zh: bool, roots: Iterable[str] = ()) -> str:
    for known in KNOWN:
        if known.pattern.search(message):
            return known.zh if zh else known.en
    return without_paths(message, roots)


def _rewrite(value, zh: bool, roots: tuple[str, ...]):
    if isinstance(value, dict):
        return {k: (rewrite_message(v, zh, roots) if k in REWRITTEN_KEYS and isinstance(v, str)
                    else _rewrite(v, zh, roots)) for k, v in value.items()}
    if isinstance(value, list):
        return [_rewrite(v, zh, roots) for v in value]
    return value


def rewrite_json_text(text: bytes, zh: bool, roots: tuple[str, ...]) -> bytes:
    """One JSON document (or an SSE `data:` payload) with its error texts rewritten; other bytes unchanged."""
    if b'"error"' not in text and b'"detail"' not in text:
        return text
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return text
    return json.dumps(_rewrite(data, zh, roots), ensure_ascii=False).encode()


class GradioErrorText:
    """ASGI: rewrites the error texts of every `/gradio_api/...` answer (see the module docstring).
    `roots()` gives the folders whose names may be shown relative (the working, models and data folders)."""

    def __init__(self, app, roots: Callable[[], Iterable[str]] = tuple) -> None:
        self.app = app
        self.roots = roots

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or not scope.get("path", "").startswith(GRADIO_API):
            await self.app(scope, receive, send)
            return
        languages = b"".join(v for k, v in scope.get("headers", []) if k.lower() == b"accept-language").lower()
        zh = languages.strip().startswith(b"zh")
        roots = tuple(self.roots())
        kind = {"value": ""}
        pending = bytearray()

        async def send_rewritten(message) -> None:
            if message["type"] == "http.response.start":
                headers = dict((k.lower(), v) for k, v in message.get("headers", []))
                content_type = headers.get(b"content-type", b"").split(b";")[0].strip()
                kind["value"] = {b"text/event-stream": "sse", b"application/json": "json"}.get(content_type, "")
                if kind["value"]:  # the length changes with the text
                    message = dict(message, headers=[(k, v) for k, v in message.get("headers", [])
                                                     if k.lower() != b"content-length"])
                await send(message)
                return
            if message["type"] != "http.response.body" or not kind["value"]:
                await send(message)
                return
            pending.extend(message.get("body", b""))
            more = message.get("more_body", False)
            if kind["value"] == "json":
                if more:
                    return
                body = rewrite_json_text(bytes(pending), zh, roots)
            else:  # event stream: rewrite each complete line, keep a partial one for the next chunk
                cut = pending.rfind(b"\n") + 1 if more else len(pending)
                lines, rest = bytes(pending[:cut]), bytes(pending[cut:])
                body = b"".join(_rewrite_line(line, zh, roots) for line in lines.splitlines(keepends=True))
                pending[:] = rest
                await send({"type": "http.response.body", "body": body, "more_body": more})
                return
            pending.clear()
            await send({"type": "http.response.body", "body": body, "more_body": False})

        await self.app(scope, receive, send_rewritten)


def _rewrite_line(line: bytes, zh: bool, roots: tuple[str, ...]) -> bytes:
    if not line.startswith(b"data:"):
        return line
    end = len(line.rstrip(b"\r\n"))
    payload = line[5:end].strip()
    return b"data: " + rewrite_json_text(payload, zh, roots) + line[end:]
