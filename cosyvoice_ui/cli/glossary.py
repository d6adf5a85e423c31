"""`glossary`: list, import, export, remove and preview the saved pronunciation glossaries.

The same store (`serving.glossary.GlossaryStore`, one JSON file per glossary in `--glossary-dir`) serves the
UI, the REST API and `synth --glossary ID`.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

from ..errors import InvalidRequest
from .common import glossary_store, load_glossary


def add_glossary_parser(sub) -> None:
    p = sub.add_parser("glossary", help="saved pronunciation glossaries: list, import, export, rm, preview")
    gs = p.add_subparsers(dest="glossary_command", required=True)
    gs.add_parser("list", help="show the saved glossaries")
    imp = gs.add_parser("import", help="save a glossary from a JSON file (word → pronunciation)")
    imp.add_argument("file", type=Path)
    imp.add_argument("--name", default=None, help="its name (default: the file's own, else the file name)")
    exp = gs.add_parser("export", help="write a saved glossary as JSON")
    exp.add_argument("id")
    exp.add_argument("--out", type=Path, default=None, help="file to write (default: print it)")
    rm = gs.add_parser("rm", help="delete a saved glossary")
    rm.add_argument("id")
    pv = gs.add_parser("preview", help="show how a text will be read with a glossary")
    pv.add_argument("glossary", metavar="ID_OR_FILE")
    pv.add_argument("--text", required=True, help="the sentence to preview")
    pv.add_argument("--model-dir", type=Path, default=None,
                    help="load this model and show its own reading (normalised, split); without it: the text each "
                         "kind of model is given")
    pv.add_argument("--device", default="auto")
    for q in gs.choices.values():
        q.add_argument("--glossary-dir", type=Path, default=Path("glossaries"), help="where glossaries are kept")


def cmd_glossary(args) -> int:
    store = glossary_store(args)
    command = args.glossary_command
    if command == "list":
        glossaries = store.list()
        for glossary in glossaries:
            count = len(glossary.entries)
            print(f"{glossary.id:24} {count:4d} entr{'y' if count == 1 else 'ies'}  {glossary.name!r}")
        if not glossaries:
            print(f"no saved glossaries in {args.glossary_dir} (import one: python -m cosyvoice_ui glossary import "
                  "names.json)")
        return 0
    if command == "import":
        from ..serving.glossary import read_glossary_file

        glossary = read_glossary_file(args.file)
        if args.name:
            glossary = replace(glossary, name=args.name.strip())
        saved = store.save(glossary)
        print(f"saved glossary {saved.id} ({len(saved.entries)} entries, {saved.name!r})")
        print(f"use it: python -m cosyvoice_ui synth --glossary {saved.id} --text '...' --out out.wav")
        return 0
    if command == "export":
        from ..serving.glossary import to_json

        text = to_json(store.require(args.id)) + "\n"
        if args.out is None:
            sys.stdout.write(text)
            return 0
        from ..files import write_atomic

        args.out.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(args.out, text.encode("utf-8"))
        print(f"wrote {args.out}")
        return 0
    if command == "rm":
        if not store.remove(args.id):
            raise InvalidRequest("glossary_unknown", f"there is no saved glossary {args.id!r}; saved glossaries: "
                                 f"{', '.join(store.ids()) or 'none'}", glossary=args.id)
        print(f"removed {args.id}")
        return 0
    return _preview(args, store)


def _preview(args, store) -> int:
    from ..serving.glossary import applied, preview

    glossary = load_glossary(args.glossary, store)
    if glossary is None:
        raise InvalidRequest("glossary_unknown", "name a saved glossary id or a JSON file to preview")
    if args.model_dir is not None:
        from .common import TerminalProgress, load_engine

        args.engine_url, args.voices_dir = None, None
        engine = load_engine(args, TerminalProgress())
        result = applied(args.text, glossary, engine.info)
        print(f"{engine.info.name} reads:")
        for number, segment in enumerate(preview(engine, args.text, glossary), 1):
            print(f"  {number}. {segment}")
        _used(result)
        return 0
    results = [(label, applied(args.text, glossary, info)) for label, info in _reader_kinds()]
    for label, result in results:
        print(f"{label}: {result.text}")
    _used(replace(results[0][1], skipped=results[1][1].skipped))
    return 0


def _reader_kinds():
    """Two readers that differ in what they read: one that reads pinyin and CMU hints (the models that do, from
    the table of known models) and one that reads text only (every other model, which gets the respellings)."""
    from ..known_models import models_reading, name_list
    from ..types import EngineInfo, Mode

    readers = name_list(dict.fromkeys(models_reading("pinyin") + models_reading("cmu"))) or "models that read them"
    # Only `pronunciation` matters to the glossary; the rest of each description is filler.
    hints = EngineInfo(name=readers, family="", sample_rate=0, modes=(Mode.ZERO_SHOT,),
                       pronunciation=("pinyin", "cmu"))
    plain = EngineInfo(name="other models", family="", sample_rate=0, modes=(Mode.ZERO_SHOT,))
    return [(f"with pronunciation hints ({readers})", hints), ("respelled (other models)", plain)]


def _used(result) -> None:
    if result.used:
        print("entries used: " + ", ".join(entry.word for entry in result.used))
    else:
        print("no entry of the glossary occurs in this text")
    for entry, reason in result.skipped:
        print(f"skipped {entry.word!r}: {reason}")
