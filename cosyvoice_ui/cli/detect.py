"""`python -m cosyvoice_ui detect FILE...`: does each file carry the watermark this app puts into its outputs?

One line per file (its verdict and the detector's confidence). The exit status is grep's: 0 when every file
carries the mark, 1 when one does not, 2 when a file could not be checked (or no detector is installed), so
scripts can use it: `python -m cosyvoice_ui detect -q take.wav && echo "made here"`. The check is the one the
REST route and the UI run (`serving/watermarking.check_file`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ..errors import CosyVoiceError

MARKED, UNMARKED, TROUBLE = 0, 1, 2


def add_detect_parser(sub) -> None:
    p = sub.add_parser("detect", help="check audio or video files for this app's watermark (exit 0: all marked, "
                       "1: one is not, 2: an error)",
                       description="Check whether each file carries the inaudible watermark every output of this "
                       "app carries (unless its owner turned it off). Reads any audio or video file ffmpeg can "
                       "read, up to 10 minutes. Exit status: 0 when every file carries the mark, 1 when one does "
                       "not, 2 when a file could not be checked.")
    p.add_argument("files", nargs="+", type=Path, metavar="FILE")
    p.add_argument("-q", "--quiet", action="store_true", help="print nothing: the exit status says it")
    p.add_argument("--json", action="store_true", help="one JSON object per line: file, marked, confidence, score, "
                   "seconds (or error)")


def cmd_detect(args) -> int:
    from ..serving.watermarking import check_file

    worst = MARKED
    for path in args.files:
        try:
            verdict = check_file(path, "file")
        except CosyVoiceError as exc:
            worst = TROUBLE
            _say(args, {"file": str(path), "error": getattr(exc, "code", "error"), "message": str(exc)},
                 f"{path}: error: {exc}", sys.stderr)
            continue
        if not verdict.marked:
            worst = max(worst, UNMARKED)
        word = "marked" if verdict.marked else "not marked"
        _say(args, {"file": str(path), **verdict.to_dict()},
             f"{path}: {word} (confidence {verdict.confidence:.2f}, score {verdict.score:.2f}, "
             f"{verdict.seconds:.1f} s)", sys.stdout)
    return worst


def _say(args, record: dict, line: str, stream) -> None:
    if args.quiet:
        return
    if args.json:
        print(json.dumps(record, ensure_ascii=False), flush=True)
    else:
        print(line, file=stream, flush=True)
