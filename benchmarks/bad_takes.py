"""Bad-take detection: how many forced failures `take_check` catches and how many normal takes it flags.

Usage: python benchmarks/bad_takes.py [--quick] [--measure] [--verify] [--json]

  --measure  render the measurement half of the corpus on the offline voice (Kokoro-82M, real speech; several
             speakers; speeds 0.8, 1.0, 1.25) and print the seconds-per-character statistics the bands of
             `cosyvoice_ui.take_check.MEASURED` come from: per language the line seconds·speed = a + b·chars
             (least squares), and p1 / median / p99 of (seconds·speed − a) / chars.
  default    evaluate, per family and language:
             * offline voice (when installed): the held-out half of the corpus (one line or two-sentence
               paragraphs, rotating speakers and speeds) is "normal"; forced failures are made from each
               normal take: "doubled" (its audio said twice), "loop" (its second half said again), "truncated"
               (cut to 40 %). No speech tokens here, so only the seconds-per-character band can catch them.
             * tiny CosyVoice models v1 / v2 / v3 (random weights, written on the fly): the LLM is forced through
               the real engine. "normal": decoding forced to the measured speech rate (a length drawn within
               ±20 % of the median); "past_eos": EOS ignored up to the decoder's cap (20 speech tokens per text
               token); "loop": a 0.6 s block of tokens looped until the take is twice as long; "doubled": the
               whole token stream said twice; "early_eos": EOS forced after 30 % of the normal length.
               Random weights say nothing about a real model's speech rate: these rows test that the checks
               catch the forced failures end to end and that sampled tokens do not trip the repeat check.
             * retry: the same forced failures on attempt 1 only, through `guarded_synthesis` with 2 retries: how
               often the kept take passes, how many segments were retried and how many needed the second retry.
  --verify   English offline takes also go through a pocketsphinx round trip (word recall), normal vs truncated.
  --quick    the CI-sized run: no offline voice, tiny v1 and v3, one line per language.
  --json     also print one JSON line with every number.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bad_take_corpus import eval_lines, measure_lines  # noqa: E402

from cosyvoice_ui.take_check import check_take, spoken_chars  # noqa: E402

SPEEDS = (0.8, 1.0, 1.25)
FAILURES_OFFLINE = ("doubled", "loop", "truncated")
FAILURES_TINY = ("past_eos", "loop", "doubled", "early_eos")


@dataclass
class Tally:
    """Counts of one (source, family, language, kind) row."""

    runs: int = 0
    flagged: int = 0
    retried: int = 0  # retry rows: segments re-rendered at all (the caught ones)
    second: int = 0  # retry rows: segments that needed a second retry (attempt 3)

    @property
    def rate(self) -> float:
        return self.flagged / self.runs if self.runs else 0.0


# --- offline voice -------------------------------------------------------------------------------------------

def offline_engine():
    from cosyvoice_ui.offline.assets import offline_available

    ok, why = offline_available()
    if not ok:
        print(f"offline voice not installed ({why}); its rows are skipped")
        return None
    from cosyvoice_ui.offline import load_offline_engine

    return load_offline_engine(voices_dir=Path(tempfile.mkdtemp(prefix="bad-takes-voices-")))


def offline_takes(engine, lines: tuple[str, ...], language: str, speakers: tuple[str, ...],
                  every_speaker: bool = False):
    """(text, speed, speaker, samples, rate) for each line (each line × speaker with `every_speaker`),
    rotating speakers and speeds."""
    from cosyvoice_ui.types import Mode, SynthesisRequest

    jobs = [(text, n) for n, text in enumerate(lines) for _ in (speakers if every_speaker else (0,))]
    for i, (text, n) in enumerate(jobs):
        speaker, speed = speakers[i % len(speakers)], SPEEDS[(i // len(speakers) + n) % len(SPEEDS)]
        chunks = list(engine.synthesize(SynthesisRequest(Mode.SFT, text=text, speaker=speaker, speed=speed,
                                                         seed=1000 + i)))
        samples = np.concatenate([c.samples for c in chunks])
        yield text, speed, speaker, samples, chunks[0].sample_rate


def measure(engine, speakers: tuple[str, ...]) -> dict:
    """The seconds-per-character statistics of normal offline speech, per language (see the module)."""
    results = {}
    for language in ("en", "zh"):
        chars, seconds = [], []
        for text, speed, _, samples, rate in offline_takes(engine, measure_lines(language), language, speakers,
                                                           every_speaker=True):
            chars.append(spoken_chars(text))
            seconds.append(len(samples) / rate * speed)  # normalised to speed 1.0
        x, y = np.asarray(chars, float), np.asarray(seconds, float)
        slope, intercept = np.polyfit(x, y, 1)
        intercept = max(0.0, float(intercept))
        per_char = (y - intercept) / x
        residual = y - (intercept + slope * x)
        raw = y / x
        results[language] = {
            "takes": len(x), "fit_overhead_s": round(intercept, 3), "fit_s_per_char": round(float(slope), 4),
            "p1": round(float(np.percentile(per_char, 1)), 4), "median": round(float(np.median(per_char)), 4),
            "p99": round(float(np.percentile(per_char, 99)), 4),
            "raw_min": round(float(raw.min()), 4), "raw_max": round(float(raw.max()), 4),
            "residual_sd_s": round(float(residual.std()), 3),
            "residual_max_s": round(float(np.abs(residual).max()), 3),
        }
    return results


def offline_rows(engine, speakers, tallies, verify: bool, quick: bool) -> None:
    recall_of = sphinx_recall() if verify else None
    for language in ("en", "zh"):
        lines = eval_lines(language)[: 2 if quick else None]
        print(f"offline {language}: {len(lines)} lines", file=sys.stderr, flush=True)
        for text, speed, _, samples, rate in offline_takes(engine, lines, language, speakers):
            seconds = len(samples) / rate
            normal = check_take(text, seconds, "offline", speed=speed)
            row = tallies[("offline", "offline", language, "normal")]
            row.runs += 1
            row.flagged += not normal.ok
            if not normal.ok:
                print(f"  false positive: {normal.detail} — {text!r} at speed {speed}")
            forced = {"doubled": 2.0 * seconds, "loop": 1.5 * seconds, "truncated": 0.4 * seconds}
            for kind, fake_seconds in forced.items():
                row = tallies[("offline", "offline", language, kind)]
                row.runs += 1
                row.flagged += not check_take(text, fake_seconds, "offline", speed=speed).ok
            if recall_of is not None and language == "en":
                for kind, wave in (("normal", samples), ("truncated", samples[: int(0.4 * len(samples))])):
                    recall = recall_of(wave, rate, text)
                    row = tallies[("offline+asr", "offline", language, kind)]
                    row.runs += 1
                    row.flagged += recall < 0.5
                    row.__dict__.setdefault("recalls", []).append(recall)


def sphinx_recall():
    """A word-recall round trip through pocketsphinx (English), for --verify."""
    from pocketsphinx import Decoder

    from cosyvoice_ui.take_check import word_recall

    decoder = Decoder(loglevel="FATAL")

    def recall(samples: np.ndarray, rate: int, text: str) -> float:
        from scipy.signal import resample_poly

        wave = resample_poly(samples, 16000, rate) if rate != 16000 else samples
        pcm = (np.clip(wave, -1, 1) * 32767).astype(np.int16).tobytes()
        decoder.start_utt()
        decoder.process_raw(pcm, full_utt=True)
        decoder.end_utt()
        heard = decoder.hyp().hypstr if decoder.hyp() else ""
        return word_recall(text, heard)

    return recall


# --- tiny CosyVoice models, LLM forced ----------------------------------------------------------------------

class ForcedLLM:
    """Wraps an engine's `llm.inference` to force one failure kind (see the module); `fail_times` limits
    how many calls fail (the retry rows fail only the first), after which decoding is "normal"."""

    def __init__(self, engine, rate: int) -> None:
        self.engine, self.rate = engine, rate
        self.original = engine.llm.inference
        self.kind, self.normal_len, self.fail_times, self.calls = "normal", 50, None, 0
        engine.llm.inference = self  # an instance attribute shadows the method for this engine only

    def __call__(self, text, *args, max_len=None, ignore_eos=False, **options):
        self.calls += 1
        kind = self.kind if self.fail_times is None or self.calls <= self.fail_times else "normal"
        n = self.normal_len

        def decode(length: int) -> list[int]:
            return list(self.original(text, *args, max_len=length, ignore_eos=True, **options))

        if kind == "normal":
            return iter(decode(n))
        if kind == "past_eos":
            return iter(decode(20 * int(text.shape[1])))
        if kind == "early_eos":
            return iter(decode(max(1, int(0.3 * n))))
        first = decode(n)
        if kind == "doubled":
            return iter(first + first)
        block = first[n // 2: n // 2 + max(2, int(0.6 * self.rate))]  # loop: a 0.6 s block until 2× long
        looped = first[: n // 2]
        while len(looped) < 2 * n:
            looped += block
        return iter(looped)


def normal_length(text: str, language: str, rate: int, rng: np.random.Generator) -> int:
    """Speech tokens of a normal take of `text`: the measured rate (overhead + per char) ±20 %."""
    from cosyvoice_ui.take_check import MEASURED

    _, median, _, overhead, _ = MEASURED[language]
    return max(4, int(round(rate * (overhead + median * spoken_chars(text)) * rng.uniform(0.8, 1.2))))


def tiny_rows(families: tuple[str, ...], lines_per_language: int | None, tallies, retry_tallies) -> None:
    from cosyvoice_ui import load_engine
    from cosyvoice_ui.serving.takes import RetryPolicy, SegmentReport, guarded_synthesis
    from cosyvoice_ui.testing.signals import voice_clip
    from cosyvoice_ui.testing.tiny_model import write_tiny_model
    from cosyvoice_ui.types import Mode, SynthesisRequest

    import torch

    torch.set_num_threads(1)
    prompt = voice_clip(3.0, seed=1)
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory(prefix="bad-takes-") as folder:
        for family in families:
            engine = load_engine(write_tiny_model(Path(folder) / family, family=family), device="cpu")
            rate = engine.info.decoder.token_rate
            forced = ForcedLLM(engine, rate)
            for language in ("en", "zh"):
                lines = eval_lines(language)[:lines_per_language]
                print(f"tiny {family} {language}: {len(lines)} lines", file=sys.stderr, flush=True)
                for i, text in enumerate(lines):
                    request = SynthesisRequest(Mode.CROSS_LINGUAL, text=text, prompt_audio=prompt, seed=i)
                    forced.normal_len = normal_length(text, language, rate, rng)
                    for kind in ("normal",) + FAILURES_TINY:
                        forced.kind, forced.fail_times, forced.calls = kind, None, 0
                        chunks = list(engine.synthesize(request))
                        seconds = sum(len(c.samples) for c in chunks) / chunks[0].sample_rate
                        tokens = tuple(t for c in chunks for t in c.tokens)
                        check = check_take(chunks[0].text or text, seconds, family, tokens,
                                           decoder=engine.info.decoder)
                        row = tallies[("tiny", family, language, kind)]
                        row.runs += 1
                        row.flagged += not check.ok
                        if kind == "normal" and not check.ok:
                            print(f"  false positive: {family} {check.detail} — {text!r}")
                        if kind == "normal":
                            continue
                        forced.kind, forced.fail_times, forced.calls = kind, 1, 0
                        report: list[SegmentReport] = []
                        list(guarded_synthesis(engine, request, RetryPolicy(retries=2), report=report))
                        row = retry_tallies[(family, language, kind)]
                        row.runs += len(report)
                        row.flagged += sum(r.check.ok and r.attempts > 1 for r in report)
                        row.retried += sum(r.attempts > 1 for r in report)
                        row.second += sum(r.attempts > 2 for r in report)
            engine.close()


# --- report -------------------------------------------------------------------------------------------------

def table(tallies, retry_tallies) -> list[dict]:
    rows = []
    print(f"\n{'source':<12}{'family':<9}{'lang':<6}{'kind':<11}{'runs':>6}{'flagged':>9}{'rate':>8}  meaning")
    def order(item):
        key = item[0]
        return key[:3], key[3] != "normal", key[3]

    for (source, family, language, kind), t in sorted(tallies.items(), key=order):
        meaning = "false positives" if kind == "normal" else "caught"
        print(f"{source:<12}{family:<9}{language:<6}{kind:<11}{t.runs:>6}{t.flagged:>9}{t.rate:>8.1%}  {meaning}")
        row = {"source": source, "family": family, "language": language, "kind": kind, "runs": t.runs,
               "flagged": t.flagged, "rate": round(t.rate, 4)}
        if "recalls" in t.__dict__:
            row["mean_recall"] = round(float(np.mean(t.__dict__["recalls"])), 3)
            print(f"{'':<38}mean word recall {row['mean_recall']:.2f}")
        rows.append(row)
    if retry_tallies:
        print(f"\n{'retry (fails on attempt 1 only)':<38}{'segments':>9}{'recovered':>10}{'rate':>8}"
              f"{'retried':>9}{'2nd retry':>10}")
        for (family, language, kind), t in sorted(retry_tallies.items()):
            print(f"{family + ' ' + language + ' ' + kind:<38}{t.runs:>9}{t.flagged:>10}{t.rate:>8.1%}"
                  f"{t.retried:>9}{t.second:>10}")
            rows.append({"source": "retry", "family": family, "language": language, "kind": kind,
                         "runs": t.runs, "recovered": t.flagged, "rate": round(t.rate, 4), "retried": t.retried,
                         "second_retry": t.second})
        retried = sum(t.retried for t in retry_tallies.values())
        recovered = sum(t.flagged for t in retry_tallies.values())
        second = sum(t.second for t in retry_tallies.values())
        print(f"retries: {retried} segments retried, {recovered} good after it, {second} needed a second retry")
    normal = [t for k, t in tallies.items() if k[3] == "normal" and k[0] != "offline+asr"]
    runs, flagged = sum(t.runs for t in normal), sum(t.flagged for t in normal)
    print(f"\nfalse positives on normal takes: {flagged}/{runs} ({flagged / runs if runs else 0:.1%})")
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="CI-sized: tiny v1 and v3, one line per language")
    parser.add_argument("--measure", action="store_true", help="print the offline speech-rate measurement")
    parser.add_argument("--verify", action="store_true", help="pocketsphinx round trip on English offline takes")
    parser.add_argument("--json", action="store_true", help="also print one JSON line with every number")
    args = parser.parse_args(argv)
    from cosyvoice_ui.cosyvoice.families import V1, V2, V3
    from cosyvoice_ui.take_check import BANDS, MEASURED, band

    started = time.perf_counter()
    print("measured normal speech, s/char at speed 1 (p1, median, p99, overhead s):",
          {k: v for k, v in MEASURED.items()})
    print("bands (family, language) -> s/char:",
          {f"{f}/{lang}": (round(lo, 3), round(hi, 3)) for (f, lang), (lo, hi) in BANDS.items()
           if lang in ("en", "zh") and f != "*"}
          | {f"{spec.name}/{lang}": tuple(round(x, 3) for x in band(spec.name, lang, spec.decoder))
             for spec in (V1, V2, V3) for lang in ("en", "zh")})
    result: dict = {"measured": MEASURED}
    engine = None if args.quick else offline_engine()
    speakers: tuple[str, ...] = ()
    if engine is not None:
        names = engine.info.speakers
        speakers = tuple(dict.fromkeys((names[0], names[1], names[min(4, len(names) - 1)], names[-1])))
    if args.measure:
        if engine is None:
            print("--measure needs the offline voice")
            return 1
        result["measurement"] = measure(engine, speakers)
        print(json.dumps(result["measurement"], indent=1))
    tallies: dict = defaultdict(Tally)
    retry_tallies: dict = defaultdict(Tally)
    if engine is not None:
        offline_rows(engine, speakers, tallies, args.verify, args.quick)
    tiny_rows(("v1", "v3") if args.quick else ("v1", "v2", "v3"), 1 if args.quick else 8, tallies, retry_tallies)
    result["rows"] = table(tallies, retry_tallies)
    result["seconds"] = round(time.perf_counter() - started, 1)
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
