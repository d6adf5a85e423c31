"""`synth --script` and `synth --book` end to end: on a tiny model, on the offline voice, and on a recording fake
engine that can be interrupted on its Nth synthesis (resume renders only the rest); plus subtitles for plain
`synth`, glossaries on every synth form, bad-take retries on stderr, and the one-line errors."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from cosyvoice_ui.cli.main import main
from cosyvoice_ui.serving.subtitles import parse
from cosyvoice_ui.take_check import allowed_seconds
from cosyvoice_ui.testing.ebooks import write_epub
from cosyvoice_ui.testing.fakes import FakeEngine
from cosyvoice_ui.testing.signals import voice_clip
from cosyvoice_ui.types import AudioChunk, Mode

REPO = Path(__file__).resolve().parents[1]
SCRIPT = "# a short scene\nAlice: Hi there.\nBob: Hello.\nFine day.\nAlice: Bye now.\n"
SHORT_BOOK = (("One", ("Go.",)), ("Two", ("Stop.",)), ("Three", ("Run.",)))
SRT_TOLERANCE_S = 0.05


class StudioFake(FakeEngine):
    """A fake engine that records every request, speaks each text for a length its take check accepts (or a
    too-long one for the first `bad_first` calls), and raises KeyboardInterrupt on call `interrupt_at`."""

    def __init__(self, interrupt_at: int | None = None, bad_first: int = 0) -> None:
        super().__init__(name="studio-fake", speakers=("A", "B"), sample_rate=16000, chunks=1)
        self.requests: list = []
        self.interrupt_at = interrupt_at
        self.bad_first = bad_first

    @property
    def texts(self) -> list[str]:
        return [r.text for r in self.requests]

    def _synthesize(self, request, progress, cancel):
        self.requests.append(request)
        if self.interrupt_at is not None and len(self.requests) == self.interrupt_at:
            raise KeyboardInterrupt
        (low, high), _, _ = allowed_seconds(request.text, self.info.family, request.speed)
        seconds = high * 3 + 1.0 if len(self.requests) <= self.bad_first else (low + high) / 2
        rng = np.random.default_rng(request.seed)
        samples = (0.1 * rng.standard_normal(max(1, int(seconds * 16000)))).astype(np.float32)
        yield AudioChunk(samples, 16000, 0, 1, True, request.text)


@pytest.fixture()
def fake(monkeypatch):
    """Install a `StudioFake` as the engine every CLI command loads; `fake(...)` makes a new one."""
    import cosyvoice_ui.serving.backends as backends

    current = {}

    def install(**options) -> StudioFake:
        current["engine"] = StudioFake(**options)
        return current["engine"]

    monkeypatch.setattr(backends, "open_engine", lambda *args, **kwargs: current["engine"])
    install()
    return install


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def _fake_args(tmp_path: Path, *extra: str) -> list[str]:
    return ["synth", "--voices-dir", str(tmp_path / "voices"), "--glossary-dir", str(tmp_path / "glossaries"), *extra]


def _audio(path: Path) -> tuple[np.ndarray, int]:
    samples, rate = sf.read(path, dtype="float32")
    return samples, rate


def _cues(path: Path):
    return parse(path.read_text(encoding="utf-8"))


# --- scripts on a tiny model ----------------------------------------------------------------------------------

def test_script_on_a_tiny_model_writes_mix_stems_and_subtitles_that_match(tiny_sft: Path, tmp_path: Path,
                                                                          capsys) -> None:
    script = _write(tmp_path / "dialogue.txt", SCRIPT)
    voices = _write(tmp_path / "map.json", json.dumps({"Alice": "英文女", "Bob": {"preset": "英文男"}}))
    out = tmp_path / "show.wav"
    code = main(["synth", "--model-dir", str(tiny_sft), "--device", "cpu", "--script", str(script), "--voices",
                 str(voices), "--out", str(out), "--stems", str(tmp_path / "stems"), "--srt", "--vtt",
                 str(tmp_path / "subs" / "show.vtt"), "--voices-dir", str(tmp_path / "voices"), "--take-retries", "0"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    project = json.loads((tmp_path / "show.project" / "project.json").read_text(encoding="utf-8"))
    assert [line["speaker"] for line in project["lines"]] == ["Alice", "Bob", "Narrator", "Alice"]
    assert project["voices"]["Alice"] == {"kind": "preset", "value": "英文女", "transcript": "", "instruct": ""}
    mix, rate = _audio(out)
    stems = {p.stem: _audio(p)[0] for p in (tmp_path / "stems").iterdir()}
    assert set(stems) == {"Alice", "Bob", "Narrator"}
    np.testing.assert_allclose(sum(stems.values()), mix, atol=4 / 32767)  # the stems add up to the mix
    srt, vtt = _cues(tmp_path / "show.srt"), _cues(tmp_path / "subs" / "show.vtt")
    assert [c.text.split(":")[0] for c in srt] == ["Alice", "Bob", "Narrator", "Alice"]
    assert [c.speaker for c in vtt] == ["Alice", "Bob", "Narrator", "Alice"]
    # Each cue spans exactly its line's take in the mix (the gaps between lines included), within 50 ms ...
    start = 0.0
    for cue, line in zip(srt, project["lines"]):
        seconds = line["takes"][0]["seconds"]
        assert abs(cue.start - start) <= SRT_TOLERANCE_S and abs(cue.end - (start + seconds)) <= SRT_TOLERANCE_S
        start += seconds + project["settings"]["gap_s"]
    assert abs(srt[-1].end - len(mix) / rate) <= SRT_TOLERANCE_S
    # ... and the audio under it is the speaker's: their stem sounds there, the other stems are silent.
    for cue, speaker in zip(srt, ["Alice", "Bob", "Narrator", "Alice"]):
        inside = slice(int((cue.start + 0.06) * rate), int((cue.end - 0.06) * rate))
        assert np.abs(stems[speaker][inside]).max() > 0
        assert all(np.abs(track[inside]).max() == 0 for name, track in stems.items() if name != speaker)
    assert "wrote" in captured.out and str(out) in captured.out


@pytest.mark.slow
def test_script_as_a_subprocess_stops_on_ctrl_c_and_resumes(tiny_sft: Path, tmp_path: Path) -> None:
    """A real Ctrl-C (SIGINT) once the first line is saved: exit 130 with how to resume; the rerun keeps it."""
    script = _write(tmp_path / "dialogue.txt", SCRIPT)
    out = tmp_path / "show.wav"
    command = [sys.executable, "-m", "cosyvoice_ui", "synth", "--model-dir", str(tiny_sft), "--device", "cpu",
               "--script", str(script), "--out", str(out), "--voices-dir", str(tmp_path / "voices"),
               "--take-retries", "0"]
    project_file = tmp_path / "show.project" / "project.json"
    process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while process.poll() is None and time.monotonic() < deadline:  # wait for the first saved take
        if project_file.is_file() and any(line["takes"] for line in _lines(project_file)):
            break
        time.sleep(0.05)
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=300)
    kept = [line["id"] for line in _lines(project_file) if line["takes"]]
    if process.returncode == 0:
        pytest.skip("the render finished before the interrupt arrived")
    assert process.returncode == 130, err
    assert "Traceback" not in err and "run the same command again" in err
    assert f"{len(kept)} of 4 lines are rendered" in err
    again = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    assert f"resuming {tmp_path / 'show.project'}: {len(kept)} of 4 lines are rendered already" in again.stderr
    lines = _lines(project_file)
    assert all(len(line["takes"]) == 1 for line in lines)  # the kept lines were not rendered again
    assert out.is_file()


def _lines(project_file: Path) -> list[dict]:
    try:
        return json.loads(project_file.read_text(encoding="utf-8"))["lines"]
    except (OSError, ValueError):
        return []


# --- scripts on the fake: resume, voice maps, glossary, retries ---------------------------------------------

def test_script_interrupted_on_the_third_synthesis_resumes_with_only_the_rest(fake, tmp_path: Path, capsys) -> None:
    script = _write(tmp_path / "dialogue.txt", SCRIPT)
    out = tmp_path / "show.wav"
    args = _fake_args(tmp_path, "--script", str(script), "--out", str(out), "--srt")
    engine = fake(interrupt_at=3)
    assert main(args) == 130
    err = capsys.readouterr().err
    assert "interrupted: 2 of 4 lines are rendered and saved" in err and "run the same command again" in err
    assert "Traceback" not in err and not out.exists()
    takes = sorted((tmp_path / "show.project" / "takes").iterdir())
    assert len(takes) == 2
    stamps = {p.name: p.stat().st_mtime_ns for p in takes}

    engine = fake()
    assert main(args) == 0
    captured = capsys.readouterr()
    assert "resuming" in captured.err and "2 of 4 lines are rendered already; rendering the other 2" in captured.err
    assert engine.texts == ["Fine day.", "Bye now."]  # only what was missing
    assert all(p.stat().st_mtime_ns == stamps[p.name] for p in takes)
    assert out.is_file() and len(_cues(tmp_path / "show.srt")) == 4

    engine = fake()
    assert main(args) == 0
    assert engine.texts == [] and "nothing left to render" in capsys.readouterr().err


def test_voice_map_shapes_are_used_and_remembered_in_the_project(fake, tmp_path: Path, capsys) -> None:
    clip = voice_clip(3.0, 16000)
    sf.write(tmp_path / "bob.wav", clip.samples, clip.sample_rate)
    script = _write(tmp_path / "dialogue.txt", "Alice: Hi there.\nBob: Hello.\nCarol: Good day.\nNarrator: End.\n")
    voices = _write(tmp_path / "map.json", json.dumps({
        "Alice": "B", "Bob": {"sample": "bob.wav", "transcript": "a test sentence"},
        "Carol": {"instruct": "Speak slowly."}, "Dave": "A"}))
    out = tmp_path / "show.wav"
    engine = fake()
    assert main(_fake_args(tmp_path, "--script", str(script), "--voices", str(voices), "--out", str(out))) == 0
    err = capsys.readouterr().err
    assert "'Dave', who speaks no line" in err
    modes = {r.text: (r.mode, r.speaker, r.prompt_audio is not None, r.prompt_text, r.instruct_text)
             for r in engine.requests}
    assert modes["Hi there."][:2] == (Mode.SFT, "B")
    assert modes["Hello."][0] is Mode.ZERO_SHOT and modes["Hello."][2] and modes["Hello."][3] == "a test sentence"
    assert modes["Good day."][0] is Mode.INSTRUCT and modes["Good day."][4] == "Speak slowly."
    assert modes["End."][:2] == (Mode.SFT, "A")  # no voice given: the model's default preset
    saved = json.loads((tmp_path / "show.project" / "project.json").read_text(encoding="utf-8"))["voices"]
    assert saved["Bob"]["kind"] == "sample" and (tmp_path / "show.project" / "voices" / saved["Bob"]["value"]).is_file()

    # A rerun without --voices keeps the remembered voices (nothing to re-render); a new line uses them too.
    _write(script, script.read_text(encoding="utf-8") + "Bob: One more.\n")
    engine = fake()
    assert main(_fake_args(tmp_path, "--script", str(script), "--out", str(out))) == 0
    assert [(r.text, r.mode) for r in engine.requests] == [("One more.", Mode.ZERO_SHOT)]
    assert "1 line(s) are new or edited" in capsys.readouterr().err


def test_glossary_changes_what_every_synth_form_speaks(fake, tmp_path: Path, capsys) -> None:
    glossary = _write(tmp_path / "names.json", json.dumps({"Nguyen": "Win", "Siobhan": "Shivawn"}))
    engine = fake()
    assert main(_fake_args(tmp_path, "--text", "Nguyen says hi.", "--glossary", str(glossary),
                           "--out", str(tmp_path / "a.wav"))) == 0
    assert engine.texts == ["Win says hi."]

    lines = _write(tmp_path / "lines.txt", "Siobhan is here.\nNo names.\n")
    engine = fake()
    assert main(_fake_args(tmp_path, "--text-file", str(lines), "--glossary", str(glossary),
                           "--out", str(tmp_path / "lines"))) == 0
    assert engine.texts == ["Shivawn is here.", "No names."]

    # a saved glossary, by id, for a script and for a book
    assert main(["glossary", "import", str(glossary), "--name", "Names", "--glossary-dir",
                 str(tmp_path / "glossaries")]) == 0
    assert "saved glossary names" in capsys.readouterr().out
    script = _write(tmp_path / "dialogue.txt", "Alice: Nguyen, come here.\nSiobhan: Coming.\n")
    engine = fake()
    assert main(_fake_args(tmp_path, "--script", str(script), "--glossary", "names",
                           "--out", str(tmp_path / "show.wav"))) == 0
    assert engine.texts == ["Win, come here.", "Coming."]
    book = write_epub(tmp_path / "book.epub", chapters=(("One", ("Nguyen went home.",)),), title="Names")
    engine = fake()
    assert main(_fake_args(tmp_path, "--book", str(book), "--glossary", "names", "--out", str(tmp_path / "book"))) == 0
    assert "Win went home." in engine.texts and not any("Nguyen" in t for t in engine.texts)

    # without the flag the words are spoken as written
    engine = fake()
    assert main(_fake_args(tmp_path, "--text", "Nguyen says hi.", "--out", str(tmp_path / "b.wav"))) == 0
    assert engine.texts == ["Nguyen says hi."]
    assert main(_fake_args(tmp_path, "--text", "hi", "--glossary", "nobody", "--out", str(tmp_path / "c.wav"))) == 2
    assert "no saved glossary 'nobody'" in capsys.readouterr().err


def test_bad_takes_are_retried_and_shown_on_stderr(fake, tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("COSYVOICE_TAKE_RETRIES", "2")  # two retries (default 1; the suite runs with 0)
    engine = fake(bad_first=1)
    assert main(_fake_args(tmp_path, "--text", "Hello there, friend.", "--out", str(tmp_path / "a.wav"))) == 0
    err = capsys.readouterr().err
    assert len(engine.requests) == 2 and "[   retry]" in err and "retry 1/2 (too long for its text)" in err

    engine = fake(bad_first=1)
    assert main(_fake_args(tmp_path, "--text", "Hello there, friend.", "--no-take-check",
                           "--out", str(tmp_path / "b.wav"))) == 0
    err = capsys.readouterr().err
    assert len(engine.requests) == 1 and "[   retry]" not in err and "retry 1/" not in err

    script = _write(tmp_path / "dialogue.txt", "Alice: Hi there.\nBob: Hello.\n")
    engine = fake(bad_first=1)
    assert main(_fake_args(tmp_path, "--script", str(script), "--out", str(tmp_path / "show.wav"))) == 0
    err = capsys.readouterr().err
    assert len(engine.requests) == 3 and "line 1/2 · Alice: segment 1/1: retry 1/2" in err
    assert "1 bad take(s) found" in err

    book = write_epub(tmp_path / "book.epub", chapters=SHORT_BOOK)
    engine = fake(bad_first=1)
    assert main(_fake_args(tmp_path, "--book", str(book), "--out", str(tmp_path / "book"), "--take-retries", "1")) == 0
    err = capsys.readouterr().err
    assert "[   retry] chapter 1/3 · piece 1/2: segment 1/1 retry 1" in err and "1 bad take(s) found" in err


# --- subtitles of plain synth ---------------------------------------------------------------------------------

def test_plain_synth_subtitles_match_the_audio_on_a_tiny_model(tiny_sft: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "a.wav"
    assert main(["synth", "--model-dir", str(tiny_sft), "--device", "cpu", "--speaker", "英文女", "--seed", "1",
                 "--text", "Hello there. How are you?", "--out", str(out), "--srt", "--vtt",
                 str(tmp_path / "a.vtt"), "--take-retries", "0"]) == 0
    samples, rate = _audio(out)
    for path in (tmp_path / "a.srt", tmp_path / "a.vtt"):
        cues = _cues(path)
        assert cues and abs(cues[0].start) <= SRT_TOLERANCE_S
        assert abs(cues[-1].end - len(samples) / rate) <= SRT_TOLERANCE_S
        assert all(abs(a.end - b.start) <= SRT_TOLERANCE_S for a, b in zip(cues, cues[1:]))
    assert "a.srt" in capsys.readouterr().out


def test_text_file_subtitles_numbered_and_joined(fake, tmp_path: Path, capsys) -> None:
    lines = _write(tmp_path / "lines.txt", "First line here.\nSecond one.\nThird and last line.\n")
    assert main(_fake_args(tmp_path, "--text-file", str(lines), "--out", str(tmp_path / "out"), "--srt")) == 0
    names = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert names == ["0001.srt", "0001.wav", "0002.srt", "0002.wav", "0003.srt", "0003.wav"]
    for number in (1, 2, 3):
        samples, rate = _audio(tmp_path / "out" / f"000{number}.wav")
        cue, = _cues(tmp_path / "out" / f"000{number}.srt")
        assert abs(cue.end - len(samples) / rate) <= SRT_TOLERANCE_S

    joined = tmp_path / "joined.wav"
    assert main(_fake_args(tmp_path, "--text-file", str(lines), "--join", "--out", str(joined), "--vtt")) == 0
    samples, rate = _audio(joined)
    cues = _cues(tmp_path / "joined.vtt")
    parts = [len(_audio(tmp_path / "out" / f"000{n}.wav")[0]) / rate for n in (1, 2, 3)]
    starts = [0.0, parts[0] + 0.3, parts[0] + parts[1] + 0.6]
    assert [c.text for c in cues] == ["First line here.", "Second one.", "Third and last line."]
    assert all(abs(c.start - s) <= SRT_TOLERANCE_S for c, s in zip(cues, starts))
    assert abs(cues[-1].end - len(samples) / rate) <= SRT_TOLERANCE_S
    assert main(_fake_args(tmp_path, "--text-file", str(lines), "--out", str(tmp_path / "o2"), "--srt", "x.srt")) == 2
    assert "pass --srt without a file name" in capsys.readouterr().err


# --- books ----------------------------------------------------------------------------------------------------

def test_book_on_a_tiny_model_yields_three_chapters_and_a_chaptered_m4b(tiny_sft: Path, tmp_path: Path,
                                                                        capsys) -> None:
    from cosyvoice_ui.studio.chapters import read_chapters

    book = write_epub(tmp_path / "book.epub", chapters=SHORT_BOOK, title="Tiny Book")
    out = tmp_path / "book"
    code = main(["synth", "--model-dir", str(tiny_sft), "--device", "cpu", "--book", str(book), "--voice", "英文男",
                 "--out", str(out), "--voices-dir", str(tmp_path / "voices"), "--take-retries", "0"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    chapters = sorted((out / "chapters").glob("*.flac"))
    assert [p.name for p in chapters] == ["01 One.flac", "02 Two.flac", "03 Three.flac"]
    assert len(list((out / "chapters").glob("*.srt"))) == 3
    marks = read_chapters(out / "Tiny Book.m4b")
    assert [m.title for m in marks] == ["One", "Two", "Three"]
    lengths = [len(sf.read(p)[0]) / sf.info(p).samplerate for p in chapters]
    assert all(abs((m.end - m.start) - n) < 0.1 for m, n in zip(marks, lengths))
    assert "ETA" in captured.err and "wrote" in captured.out and "Tiny Book.m4b (3 chapters" in captured.out


def test_book_interrupted_on_the_fourth_piece_resumes_with_only_the_rest(fake, tmp_path: Path, capsys) -> None:
    from cosyvoice_ui.studio.chapters import read_chapters

    book = write_epub(tmp_path / "book.epub", chapters=SHORT_BOOK, title="Short")
    out = tmp_path / "book"
    args = _fake_args(tmp_path, "--book", str(book), "--out", str(out), "--book-format", "mp3", "--format", "mp3")
    fake(interrupt_at=4)
    assert main(args) == 130
    err = capsys.readouterr().err
    assert "interrupted: 3 of 6 pieces are saved" in err and "run the same command again" in err
    assert "Traceback" not in err

    engine = fake()
    assert main(args) == 0
    captured = capsys.readouterr()
    assert "resuming" in captured.err and "3 of 6 pieces are rendered already" in captured.err
    assert engine.texts == ["Stop.", "Three", "Run."]  # only the pieces the first run did not finish
    assert len(list((out / "chapters").glob("*.mp3"))) == 3
    assert [m.title for m in read_chapters(out / "Short.mp3")] == ["One", "Two", "Three"]
    assert "3 pieces rendered now, 3 kept from an earlier run" in captured.out


# --- the offline voice ------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_script_and_book_on_the_offline_voice(tmp_path: Path, capsys) -> None:
    from tests.offline.conftest import require_offline

    require_offline()
    from cosyvoice_ui.studio.chapters import read_chapters

    script = _write(tmp_path / "dialogue.txt", "Alice: Hi there.\nBob: Hello.\n")
    base = ["synth", "--model-dir", "offline-default", "--device", "cpu", "--voices-dir", str(tmp_path / "voices")]
    assert main([*base, "--script", str(script), "--out", str(tmp_path / "show.wav"), "--srt"]) == 0, \
        capsys.readouterr().err
    mix, rate = _audio(tmp_path / "show.wav")
    cues = _cues(tmp_path / "show.srt")
    assert len(cues) == 2 and abs(cues[-1].end - len(mix) / rate) <= SRT_TOLERANCE_S
    assert main([*base, "--script", str(script), "--out", str(tmp_path / "show.wav")]) == 0
    assert "2 of 2 lines are rendered already" in capsys.readouterr().err

    book = write_epub(tmp_path / "book.epub", chapters=SHORT_BOOK, title="Offline")
    assert main([*base, "--book", str(book), "--out", str(tmp_path / "book")]) == 0, capsys.readouterr().err
    assert len(list((tmp_path / "book" / "chapters").glob("*.flac"))) == 3
    assert len(read_chapters(tmp_path / "book" / "Offline.m4b")) == 3


# --- errors -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("extra, message", [
    (["--script", "missing.txt", "--out", "x.wav"], "cannot read the script 'missing.txt'"),
    (["--script", "{script}", "--text", "hi", "--out", "x.wav"], "--text and --script cannot be used together"),
    (["--script", "{script}", "--book", "b.epub", "--out", "x.wav"], "cannot be used together"),
    (["--text", "hi", "--voices", "map.json", "--out", "x.wav"], "--voices works with --script only"),
    (["--book", "{script}", "--srt", "--out", "dir"], "every chapter gets its own SRT"),
    (["--script", "{script}", "--voices", "{bad_map}", "--out", "x.wav"], "not valid JSON"),
    (["--script", "{script}", "--voices", "{sample_map}", "--out", "x.wav"], "is not there"),
    (["--script", "{empty}", "--out", "x.wav"], "script"),
    (["--book", "{pdf}", "--out", "dir"], "book"),
    (["--book", "{script}", "--voice", "nobody", "--out", "dir"], "no preset or saved voice 'nobody'"),
])
def test_bad_flags_fail_in_one_line_with_exit_2(fake, tmp_path: Path, capsys, monkeypatch, extra, message) -> None:
    files = {"script": _write(tmp_path / "s.txt", "Alice: Hi.\n"), "bad_map": _write(tmp_path / "bad.json", "{oops"),
             "sample_map": _write(tmp_path / "m.json", json.dumps({"Alice": {"sample": "nope.wav"}})),
             "empty": _write(tmp_path / "e.txt", "# nothing\n\n"), "pdf": _write(tmp_path / "b.pdf", "%PDF-1.4")}
    argv = [part.format(**files) for part in extra]
    monkeypatch.chdir(tmp_path)
    assert main(_fake_args(tmp_path, *argv)) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and err.count("\n") == 1


def test_blocked_words_stop_a_script_and_a_book_before_anything_is_spoken(fake, tmp_path: Path, capsys) -> None:
    """`--blocked-words` holds for every line of a script and every piece of a book: each is one speech job."""
    blocked = _write(tmp_path / "blocked.txt", "forbidden\n")
    script = _write(tmp_path / "dialogue.txt", "Alice: Hi there.\nBob: The FORBIDDEN word.\n")
    engine = fake()
    assert main(_fake_args(tmp_path, "--script", str(script), "--out", str(tmp_path / "show.wav"),
                           "--blocked-words", str(blocked))) == 2
    err = capsys.readouterr().err
    assert "line 2 (Bob)" in err and "does not allow" in err and "forbidden" not in err.casefold()
    assert engine.requests == [] and not (tmp_path / "show.wav").exists()

    book = write_epub(tmp_path / "book.epub", chapters=(("One", ("Fine words.",)), ("Two", ("A forbidden one.",))))
    assert main(_fake_args(tmp_path, "--book", str(book), "--out", str(tmp_path / "book"),
                           "--blocked-words", str(blocked))) == 2
    err = capsys.readouterr().err
    assert "chapter 2/2" in err and "does not allow" in err
    assert engine.requests == [] and not (tmp_path / "book").exists()
    assert main(_fake_args(tmp_path, "--script", str(script), "--out", str(tmp_path / "show.wav"))) == 0  # no flag


# --- the glossary command ---------------------------------------------------------------------------------------

def test_glossary_command_imports_lists_previews_exports_and_removes(fake, tmp_path: Path, capsys) -> None:
    store = ["--glossary-dir", str(tmp_path / "glossaries")]
    source = _write(tmp_path / "names.json", json.dumps({"entries": [
        {"word": "Xi'an", "pinyin": "[x][ī][ān]", "respell": "Shee-ahn"}, {"word": "GIF", "cmu": "[JH][IH1][F]"},
        {"word": "Nguyen", "respell": "Win"}]}))
    assert main(["glossary", "list", *store]) == 0
    assert "no saved glossaries" in capsys.readouterr().out
    assert main(["glossary", "import", str(source), "--name", "Place names", *store]) == 0
    assert "saved glossary place-names (3 entries, 'Place names')" in capsys.readouterr().out
    assert main(["glossary", "list", *store]) == 0
    assert "place-names" in capsys.readouterr().out

    assert main(["glossary", "preview", "place-names", "--text", "Nguyen saw a GIF in Xi'an.", *store]) == 0
    out = capsys.readouterr().out
    assert "with pronunciation hints (Fun-CosyVoice3-0.5B): Win saw a [JH][IH1][F] in [x][ī][ān]." in out
    assert "respelled (other models): Win saw a GIF in Shee-ahn." in out
    assert "skipped 'GIF'" in out  # no respelling for the models without hints
    assert main(["glossary", "preview", str(source), "--text", "Nguyen is here.", "--model-dir", "any", *store]) == 0
    out = capsys.readouterr().out
    assert "studio-fake reads:" in out and "1. Win is here." in out

    exported = tmp_path / "out" / "names.json"
    assert main(["glossary", "export", "place-names", "--out", str(exported), *store]) == 0
    data = json.loads(exported.read_text(encoding="utf-8"))
    assert data["id"] == "place-names" and len(data["entries"]) == 3
    assert f"wrote {exported}" in capsys.readouterr().out
    assert main(["glossary", "export", "place-names", *store]) == 0
    assert json.loads(capsys.readouterr().out)["name"] == "Place names"
    assert main(["glossary", "rm", "place-names", *store]) == 0
    assert main(["glossary", "rm", "place-names", *store]) == 2
    assert "no saved glossary 'place-names'" in capsys.readouterr().err
    _write(tmp_path / "bad.json", "{nope")
    assert main(["glossary", "import", str(tmp_path / "bad.json"), *store]) == 2
    assert "not valid JSON" in capsys.readouterr().err
