"""The watermark, measured (issue 27): robustness, false alarms, audibility and cost.

Usage: python benchmarks/watermark.py [--quick] [--json] [--threads 2]

  Marked speech: the offline voice (Kokoro-82M, real speech: English and Mandarin sentences, several speakers) and
  the tiny random CosyVoice models of every family (v1 22.05 kHz, v2 and v3 24 kHz: noise-like sound, the families'
  rates and chunking), each rendered by the real speech job (`serving/jobs.py` `stream_on`) with the mark off, then
  marked chunk by chunk exactly as the job marks (so streamed output is what is measured), cut to its first 8 s and
  brought to -20 LUFS like a REST result.
  Robustness: the share of marked clips still detected after each attack: MP3 128k, Opus 32k, AAC 128k (ffmpeg's
  encoders, decoded back), resampling to 16 kHz and back (ffmpeg's aresample), ±6 dB gain (clipped to full scale),
  loudness normalisation (ffmpeg's loudnorm, EBU R128 -16 LUFS), a 3 s excerpt from the middle, white noise at 20 dB
  SNR, and a 1.1× time stretch (ffmpeg's atempo).
  False alarms: unmarked speech called marked: the offline voice with the mark off, espeak-ng (several languages),
  flite and pocketsphinx's test audio where installed (else the row says so), the tiny models' unmarked output;
  clean and after every attack.
  Audibility: log-spectral distance (dB; 2048-point frames, hop 512, at the clip's rate) and SNR of the marked clip
  against the same clip unmarked (the same gain on both).
  Cost: milliseconds per second of audio to mark and to check, on --threads CPU threads (median of 5), and the
  marking's share of a v3 fast job (RTF 1.10 on 2 threads, README "Speed").
  --quick: the CI-sized run (two sentences, one speaker, tiny v1 only, three attacks).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cosyvoice_ui.audio import ffmpeg_path, normalize_loudness  # noqa: E402
from cosyvoice_ui.errors import InvalidRequest  # noqa: E402
from cosyvoice_ui.serving import watermarking  # noqa: E402
from cosyvoice_ui.types import Audio  # noqa: E402

CLIP_SECONDS = 8.0
V3_FAST_RTF = 1.10  # README "Speed": v3 fast on 2 CPU threads (compute seconds per second of audio)
SENTENCES = {
    "en": ["The quick brown fox jumps over the lazy dog near the river bank.",
           "Please remember to bring your umbrella tomorrow, it might rain in the afternoon.",
           "Our meeting has been moved to Thursday at half past three in the small room.",
           "She opened the old wooden box and found a letter written many years ago.",
           "Turn left at the second traffic light and the station will be on your right.",
           "Good evening, and welcome to the program; tonight we talk about the ocean."],
    "zh": ["今天天气很好，我们一起去公园散步吧。", "请在明天下午三点之前把报告发给我。",
           "这本书讲的是一个小女孩和她的猫的故事。", "火车马上就要进站了，请大家拿好自己的行李。"],
}
OFFLINE_SPEAKERS = ("jf_gongitsune", "jm_kumo", "jf_alpha", "blend_kumo_nezumi", "jf_nezumi")  # its presets
# espeak-ng voices (English texts, Mandarin ones for cmn) and flite's voices: more unmarked clips than marked ones,
# since a false-alarm rate near 1 % needs many
ESPEAK_VOICES = ("en-us", "en-gb", "en-gb-x-rp", "en-us-nyc", "fr-fr", "de", "es", "it", "nl", "pl", "hi", "cmn")
FLITE_VOICES = ("kal", "slt", "awb", "rms")


@dataclass
class Clip:
    source: str
    rate: int
    plain: np.ndarray
    marked: np.ndarray | None = None


@dataclass
class Tally:
    hits: int = 0
    total: int = 0
    scores: list[float] = field(default_factory=list)

    def add(self, found: bool, score: float) -> None:
        self.hits += int(found)
        self.total += 1
        self.scores.append(score)

    @property
    def rate(self) -> float:
        return self.hits / self.total if self.total else float("nan")


# --- sources -------------------------------------------------------------------------------------------------


def rendered(engine, requests, source: str) -> list[Clip]:
    """Each request through the real speech job, mark off; then marked chunk by chunk as the job does."""
    from cosyvoice_ui.serving.jobs import JobOptions, stream_on
    from cosyvoice_ui.testing.speech import speech_jobs

    work = Path(tempfile.mkdtemp(prefix="wm-bench-"))
    speech = speech_jobs(work, watermark=False, check_takes=False)
    mark = watermarking.shared()
    clips = []
    for request in requests:
        job = speech.prepare(request, JobOptions(loudness=None, check_takes=False), engine.info)
        live = stream_on(engine, job)
        chunks = [chunk.samples for chunk in live.chunks()]
        rate = live.sample_rate
        plain = np.concatenate(chunks)
        marked = np.concatenate([mark.mark(c, rate) for c in chunks])
        keep = int(CLIP_SECONDS * rate)
        plain, marked = plain[:keep], marked[:keep]
        gain = _gain(plain, rate)
        clips.append(Clip(source, rate, plain * gain, np.clip(marked * gain, -1.0, 1.0).astype(np.float32)))
    shutil.rmtree(work, ignore_errors=True)
    return clips


def _gain(samples: np.ndarray, rate: int) -> float:
    level = normalize_loudness(samples, rate, -20.0)
    peak = float(np.max(np.abs(samples))) or 1.0
    return float(np.max(np.abs(level))) / peak


def offline_clips(quick: bool) -> list[Clip]:
    from cosyvoice_ui.serving.backends import OFFLINE_ID, load_any
    from cosyvoice_ui.types import Mode, SynthesisRequest

    try:
        engine = load_any(OFFLINE_ID)
    except Exception as exc:  # noqa: BLE001 - the offline voice is optional
        print(f"offline voice unavailable: {exc}", file=sys.stderr)
        return []
    if "Kokoro" not in engine.info.name:
        print(f"offline voice is the fallback ({engine.info.name}): skipped", file=sys.stderr)
        return []
    speakers = [s for s in OFFLINE_SPEAKERS if s in engine.info.speakers] or list(engine.info.speakers[:1])
    texts = SENTENCES["en"][:2] if quick else SENTENCES["en"] + SENTENCES["zh"]
    requests = [SynthesisRequest(Mode.SFT, text=text, speaker=speakers[i % len(speakers)], seed=i + 1)
                for i, text in enumerate(texts)]
    return rendered(engine, requests, "offline voice (Kokoro)")


def tiny_clips(quick: bool) -> list[Clip]:
    from cosyvoice_ui import load_engine
    from cosyvoice_ui.testing.tiny_model import write_tiny_model
    from cosyvoice_ui.types import Mode, SynthesisRequest

    clips = []
    texts = SENTENCES["en"][:2] + SENTENCES["zh"][:2]
    for family in ("v1",) if quick else ("v1", "v2", "v3"):
        folder = write_tiny_model(Path(tempfile.mkdtemp(prefix="wm-tiny-")) / family, family=family, sft=True)
        engine = load_engine(folder, device="cpu")
        speaker = engine.info.speakers[0]
        requests = [SynthesisRequest(Mode.SFT, text=t, speaker=speaker, seed=i + 1, stream=engine.info.streaming)
                    for i, t in enumerate(texts[:1] if quick else texts)]
        clips += rendered(engine, requests, f"tiny {family} ({engine.info.sample_rate} Hz)")
        shutil.rmtree(folder.parent, ignore_errors=True)
    return clips


def espeak_clips(quick: bool) -> list[Clip]:
    binary = shutil.which("espeak-ng")
    if binary is None:
        return []
    import soundfile as sf

    clips = []
    for voice in ESPEAK_VOICES[:1] if quick else ESPEAK_VOICES:
        texts = SENTENCES["zh"] if voice == "cmn" else SENTENCES["en"]
        for text in texts[:1] if quick else texts[:4]:
            with tempfile.NamedTemporaryFile(suffix=".wav") as out:
                subprocess.run([binary, "-v", voice, "-w", out.name, text], check=True, capture_output=True)
                samples, rate = sf.read(out.name, dtype="float32")
            clips.append(Clip("espeak-ng", rate, samples * _gain(samples, rate)))
    return clips


def flite_clips(quick: bool) -> list[Clip] | str:
    binary = shutil.which("flite")
    if binary is None:
        return "flite is not installed"
    import soundfile as sf

    clips = []
    for voice in FLITE_VOICES[:1] if quick else FLITE_VOICES:
        for text in SENTENCES["en"][:1] if quick else SENTENCES["en"][:4]:
            with tempfile.NamedTemporaryFile(suffix=".wav") as out:
                subprocess.run([binary, "-voice", voice, "-t", text, "-o", out.name], check=True, capture_output=True)
                samples, rate = sf.read(out.name, dtype="float32")
            clips.append(Clip("flite", rate, samples * _gain(samples, rate)))
    return clips


def pocketsphinx_clips() -> list[Clip] | str:
    import importlib.util

    import soundfile as sf

    spec = importlib.util.find_spec("pocketsphinx")
    if spec is None or not spec.submodule_search_locations:
        return "pocketsphinx is not installed"
    root = Path(next(iter(spec.submodule_search_locations)))
    found = sorted(p for pattern in ("*.wav", "*.raw") for p in root.rglob(pattern))
    if not found:
        return "pocketsphinx's wheel ships no test audio"
    clips = []
    for path in found:
        if path.suffix == ".raw":  # its test audio: 16 kHz 16-bit mono
            samples, rate = np.fromfile(path, "<i2").astype(np.float32) / 32768, 16000
        else:
            samples, rate = sf.read(path, dtype="float32")
        clips.append(Clip("pocketsphinx test audio", rate, samples))
    return clips


# --- attacks -------------------------------------------------------------------------------------------------


def _ffmpeg(samples: np.ndarray, rate: int, *args: str, out_rate: int | None = None) -> np.ndarray:
    command = [ffmpeg_path(), "-hide_banner", "-loglevel", "error", "-f", "f32le", "-ar", str(rate), "-ac", "1",
               "-i", "pipe:0", *args, "-f", "f32le", "-ac", "1", "-ar", str(out_rate or rate), "pipe:1"]
    done = subprocess.run(command, input=samples.astype("<f4").tobytes(), capture_output=True, check=True)
    return np.frombuffer(done.stdout, "<f4").copy()


def _codec(samples: np.ndarray, rate: int, encode: list[str], container: str) -> np.ndarray:
    encoded = subprocess.run([ffmpeg_path(), "-hide_banner", "-loglevel", "error", "-f", "f32le", "-ar", str(rate),
                              "-ac", "1", "-i", "pipe:0", *encode, "-f", container, "pipe:1"],
                             input=samples.astype("<f4").tobytes(), capture_output=True, check=True).stdout
    decoded = subprocess.run([ffmpeg_path(), "-hide_banner", "-loglevel", "error", "-i", "pipe:0", "-f", "f32le",
                              "-ac", "1", "-ar", str(rate), "pipe:1"], input=encoded, capture_output=True, check=True)
    return np.frombuffer(decoded.stdout, "<f4").copy()


def _noise(samples: np.ndarray, snr_db: float, seed: int = 0) -> np.ndarray:
    power = float(np.mean(samples.astype(np.float64) ** 2))
    noise = np.random.default_rng(seed).standard_normal(samples.size) * np.sqrt(power / 10 ** (snr_db / 10))
    return (samples + noise).astype(np.float32)


def _excerpt(samples: np.ndarray, rate: int, seconds: float = 3.0) -> np.ndarray:
    size = int(seconds * rate)
    start = max(0, (samples.size - size) // 2)
    return samples[start:start + size]


ATTACKS = {
    "none": lambda x, r: x,
    "MP3 128k": lambda x, r: _codec(x, r, ["-c:a", "libmp3lame", "-b:a", "128k"], "mp3"),
    "Opus 32k": lambda x, r: _codec(x, r, ["-c:a", "libopus", "-b:a", "32k"], "ogg"),
    "AAC 128k": lambda x, r: _codec(x, r, ["-c:a", "aac", "-b:a", "128k"], "adts"),
    "16 kHz and back": lambda x, r: _ffmpeg(x, r, "-af", f"aresample=16000,aresample={r}"),
    "+6 dB": lambda x, r: np.clip(x * 10 ** (6 / 20), -1.0, 1.0),
    "-6 dB": lambda x, r: x * 10 ** (-6 / 20),
    "loudness -16 LUFS": lambda x, r: _ffmpeg(x, r, "-af", "loudnorm=I=-16:TP=-1.5:LRA=11"),
    "3 s excerpt": _excerpt,
    "noise 20 dB SNR": lambda x, r: _noise(x, 20.0),
    "1.1x stretch": lambda x, r: _ffmpeg(x, r, "-af", "atempo=1.1"),
}
QUICK_ATTACKS = ("none", "MP3 128k", "Opus 32k", "3 s excerpt")


def verdict(samples: np.ndarray, rate: int) -> tuple[bool, float]:
    try:
        found = watermarking.shared().check(Audio(np.asarray(samples, np.float32), rate))
    except InvalidRequest:  # too short or silent after the attack: not found
        return False, 0.0
    return found.marked, found.score


# --- audibility and cost -------------------------------------------------------------------------------------


def lsd_db(reference: np.ndarray, other: np.ndarray) -> float:
    """Log-spectral distance (dB): per frame the RMS over bins of the power spectra's dB difference, averaged."""
    from scipy.signal import stft

    _, _, a = stft(reference, nperseg=2048, noverlap=2048 - 512)
    _, _, b = stft(other, nperseg=2048, noverlap=2048 - 512)
    pa, pb = np.abs(a) ** 2 + 1e-10, np.abs(b) ** 2 + 1e-10
    return float(np.mean(np.sqrt(np.mean((10 * np.log10(pa / pb)) ** 2, axis=0))))


def snr_db(reference: np.ndarray, other: np.ndarray) -> float:
    return float(10 * np.log10(np.sum(reference.astype(np.float64) ** 2) / np.sum((other - reference) ** 2)))


def cost(clips: list[Clip], runs: int = 5) -> dict:
    """ms per second of audio to mark (chunk as the job gets it) and to check, median over `runs`."""
    real = [c for c in clips if c.source.startswith("offline")]  # real speech when the offline voice is there
    speech = max(real or clips, key=lambda c: c.plain.size)
    rate, x = speech.rate, np.tile(speech.plain, 2)[: int(10 * speech.rate)]
    mark = watermarking.shared()
    seconds = x.size / rate
    times_mark, times_check = [], []
    mark.mark(x, rate)  # warm
    for _ in range(runs):
        started = time.perf_counter()
        marked = mark.mark(x, rate)
        times_mark.append(time.perf_counter() - started)
        started = time.perf_counter()
        mark.check(Audio(marked, rate))
        times_check.append(time.perf_counter() - started)
    embed = statistics.median(times_mark) / seconds * 1e3
    return {"clip": f"{speech.source}, {seconds:.0f} s at {rate} Hz", "mark_ms_per_s": round(embed, 1),
            "check_ms_per_s": round(statistics.median(times_check) / seconds * 1e3, 1),
            "share_of_v3_fast_job": round(embed / (V3_FAST_RTF * 1e3), 4)}


# --- the run -------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="CI-sized: two sentences, tiny v1, three attacks")
    parser.add_argument("--threads", type=int, default=2, help="CPU threads for torch (default 2)")
    parser.add_argument("--json", action="store_true", help="also print one JSON line with every number")
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    problem = watermarking.shared().problem()
    if problem is not None or ffmpeg_path() is None:
        print(f"cannot measure: {problem or 'ffmpeg is not installed'}", file=sys.stderr)
        return 2
    started = time.monotonic()
    marked = offline_clips(args.quick) + tiny_clips(args.quick)
    unmarked = [Clip(c.source + ", mark off", c.rate, c.plain) for c in marked] + espeak_clips(args.quick)
    notes = []
    for extra in (flite_clips(args.quick), pocketsphinx_clips()):
        if isinstance(extra, str):
            notes.append(extra)
        else:
            unmarked += extra
    attacks = QUICK_ATTACKS if args.quick else tuple(ATTACKS)
    detected: dict[str, dict[str, Tally]] = {}
    alarms: dict[str, dict[str, Tally]] = {}
    for table, clips, attr in ((detected, marked, "marked"), (alarms, unmarked, "plain")):
        for clip in clips:
            for attack in attacks:
                attacked = ATTACKS[attack](getattr(clip, attr), clip.rate)
                found, score = verdict(attacked, clip.rate)
                table.setdefault(clip.source, {}).setdefault(attack, Tally()).add(found, score)
    audibility = {}
    for clip in marked:
        row = audibility.setdefault(clip.source, {"lsd_db": [], "snr_db": []})
        row["lsd_db"].append(lsd_db(clip.plain, clip.marked))
        row["snr_db"].append(snr_db(clip.plain, clip.marked))
    result = {"threads": args.threads, "quick": args.quick, "attacks": list(attacks),
              "detection": _rates(detected), "false_alarms": _rates(alarms),
              "audibility": {k: {m: round(float(np.mean(v)), 2) for m, v in row.items()} | {"clips": len(row["lsd_db"])}
                             for k, row in audibility.items()},
              "cost": cost(marked), "notes": notes, "seconds": round(time.monotonic() - started, 1)}
    print(report(result, detected, alarms))
    if args.json:
        print(json.dumps(result, ensure_ascii=False))
    return 0


def _rates(table: dict[str, dict[str, Tally]]) -> dict:
    out = {source: {attack: {"rate": round(t.rate, 4), "hits": t.hits, "clips": t.total,
                             "median_score": round(float(np.median(t.scores)), 3)} for attack, t in row.items()}
           for source, row in table.items()}
    every: dict[str, Tally] = {}
    for row in table.values():
        for attack, tally in row.items():
            total = every.setdefault(attack, Tally())
            total.hits += tally.hits
            total.total += tally.total
    out["all"] = {attack: {"rate": round(t.rate, 4), "hits": t.hits, "clips": t.total} for attack, t in every.items()}
    return out


def report(result: dict, detected: dict, alarms: dict) -> str:
    attacks = result["attacks"]
    lines = ["Detection rate of marked clips (hits/clips) after each attack:", "",
             "| source | " + " | ".join(attacks) + " |", "|---|" + "---|" * len(attacks)]
    for source, row in [*detected.items(), ("all", None)]:
        cells = result["detection"][source]
        lines.append(f"| {source} | " + " | ".join(f"{cells[a]['rate']:.0%} ({cells[a]['hits']}/{cells[a]['clips']})"
                                                    for a in attacks) + " |")
    lines += ["", "False alarms on unmarked speech (called marked / clips):", "",
              "| source | " + " | ".join(attacks) + " |", "|---|" + "---|" * len(attacks)]
    for source in [*alarms, "all"]:
        cells = result["false_alarms"][source]
        lines.append(f"| {source} | " + " | ".join(f"{cells[a]['rate']:.0%} ({cells[a]['hits']}/{cells[a]['clips']})"
                                                    for a in attacks) + " |")
    lines += ["", "| marked vs unmarked | clips | log-spectral distance | SNR |", "|---|---|---|---|"]
    for source, row in result["audibility"].items():
        lines.append(f"| {source} | {row['clips']} | {row['lsd_db']:.2f} dB | {row['snr_db']:.1f} dB |")
    c = result["cost"]
    lines += ["", f"Cost on {result['threads']} threads ({c['clip']}): mark {c['mark_ms_per_s']} ms and check "
              f"{c['check_ms_per_s']} ms per second of audio; marking is {c['share_of_v3_fast_job']:.1%} of a v3 "
              f"fast job (RTF {V3_FAST_RTF})."]
    lines += [f"Not measured: {note}." for note in result["notes"]]
    lines.append(f"({result['seconds']:.0f} s)")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
