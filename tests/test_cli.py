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


# fixture → (at least this many stages, the stage groups its table must show)
PARITY_FIXTURES = {
    "cosyvoice1-tiny": (62, ("frontend", "tokenizer", "llm", "flow", "hift", "streaming")),
    "cosyvoice2-tiny": (54, ("frontend", "llm", "flow", "hift")),
    "cosyvoice3-tiny": (77, ("frontend", "llm", "flow", "hift", "stream")),
}


def _stage_count(last_line: str) -> int:
    return int(last_line.split("(")[1].split()[0])


@pytest.mark.parametrize("name", sorted(PARITY_FIXTURES))
def test_parity_command_passes_on_the_fixture(name: str, capsys) -> None:
    minimum, groups = PARITY_FIXTURES[name]
    assert main(["parity", str(fixture_dir(name))]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-1].startswith("parity: PASS (") and _stage_count(lines[-1]) >= minimum
    rows = lines[1:-1]
    assert len(rows) == _stage_count(lines[-1]) and all(row.rstrip().endswith("yes") or "yes  (" in row for row in rows)
    assert {row.split()[0] for row in rows} == set(groups)  # every golden group ran, none crashed as a whole


def test_every_family_the_registry_runs_has_a_parity_run() -> None:
    from cosyvoice_ui.cosyvoice.families import V1, V2, V3
    from cosyvoice_ui.cosyvoice.parity import parity_runs
    from cosyvoice_ui.cosyvoice.registry import BACKENDS

    assert set(parity_runs()) == set(BACKENDS) == {V1, V2, V3}


def _alter(folder: Path, file: str, suffix: str) -> None:
    weights = torch.load(folder / file, weights_only=True)
    key = next(k for k in weights if k.endswith(suffix))
    weights[key] = weights[key] * 1.01
    torch.save(weights, folder / file)


@pytest.mark.parametrize("name,file,suffix,groups", [
    ("cosyvoice1-tiny", "flow.pt", "encoder_proj.weight", ("flow", "streaming")),
    ("cosyvoice2-tiny", "flow.pt", "encoder_proj.weight", ("flow",)),
    ("cosyvoice2-tiny", "hift.pt", "conv_post.parametrizations.weight.original0", ("hift",)),  # g: v is normalised
    ("cosyvoice3-tiny", "llm.pt", "llm_decoder.weight", ("llm",)),
])
def test_parity_command_fails_on_altered_weights(name: str, file: str, suffix: str, groups: tuple[str, ...],
                                                 tmp_path: Path, capsys) -> None:
    altered = tmp_path / "altered"
    shutil.copytree(fixture_dir(name), altered)
    _alter(altered, file, suffix)
    assert main(["parity", str(altered)]) == 1
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-1].startswith("parity: FAIL (")
    failed = [line for line in lines[1:-1] if " NO" in line]
    assert failed and all(line.startswith(groups) for line in failed)  # only stages that use the altered part
    assert any(line.startswith(groups[0]) for line in failed)


def test_parity_refuses_a_folder_that_is_no_cosyvoice_fixture(tmp_path: Path, tiny_base: Path, capsys) -> None:
    assert main(["parity", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "no model yaml" in err and "CosyVoice-300M" in err and "CosyVoice2-0.5B" in err
    assert main(["parity", str(tiny_base)]) == 2  # a model folder, but no goldens
    assert "manifest.json" in capsys.readouterr().err


def test_download_offline_fails_fast_with_manual_steps(tmp_path: Path, monkeypatch, capsys) -> None:
    with socket.socket() as s:  # a loopback port nobody listens on: the hub is "down"
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    started = time.monotonic()
    assert main(["download", "CosyVoice-300M-SFT", "--models-dir", str(tmp_path)]) == 2
    assert time.monotonic() - started < 10
    err = capsys.readouterr().err
    # The command given downloads straight into the folder the app looks in (the models folder), with the CLI
    # huggingface-hub installs (`hf`).
    target = tmp_path / "CosyVoice-300M-SFT"
    assert "cannot reach" in err and f"hf download FunAudioLLM/CosyVoice-300M-SFT --local-dir {target}" in err
    assert f"git clone https://huggingface.co/FunAudioLLM/CosyVoice-300M-SFT {target}" in err
    assert shutil.which("hf", path=str(Path(sys.executable).parent)), "huggingface-hub installs no `hf` command"
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
