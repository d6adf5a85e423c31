"""The command line end to end: every mode through `synth` on tiny models, the parity command (and
that it can fail), offline download errors, and the tiny-model writer."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from cosyvoice_ui.cli.main import main
from cosyvoice_ui.cosyvoice.families import detect
from cosyvoice_ui.testing.signals import voice_clip

from .conftest import fixture_dir


@pytest.fixture(scope="module")
def wavs(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("cli_wavs")
    paths = {}
    for name, seconds, pitch in (("prompt", 4.0, 140.0), ("source", 2.0, 210.0)):
        clip = voice_clip(seconds, 16000, pitch=pitch)
        paths[name] = folder / f"{name}.wav"
        sf.write(paths[name], clip.samples, clip.sample_rate)
    return paths


def _duration(path: Path) -> float:
    data, rate = sf.read(path)
    assert np.isfinite(data).all() and np.abs(data).max() > 0
    return len(data) / rate


@pytest.mark.parametrize("mode", ["sft", "zero_shot", "cross_lingual", "vc"])
def test_synth_every_mode_on_a_tiny_model(mode: str, tiny_sft: Path, wavs, tmp_path: Path, capsys) -> None:
    out = tmp_path / f"{mode}.wav"
    args = ["synth", "--model-dir", str(tiny_sft), "--device", "cpu", "--mode", mode, "--seed", "1", "--out", str(out)]
    if mode != "vc":
        args += ["--text", "Hello world, a short test."]
    if mode == "sft":
        args += ["--speaker", "英文男"]
    if mode in ("zero_shot", "cross_lingual", "vc"):
        args += ["--prompt-wav", str(wavs["prompt"])]
    if mode == "zero_shot":
        args += ["--prompt-text", "希望你以后能够做的比我还好呦。"]
    if mode == "vc":
        args += ["--source-wav", str(wavs["source"])]
    assert main(args) == 0
    seconds = _duration(out)
    if mode == "vc":
        assert abs(seconds - 2.0) < 0.1  # the source's timing is kept
    else:
        assert 0.1 < seconds < 12.0
    assert "wrote" in capsys.readouterr().out


def test_synth_instruct_and_stream_to_mp3(tiny_instruct: Path, tmp_path: Path) -> None:
    out = tmp_path / "instruct.mp3"
    assert main(["synth", "--model-dir", str(tiny_instruct), "--device", "cpu", "--mode", "instruct", "--speaker",
                 "中文男", "--instruct", "A calm, slow voice.", "--text", "Good morning!", "--stream", "--seed", "2",
                 "--out", str(out)]) == 0
    head = out.read_bytes()[:3]
    assert head == b"ID3" or (head[0] == 0xFF and head[1] & 0xE0 == 0xE0)  # ID3 tag or an MPEG frame sync
    assert _duration(out) > 0.1


def test_bad_requests_exit_2_with_a_message(tiny_base: Path, wavs, tmp_path: Path, capsys) -> None:
    code = main(["synth", "--model-dir", str(tiny_base), "--device", "cpu", "--mode", "sft", "--speaker", "x",
                 "--text", "hi", "--out", str(tmp_path / "x.wav")])
    assert code == 2 and "SFT" in capsys.readouterr().err
    code = main(["synth", "--model-dir", str(tmp_path / "nope"), "--device", "cpu", "--text", "hi",
                 "--out", str(tmp_path / "y.wav")])
    assert code == 2 and "does not exist" in capsys.readouterr().err


def test_parity_command_passes_on_the_fixture(capsys) -> None:
    folder = fixture_dir("cosyvoice1-tiny")
    assert main(["parity", str(folder)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-1].startswith("parity: PASS (") and int(lines[-1].split("(")[1].split()[0]) >= 60


def test_parity_command_fails_on_altered_weights(tmp_path: Path, capsys) -> None:
    folder = fixture_dir("cosyvoice1-tiny")
    altered = tmp_path / "altered"
    shutil.copytree(folder, altered)
    flow = torch.load(altered / "flow.pt", weights_only=True)
    key = next(k for k in flow if k.endswith("encoder_proj.weight"))
    flow[key] = flow[key] * 1.01
    torch.save(flow, altered / "flow.pt")
    assert main(["parity", str(altered)]) == 1
    out = capsys.readouterr().out
    assert "parity: FAIL (" in out.strip().splitlines()[-1]
    assert any("flow" in line and line.rstrip().endswith("NO") for line in out.splitlines())


def test_parity_refuses_other_generations(capsys) -> None:
    folder = fixture_dir("cosyvoice2-tiny")
    assert main(["parity", str(folder)]) == 2
    assert "CosyVoice-300M" in capsys.readouterr().err


def test_download_offline_fails_fast_with_manual_steps(tmp_path: Path, monkeypatch, capsys) -> None:
    with socket.socket() as s:  # a loopback port nobody listens on: the hub is "down"
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    started = time.monotonic()
    assert main(["download", "CosyVoice-300M-SFT", "--models-dir", str(tmp_path)]) == 2
    assert time.monotonic() - started < 10
    err = capsys.readouterr().err
    assert "cannot reach" in err and "huggingface-cli download FunAudioLLM/CosyVoice-300M-SFT" in err
    assert main(["download", "NoSuchModel", "--models-dir", str(tmp_path)]) == 2
    assert "choose one of" in capsys.readouterr().err


def test_tiny_model_cli_writes_an_official_looking_folder(tmp_path: Path) -> None:
    out = tmp_path / "tiny-instruct"
    result = subprocess.run([sys.executable, "-m", "cosyvoice_ui.testing.tiny_model", str(out), "--family", "v1",
                             "--instruct"], capture_output=True, text=True, check=True)
    assert "wrote" in result.stdout
    folder = detect(out)
    assert folder.instruct and folder.has_spk2info
    hift = torch.load(out / "hift.pt", weights_only=True)
    assert any(k.endswith("parametrizations.weight.original0") for k in hift), "hift.pt keeps weight-norm pairs"
