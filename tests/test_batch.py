"""CLI parity: batch synthesis from a text file (numbered files, --join, resume), saved voices
(`voices add/list/rm`, `synth --voice`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from cosyvoice_ui import InvalidRequest
from cosyvoice_ui.cli.batch import read_lines
from cosyvoice_ui.cli.main import main
from cosyvoice_ui.testing.signals import voice_clip

TRANSCRIPT = "希望你以后能够做的比我还好呦。"


def synth_args(model: Path, *extra: str) -> list[str]:
    return ["synth", "--model-dir", str(model), "--device", "cpu", "--speaker", "英文女", "--seed", "1", *extra]


def test_read_lines_skips_blank_lines(tmp_path: Path) -> None:
    path = tmp_path / "lines.txt"
    path.write_text("\ufeffFirst line.\n\n   \n  Second line.  \n", encoding="utf-8")
    assert read_lines(path) == ["First line.", "Second line."]
    path.write_text("\n\n", encoding="utf-8")
    with pytest.raises(InvalidRequest):
        read_lines(path)
    with pytest.raises(InvalidRequest) as missing:
        read_lines(tmp_path / "nope.txt")
    assert missing.value.code == "text_file_unreadable"


def test_text_file_to_numbered_files_and_resume(tiny_sft: Path, tmp_path: Path, capsys) -> None:
    lines = tmp_path / "prompts.txt"
    lines.write_text("Welcome to the service.\n\nPress one for sales.\nPress two for support.\n", encoding="utf-8")
    out = tmp_path / "out"
    assert main(synth_args(tiny_sft, "--text-file", str(lines), "--out", str(out))) == 0
    files = sorted(p.name for p in out.iterdir())
    assert files == ["0001.wav", "0002.wav", "0003.wav"]
    for name in files:
        samples, rate = sf.read(out / name)
        assert rate == 22050 and len(samples) > 0
    err = capsys.readouterr().err
    assert "3/3 0003.wav" in err and "[" + "#" * 24 + "]" in err  # a progress line per utterance

    kept = (out / "0001.wav").stat().st_mtime_ns
    (out / "0002.wav").unlink()
    (out / "0003.wav").write_bytes(b"")  # an empty file counts as not written
    assert main(synth_args(tiny_sft, "--text-file", str(lines), "--out", str(out))) == 0
    err = capsys.readouterr().err
    assert "1/3 0001.wav exists, skipped" in err and "2/3 0002.wav" in err and "0003.wav" in err
    assert (out / "0001.wav").stat().st_mtime_ns == kept
    assert (out / "0002.wav").stat().st_size > 0 and (out / "0003.wav").stat().st_size > 0
    assert not list(out.glob(".*"))  # no temporary files left


def test_a_bad_line_is_reported_and_the_rest_written(tiny_sft: Path, tmp_path: Path, capsys) -> None:
    lines = tmp_path / "lines.txt"
    lines.write_text("Good line.\n。。。\nAnother good line.\n", encoding="utf-8")
    out = tmp_path / "out"
    assert main(synth_args(tiny_sft, "--text-file", str(lines), "--out", str(out), "--format", "flac")) == 1
    assert sorted(p.name for p in out.iterdir()) == ["0001.flac", "0003.flac"]
    captured = capsys.readouterr()
    assert "FAILED" in captured.err and "lines 2" in captured.out


def test_join_resumes_from_parts(tiny_sft: Path, tmp_path: Path, capsys) -> None:
    lines = tmp_path / "book.txt"
    lines.write_text("Chapter one.\nIt was a dark night.\n", encoding="utf-8")
    separate = tmp_path / "separate"
    assert main(synth_args(tiny_sft, "--text-file", str(lines), "--out", str(separate))) == 0
    first = sf.read(separate / "0001.wav", dtype="float32")[0]
    second = sf.read(separate / "0002.wav", dtype="float32")[0]

    out = tmp_path / "book.wav"
    parts = tmp_path / ".book.wav.parts"
    parts.mkdir()
    np.save(parts / "0001.npy", np.zeros(1000, np.float32))  # "line 1 finished in an interrupted run"
    assert main(synth_args(tiny_sft, "--text-file", str(lines), "--out", str(out), "--join")) == 0
    assert "done in an earlier run, skipped" in capsys.readouterr().err
    joined, rate = sf.read(out, dtype="float32")
    pause = int(0.3 * rate)
    assert len(joined) == 1000 + pause + len(second)
    np.testing.assert_allclose(joined[1000 + pause:], second, atol=1 / 32767)
    assert not np.allclose(joined[:1000], first[:1000])  # the stored part was used, not re-synthesised
    assert not parts.exists()
    assert main(synth_args(tiny_sft, "--text-file", str(lines), "--out", str(out), "--join")) == 0
    assert "exists already" in capsys.readouterr().out


def test_voices_commands_and_synth_with_a_saved_voice(tiny_sft: Path, tmp_path: Path, capsys) -> None:
    clip = tmp_path / "clip.wav"
    sf.write(clip, voice_clip(4.0).samples, 16000)
    voices = tmp_path / "voices"
    assert main(["voices", "add", "Book Narrator", "--prompt-wav", str(clip), "--prompt-text", TRANSCRIPT,
                 "--model-dir", str(tiny_sft), "--device", "cpu", "--voices-dir", str(voices)]) == 0
    assert "saved voice book-narrator" in capsys.readouterr().out
    assert (voices / "book-narrator" / "features-v1.safetensors").is_file()

    assert main(["voices", "list", "--voices-dir", str(voices)]) == 0
    listing = capsys.readouterr().out
    assert "book-narrator" in listing and "v1" in listing

    out = tmp_path / "narrated.wav"
    assert main(["synth", "--model-dir", str(tiny_sft), "--device", "cpu", "--voice", "book-narrator",
                 "--voices-dir", str(voices), "--text", "Read by a saved voice.", "--seed", "2",
                 "--out", str(out)]) == 0
    assert sf.read(out)[1] == 22050

    assert main(["synth", "--model-dir", str(tiny_sft), "--device", "cpu", "--voice", "ghost",
                 "--voices-dir", str(voices), "--text", "x", "--out", str(out)]) == 2
    assert "no saved voice 'ghost'" in capsys.readouterr().err

    assert main(["voices", "rm", "book-narrator", "--voices-dir", str(voices)]) == 0
    assert main(["voices", "rm", "book-narrator", "--voices-dir", str(voices)]) == 1
    assert not (voices / "book-narrator").exists()
