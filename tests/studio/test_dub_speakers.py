"""Speakers told apart in a dub whose cues come from transcription, and the clean cues a voice is cut from: the
clustering on made-up vectors, the weightless voice statistics on two test voices, the CLI's cues.srt labelled
"Speaker N" and read back with --cues, each speaker's voice cut from their own cues only, and a clean cue chosen
over a longer one that is noisy or next to another speaker."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from hypothesis import given, settings
from hypothesis import strategies as st

from cosyvoice_ui.asr.speakers import VOICE_STATISTICS_THRESHOLD, cluster_speakers, cosine_distances, \
    voice_statistics
from cosyvoice_ui.cli.main import main
from cosyvoice_ui.serving.subtitles import parse
from cosyvoice_ui.testing.fakes import FakeEngine
from cosyvoice_ui.testing.signals import voice_clip
from cosyvoice_ui.types import Audio, SpeakerEmbedder

from .dub_media_kit import LINES, make_video

RATE = 24000
PITCH = {"Alice": 220.0, "Bob": 120.0}  # the kit's two test voices


def groups(centres: np.ndarray, order: list[int], spread: float, seed: int = 0) -> np.ndarray:
    """One vector per entry of `order`: its group's centre plus a little noise."""
    rng = np.random.default_rng(seed)
    return np.stack([centres[g] + spread * rng.standard_normal(centres.shape[1]) for g in order])


# --- the clustering -----------------------------------------------------------------------------------------

def test_one_voice_stays_one() -> None:
    vectors = groups(np.ones((1, 16)), [0] * 12, spread=0.05)
    assert cluster_speakers(vectors, [3.0] * 12, threshold=0.25) == [0] * 12


def test_three_separate_voices_are_three_named_in_order_of_first_speech() -> None:
    order = [2, 2, 0, 1, 0, 2, 1, 1, 0, 2]
    vectors = groups(np.eye(3, 16) * 4 + 1, order, spread=0.1)
    labels = cluster_speakers(vectors, [2.0] * len(order), threshold=0.25)
    first = {}
    for group in order:
        first.setdefault(group, len(first))
    assert labels == [first[group] for group in order]  # group 2 spoke first: speaker 0


def test_a_cue_too_short_to_judge_joins_the_nearest_voice() -> None:
    centres = np.eye(3, 16)
    vectors = groups(centres, [0, 1, 0, 1, 0, 1], spread=0.02)
    between = 0.6 * centres[1] + 0.5 * centres[2] + 0.62 * np.eye(16)[3]  # far from both, nearer voice 1
    vectors = np.vstack([vectors, between])
    distances = cosine_distances(vectors)[-1]
    assert distances[1] > 0.25 and distances[1] < distances[0]
    assert cluster_speakers(vectors, [2.0] * 7, threshold=0.25)[-1] == 2  # judged: a voice of its own
    assert cluster_speakers(vectors, [2.0] * 6 + [0.5], threshold=0.25) == [0, 1, 0, 1, 0, 1, 1]


def test_the_count_given_and_the_cap() -> None:
    centres = np.eye(3, 16) * 4 + 1
    vectors = groups(centres, [0, 1, 2, 0, 1, 2], spread=0.1)
    assert len(set(cluster_speakers(vectors, [2.0] * 6, 0.25, count=2))) == 2
    assert set(cluster_speakers(vectors, [2.0] * 6, 0.25, count=1)) == {0}
    apart = np.eye(12, 16)  # twelve voices, nothing in common
    assert sorted(set(cluster_speakers(apart, [2.0] * 12, 0.25))) == list(range(8))  # at most 8
    assert cluster_speakers(apart, [2.0] * 12, 0.25, max_speakers=12) == list(range(12))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 4), min_size=1, max_size=30), st.floats(0.0, 0.3), st.integers(0, 1000))
def test_labels_count_up_from_zero_in_order_of_first_speech(order: list[int], spread: float, seed: int) -> None:
    vectors = groups(np.eye(5, 8) * 3 + 0.5, order, spread, seed)
    seconds = [0.5 + (seed * (n + 1)) % 30 / 10 for n in range(len(order))]
    labels = cluster_speakers(vectors, seconds, threshold=0.25)
    assert len(labels) == len(order) and labels[0] == 0
    for n, label in enumerate(labels):
        assert label <= max(labels[:n], default=-1) + 1  # a new speaker gets the next number


# --- the weightless voice statistics --------------------------------------------------------------------------

def test_voice_statistics_tell_the_two_test_voices_apart_and_ignore_the_level() -> None:
    alice = [voice_clip(seconds, RATE, PITCH["Alice"], seed).samples for seed, seconds in enumerate((3.6, 3.0, 1.2))]
    bob = [voice_clip(seconds, RATE, PITCH["Bob"], seed).samples for seed, seconds in enumerate((3.6, 3.2, 1.2))]
    vectors = np.stack([voice_statistics(Audio(x, RATE)) for x in [*alice, *bob, 0.1 * alice[0]]])
    distances = cosine_distances(vectors)
    within = max(distances[0, 1], distances[0, 2], distances[3, 4], distances[3, 5], distances[0, 6])
    between = distances[:3, 3:6].min()
    print(f"voice statistics, the kit's two voices: within {within:.3f}, between {between:.3f}")
    assert within < VOICE_STATISTICS_THRESHOLD < between


# --- through the CLI ---------------------------------------------------------------------------------------------

class StubTranscriber:
    """Hears "Line N of the talk." in the Nth stretch (English)."""

    def __init__(self) -> None:
        self.heard = 0

    def transcribe(self, audio, language=None, progress=None, backend=None):
        from cosyvoice_ui.serving.transcription import Transcript

        self.heard += 1
        return Transcript(f"Line {self.heard} of the talk.", "en", "stub")


class Noise(FakeEngine):
    """Seeded noise, 0.2 s a character; `embedder` is the speaker network it lends (None: none)."""

    def __init__(self, embedder: SpeakerEmbedder | None = None) -> None:
        super().__init__(name="noise", sample_rate=RATE, chunks=1)
        self.embedder = embedder
        self.prompts: list[float] = []

    def speaker_embedder(self) -> SpeakerEmbedder | None:
        return self.embedder

    def _synthesize(self, request, progress, cancel):
        from cosyvoice_ui.types import AudioChunk

        self.prompts.append(request.prompt_audio.duration if request.prompt_audio is not None else 0.0)
        count = int(0.2 * len(request.text) * RATE)
        samples = (0.1 * np.random.default_rng(request.seed).standard_normal(count)).astype(np.float32)
        yield AudioChunk(samples, RATE, 0, 1, True, request.text)


@pytest.fixture()
def cli(monkeypatch, tmp_path: Path):
    """Runs `dub VIDEO` without --cues on a noise engine, the transcription stubbed; returns a runner."""
    import cosyvoice_ui.serving.backends as backends
    import cosyvoice_ui.serving.transcription as transcription

    engines = {"engine": Noise()}
    monkeypatch.setattr(backends, "open_engine", lambda *args, **kwargs: engines["engine"])
    monkeypatch.setattr(transcription, "shared_transcriber", lambda *args, **kwargs: StubTranscriber())

    def run(video: Path, *extra: str, engine: Noise | None = None, out: str = "out.mp4") -> int:
        engines["engine"] = engine or Noise()
        return main(["dub", str(video), "--out", str(tmp_path / out), "--voices-dir", str(tmp_path / "voices"),
                     *extra])

    return run


def two_voices(seconds: float = 20.0) -> np.ndarray:
    """The kit's cues, Alice at 220 Hz and Bob at 120 Hz, silence between."""
    track = np.zeros(int(seconds * RATE), np.float32)
    for start, end, speaker, *_ in LINES:
        clip = voice_clip(end - start, RATE, PITCH[speaker], seed=int(start)).samples
        track[int(start * RATE):int(start * RATE) + len(clip)] = clip
    return track


@pytest.fixture(scope="module")
def video(tmp_path_factory) -> Path:
    return make_video(tmp_path_factory.mktemp("media") / "talk.mp4", two_voices(), RATE)


def pitch_of(path: Path) -> float:
    """The strongest frequency (Hz) of a recording: the test voices' fundamental."""
    samples, rate = sf.read(path, dtype="float32")
    spectrum = np.abs(np.fft.rfft(samples * np.hanning(len(samples))))
    freqs = np.fft.rfftfreq(len(samples), 1 / rate)
    band = (freqs > 80) & (freqs < 400)
    return float(freqs[band][np.argmax(spectrum[band])])


def test_two_voices_get_two_speakers_each_cut_from_their_own_cues(cli, video: Path, tmp_path: Path,
                                                                   capsys) -> None:
    assert cli(video) == 0, capsys.readouterr().err
    assert "2 voices (Speaker 1, Speaker 2: check who says what)" in capsys.readouterr().err
    state = json.loads((tmp_path / "out.mp4.dub" / "dub.json").read_text(encoding="utf-8"))
    speakers = [cue["speaker"] for cue in state["cues"]]
    assert speakers == ["Speaker 1", "Speaker 2", "Speaker 1", "Speaker 2", "Speaker 1"]  # Alice, Bob, ...
    for name, voice in (("Speaker 1", "Alice"), ("Speaker 2", "Bob")):
        source = state["sources"][name]
        own = {cue["id"] for cue in state["cues"] if cue["speaker"] == name}
        assert source["cues"] and set(source["cues"]) <= own  # their own cues only
        heard = pitch_of(tmp_path / "out.mp4.dub" / "voices" / source["file"])
        assert abs(heard - PITCH[voice]) < 0.15 * PITCH[voice], (name, heard)

    # The labels are in cues.srt, to correct there; given back (translated), they read back as the same speakers:
    # every cue keeps its speaker (only the words changed) and the voices cut before are kept.
    written = tmp_path / "out.mp4.dub" / "cues.srt"
    assert [c.text.split(":")[0] for c in parse(written.read_text(encoding="utf-8"))] == speakers
    translated = tmp_path / "translated.srt"
    translated.write_text(written.read_text(encoding="utf-8").replace("of the talk.", "次谈话。"), encoding="utf-8")
    engine = Noise()
    assert cli(video, "--cues", str(translated), "--lang", "zh", engine=engine) == 0
    again = json.loads((tmp_path / "out.mp4.dub" / "dub.json").read_text(encoding="utf-8"))
    assert [cue["speaker"] for cue in again["cues"]] == speakers
    assert [cue["text"] for cue in again["cues"]] == [f"Line {n} 次谈话。" for n in range(1, 6)]
    assert again["sources"] == state["sources"] and len(engine.prompts) == 5


def test_one_speaker_asked_for_or_heard_is_the_narrator(cli, video: Path, tmp_path: Path, capsys) -> None:
    assert cli(video, "--speakers", "1") == 0
    assert "one voice" in capsys.readouterr().err
    state = json.loads((tmp_path / "out.mp4.dub" / "dub.json").read_text(encoding="utf-8"))
    assert {cue["speaker"] for cue in state["cues"]} == {"Narrator"}
    written = parse((tmp_path / "out.mp4.dub" / "cues.srt").read_text(encoding="utf-8"))
    assert [c.text for c in written] == [f"Line {n} of the talk." for n in range(1, 6)]  # no labels to read back

    # A speaker network the model lends is used instead of the statistics: this one hears one voice in all.
    same = SpeakerEmbedder("one-voice", lambda audio: np.ones(4, np.float32), 0.3)
    assert cli(video, engine=Noise(same), out="lent.mp4") == 0
    state = json.loads((tmp_path / "lent.mp4.dub" / "dub.json").read_text(encoding="utf-8"))
    assert {cue["speaker"] for cue in state["cues"]} == {"Narrator"}


@pytest.mark.parametrize("value", ["two", "0", "9"])
def test_a_mistyped_speaker_count_is_refused_in_one_line(cli, video: Path, tmp_path: Path, capsys, value) -> None:
    assert cli(video, "--speakers", value) == 2
    err = capsys.readouterr().err
    assert f"the number of speakers {value!r} is not one to tell apart; give how many people speak, 1 to 8" in err
    assert err.count("\n") == 1 and "Traceback" not in err and str(tmp_path) not in err


# --- the clean cue ------------------------------------------------------------------------------------------------

def test_the_voice_is_cut_from_a_clean_cue_before_a_longer_noisy_or_crowded_one(tmp_path: Path) -> None:
    """Alice's longest cue (6 s) has loud noise over it, her next (5 s) starts 0.1 s after Bob stops; her shortest
    (4 s) is clean: it is the one cut. With the clean one gone, the cut falls back to the others and says so."""
    from cosyvoice_ui.studio.dub import DubProject
    from cosyvoice_ui.studio.dub_cues import DubCue

    def speech(seconds: float, pitch: float) -> np.ndarray:  # syllables with pauses between them
        clip = voice_clip(seconds, RATE, pitch).samples
        t = np.arange(len(clip)) / RATE
        return clip * ((t % 0.5) < 0.35)

    track = np.zeros(int(20 * RATE), np.float32)
    times = {"noisy": (0.5, 6.5), "bob": (7.0, 9.0), "crowded": (9.1, 14.1), "clean": (15.0, 19.0)}
    for name, (start, end) in times.items():
        track[int(start * RATE):int(end * RATE)] = speech(end - start, PITCH["Bob" if name == "bob" else "Alice"])
    start, end = times["noisy"]
    track[int(start * RATE):int(end * RATE)] += 0.05 * np.random.default_rng(0).standard_normal(
        int(end * RATE) - int(start * RATE)).astype(np.float32)
    video = make_video(tmp_path / "talk.mp4", track, RATE)
    cues = [DubCue(f"c{n:04d}", *times[name], f"{name}.", "Bob" if name == "bob" else "Alice",
                   source_text=f"{name}.") for n, name in enumerate(times, start=1)]
    project = DubProject.create(tmp_path / "dub", video, cues)
    source = project.source_voice("Alice")
    assert source.cues == ["c0004"] and source.clean and source.transcript == "clean."
    assert 3.5 <= source.seconds <= 4.2

    fallback = DubProject.create(tmp_path / "fallback", video, cues[:3])
    source = fallback.source_voice("Alice")
    assert source.cues == ["c0001"] and source.clean is False  # the longest of the unclean: 6 s is enough


def test_a_cosyvoice_model_lends_its_campplus_network(tiny_base: Path) -> None:
    """The vector is the one the model's own prompts carry (the same features and ONNX session), 192-d."""
    from cosyvoice_ui import load_engine
    from cosyvoice_ui.serving.transcription import speaker_separation

    engine = load_engine(tiny_base, device="cpu")
    separation = speaker_separation(engine)
    assert separation.embedder.name == "campplus"
    audio = voice_clip(3.0, RATE, PITCH["Alice"])
    vector = separation.embed(audio)
    assert vector.shape == (192,)
    np.testing.assert_allclose(vector, engine.prompts.encode(audio).embedding.numpy().reshape(-1), rtol=1e-5)
    assert speaker_separation(None).embedder.name == "voice statistics"
