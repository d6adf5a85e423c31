"""What a server may show of itself: URLs without their credentials, and texts without this machine's paths.

`/health`, `/config`, logs and messages pass what they show through these, so a thin client's
`--engine-url http://user:pass@gpu-box:7860`, an absolute `--model-dir` or the server's working folder never
reach a caller: a path is replaced by its name relative to a folder the caller knows (the models or data
folder), or else by its last part.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

# An absolute POSIX path (two parts or more) or a Windows drive path, as it appears inside a sentence.
_ABSOLUTE = re.compile(r"(?<![\w.:/~-])(?:[A-Za-z]:\\|/)(?:[^\s'\"`:;,()<>\[\]{}|*?]+[/\\])+[^\s'\"`:;,()<>\[\]{}|*?]*")
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@]*@")


def public_url(url: str | None) -> str | None:
    """`url` without `user:password@` (and without a query, which may carry a token)."""
    if not url:
        return url
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return _USERINFO.sub(r"\1", url)
    shown = f"[{host}]" if ":" in host else host
    netloc = f"{shown}:{port}" if port is not None else shown
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def without_userinfo(text: str) -> str:
    """Every URL in `text` with its `user:password@` removed."""
    return _USERINFO.sub(r"\1", text)


def without_paths(text: str, roots: Iterable[str | Path] = ()) -> str:
    """`text` with every absolute path replaced: by its part below one of `roots` (the longest that holds it),
    else by its last part. URLs are left alone (their paths are not this machine's)."""
    if not text:
        return text
    known = sorted({os.path.abspath(str(r)) for r in roots if r}, key=len, reverse=True)

    def shorten(match: re.Match[str]) -> str:
        path = match.group(0)
        start = match.start()
        if start >= 2 and text[max(0, start - 3):start].endswith(("://", ":/")):
            return path  # the path part of a URL
        trailing = ""
        while path and path[-1] in ".!":  # sentence punctuation after the path
            path, trailing = path[:-1], path[-1] + trailing
        for root in known:
            if path == root:
                return Path(root).name + trailing
            if path.startswith(root.rstrip("/\\") + os.sep):
                return path[len(root.rstrip("/\\")) + 1:] + trailing
        name = re.split(r"[/\\]", path.rstrip("/\\"))[-1]
        return (name or "a folder") + trailing

    return _ABSOLUTE.sub(shorten, without_userinfo(text))
