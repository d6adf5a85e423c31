"""Peers side by side: our engine and another CosyVoice engine on the same random full-size folder, alternately,
per stage.

    python benchmarks/peers.py --family v3 --precisions f16,q8_0 --batches 3 --threads 2 \\
        --cosyvoice-cpp-repo URL_OR_CLONE --ggml-repo URL_OR_CLONE --pcre2-repo URL_OR_CLONE
    python benchmarks/peers.py --family v2 --precisions bf16,q8 --batches 3 --threads 2
    python benchmarks/peers.py --family v3 --precisions f16 --batches 1 --json     # one JSON line (last line)

An optional extra, never run in CI. Its peers and what it does with them (all cached under --cache-dir, so a
second run only renders):

  v3: cosyvoice.cpp (Lourdle/cosyvoice.cpp, commit 265b97e; ggml at af97976, the commit its own CMake pins; pcre2
      at ff92e0b, its submodule), built CPU only, Release, the library without ONNX Runtime, ICU, audio I/O or the
      server, when cmake >= 3.28 (the system's or the one in requirements-peers.txt) and a C++20 compiler with
      <format> are there (GCC >= 13, or clang with libc++ >= 17 -- on Debian 12: apt-get install clang-19
      libc++-19-dev libc++abi-19-dev libomp-19-dev); else it is skipped with the reason. The folder goes through its
      convert_model_to_gguf.py once per precision (f32, f16, q8_0, q5_0, q5_1, q4_0, q4_1), and renders are timed by
      benchmarks/peers_cosyvoice_cpp.cpp, a small driver on its public low-level API (LLM call, token2wav; the
      vocoder's start is seen through the noise callback). It only runs CosyVoice3.
  v2: vox-tts 0.19.5 from the package index (a wheel with its own C++ engine), the folder converted with
      vox.build_cosyvoice once per precision (bf16, f16, f32; q8 = bf16 with the LLM's linear layers in 8 bits;
      flow and HiFT f32, its default). It only runs CosyVoice2. Its voice file comes from its own cloning
      frontend, whose CAM++ and speech tokenizer get random weights of the real shapes here (the random folder's
      ONNX files are tiny stand-ins); the features it made are then replaced by ours (use_our_prompt).

Extra Python packages (benchmarks/requirements-peers.txt) go into a separate venv (--venv, default
CACHE/venv) that sees this environment's packages (torch, numpy, onnx) through a .pth file, so nothing is
installed into the project's environment.

Workload (workload.py, bench_engine's): zero-shot, 40 text ids, 20 prompt-text ids, a 5 s prompt (125 speech
tokens, 250 mel frames) and exactly 125 output tokens. Every engine gets the same text ids (cosyvoice.cpp takes
them as ids, vox as the text they decode to), prompt text, prompt speech tokens, prompt mel and speaker embedding:
ours makes them from a 5 s clip (bench_engine's), cosyvoice.cpp reads them from a prompt_speech.gguf written here,
vox from its voice file. Exactly N tokens are forced on the peers by setting their minimum and maximum token/text
ratio to N / 40 (cosyvoice.cpp per call, vox in the converted model's settings; a text that vox tokenized to
another length would show as another count); the count is checked after every render.

Each engine is its own process, loaded once and warmed by one short render; then per batch each renders once, in
this order: ours stock, ours fast, the peer at each precision. Printed per engine, min-max over batches: LLM
prefill, LLM ms/token (prefill + decode over the tokens: vox reports the LLM as one number), decode ms/token where
known, flow, HiFT, total and RTF; the ratios peer / ours (stock and fast) per stage, each taken within one batch,
min-max; a Markdown table; the load average before and after each batch. Other work on the machine moves all
numbers; the ratios within one batch are what count.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
DEFAULT_CACHE = Path(tempfile.gettempdir()) / "cosyvoice_ui_peers"
REQUIREMENTS = HERE / "requirements-peers.txt"
DRIVER_SOURCE = HERE / "peers_cosyvoice_cpp.cpp"

COSYVOICE_CPP_COMMIT = "265b97e0534b609ff3b814a4be5712a94b835d7d"
GGML_COMMIT = "af97976c7810cdabb1863172f31c432dab767de7"  # GGML_PINNED_COMMIT in its cmake/Dependencies.cmake
PCRE2_COMMIT = "ff92e0b9cea5b5ae3af12ba930d03556684f098b"  # its vendor/pcre2 submodule at that commit
COSYVOICE_CPP_REPO = "https://github.com/Lourdle/cosyvoice.cpp"
GGML_REPO = "https://github.com/ggml-org/ggml"
PCRE2_REPO = "https://github.com/PCRE2Project/pcre2"
VOX_VERSION = "0.19.5"

PEERS = {"v3": "cosyvoice.cpp", "v2": "vox"}
PEER_PRECISIONS = {"cosyvoice.cpp": ("f32", "f16", "q8_0", "q5_0", "q5_1", "q4_0", "q4_1"),
                   "vox": ("bf16", "f16", "f32", "q8")}
WARMUP_TOKENS = 10
STAGES = ("llm_prefill_s", "llm_ms_per_token", "decode_ms_per_token", "flow_s", "hift_s", "total_s", "rtf")
RATIO_STAGES = ("llm_ms_per_token", "flow_s", "hift_s", "total_s", "rtf")


# --- pure logic (unit-tested in tests/test_peers_bench.py) -----------------------------------------

def vox_stage_delta(before: dict, after: dict, samples: int, sample_rate: int, token_rate: float = 25.0) -> dict:
    """One vox render's stage clocks from its engine.stats() before and after (the "backend" section keeps running
    totals: llm_ms, flow_ms, hift_ms) and the audio it made; its speech tokens are the audio at the family's token
    rate (CosyVoice2: 25 a second, 960 samples at 24 kHz), as vox reports no count."""
    b, a = before["backend"], after["backend"]
    return {"llm_s": (a["llm_ms"] - b["llm_ms"]) / 1e3, "flow_s": (a["flow_ms"] - b["flow_ms"]) / 1e3,
            "hift_s": (a["hift_ms"] - b["hift_ms"]) / 1e3, "tokens": round(samples * token_rate / sample_rate),
            "audio_s": samples / sample_rate}


def derive(run: dict) -> dict:
    """A run's stage record with the derived numbers: LLM ms/token (prefill + decode, over the tokens), decode
    ms/token (over tokens - 1, when the prefill is known apart), RTF (total over the audio made)."""
    out = dict(run)
    llm_s = run.get("llm_s")
    if llm_s is None:
        llm_s = run["llm_prefill_s"] + run["llm_decode_s"]
        out["llm_s"] = llm_s
    out["llm_ms_per_token"] = 1e3 * llm_s / run["tokens"]
    decode = run.get("llm_decode_s")
    out["decode_ms_per_token"] = 1e3 * decode / (run["tokens"] - 1) if decode is not None and run["tokens"] > 1 else None
    out.setdefault("llm_prefill_s", None)
    if "audio_s" not in run:  # the cosyvoice.cpp driver reports samples
        out["audio_s"] = run["samples"] / run["sample_rate"]
    out["rtf"] = run["total_s"] / out["audio_s"]
    return out


def span(values: list[float | None]) -> tuple[float, float] | None:
    known = [v for v in values if v is not None]
    return (min(known), max(known)) if known else None


def fmt_span(s: tuple[float, float] | None, digits: int = 2) -> str:
    if s is None:
        return "-"
    lo, hi = s
    return f"{lo:.{digits}f}" if f"{lo:.{digits}f}" == f"{hi:.{digits}f}" else f"{lo:.{digits}f}–{hi:.{digits}f}"


def summarize(batches: list[dict[str, dict]], engines: list[str], peers: list[str]) -> dict:
    """Per engine the min-max of each stage over the batches, and per peer engine the min-max of peer / ours
    (stock and fast) per stage, each ratio taken within one batch. `batches`: [{engine: derived run}]."""
    stages = {name: {stage: span([b[name].get(stage) for b in batches if name in b]) for stage in STAGES}
              for name in engines}
    ratios: dict[str, dict[str, dict]] = {}
    for peer in peers:
        ratios[peer] = {}
        for ours in ("ours stock", "ours fast"):
            per_stage = {}
            for stage in RATIO_STAGES:
                values = [b[peer][stage] / b[ours][stage] for b in batches
                          if peer in b and ours in b and b[ours].get(stage) and b[peer].get(stage) is not None]
                per_stage[stage] = span(values)
            ratios[peer][ours] = per_stage
    return {"stages": stages, "ratios": ratios}


def markdown_table(summary: dict, engines: list[str], peers: list[str]) -> str:
    """The README table: per engine, min-max over batches of each stage and RTF, and the peer / ours RTF ratios."""
    head = ("| engine | LLM ms/token | flow s | HiFT s | total s | RTF | RTF ÷ ours stock | RTF ÷ ours fast |\n"
            "|---|---|---|---|---|---|---|---|")
    rows = []
    for name in engines:
        s = summary["stages"][name]
        r = summary["ratios"].get(name)
        rows.append(f"| {name} | {fmt_span(s['llm_ms_per_token'], 1)} | {fmt_span(s['flow_s'], 1)} | "
                    f"{fmt_span(s['hift_s'], 2)} | {fmt_span(s['total_s'], 1)} | {fmt_span(s['rtf'])} | "
                    f"{fmt_span(r['ours stock']['rtf']) + '×' if r else ''} | "
                    f"{fmt_span(r['ours fast']['rtf']) + '×' if r else ''} |")
    return "\n".join([head, *rows])


def ratio_table(summary: dict, peers: list[str]) -> str:
    """Per peer engine, its per-stage ratios to ours stock and ours fast (min-max over batches)."""
    head = ("| peer ÷ ours | LLM ms/token | flow | HiFT | total | RTF |\n"
            "|---|---|---|---|---|---|")
    rows = []
    for peer in peers:
        for ours in ("ours stock", "ours fast"):
            r = summary["ratios"][peer][ours]
            cells = " | ".join(fmt_span(r[stage]) for stage in RATIO_STAGES)
            rows.append(f"| {peer} ÷ {ours} | {cells} |")
    return "\n".join([head, *rows])


# --- workers: one process per engine, one JSON line per command -------------------------------------

class Worker:
    """A render process: prints a JSON "ready" line after loading, then answers each command line with one JSON
    line. Other stdout lines are skipped; stderr goes to a log file."""

    def __init__(self, name: str, command: list[str], log_path: Path, env: dict | None = None) -> None:
        self.name = name
        self.log_path = log_path
        self.log = open(log_path, "w", encoding="utf-8")  # noqa: SIM115  (closed in close())
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
                                     text=True, env=env, cwd=REPO)
        self.ready = self._answer()

    def _answer(self) -> dict:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            line = line.strip()
            if line.startswith("{"):
                try:
                    answer = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if "error" in answer:
                    raise RuntimeError(f"{self.name}: {answer['error']}")
                return answer
        self.proc.wait()
        tail = self.log_path.read_text(encoding="utf-8", errors="replace")[-3000:]
        raise RuntimeError(f"{self.name} exited ({self.proc.returncode}); its log ends:\n{tail}")

    def ask(self, command: str) -> dict:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self._answer()

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write("quit\n")
                self.proc.stdin.flush()
                self.proc.wait(timeout=30)
            except (BrokenPipeError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def _emit(payload: dict) -> None:
    print(json.dumps(payload), flush=True)


def worker_ours(args: argparse.Namespace) -> int:
    """Our engine at one precision (runs in this environment)."""
    sys.path[:0] = [str(REPO), str(HERE)]
    import cosyvoice_ui  # noqa: F401  (first: it sets OpenMP's spin count before torch loads, as the app does)
    import numpy as np
    import torch

    from bench_engine import FAMILIES, full_size_folder
    from cosyvoice_ui.cosyvoice.engine import load_engine
    from cosyvoice_ui.testing.signals import voice_clip
    from cosyvoice_ui.types import Mode
    from workload import PROMPT_TEXT, Workload, build_input, render_offline

    torch.set_num_threads(args.threads)
    folder = full_size_folder(Path(args.model_cache), args.family)
    start = time.perf_counter()
    engine = load_engine(folder, device="cpu", precision=args.precision, threads=args.threads)
    load_s = time.perf_counter() - start
    family = FAMILIES[args.family]
    workload = Workload.for_family(family.token_rate, family.mel_rate)
    voice = voice_clip(workload.prompt_seconds)
    model_input = build_input(engine, engine.encode_voice(voice), workload)
    if args.dump:
        text_ids = model_input.text[0].tolist()
        prompt_ids = model_input.prompt_text[0].tolist()
        # v3's system prompt and <|endofprompt|> lead the prompt text; cosyvoice.cpp adds them itself
        prefix_ids = engine.tokenizer.encode(engine.recipe.prompt_text(Mode.ZERO_SHOT, ""))
        prefix = len(prefix_ids) if prompt_ids[:len(prefix_ids)] == prefix_ids else 0
        np.savez(args.dump, text_ids=np.array(text_ids, np.int32), prompt_text_ids=np.array(prompt_ids, np.int32),
                 prompt_prefix_ids=np.array(prefix, np.int32),
                 text=np.array(engine.tokenizer.decode(text_ids)),
                 prompt_text=np.array(engine.tokenizer.decode(prompt_ids[prefix:])),
                 prompt_text_source=np.array(PROMPT_TEXT),
                 prompt_tokens=model_input.flow_prompt_tokens[0].numpy().astype(np.int32),
                 prompt_mel=model_input.prompt_mel[0].float().numpy(),
                 embedding=model_input.flow_embedding.reshape(1, -1).float().numpy(),
                 voice=np.asarray(voice.samples, np.float32), voice_rate=np.array(voice.sample_rate, np.int32),
                 output_tokens=np.array(workload.output_tokens, np.int32))
    sample_rate = engine.info.sample_rate
    _emit({"ready": True, "load_s": load_s, "sample_rate": sample_rate, "folder": folder.name,
           "text_tokens": int(model_input.text.size(1)), "prompt_text_tokens": int(model_input.prompt_text.size(1)),
           "prompt_tokens": int(model_input.flow_prompt_tokens.size(1)),
           "prompt_mel_frames": int(model_input.prompt_mel.size(1)), "torch": torch.__version__})
    for line in sys.stdin:
        words = line.split()
        if not words or words[0] == "quit":
            break
        tokens = int(words[1])
        wall, times, wave = render_offline(engine, model_input, tokens, args.seed)
        _emit({"llm_prefill_s": times.llm_prefill_s, "llm_decode_s": times.llm_decode_s, "tokens": times.tokens,
               "flow_s": times.flow_s, "hift_s": times.hift_s, "total_s": wall,
               "audio_s": wave.numel() / sample_rate})
    return 0


def use_our_prompt(voice_file: str, dump) -> None:
    """Put our prompt features into a voice file vox cloned (its profile keeps the features it made, which it uses
    from then on: feat.cosy_mel [frames, 80], feat.cosy_tokens, feat.cosy_xvec [192]), so vox renders from the same
    prompt tokens, mel and speaker embedding as ours and cosyvoice.cpp. The shapes must match what it made."""
    import numpy as np
    from vox.formats import load_safetensors, save_safetensors

    tensors, meta = load_safetensors(voice_file)
    ours = {"feat.cosy_mel": np.ascontiguousarray(dump["prompt_mel"], np.float32),
            "feat.cosy_tokens": np.ascontiguousarray(dump["prompt_tokens"], np.int32),
            "feat.cosy_xvec": np.ascontiguousarray(dump["embedding"].reshape(-1), np.float32)}
    for name, value in ours.items():
        if name not in tensors or tensors[name].shape != value.shape:
            raise RuntimeError(f"{voice_file}: vox's {name} is {getattr(tensors.get(name), 'shape', None)}, ours "
                               f"{value.shape}")
    tensors.update(ours)
    save_safetensors(voice_file, tensors, meta)


def worker_vox(args: argparse.Namespace) -> int:
    """vox at one precision (runs in the peers venv); stage clocks from its engine.stats()."""
    import numpy as np
    import vox

    dump = np.load(args.dump)
    start = time.perf_counter()
    engine = vox.Engine(args.model, device="cpu", threads=args.threads)
    load_s = time.perf_counter() - start
    voice_path = Path(args.voice)
    if not voice_path.is_file():
        voice = engine.clone_voice((dump["voice"], int(dump["voice_rate"])), str(dump["prompt_text"]))
        partial = str(voice_path) + ".partial"
        voice.save(partial)
        use_our_prompt(partial, dump)
        os.replace(partial, voice_path)
    voice = engine.load_voice(str(voice_path))
    text = str(dump["text"])
    short = " ".join(text.split()[:3])
    _emit({"ready": True, "load_s": load_s, "sample_rate": engine.sample_rate, "threads": engine.stats()["threads"]})
    for line in sys.stdin:
        words = line.split()
        if not words or words[0] == "quit":
            break
        before = engine.stats()
        start = time.perf_counter()
        audio = engine.synthesize(short if words[0] == "warmup" else text, voice, seed=args.seed)
        wall = time.perf_counter() - start
        run = vox_stage_delta(before, engine.stats(), len(audio), engine.sample_rate)
        _emit({**run, "llm_prefill_s": None, "llm_decode_s": None, "total_s": wall})
    return 0


# --- helpers run in the peers venv -------------------------------------------------------------------

def helper_cpp_prompt(args: argparse.Namespace) -> int:
    """cosyvoice.cpp's prompt_speech.gguf from the workload dump (the tensors its loader reads: feat [T, 80],
    embedding [1, 192], tokens, text; no crc32, which it only checks when present)."""
    import gguf
    import numpy as np

    dump = np.load(args.dump)
    writer = gguf.GGUFWriter(args.out, "cosyvoice3")
    writer.add_tensor("feat", np.ascontiguousarray(dump["prompt_mel"], np.float32))
    writer.add_tensor("embedding", np.ascontiguousarray(dump["embedding"], np.float32))
    writer.add_tensor("tokens", np.ascontiguousarray(dump["prompt_tokens"], np.int32))
    writer.add_tensor("text", np.frombuffer(str(dump["prompt_text"]).encode("utf-8"), np.int8).copy())
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return 0


def random_campplus(seed: int = 0) -> dict:
    """CAM++ (CosyVoice's campplus: FCM head 32 channels, TDNN 128, dense blocks of 12/24/16 layers, growth 32,
    bottleneck 128, 192-d output) with random weights, in the layout vox's converter makes from campplus.onnx:
    "<module>.weight" (+ ".bias" for the CAM layers' 1x1 convolutions) and batch norms as ".scale" / ".shift"."""
    import numpy as np

    rng = np.random.RandomState(seed)
    out: dict[str, np.ndarray] = {}

    def conv(name: str, shape: tuple[int, ...], bias: bool = False) -> None:
        fan_in = int(np.prod(shape[1:]))
        out[name + ".weight"] = (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)
        if bias:
            out[name + ".bias"] = np.zeros(shape[0], np.float32)

    def bn(name: str, channels: int) -> None:
        out[name + ".scale"] = np.ones(channels, np.float32)
        out[name + ".shift"] = np.zeros(channels, np.float32)

    conv("head.conv1", (32, 1, 3, 3))
    bn("head.bn1", 32)
    for layer in ("layer1", "layer2"):
        for i in (0, 1):
            p = f"head.{layer}.{i}."
            conv(p + "conv1", (32, 32, 3, 3))
            bn(p + "bn1", 32)
            conv(p + "conv2", (32, 32, 3, 3))
            bn(p + "bn2", 32)
            if i == 0:
                conv(p + "shortcut.0", (32, 32, 1, 1))
                bn(p + "shortcut.1", 32)
    conv("head.conv2", (32, 32, 3, 3))
    bn("head.bn2", 32)
    conv("xvector.tdnn.linear", (128, 320, 5))
    bn("xvector.tdnn.nonlinear.batchnorm", 128)
    channels = 128
    for block, layers in ((1, 12), (2, 24), (3, 16)):
        for i in range(1, layers + 1):
            p = f"xvector.block{block}.tdnnd{i}."
            width = channels + (i - 1) * 32
            bn(p + "nonlinear1.batchnorm", width)
            conv(p + "linear1", (128, width, 1))
            bn(p + "nonlinear2.batchnorm", 128)
            conv(p + "cam_layer.linear_local", (32, 128, 3))
            conv(p + "cam_layer.linear1", (64, 128, 1), bias=True)
            conv(p + "cam_layer.linear2", (32, 64, 1), bias=True)
        channels += layers * 32
        bn(f"xvector.transit{block}.nonlinear.batchnorm", channels)
        conv(f"xvector.transit{block}.linear", (channels // 2, channels, 1))
        channels //= 2
    bn("xvector.out_nonlinear.batchnorm", channels)
    conv("xvector.dense.linear", (192, channels * 2, 1))
    bn("xvector.dense.nonlinear.batchnorm", 192)
    return out


def helper_vox_build(args: argparse.Namespace) -> int:
    """vox's .tmod of the random CosyVoice2 folder at one precision, with exactly --tokens speech tokens forced
    for --text-tokens text ids (min and max token/text ratio both that quotient) and a cloning frontend of random
    weights: CAM++ from random_campplus() instead of the stand-in campplus.onnx, S3TokenizerV2 from s3tokenizer's
    own module (random init) saved as speech_tokenizer_v2.pt, which vox's converter reads before the .onnx."""
    import types

    import torch

    source = Path(args.folder)
    shadow = Path(args.out).with_suffix(".src")
    shutil.rmtree(shadow, ignore_errors=True)
    shadow.mkdir(parents=True)
    for entry in source.iterdir():
        (shadow / entry.name).symlink_to(entry.resolve())
    sys.modules.setdefault("torchaudio", types.ModuleType("torchaudio"))  # only its audio loader imports it
    from s3tokenizer.model_v2 import S3TokenizerV2

    torch.manual_seed(args.seed)
    torch.save(S3TokenizerV2("speech_tokenizer_v2_25hz").state_dict(), shadow / "speech_tokenizer_v2.pt")

    import vox.build_cosyvoice as build

    ratio = (args.tokens + 0.5) / args.text_tokens
    write_tmod = build.write_tmod

    def forced_write(path, manifest, blobs, *rest, **kwargs):
        manifest["cosyvoice"]["llm"].update(min_token_text_ratio=ratio, max_token_text_ratio=ratio)
        return write_tmod(path, manifest, blobs, *rest, **kwargs)

    build.write_tmod = forced_write
    build.campplus_from_onnx = lambda path: random_campplus(args.seed)
    build.check_campplus = lambda path, weights: ("window", "random CAM++ weights (benchmark)")
    dtype, quant = ("bf16", "q8") if args.precision == "q8" else (args.precision, "")
    partial = args.out + ".partial"
    build.build(str(shadow), partial, dtype=dtype, flow_dtype="f32", clone=True, variant="cosyvoice2-0.5b-random",
                sha=False, quant=quant)
    os.replace(partial, args.out)
    shutil.rmtree(shadow, ignore_errors=True)
    return 0


# --- setup -------------------------------------------------------------------------------------------

def run_logged(command: list[str], log: Path, cwd: Path | None = None, env: dict | None = None) -> None:
    with open(log, "a", encoding="utf-8") as out:
        out.write("$ " + " ".join(command) + "\n")
        out.flush()
        done = subprocess.run(command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, check=False)
    if done.returncode != 0:
        tail = log.read_text(encoding="utf-8", errors="replace")[-3000:]
        raise RuntimeError(f"{' '.join(command[:3])}... failed ({done.returncode}); {log} ends:\n{tail}")


def ensure_venv(venv: Path, log: Path) -> Path:
    """The peers venv: this interpreter's packages visible through a .pth file, the pinned extras installed once."""
    python = venv / "bin" / "python"
    marker = venv / ".requirements-sha256"
    digest = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()
    if python.exists() and marker.is_file() and marker.read_text().strip() == digest:
        return python
    if not python.exists():
        run_logged([sys.executable, "-m", "venv", str(venv)], log)
    import sysconfig

    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    ours = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    Path(purelib, "zz_cosyvoice_ui_env.pth").write_text("\n".join(sorted(ours)) + "\n", encoding="utf-8")
    run_logged([str(python), "-m", "pip", "install", "--no-deps", "-r", str(REQUIREMENTS)], log)
    marker.write_text(digest + "\n")
    return python


@dataclass
class Toolchain:
    cc: str
    cxx: str
    cxx_flags: list[str] = field(default_factory=list)
    cmake: str = "cmake"


def _cmake_version(cmake: str) -> tuple[int, ...]:
    try:
        out = subprocess.run([cmake, "--version"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return ()
    found = re.search(r"version (\d+)\.(\d+)", out)
    return tuple(int(x) for x in found.groups()) if found else ()


def find_toolchain(venv_python: Path, scratch: Path) -> Toolchain | str:
    """cmake >= 3.28 and a C++20 compiler whose library has <format>, or the reason there is none."""
    cmake = None
    for candidate in (shutil.which("cmake"), str(venv_python.parent / "cmake")):
        if candidate and _cmake_version(candidate) >= (3, 28):
            cmake = candidate
            break
    if cmake is None:
        return "no cmake >= 3.28 (requirements-peers.txt installs one into the peers venv)"
    if not shutil.which("git"):
        return "no git"
    probe = scratch / "format_probe.cpp"
    probe.write_text('#include <format>\n#include <string>\nint main() { return std::format("{}", 7).size() - 1; }\n')
    candidates = [os.environ.get("CXX"), "c++", "g++", "clang++", "clang++-19", "clang++-18", "clang++-17"]
    tried = []
    for cxx in dict.fromkeys(c for c in candidates if c):
        path = shutil.which(cxx)
        if not path:
            continue
        for flags in ([], ["-stdlib=libc++"]):
            done = subprocess.run([path, "-std=c++20", *flags, str(probe), "-o", str(scratch / "format_probe")],
                                  capture_output=True, text=True, check=False)
            tried.append(cxx + (" " + " ".join(flags) if flags else ""))
            if done.returncode == 0:
                cc = re.sub(r"clang\+\+", "clang", cxx) if "clang" in cxx else re.sub(r"[gc]\+\+", "gcc", cxx)
                cc = shutil.which(cc) or shutil.which("cc") or "cc"
                return Toolchain(cc=cc, cxx=path, cxx_flags=flags, cmake=cmake)
    return ("no C++20 compiler with <format> (tried " + ", ".join(tried or ["none found"]) +
            "; GCC >= 13 or clang with libc++ >= 17 has it)")


def _checkout(repo: str, commit: str, dest: Path, log: Path) -> None:
    if not (dest / ".git").exists():
        shutil.rmtree(dest, ignore_errors=True)
        run_logged(["git", "clone", "--quiet", repo, str(dest)], log)
    run_logged(["git", "-C", str(dest), "checkout", "--quiet", "--detach", commit], log)
    head = subprocess.run(["git", "-C", str(dest), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    if head != commit:
        raise RuntimeError(f"{dest}: at {head}, not {commit}")


def build_cosyvoice_cpp(args: argparse.Namespace, tools: Toolchain, cache: Path, log: Path) -> dict:
    """cosyvoice.cpp at the pinned commits, built once; then the timing driver. Returns its paths."""
    src = cache / f"cosyvoice.cpp-{COSYVOICE_CPP_COMMIT[:7]}"
    build = src / "build"
    driver = cache / "peers_cosyvoice_cpp"
    lib = build / "lib"
    if not (lib / "libcosyvoice.so").exists():
        _checkout(args.cosyvoice_cpp_repo, COSYVOICE_CPP_COMMIT, src, log)
        _checkout(args.ggml_repo, GGML_COMMIT, src / "vendor" / "ggml", log)
        _checkout(args.pcre2_repo, PCRE2_COMMIT, src / "vendor" / "pcre2", log)
        flags = " ".join(tools.cxx_flags)
        configure = [tools.cmake, "-S", str(src), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release",
                     f"-DCMAKE_C_COMPILER={tools.cc}", f"-DCMAKE_CXX_COMPILER={tools.cxx}",
                     "-DCOSYVOICE_NO_FRONTEND=ON", "-DCOSYVOICE_NO_ICU=ON", "-DCOSYVOICE_NO_AUDIO=ON",
                     "-DCOSYVOICE_SERVER_NO_WEBUI=ON", "-DGGML_METAL=OFF", "-DGGML_CUDA=OFF", "-DGGML_VULKAN=OFF"]
        if flags:
            configure += [f"-DCMAKE_CXX_FLAGS={flags}", f"-DCMAKE_EXE_LINKER_FLAGS={flags}",
                          f"-DCMAKE_SHARED_LINKER_FLAGS={flags}"]
        run_logged(configure, log)
        run_logged([tools.cmake, "--build", str(build), "--target", "cosyvoice", "-j", str(os.cpu_count() or 2)], log)
    source_digest = hashlib.sha256(DRIVER_SOURCE.read_bytes()).hexdigest()[:16]
    stamp = driver.with_suffix(".sha")
    if not driver.exists() or not stamp.is_file() or stamp.read_text().strip() != source_digest:
        run_logged([tools.cxx, "-std=c++20", *tools.cxx_flags, "-O2", str(DRIVER_SOURCE), "-I", str(src / "include"),
                    "-I", str(src / "vendor" / "ggml" / "include"), "-L", str(lib), "-lcosyvoice", "-lggml",
                    "-lggml-base", f"-Wl,-rpath,{lib}", "-o", str(driver)], log)
        stamp.write_text(source_digest + "\n")
    return {"src": src, "driver": driver, "compiler": f"{Path(tools.cxx).name} {' '.join(tools.cxx_flags)}".strip()}


def convert_cpp(python: Path, src: Path, folder: Path, precision: str, out_dir: Path, log: Path) -> Path:
    out = out_dir / f"{folder.name}-{precision}.gguf"
    if not out.exists():
        partial = out.with_suffix(".partial")
        run_logged([str(python), str(src / "convert_model_to_gguf.py"), "--yaml_config",
                    str(next(folder.glob("cosyvoice*.yaml"))), "--gguf_model", str(partial), "--ftype", precision], log)
        partial.rename(out)
    return out


def convert_vox(python: Path, folder: Path, precision: str, tokens: int, text_tokens: int, out_dir: Path,
                log: Path, seed: int) -> Path:
    out = out_dir / f"{folder.name}-{precision}-forced{tokens}of{text_tokens}.tmod"
    if not out.exists():
        run_logged([str(python), str(Path(__file__).resolve()), "--helper", "vox-build", "--folder", str(folder),
                    "--precision", precision, "--tokens", str(tokens), "--text-tokens", str(text_tokens),
                    "--seed", str(seed), "--out", str(out)], log)
    return out


# --- the run -----------------------------------------------------------------------------------------

def loadavg() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def run(args: argparse.Namespace) -> dict:
    cache = Path(args.cache_dir)
    cache.mkdir(parents=True, exist_ok=True)
    log = cache / "setup.log"
    peer = PEERS[args.family]
    precisions = [p for p in args.precisions.split(",") if p]
    bad = [p for p in precisions if p not in PEER_PRECISIONS[peer]]
    if bad:
        raise SystemExit(f"{peer} precisions are {', '.join(PEER_PRECISIONS[peer])}; not {', '.join(bad)}")
    sys.path[:0] = [str(REPO), str(HERE)]
    from bench_engine import FAMILIES, full_size_folder
    from workload import Workload

    family = FAMILIES[args.family]
    workload = Workload.for_family(family.token_rate, family.mel_rate)
    folder = full_size_folder(Path(args.model_cache), args.family)
    venv_python = ensure_venv(Path(args.venv) if args.venv else cache / "venv", log)
    notes: list[str] = []
    peer_info: dict = {"name": peer}

    # The peer's build and model files, before any engine is loaded.
    peer_models: dict[str, Path] = {}
    if peer == "cosyvoice.cpp":
        tools = find_toolchain(venv_python, cache)
        if isinstance(tools, str):
            notes.append(f"cosyvoice.cpp skipped: {tools}")
            peer = None
        else:
            built = build_cosyvoice_cpp(args, tools, cache, log)
            peer_info.update(commit=COSYVOICE_CPP_COMMIT, ggml=GGML_COMMIT, pcre2=PCRE2_COMMIT,
                             compiler=built["compiler"])
            for precision in precisions:
                peer_models[precision] = convert_cpp(venv_python, built["src"], folder, precision, cache, log)
    else:
        peer_info.update(version=VOX_VERSION)
        for precision in precisions:
            peer_models[precision] = convert_vox(venv_python, folder, precision, workload.output_tokens,
                                                 workload.text_tokens, cache, log, args.seed)

    # Engines: ours first (stock also writes the shared workload), then the peer's.
    dump = cache / f"workload-{args.family}.npz"
    workers: dict[str, Worker] = {}
    try:
        for precision in ("stock", "fast"):
            command = [sys.executable, str(Path(__file__).resolve()), "--worker", "ours", "--family", args.family,
                       "--precision", precision, "--threads", str(args.threads), "--seed", str(args.seed),
                       "--model-cache", str(args.model_cache)]
            if precision == "stock":
                command += ["--dump", str(dump)]
            workers[f"ours {precision}"] = Worker(f"ours {precision}", command, cache / f"ours-{precision}.log")
        if peer == "cosyvoice.cpp":
            prompt = cache / f"prompt-{args.family}.gguf"
            run_logged([str(venv_python), str(Path(__file__).resolve()), "--helper", "cpp-prompt", "--dump",
                        str(dump), "--out", str(prompt)], log)
            ids = cache / f"text-ids-{args.family}.txt"
            ids_cmd = ("import numpy as np, sys; d = np.load(sys.argv[1]); "
                       "print(' '.join(str(i) for i in d['text_ids']))")
            ids.write_text(subprocess.run([sys.executable, "-c", ids_cmd, str(dump)], capture_output=True, text=True,
                                          check=True).stdout)
            for precision, model in peer_models.items():
                name = f"cosyvoice.cpp {precision}"
                workers[name] = Worker(name, [str(built["driver"]), str(model), str(prompt), str(ids),
                                              str(args.threads), str(args.seed)], cache / f"cpp-{precision}.log")
        elif peer == "vox":
            for precision, model in peer_models.items():
                name = f"vox {precision}"
                worker_log = cache / f"vox-{precision}.log"
                workers[name] = Worker(name, [str(venv_python), str(Path(__file__).resolve()), "--worker", "vox",
                                              "--model", str(model), "--voice", str(model.with_suffix(".tvoice")),
                                              "--dump", str(dump), "--threads", str(args.threads), "--seed",
                                              str(args.seed)], worker_log)
        engines = list(workers)
        peers = [name for name in engines if not name.startswith("ours")]
        for name, worker in workers.items():  # one short render each: first-call costs stay out of the batches
            worker.ask("warmup" if name.startswith("vox") else f"run {WARMUP_TOKENS}")

        batches: list[dict[str, dict]] = []
        loads: list[dict] = []
        for b in range(args.batches):
            before = loadavg()
            batch = {}
            for name, worker in workers.items():
                command = "run" if name.startswith("vox") else f"run {workload.output_tokens}"
                answer = worker.ask(command)
                if answer["tokens"] != workload.output_tokens:
                    notes.append(f"batch {b + 1}: {name} made {answer['tokens']} tokens, not "
                                 f"{workload.output_tokens}")
                batch[name] = derive(answer)
                print(f"batch {b + 1}/{args.batches} {name}: RTF {batch[name]['rtf']:.2f}", file=sys.stderr,
                      flush=True)
            batches.append(batch)
            loads.append({"before": before, "after": loadavg()})
        ready = {name: worker.ready for name, worker in workers.items()}
    finally:
        for worker in workers.values():
            worker.close()
    summary = summarize(batches, engines, peers)
    return {"family": args.family, "folder": folder.name, "threads": args.threads, "batches": args.batches,
            "workload": workload.describe(), "peer": peer_info, "engines": engines, "peers": peers,
            "ready": ready, "runs": batches, "loadavg": loads, "notes": notes, **summary,
            "markdown": markdown_table(summary, engines, peers), "ratio_markdown": ratio_table(summary, peers)}


def format_report(r: dict) -> str:
    p = r["peer"]
    what = (f"cosyvoice.cpp {p['commit'][:7]} (ggml {p['ggml'][:7]}, pcre2 {p['pcre2'][:7]}, {p['compiler']})"
            if p["name"] == "cosyvoice.cpp" and "commit" in p else f"{p['name']} {p.get('version', '')}".strip())
    lines = [f"{r['folder']} (random weights) · {r['threads']} threads · {r['batches']} batches · peer {what}",
             f"workload: {r['workload']}",
             "load average (1/5/15 min) before → after each batch: " + "; ".join(
                 f"{'/'.join(map(str, x['before']))} → {'/'.join(map(str, x['after']))}" for x in r["loadavg"]),
             f"  {'engine':<22}{'prefill s':>11}{'LLM ms/tok':>13}{'decode ms/tok':>15}{'flow s':>13}{'HiFT s':>13}"
             f"{'total s':>13}{'RTF':>13}"]
    for name in r["engines"]:
        s = r["stages"][name]
        lines.append(f"  {name:<22}{fmt_span(s['llm_prefill_s']):>11}{fmt_span(s['llm_ms_per_token'], 1):>13}"
                     f"{fmt_span(s['decode_ms_per_token'], 1):>15}{fmt_span(s['flow_s']):>13}"
                     f"{fmt_span(s['hift_s']):>13}{fmt_span(s['total_s']):>13}{fmt_span(s['rtf']):>13}")
    lines.append("ratios peer ÷ ours, each within one batch (min–max over batches):")
    lines.append(f"  {'':<36}" + "".join(f"{stage:>18}" for stage in RATIO_STAGES))
    for peer in r["peers"]:
        for ours in ("ours stock", "ours fast"):
            cells = "".join(f"{fmt_span(r['ratios'][peer][ours][stage]):>18}" for stage in RATIO_STAGES)
            lines.append(f"  {peer + ' ÷ ' + ours:<36}{cells}")
    if any(name.startswith("vox") for name in r["peers"]):
        lines.append("vox reports its LLM as one clock (prefill + decode): its LLM ms/token is that over the tokens,"
                     " as for the others; its prefill and decode alone are not known, and its token count is its"
                     " audio at 25 tokens a second.")
    lines += [f"note: {note}" for note in r["notes"]]
    lines += ["", "Markdown:", "", r["markdown"], "", r["ratio_markdown"]]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--family", default="v3", choices=sorted(PEERS), help="v3: cosyvoice.cpp; v2: vox")
    p.add_argument("--precisions", default=None,
                   help="the peer's precisions, comma-separated (default: cosyvoice.cpp f16,q8_0; vox bf16,q8)")
    p.add_argument("--batches", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cache-dir", default=str(DEFAULT_CACHE), help="builds, converted models, the venv, logs")
    p.add_argument("--model-cache", default=str(Path(tempfile.gettempdir()) / "cosyvoice_ui_bench"),
                   help="where bench_engine keeps the random full-size folders")
    p.add_argument("--venv", default=None, help="the peers venv (default: CACHE/venv)")
    p.add_argument("--cosyvoice-cpp-repo", default=COSYVOICE_CPP_REPO, help="a URL or a local clone")
    p.add_argument("--ggml-repo", default=GGML_REPO, help="a URL or a local clone")
    p.add_argument("--pcre2-repo", default=PCRE2_REPO, help="a URL or a local clone")
    p.add_argument("--json", action="store_true", help="print one JSON object (last line)")
    # internal: the worker and helper processes
    p.add_argument("--worker", choices=["ours", "vox"], help=argparse.SUPPRESS)
    p.add_argument("--helper", choices=["cpp-prompt", "vox-build"], help=argparse.SUPPRESS)
    p.add_argument("--precision", help=argparse.SUPPRESS)
    p.add_argument("--dump", help=argparse.SUPPRESS)
    p.add_argument("--model", help=argparse.SUPPRESS)
    p.add_argument("--voice", help=argparse.SUPPRESS)
    p.add_argument("--folder", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    p.add_argument("--tokens", type=int, help=argparse.SUPPRESS)
    p.add_argument("--text-tokens", type=int, help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.worker == "ours":
        return worker_ours(args)
    if args.worker == "vox":
        return worker_vox(args)
    if args.helper == "cpp-prompt":
        return helper_cpp_prompt(args)
    if args.helper == "vox-build":
        return helper_vox_build(args)
    if args.precisions is None:
        args.precisions = "f16,q8_0" if args.family == "v3" else "bf16,q8"
    result = run(args)
    print(json.dumps(result) if args.json else format_report(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
