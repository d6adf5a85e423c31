"""What CosyVoice generations are, as light data: one `FamilySpec` each, and `detect(model_dir)`.

Every fact that differs between v1, v2 and v3 and is not a class lives here: yaml name, file set,
sample / token / mel rates, modes, instruct examples, streaming constants, the official checkpoints.
`registry.py` maps each family to our classes; no other module checks a family name, a yaml name or a
family's sample rate (tests/test_family_checks.py forbids it). No torch here: the UI and the API read it.

Upstream picks the generation by which yaml file exists; we do the same (`detect`), and the loader then
checks the yaml's class paths against the registry's allow-list, so a renamed or mixed-up folder fails
with a clear message instead of a shape error later.

The runnable checkpoints are also the root's table of known models (`known_models.py`), which every message
that names models reads; a family `register`ed later (with its `registry.register` entry) is named there too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

from .. import known_models
from ..errors import CheckpointError, ConfigError
from ..known_models import KnownModel
from ..types import EngineInfo, Instruction, Mode, Precision, SpeechDecoder

# A small optional file a folder may carry to say which variant it is (our tiny test models write it);
# official folders don't have it, so the folder name decides, as upstream does ("-Instruct" in the path).
VARIANT_FILE = "cosyvoice_ui.json"


@dataclass(frozen=True)
class StreamingSpec:
    """One family's token → wave chunking constants (cosyvoice-models.md §7.3-7.5), read by the family's
    chunker (`registry.py`).

    Hops are in speech tokens, mel lengths in mel frames, the source cache in samples. A chunk is
    rendered once hop + overlap (+ look-ahead) tokens wait; `token_first_hop_len` lets the first chunk go
    out earlier than upstream's first hop, later hops grow by `stream_scale_factor` up to
    `token_max_hop_len` (see `streaming.stream_tokens`).
    """

    token_min_hop_len: int
    token_max_hop_len: int
    token_overlap_len: int
    mel_overlap_len: int  # mel frames cross-faded into the next chunk
    mel_cache_len: int  # mel frames the vocoder re-runs at the head of the next chunk
    source_cache_len: int  # NSF source samples carried over (and speech samples cross-faded)
    stream_scale_factor: float
    token_first_hop_len: int
    pre_lookahead_len: int  # tokens past the hop the flow reads ahead (0: none)
    # v2/v3: the first chunk may be just the tokens up to the flow's first chunk boundary after the prompt
    # (the prompt's pad), when they are at least this many; 0 keeps upstream's pad + a whole first hop.
    token_min_first_hop_len: int = 0


# Upstream's v1 schedule, bit for bit (the parity check streams with it): every chunk waits for
# hop (100) + overlap (20) tokens; 34 mel frames = 20 tokens at 50 Hz; 20 frames · 256 samples.
UPSTREAM_STREAMING_V1 = StreamingSpec(token_min_hop_len=100, token_max_hop_len=200, token_overlap_len=20,
                                      mel_overlap_len=34, mel_cache_len=20, source_cache_len=20 * 256,
                                      stream_scale_factor=1.0, token_first_hop_len=100, pre_lookahead_len=0)
# Our default: the first chunk after 32 + 20 tokens instead of 100 + 20. On a CPU the first chunk's
# cost is dominated by the LLM prefill and by re-denoising the prompt frames, so waiting for ~70 more
# tokens (1.4 s of audio) only adds decode time. 32 keeps the chunk above the 40 tokens at which the
# length regulator splits off the overlap edges (so joins are built as upstream's are), and its mel
# rounds down like upstream's hop does: int(52 · 22050/256/50) − 34 overlap = 55 frames ≤ 32 tokens'
# worth (55.1), as 172 ≤ 172.3 for a hop of 100 (a hop of 30 would emit 52 frames for 51.7).
LOW_LATENCY_STREAMING_V1 = replace(UPSTREAM_STREAMING_V1, token_first_hop_len=32)
# Upstream's v2 schedule (§7.4): hops 25 → 50 → 100 tokens with 3 look-ahead tokens, no mel overlap,
# 8 mel frames · 480 samples of vocoder cache (`streaming_qwen.py`).
UPSTREAM_STREAMING_V2 = StreamingSpec(token_min_hop_len=25, token_max_hop_len=100, token_overlap_len=0,
                                      mel_overlap_len=0, mel_cache_len=8, source_cache_len=8 * 480,
                                      stream_scale_factor=2.0, token_first_hop_len=25, pre_lookahead_len=3)
# v3 (§7.5): v2's token schedule; its causal vocoder re-runs the whole mel, so nothing is cached.
UPSTREAM_STREAMING_V3 = replace(UPSTREAM_STREAMING_V2, mel_cache_len=0, source_cache_len=0)
# Ours for v2/v3: the first chunk ends at the first chunk boundary of the flow's chunk-causal attention after the
# prompt when at least 12 tokens lie before it (upstream adds a whole 25-token hop after that boundary). The
# chunk stays aligned, so its frames see what they would see in any later pass; the first audio waits for
# 12 + 3 look-ahead tokens instead of 25 + 3 (fast mode trims the flow prompt to a length that leaves such a
# pad: `precision.trim_flow_prompt`). Later hops grow as upstream's: 50, then 100.
FIRST_HOP_MIN = 12
LOW_LATENCY_STREAMING_V2 = replace(UPSTREAM_STREAMING_V2, token_min_first_hop_len=FIRST_HOP_MIN)
LOW_LATENCY_STREAMING_V3 = replace(UPSTREAM_STREAMING_V3, token_min_first_hop_len=FIRST_HOP_MIN)


@dataclass(frozen=True)
class ModeSet:
    """The modes of one kind of folder. `preset` modes need preset speakers (spk2info.pt) and are offered
    only when the folder has some (listed first); `always` modes work with any voice recording."""

    preset: tuple[Mode, ...]
    always: tuple[Mode, ...]

    def given(self, speakers: tuple[str, ...]) -> tuple[Mode, ...]:
        return (self.preset if speakers else ()) + self.always


@dataclass(frozen=True)
class Checkpoint:
    """One official model of a family, as published on the Hugging Face hub."""

    name: str  # folder name under pretrained_models/
    repo_id: str
    size_gb: float
    description: str
    preset_speakers: bool = False  # ships preset speakers (spk2info.pt), so it offers the family's preset modes
    recommended: bool = False  # the download the app offers first (the newest generation)


@dataclass(frozen=True)
class FamilySpec:
    """Static facts of one CosyVoice generation (no classes: those are in `registry.py`)."""

    name: str  # EngineInfo.family, the voice-feature cache's file name
    title: str  # human name of the family
    yaml_name: str  # upstream tells generations apart by this file
    required_files: tuple[str, ...]
    speech_tokenizer_file: str
    sample_rate: int  # Hz of the vocoder's output
    token_rate: int  # speech tokens per second
    mel_rate: float  # flow mel frames per second
    modes: ModeSet  # what a folder of this family can do
    instruct_variant: ModeSet | None  # an "-Instruct" folder's modes, where the family has such variants
    instruct_examples: tuple[str, ...]  # shown beside the instruct text box, and in error messages
    streaming: StreamingSpec  # our schedule
    upstream_streaming: StreamingSpec  # upstream's, bit for bit (parity streams with it)
    checkpoints: tuple[Checkpoint, ...]
    supported: bool  # False: recognised, but this engine cannot run it yet (no registry entry)
    # instruct takes a voice (recording or saved voice), not a preset speaker: upstream's instruct2 (v2, v3)
    instruct_voice: bool = False
    # zero-shot transcripts are checked against the prompt's length (v3 speaks a mismatched one badly)
    check_transcript_length: bool = False
    # The known-good instructions of the instruct picker (texts without `<|endofprompt|>` or a system prompt:
    # the recipes add them), the inline tags and pronunciation hints its text may carry, and the text limits
    # the UI warns about (EngineInfo has the same fields).
    instructions: tuple[Instruction, ...] = ()
    text_tags: tuple[str, ...] = ()
    pronunciation: tuple[str, ...] = ()  # "pinyin" ([j][ǐ]), "cmu" ([R][EH1][D])
    text_caveats: tuple[str, ...] = ()  # "ja_kanji": kana are read right, kanji may get Chinese readings
    # Text tokens per spoken character by language: how long a take of a text can be (bad-take checks).
    text_tokens_per_char: tuple[tuple[str, float], ...] = ()

    @property
    def decoder(self) -> SpeechDecoder:
        """The LLM decodes between 2 and 20 speech tokens per text token (upstream's min/max_token_text_ratio)."""
        return SpeechDecoder(self.token_rate, 2.0, 20.0, self.text_tokens_per_char)


_COMMON_FILES = ("llm.pt", "flow.pt", "hift.pt", "campplus.onnx")

# Inline tags as the tag chips insert them. v1-Instruct was trained with the first four (as plain BPE text);
# v2/v3 register all of them as special tokens (cosyvoice-models.md §2.3).
_TAGS = ("[breath]", "[laughter]", "<strong></strong>", "<laughter></laughter>", "[noise]", "[cough]")


def _instructions(category: str, pattern: str, *names: tuple[str, str]) -> tuple[Instruction, ...]:
    return tuple(Instruction(category, zh, en, pattern.format(zh)) for zh, en in names)


# CosyVoice2's instruct2 wording (upstream's "用四川话说这句话" example and its demo's lists).
_V2_INSTRUCTIONS = (
    *_instructions("dialect", "用{}说这句话", ("四川话", "Sichuanese"), ("粤语", "Cantonese"),
                   ("上海话", "Shanghainese"), ("郑州话", "Zhengzhou dialect"), ("长沙话", "Changsha dialect"),
                   ("天津话", "Tianjin dialect")),
    *_instructions("emotion", "用{}的语气说", ("开心", "Happy"), ("伤心", "Sad"), ("惊讶", "Surprised"),
                   ("生气", "Angry")),
    Instruction("emotion", "恐惧", "Fearful", "用恐惧的情感表达"),
    Instruction("rate", "快速", "Fast", "快速"),
    Instruction("rate", "慢速", "Slow", "慢速"),
    Instruction("style", "机器人", "Robot", "模仿机器人风格"),
    Instruction("style", "小猪佩奇", "Peppa Pig", "我想听听你模仿小猪佩奇的语气"),
)
# Fun-CosyVoice3's 26 (upstream `instruct_list`: 17 dialects, loud/soft, slow/fast, happy/sad/angry,
# Peppa Pig, robot), without the "You are a helpful assistant. " the v3 recipe puts in front.
_V3_INSTRUCTIONS = (
    *_instructions("dialect", "请用{}表达。", ("广东话", "Cantonese"), ("东北话", "Northeastern Mandarin"),
                   ("甘肃话", "Gansu dialect"), ("贵州话", "Guizhou dialect"), ("河南话", "Henan dialect"),
                   ("湖北话", "Hubei dialect"), ("湖南话", "Hunan dialect"), ("江西话", "Jiangxi dialect"),
                   ("闽南话", "Hokkien (Southern Min)"), ("宁夏话", "Ningxia dialect"), ("山西话", "Shanxi dialect"),
                   ("陕西话", "Shaanxi dialect"), ("山东话", "Shandong dialect"), ("上海话", "Shanghainese"),
                   ("四川话", "Sichuanese"), ("天津话", "Tianjin dialect"), ("云南话", "Yunnan dialect")),
    Instruction("volume", "大声", "Loud", "Please say a sentence as loudly as possible."),
    Instruction("volume", "小声", "Soft", "Please say a sentence in a very soft voice."),
    Instruction("rate", "慢速", "Slow", "请用尽可能慢地语速说一句话。"),
    Instruction("rate", "快速", "Fast", "请用尽可能快地语速说一句话。"),
    *_instructions("emotion", "请非常{}地说一句话。", ("开心", "Happy"), ("伤心", "Sad"), ("生气", "Angry")),
    Instruction("style", "小猪佩奇", "Peppa Pig", "我想体验一下小猪佩奇风格，可以吗？"),
    Instruction("style", "机器人", "Robot", "你可以尝试用机器人的方式解答吗？"),
)
# v2 and v3 build their Qwen2 text tokenizer (and LLM shape) from this folder (cosyvoice-models.md §1.4).
_QWEN_FILES = tuple(f"CosyVoice-BlankEN/{name}" for name in ("config.json", "vocab.json", "merges.txt"))

# Text tokens per spoken character (letters, digits, Hanzi; punctuation not counted). v1's Whisper-style BPE,
# measured on the bad-take corpus (benchmarks/bad_take_corpus.py: 357 ids / 1270 letters, 519 ids / 419 Hanzi);
# Qwen2's BPE (v2, v3), whose real vocabulary is not in the test data: the usual ~4 letters and ~1.4 Hanzi a token.
V1_TOKENS_PER_CHAR = (("en", 0.28), ("zh", 1.24), ("ja", 1.24), ("ko", 0.9), ("other", 0.5))
QWEN_TOKENS_PER_CHAR = (("en", 0.25), ("zh", 0.7), ("ja", 0.7), ("ko", 0.5), ("other", 0.4))

V1 = FamilySpec(
    name="v1",
    title="CosyVoice-300M",
    yaml_name="cosyvoice.yaml",
    required_files=("cosyvoice.yaml", *_COMMON_FILES, "speech_tokenizer_v1.onnx"),
    speech_tokenizer_file="speech_tokenizer_v1.onnx",
    sample_rate=22050,
    token_rate=50,
    text_tokens_per_char=V1_TOKENS_PER_CHAR,
    mel_rate=22050 / 256,  # upstream hard-codes it in the v1 flow (hop 256)
    modes=ModeSet(preset=(Mode.SFT,), always=(Mode.ZERO_SHOT, Mode.CROSS_LINGUAL, Mode.VC)),
    # The -Instruct model conditions on instruct text + a preset speaker's embedding. Upstream refuses
    # cross-lingual on it and still allows zero-shot and voice conversion.
    instruct_variant=ModeSet(preset=(Mode.INSTRUCT, Mode.SFT), always=(Mode.ZERO_SHOT, Mode.VC)),
    instruct_examples=(
        "A female speaker with normal pitch, slow speaking rate, and sad emotion.",
        "A male speaker with a deep voice, fast speaking rate, and happy emotion.",
        "Theo 'Crimson', is a fiery, passionate rebel leader. Fights with fervor for justice, but struggles with "
        "impulsiveness.",
        "A young girl telling a bedtime story, soft and gentle.",
    ),
    streaming=LOW_LATENCY_STREAMING_V1,
    upstream_streaming=UPSTREAM_STREAMING_V1,
    text_tags=_TAGS,
    checkpoints=(
        Checkpoint("CosyVoice-300M", "FunAudioLLM/CosyVoice-300M", 1.7,
                   "base model: 3-second voice cloning, cross-lingual, voice conversion"),
        Checkpoint("CosyVoice-300M-SFT", "FunAudioLLM/CosyVoice-300M-SFT", 1.7,
                   "7 preset speakers (zh/en/ja/yue/ko) plus cloning", preset_speakers=True),
        Checkpoint("CosyVoice-300M-Instruct", "FunAudioLLM/CosyVoice-300M-Instruct", 1.7,
                   "preset speakers whose style you describe in words", preset_speakers=True),
    ),
    supported=True,
)

V2 = FamilySpec(
    name="v2",
    title="CosyVoice2-0.5B",
    yaml_name="cosyvoice2.yaml",
    required_files=("cosyvoice2.yaml", *_COMMON_FILES, "speech_tokenizer_v2.onnx", *_QWEN_FILES),
    speech_tokenizer_file="speech_tokenizer_v2.onnx",
    sample_rate=24000,
    token_rate=25,
    text_tokens_per_char=QWEN_TOKENS_PER_CHAR,
    mel_rate=24000 / 480,  # two mel frames per token
    modes=ModeSet(preset=(Mode.SFT,), always=(Mode.ZERO_SHOT, Mode.CROSS_LINGUAL, Mode.INSTRUCT, Mode.VC)),
    instruct_variant=None,  # instruct works with any voice (upstream's instruct2)
    instruct_examples=("用四川话说这句话",),
    streaming=LOW_LATENCY_STREAMING_V2,
    upstream_streaming=UPSTREAM_STREAMING_V2,
    checkpoints=(Checkpoint("CosyVoice2-0.5B", "FunAudioLLM/CosyVoice2-0.5B", 3.4,
                            "second generation: cloning, dialects and styles described in words, streaming"),),
    supported=True,
    instruct_voice=True,
    instructions=_V2_INSTRUCTIONS,
    text_tags=_TAGS,
)

V3 = FamilySpec(
    name="v3",
    title="Fun-CosyVoice3-0.5B",
    yaml_name="cosyvoice3.yaml",
    required_files=("cosyvoice3.yaml", *_COMMON_FILES, "speech_tokenizer_v3.onnx", *_QWEN_FILES),
    speech_tokenizer_file="speech_tokenizer_v3.onnx",
    sample_rate=24000,
    token_rate=25,
    text_tokens_per_char=QWEN_TOKENS_PER_CHAR,
    mel_rate=24000 / 480,
    modes=ModeSet(preset=(Mode.SFT,), always=(Mode.ZERO_SHOT, Mode.CROSS_LINGUAL, Mode.INSTRUCT, Mode.VC)),
    instruct_variant=None,
    instruct_examples=("请用广东话表达。",),
    streaming=LOW_LATENCY_STREAMING_V3,
    upstream_streaming=UPSTREAM_STREAMING_V3,
    checkpoints=(Checkpoint("Fun-CosyVoice3-0.5B", "FunAudioLLM/Fun-CosyVoice3-0.5B-2512", 3.4,
                            "third generation, the best: 3-second cloning in 9 languages and 18+ Chinese dialects, "
                            "styles described in words, pronunciation hints", recommended=True),),
    supported=True,
    instruct_voice=True,
    check_transcript_length=True,
    instructions=_V3_INSTRUCTIONS,
    text_tags=_TAGS,
    pronunciation=("pinyin", "cmu"),
    text_caveats=("ja_kanji",),
)

# Every family this build knows, and those it runs; lists, changed only by `register` / `unregister`, so every
# module that imported them sees a family registered later.
FAMILIES: list[FamilySpec] = [V1, V2, V3]
SUPPORTED: list[FamilySpec] = [f for f in FAMILIES if f.supported]


def register(family: FamilySpec) -> None:
    """Add a family (after the built-in ones): detection, the catalogue and every message that names models
    know it from now on. Its classes are a `registry.register` of their own. Refuses a second family with the
    same name or yaml."""
    for known in FAMILIES:
        if family.name == known.name or family.yaml_name == known.yaml_name:
            raise ConfigError(f"a family named {known.name} with {known.yaml_name} is already registered")
    FAMILIES.append(family)
    if family.supported:
        SUPPORTED.append(family)


def unregister(family: FamilySpec) -> None:
    """Forget a family `register` added (nothing happens for one that is not registered)."""
    for table in (FAMILIES, SUPPORTED):
        if family in table:
            table.remove(family)


def is_instruct_name(family: FamilySpec, name: str) -> bool:
    """Whether a folder or checkpoint called `name` is the family's "-Instruct" variant (as upstream tells them
    apart; only where the family has such variants)."""
    return family.instruct_variant is not None and "instruct" in name.lower()


def checkpoint_modes(family: FamilySpec, checkpoint: Checkpoint) -> tuple[Mode, ...]:
    """What a folder of `checkpoint` can do as published."""
    instruct = family.instruct_variant if is_instruct_name(family, checkpoint.name) else None
    return (instruct or family.modes).given(("preset",) if checkpoint.preset_speakers else ())


def _known_models() -> list[KnownModel]:
    """The runnable checkpoints, as the messages that name models read them (`known_models.py`)."""
    return [KnownModel(c.name, f.name, checkpoint_modes(f, c), instruct_voice=f.instruct_voice,
                       pronunciation=f.pronunciation, size_gb=c.size_gb, recommended=c.recommended)
            for f in SUPPORTED for c in f.checkpoints]


known_models.add_source(_known_models)


@dataclass(frozen=True)
class ModelFolder:
    """A detected model folder: its family and which variant (base / SFT / Instruct) it is."""

    path: Path
    family: FamilySpec
    instruct: bool  # an "-Instruct" variant (only where the family has them: `FamilySpec.instruct_variant`)
    has_spk2info: bool

    @property
    def name(self) -> str:
        return self.path.name


def redownload_hint(model_dir: str | Path) -> str:
    """How to repair a damaged or incomplete model folder: the download command of its checkpoint (named
    by the folder, as `download` names it), else the generic one."""
    name = Path(model_dir).name
    known = next((c.name for f in FAMILIES for c in f.checkpoints if c.name.lower() == name.lower()), None)
    if known:
        return f"re-download it with `python -m cosyvoice_ui download {known}`"
    return ("re-download the model with `python -m cosyvoice_ui download NAME` (`python -m cosyvoice_ui "
            "list-models` lists the names), or copy the file in again from where the folder came from")


def _families_in(path: Path) -> list[FamilySpec]:
    return [f for f in FAMILIES if (path / f.yaml_name).is_file()]


def folder_family(model_dir: str | Path) -> FamilySpec | None:
    """The family whose yaml `model_dir` holds; None when it holds none, or yamls of several families."""
    path = Path(model_dir)
    found = _families_in(path) if path.is_dir() else []
    return found[0] if len(found) == 1 else None


def is_model_folder(model_dir: str | Path, supported_only: bool = False) -> bool:
    """Whether `model_dir` is a CosyVoice folder of any generation (by its yaml, as upstream tells them
    apart), or with `supported_only` one of a generation this engine runs. Looks for the yaml only;
    `detect` checks the rest."""
    path = Path(model_dir)
    if not path.is_dir():
        return False
    if not supported_only:
        return bool(_families_in(path))
    family = folder_family(path)
    return family is not None and family.supported


def _read_variant(model_dir: Path) -> dict:
    marker = model_dir / VARIANT_FILE
    if not marker.is_file():
        return {}
    try:
        data = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{VARIANT_FILE} in {model_dir.name}/ is not valid JSON: {exc}") from exc
    return data if isinstance(data, dict) else {}


def detect(model_dir: str | Path) -> ModelFolder:
    """Identify the CosyVoice generation of `model_dir` and check that every required file is there.

    Raises ConfigError (not a model folder, several or unsupported generations) or CheckpointError
    (a weight or ONNX file is missing; the message names it).
    """
    path = Path(model_dir)
    if not path.exists():
        example = known_models.recommended_model()
        raise ConfigError(f"model folder {path} does not exist; download a model "
                          f"(`python -m cosyvoice_ui download {example.name if example else 'NAME'}`) "
                          "or pass --model-dir")
    if not path.is_dir():
        raise ConfigError(f"{path} is a file; --model-dir expects the folder that holds cosyvoice.yaml, llm.pt, ...")
    found = _families_in(path)
    if not found:
        names = ", ".join(f.yaml_name for f in FAMILIES)
        raise ConfigError(f"{path.name}/ is not a CosyVoice model folder: none of {names} is in it")
    if len(found) > 1:
        raise ConfigError(f"{path.name}/ holds yaml files of several generations "
                          f"({', '.join(f.yaml_name for f in found)}); keep the one that matches its weights")
    family = found[0]
    if not family.supported:
        runnable = ", ".join(f"{f.title} ({f.yaml_name})" for f in SUPPORTED)
        raise ConfigError(f"{path.name}/ is a {family.title} folder ({family.yaml_name}); this version of the engine "
                          f"runs {runnable} folders only")
    missing = [name for name in family.required_files if not (path / name).is_file()]
    if missing:
        raise CheckpointError(f"{path.name}/ is incomplete: missing {', '.join(missing)} "
                          f"(a {family.title} folder needs {', '.join(family.required_files)}); "
                          f"{redownload_hint(path)}")
    variant = _read_variant(path)
    # Official folders are told apart by name ("-Instruct"), as upstream does; our tiny ones by VARIANT_FILE.
    instruct = family.instruct_variant is not None and bool(variant.get("instruct", is_instruct_name(family, path.name)))
    return ModelFolder(path=path, family=family, instruct=instruct, has_spk2info=(path / "spk2info.pt").is_file())


def modes_for(folder: ModelFolder, speakers: tuple[str, ...]) -> tuple[Mode, ...]:
    """The modes a detected folder supports, given the preset speakers it ships."""
    family = folder.family
    variant = family.instruct_variant if folder.instruct and family.instruct_variant else family.modes
    return variant.given(speakers)


def folder_info(folder: ModelFolder, speakers: tuple[str, ...], device: str = "cpu",
                precision: Precision | None = None) -> EngineInfo:
    """What a folder can do; cheap (no weights needed), so the UI can show it before loading."""
    modes = modes_for(folder, speakers)
    return EngineInfo(
        name=folder.name,
        family=folder.family.name,
        sample_rate=folder.family.sample_rate,
        modes=modes,
        speakers=speakers,
        device=device,
        streaming=True,
        instruct_examples=folder.family.instruct_examples if Mode.INSTRUCT in modes else (),
        notes="",
        precision=precision or Precision(),
        instruct_voice=folder.family.instruct_voice,
        instructions=folder.family.instructions if Mode.INSTRUCT in modes else (),
        text_tags=folder.family.text_tags,
        pronunciation=folder.family.pronunciation,
        text_caveats=folder.family.text_caveats,
        decoder=folder.family.decoder,
    )
