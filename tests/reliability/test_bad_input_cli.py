"""The bad-input corpus through the command line (in-process `main()`, tiny SFT model, run inside a scratch
folder with relative file names): each refusal exits non-zero with one clean `error:` line on stderr that names
the problem, usable odd inputs are served, and the next valid command then writes real audio.

The model is loaded once and reused (the load itself is not under test here); bad model folders are."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from cosyvoice_ui.cli.main import main

from .corpus import (AUDIO_CASES, SPEAKER, TEXT_CASES, TRAVERSAL, VALID_TEXT, AudioCase, TextCase, ValueCase,
                     check_clean, value_cases, voice, wav_bytes)

READ_AUDIO_CASES = [case for case in AUDIO_CASES if not case.over_cap]  # local files have no upload cap


@pytest.fixture(scope="module")
def engines() -> dict:
    return {}


@pytest.fixture()
def work(tmp_path: Path, monkeypatch, engines: dict) -> Path:
    """A scratch folder as the working directory, and one loaded engine per model folder for the module."""
    from cosyvoice_ui.serving import backends

    real = backends.open_engine

    def open_once(model_dir, models_dir, options, progress=None):
        key = (str(model_dir), options.device)
        if key not in engines:
            engines[key] = real(model_dir, models_dir, options, progress)
        return engines[key]

    monkeypatch.setattr(backends, "open_engine", open_once)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def cli(capsys, *args: str) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of `python -m cosyvoice_ui ARGS`."""
    try:
        code = main(list(args))
    except SystemExit as exc:  # argparse refuses a flag with SystemExit(2)
        code = exc.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def synth(model: Path, *extra: str, out: str | None = "out.wav") -> list[str]:
    return ["synth", "--model-dir", str(model), "--device", "cpu", *(["--out", out] if out else []), *extra]


def assert_refused(result: tuple[int, str, str], words: tuple[str, ...], work: Path, argparse: bool = False) -> None:
    code, _, err = result
    assert code not in (0, None), err
    assert "Traceback" not in err and 'File "' not in err, err
    lines = [line for line in err.splitlines() if line.strip()]
    errors = [line for line in lines if "error:" in line]
    assert len(errors) == 1 and errors[0] == lines[-1], f"not one error line at the end: {err!r}"
    if argparse:
        assert code == 2 and lines[0].startswith("usage:")
    else:
        assert errors[0].startswith("error: ") and code == 2
    message = errors[0]
    assert all(w.lower() in message.lower() for w in words), message
    check_clean(message, str(work))


def assert_wrote_audio(result: tuple[int, str, str], path: Path) -> None:
    code, out, err = result
    assert code == 0, err
    samples, rate = sf.read(path)
    assert rate == 22050 and len(samples) > 0 and np.isfinite(samples).all() and "wrote" in out


def assert_still_serving(capsys, model: Path, work: Path) -> None:
    """The next valid command writes real audio (unseeded)."""
    (work / "next.wav").unlink(missing_ok=True)
    assert_wrote_audio(cli(capsys, *synth(model, "--speaker", SPEAKER, "--text", VALID_TEXT, out="next.wav")),
                       work / "next.wav")


def write(work: Path, case: AudioCase) -> str:
    """The case's bytes as a file under `work`; returns its relative name."""
    path = Path("uploads") / case.id / case.filename
    (work / path).parent.mkdir(parents=True, exist_ok=True)
    (work / path).write_bytes(case.make())
    return str(path)


# --- audio ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", READ_AUDIO_CASES, ids=lambda c: c.id)
def test_audio_as_the_prompt(tiny_sft: Path, work: Path, capsys, case: AudioCase) -> None:
    result = cli(capsys, *synth(tiny_sft, "--mode", "cross_lingual", "--prompt-wav", write(work, case),
                                "--text", VALID_TEXT, "--seed", "1"))
    if case.expect is None:
        assert_wrote_audio(result, work / "out.wav")
    else:
        assert_refused(result, case.expect.words, work)
        assert not (work / "out.wav").exists()
    assert_still_serving(capsys, tiny_sft, work)


# --- text -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", TEXT_CASES, ids=lambda c: c.id)
def test_text(tiny_sft: Path, work: Path, capsys, case: TextCase) -> None:
    result = cli(capsys, *synth(tiny_sft, "--mode", "sft", "--speaker", SPEAKER, "--text", case.text, "--seed", "2"))
    if case.expect is None:
        assert_wrote_audio(result, work / "out.wav")
    else:
        assert_refused(result, case.expect.words, work)
    assert_still_serving(capsys, tiny_sft, work)


# --- names and values ---------------------------------------------------------------------------------------


def flags(case: ValueCase) -> list[str]:
    value = str(case.value)
    if case.field == "speaker":
        return ["--mode", "sft", "--speaker", value]
    if case.field == "voice":
        return ["--voice", value]
    if case.field == "mode":
        return ["--mode", value, "--speaker", SPEAKER, "--instruct", "A calm voice."]
    return ["--speaker", SPEAKER, f"--{case.field}", value]


@pytest.mark.parametrize("case", value_cases("cli"), ids=lambda c: c.id)
def test_bad_values(tiny_sft: Path, work: Path, capsys, case: ValueCase) -> None:
    result = cli(capsys, *synth(tiny_sft, "--text", VALID_TEXT, *flags(case)))
    assert_refused(result, case.words, work, argparse=case.codes["cli"] == "argparse")
    assert_still_serving(capsys, tiny_sft, work)


# --- the command line's own cases ---------------------------------------------------------------------------


def prepare(work: Path) -> None:
    (work / "a-folder").mkdir(exist_ok=True)
    (work / "binary.txt").write_bytes(b"\xff\xfe\x00\x81 not utf-8 \xc3")
    (work / "blank.txt").write_text("\n  \n\n")
    (work / "good.wav").write_bytes(wav_bytes(voice()))


CLI_CASES = [
    ("prompt-file-missing", ["--mode", "cross_lingual", "--prompt-wav", "nowhere.wav", "--text", VALID_TEXT],
     ("could not be read", "no file 'nowhere.wav'")),
    ("prompt-is-a-folder", ["--mode", "cross_lingual", "--prompt-wav", "a-folder", "--text", VALID_TEXT],
     ("could not be read", "folder")),
    ("source-file-missing", ["--mode", "vc", "--prompt-wav", "good.wav", "--source-wav", "gone.wav"],
     ("source audio", "no file 'gone.wav'")),
    ("out-with-an-unknown-extension", ["--speaker", SPEAKER, "--text", VALID_TEXT, "--out", "speech.exe"],
     ("format", "'exe'")),
    ("text-file-missing", ["--speaker", SPEAKER, "--text-file", "lines.txt", "--out", "batch"],
     ("text file", "lines.txt")),
    ("text-file-not-utf8", ["--speaker", SPEAKER, "--text-file", "binary.txt", "--out", "batch"],
     ("text file", "utf-8")),
    ("text-file-blank", ["--speaker", SPEAKER, "--text-file", "blank.txt", "--out", "batch"], ("no text",)),
    ("model-folder-missing", ["--model-dir", "no-such-model", "--text", VALID_TEXT], ("no-such-model",)),
    ("model-folder-traversal", ["--model-dir", "../../../../no/such/model", "--text", VALID_TEXT], ("model",)),
]


@pytest.mark.parametrize(("extra", "words"), [case[1:] for case in CLI_CASES], ids=[case[0] for case in CLI_CASES])
def test_cli_specific_inputs(tiny_sft: Path, work: Path, capsys, extra: list[str], words: tuple[str, ...]) -> None:
    prepare(work)
    args = synth(tiny_sft, *extra, out=None if "--out" in extra else "out.wav")  # a later --model-dir wins
    assert_refused(cli(capsys, *args), words, work)
    assert_still_serving(capsys, tiny_sft, work)


VOICE_CASES = [
    ("add-unreadable-recording", ["voices", "add", "narrator", "--prompt-wav", "binary.txt"], ("could not be read",)),
    ("add-missing-recording", ["voices", "add", "narrator", "--prompt-wav", "none.wav"], ("no file 'none.wav'",)),
    ("add-blank-name", ["voices", "add", "  ", "--prompt-wav", "good.wav"], ("name",)),
    ("add-surrogate-name", ["voices", "add", "bad\udc80name", "--prompt-wav", "good.wav"],
     ("voice name", "invalid character")),
    ("rm-traversal", ["voices", "rm", TRAVERSAL], ("no saved voice",)),
    ("default-traversal", ["voices", "default", TRAVERSAL], ("no saved voice",)),
]


@pytest.mark.parametrize(("args", "words"), [case[1:] for case in VOICE_CASES], ids=[case[0] for case in VOICE_CASES])
def test_saved_voice_commands(tiny_sft: Path, work: Path, capsys, args: list[str], words: tuple[str, ...]) -> None:
    prepare(work)
    code, _, err = cli(capsys, *args, *(["--model-dir", str(tiny_sft), "--device", "cpu"] if "add" in args else []))
    assert code != 0 and "Traceback" not in err
    message = [line for line in err.splitlines() if "error:" in line]
    assert len(message) == 1 and all(w.lower() in message[0].lower() for w in words), err
    check_clean(message[0], str(work))
    assert not (work / "voices").is_dir() or not [p for p in (work / "voices").iterdir() if p.is_dir()]
    assert_still_serving(capsys, tiny_sft, work)


def test_a_traversal_voice_name_is_saved_inside_the_voices_folder(tiny_sft: Path, work: Path, capsys) -> None:
    prepare(work)
    code, out, err = cli(capsys, "voices", "add", TRAVERSAL, "--prompt-wav", "good.wav", "--model-dir",
                         str(tiny_sft), "--device", "cpu")
    assert code == 0, err
    saved = [p.name for p in (work / "voices").iterdir() if p.is_dir()]
    assert saved == ["etc-passwd"] and (work / "voices" / "etc-passwd" / "voice.json").is_file()
    assert sorted(p.name for p in work.iterdir()) == ["a-folder", "binary.txt", "blank.txt", "good.wav", "voices"]
    assert_wrote_audio(cli(capsys, *synth(tiny_sft, "--voice", "etc-passwd", "--text", VALID_TEXT)), work / "out.wav")
