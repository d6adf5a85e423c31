"""`transcribe AUDIO` and the speech recognisers in `download` / `list-models`: a tiny Whisper in the hub's layout
(random weights: the text is garbage, the path is real), pocketsphinx on English made by the offline voice
(skipped without their packages), and the one-line errors. Downloads never touch the network."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import soundfile as sf

from cosyvoice_ui.cli.main import main
from cosyvoice_ui.testing.signals import voice_clip

REPO = Path(__file__).resolve().parents[1]
TINY = "tiny-whisper"


@pytest.fixture(scope="module")
def tiny_whisper(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from cosyvoice_ui.testing.tiny_asr import write_tiny_whisper

    return write_tiny_whisper(tmp_path_factory.mktemp("asr_build") / TINY)


@pytest.fixture()
def clip(tmp_path: Path) -> Path:
    audio = voice_clip(2.0, 16000)
    path = tmp_path / "clip.wav"
    sf.write(path, audio.samples, audio.sample_rate)
    return path


def test_transcribe_with_a_downloaded_whisper(tiny_whisper: Path, clip: Path, tmp_path: Path, capsys) -> None:
    models = tmp_path / "models"
    shutil.copytree(tiny_whisper, models / "asr" / TINY)
    assert main(["transcribe", str(clip), "--models-dir", str(models), "--language", "en"]) == 0
    captured = capsys.readouterr()
    assert captured.out.strip()  # the transcript alone on stdout (garbage words from random weights)
    assert f"heard by {TINY}, language en" in captured.err
    assert main(["transcribe", str(clip), "--models-dir", str(models), "--asr-model", TINY, "--language", "zh"]) == 0
    err = capsys.readouterr().err
    assert "language zh" in err and "rough" not in err


def test_a_pocketsphinx_transcript_is_called_rough(clip: Path, tmp_path: Path, capsys, monkeypatch) -> None:
    import cosyvoice_ui.serving.transcription as transcription

    class Heard:
        def transcribe(self, audio, language=None, progress=None, backend=None):
            return transcription.Transcript("close the window", "en", transcription.POCKETSPHINX)

    monkeypatch.setattr(transcription, "shared_transcriber", lambda models_dir: Heard())
    assert main(["transcribe", str(clip), "--models-dir", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    assert captured.out.strip() == "close the window"  # stdout keeps the transcript alone
    assert "a rough transcript: check and correct it" in captured.err


def test_transcribe_errors_are_one_line_with_the_fix(tmp_path: Path, clip: Path, capsys, monkeypatch) -> None:
    import cosyvoice_ui.serving.transcription as transcription

    (tmp_path / "noise.wav").write_bytes(b"not audio")
    assert main(["transcribe", str(tmp_path / "noise.wav"), "--models-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "could not be read as audio" in err and "Traceback" not in err
    assert main(["transcribe", str(clip), "--models-dir", str(tmp_path), "--asr-model", "whisper-small"]) == 2
    assert "python -m cosyvoice_ui download whisper-small" in capsys.readouterr().err
    # only pocketsphinx here: another language is refused with how to get a multilingual model
    monkeypatch.setattr(transcription.Transcriber, "available", lambda self: [transcription.POCKETSPHINX])
    assert main(["transcribe", str(clip), "--models-dir", str(tmp_path / "other"), "--language", "zh"]) == 2
    err = capsys.readouterr().err
    assert "only English" in err and "download whisper-small" in err and err.count("\n") == 1


def test_download_takes_the_recognisers_names(tmp_path: Path, capsys, monkeypatch) -> None:
    import cosyvoice_ui.serving.transcription as transcription
    from cosyvoice_ui.types import ProgressEvent

    calls = []

    def fake_download(self, name, progress=None):
        calls.append((self.asr_dir, name))
        progress(ProgressEvent("download", 0.5, "12 MB of 24 MB"))
        progress(ProgressEvent("download", 1.0, "done"))
        return self.asr_dir / name

    monkeypatch.setattr(transcription.Transcriber, "download", fake_download)
    assert main(["download", "whisper-small", "--models-dir", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    assert calls == [(tmp_path / "asr", "whisper-small")]
    assert f"downloaded to {tmp_path / 'asr' / 'whisper-small'}" in captured.out
    assert "[download] 100.0% done" in captured.err  # progress on stderr
    assert main(["download", "whisper-huge", "--models-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "choose one of" in err and "CosyVoice-300M-SFT" in err and "whisper-small" in err


def test_list_models_shows_the_recognisers(tiny_whisper: Path, tmp_path: Path, capsys) -> None:
    shutil.copytree(tiny_whisper, tmp_path / "asr" / TINY)
    assert main(["list-models", "--models-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line for line in out.splitlines() if line.strip()}
    assert "CosyVoice-300M-SFT" in rows and "available" in rows["whisper-small"]
    assert "installed" in rows[TINY] and "pocketsphinx" in rows
    assert "asr" not in rows  # the recognisers' folder is no speech model


@pytest.mark.slow
def test_pocketsphinx_transcribes_a_sample_the_offline_voice_made(tmp_path: Path) -> None:
    """The offline voice says a sentence (`synth`); `transcribe`, run as a program, hears its words back."""
    pytest.importorskip("pocketsphinx", reason="pip install pocketsphinx==5.1.1 for the offline recogniser")
    from tests.offline.conftest import require_offline

    require_offline()
    sentence = "Could you please close the window before you leave?"
    sample = tmp_path / "sample.wav"
    assert main(["synth", "--model-dir", "offline-default", "--device", "cpu", "--text", sentence,
                 "--voices-dir", str(tmp_path / "voices"), "--out", str(sample)]) == 0
    result = subprocess.run([sys.executable, "-m", "cosyvoice_ui", "transcribe", str(sample), "--models-dir",
                             str(tmp_path / "models"), "--language", "en"], cwd=REPO, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    heard = set(re.findall(r"[a-z']+", result.stdout.lower()))
    expected = set(re.findall(r"[a-z']+", sentence.lower()))
    assert len(heard & expected) >= len(expected) // 2, result.stdout
    assert "heard by pocketsphinx" in result.stderr
