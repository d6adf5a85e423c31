"""`python -m cosyvoice_ui parity FIXTURE_DIR`: run every golden of an upstream fixture folder
through this engine and print one row per stage (max abs diff vs tolerance).

The fixture format is described in the folder's README.md (goldens as safetensors, shapes and
tolerances in manifest.json). Random draws that upstream made are injected from the saved tensors
or regenerated from the manifest's recipes, so every comparison is deterministic.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from ..errors import CosyVoiceError
from .checkpoint import read_state_dict
from .config import read_yaml
from .families import FAMILIES, FamilySpec, folder_family
from .registry import BACKENDS, backend_for


@dataclass(frozen=True)
class StageResult:
    stage: str
    diff: float  # max abs difference (or number of mismatching ids for exact stages)
    tolerance: float
    ok: bool
    note: str = ""


def _diff(ours: torch.Tensor, golden: torch.Tensor) -> float:
    ours, golden = ours.detach().cpu().double(), golden.detach().cpu().double()
    if ours.shape != golden.shape:
        return math.inf
    return float((ours - golden).abs().max()) if ours.numel() else 0.0


class Fixture:
    """Access to one fixture folder's goldens and manifest."""

    def __init__(self, path: Path, family: FamilySpec) -> None:
        from safetensors.torch import load_file

        self.path = path
        self.family = family
        self.backend = backend_for(family)
        self.manifest = json.loads((path / "manifest.json").read_text(encoding="utf-8"))
        self._files = {f.name: load_file(str(f)) for f in sorted(path.glob("*_goldens.safetensors"))}
        self.config = self.backend.parse_config(read_yaml(path / family.yaml_name), family.yaml_name)

    @property
    def streaming_addendum(self) -> str:
        """The manifest's section on the family's streaming goldens (e.g. its chunk lengths and seeds)."""
        return f"{self.family.name}_streaming"

    def get(self, file: str, key: str) -> torch.Tensor:
        return self._files[f"{file}_goldens.safetensors"][key]

    def has(self, file: str) -> bool:
        return f"{file}_goldens.safetensors" in self._files

    def tolerance(self, file: str, key: str, default: float) -> float:
        entry = self.manifest.get("tensors", {}).get(f"{file}_goldens.safetensors:{key}", {})
        return float(entry.get("tolerance", {}).get("atol", default))


class ParityRun:
    """Collects stage results; each `check_*` method covers one golden group."""

    def __init__(self, fixture: Fixture) -> None:
        self.fx = fixture
        self.results: list[StageResult] = []

    def add(self, stage: str, ours: torch.Tensor, file: str, key: str, default_tol: float, note: str = "") -> None:
        tol = self.fx.tolerance(file, key, default_tol)
        diff = _diff(ours, self.fx.get(file, key))
        self.results.append(StageResult(stage, diff, tol, diff <= tol, note))

    def add_exact(self, stage: str, mismatches: int, note: str = "") -> None:
        self.results.append(StageResult(stage, float(mismatches), 0.0, mismatches == 0, note))

    def guarded(self, stage: str, fn: Callable[[], None]) -> None:
        try:
            fn()
        except Exception as exc:  # a crash in one stage is reported as that stage failing
            self.results.append(StageResult(stage, math.inf, 0.0, False, f"{type(exc).__name__}: {exc}"))

    # --- frontend -----------------------------------------------------------------------------------

    def check_frontend(self) -> None:
        from .frontend import features

        cfg = self.fx.config.mel
        basis = features.slaney_mel_filters(cfg.sampling_rate, cfg.n_fft, cfg.num_mels, cfg.fmin, cfg.fmax)
        self.add("frontend mel_basis", torch.from_numpy(basis), "frontend", "mel_basis", 1e-6)
        wave22 = self.fx.get("frontend", "wave_22050")
        self.add("frontend speech_feat_mel", features.matcha_mel(wave22, cfg), "frontend", "speech_feat_mel", 1e-4)
        wave16 = self.fx.get("frontend", "wave_16k")
        self.add("frontend whisper_log_mel_128", features.whisper_log_mel(wave16), "frontend",
                 "whisper_log_mel_128", 1e-4)
        fbank = features.kaldi_fbank(wave16[0])
        self.add("frontend kaldi_fbank_80", fbank, "frontend", "kaldi_fbank_80", 1e-3)
        self.add("frontend kaldi_fbank_80_cmn", features.campplus_features(wave16[0])[0], "frontend",
                 "kaldi_fbank_80_cmn", 1e-3)

    def check_tokenizer(self) -> None:
        goldens = json.loads((self.fx.path / "tokenizer_goldens.json").read_text(encoding="utf-8"))
        block = goldens["whisper_multilingual"]
        tokenizer = self.fx.backend.text_tokenizer(self.fx.path)
        wrong = sum(tokenizer.encode(case["text"]) != case["ids"] for case in block["cases"])
        wrong += sum(tokenizer.encode(tok) != [i] for tok, i in block.get("special_token_ids", {}).items())
        wrong += int(tokenizer.n_vocab != block.get("n_vocab", tokenizer.n_vocab))
        self.add_exact("tokenizer whisper_multilingual", wrong, f"{len(block['cases'])} strings, ids equal")

    # --- LLM ------------------------------------------------------------------------------------------

    def check_llm(self) -> None:
        from .models.sampling import RasSampler
        from .precision import speed_up_llm

        llm = self.fx.backend.load_llm(self.fx.config.llm, read_state_dict(self.fx.path / "llm.pt"))
        speed_up_llm(llm, "cpu")  # check the kernels the engine's stock precision actually runs
        for case, meta in self.fx.manifest["stages"]["llm"].items():
            def g(key: str) -> torch.Tensor:
                return self.fx.get("llm", f"{case}.{key}")

            def run(case=case, meta=meta, g=g) -> None:
                text, prompt_text = g("text").long(), g("prompt_text").long()
                prompt_speech, embedding = g("prompt_speech_token").long(), g("embedding")
                continuation = g("tf_continuation").long()
                with torch.inference_mode():
                    speech = torch.cat([prompt_speech, continuation], dim=1)
                    lm_input = llm.build_input(text, prompt_text, speech, embedding)
                    self.add(f"llm {case} tf_lm_input", lm_input, "llm", f"{case}.tf_lm_input", 1e-5)
                    encoded = llm.encode_text(torch.cat([prompt_text, text], dim=1))
                    self.add(f"llm {case} tf_text_encoded", encoded, "llm", f"{case}.tf_text_encoded", 1e-4)
                    self.add(f"llm {case} tf_hidden", llm.llm(lm_input), "llm", f"{case}.tf_hidden", 1e-4)
                    logp = llm.teacher_forced_logp(text, prompt_text, prompt_speech, embedding, continuation)
                    self.add(f"llm {case} tf_logp", logp, "llm", f"{case}.tf_logp", 1e-4)
                    chosen: list[float] = []

                    def greedy(lp: torch.Tensor, decoded, generator) -> int:
                        token = int(torch.argmax(lp))
                        chosen.append(float(lp[token]))
                        return token

                    tokens = list(llm.inference(text, prompt_text, prompt_speech, embedding, sampler=greedy,
                                                generator=torch.Generator().manual_seed(0)))
                    golden = g("greedy_tokens")[0].tolist()
                    robust = int(meta.get("greedy_robust_prefix_len", len(golden)))
                    wrong = sum(a != b for a, b in zip(tokens[:robust], golden[:robust]))
                    wrong += abs(min(len(tokens), robust) - min(len(golden), robust))
                    self.add_exact(f"llm {case} greedy_tokens", wrong, f"first {robust} of {len(golden)} tokens")
                    if len(chosen) >= len(golden):
                        self.add(f"llm {case} greedy_chosen_logp", torch.tensor(chosen[: len(golden)]), "llm",
                                 f"{case}.greedy_chosen_logp", 1e-4)
                    seed = int(meta.get("ras_seed", 0))
                    sampler = RasSampler.from_config(self.fx.config.llm.sampling)
                    ras = list(llm.inference(text, prompt_text, prompt_speech, embedding, sampler=sampler,
                                             generator=torch.Generator().manual_seed(seed)))
                    golden_ras = g("ras_tokens")[0].tolist()
                    mismatches = sum(a != b for a, b in zip(ras, golden_ras)) + abs(len(ras) - len(golden_ras))
                    self.add_exact(f"llm {case} ras_tokens", mismatches, f"seeded generator {seed}")

            self.guarded(f"llm {case}", run)

    # --- flow -----------------------------------------------------------------------------------------

    def check_flow(self) -> None:
        flow = self.fx.backend.load_flow(self.fx.config.flow, read_state_dict(self.fx.path / "flow.pt"))
        for case in self.fx.manifest["stages"]["flow"]:
            def run(case=case) -> None:
                g = lambda key: self.fx.get("flow", f"{case}.{key}")  # noqa: E731
                token, prompt_token = g("token").long(), g("prompt_token").long()
                prompt_feat, embedding = g("prompt_feat"), g("embedding")
                with torch.inference_mode():
                    c = flow.condition(token, prompt_token, prompt_feat, embedding)
                    self.add(f"flow {case} spks", c.spks, "flow", f"{case}.spks", 1e-5)
                    self.add(f"flow {case} encoder_proj_out", c.encoder_proj_out, "flow",
                             f"{case}.encoder_proj_out", 1e-4)
                    self.add(f"flow {case} mu", c.mu, "flow", f"{case}.mu", 1e-4)
                    if f"{case}.est0_out" in self.fx._files["flow_goldens.safetensors"]:
                        est = flow.decoder.estimator(g("est0_x"), g("est0_mask"), g("est0_mu"), g("est0_t"),
                                                     g("est0_spks"), g("est0_cond"))
                        self.add(f"flow {case} est0_out (U-Net)", est, "flow", f"{case}.est0_out", 1e-4)
                    mel, _ = flow.inference(token, prompt_token, prompt_feat, embedding, noise=g("noise"))
                    self.add(f"flow {case} mel (10 steps)", mel, "flow", f"{case}.mel", 1e-3)

            self.guarded(f"flow {case}", run)

    # --- HiFT -----------------------------------------------------------------------------------------

    def _hift(self, name: str = "hift.pt"):
        return self.fx.backend.load_vocoder(self.fx.config.hift, read_state_dict(self.fx.path / name))

    def check_hift(self) -> None:
        from .models.nsf import NSFNoise

        hift = self._hift()
        for case, meta in self.fx.manifest["stages"]["hift"].items():
            def run(case=case, meta=meta) -> None:
                g = lambda key: self.fx.get("hift", f"{case}.{key}")  # noqa: E731
                mel = g("mel")
                seed = int(meta["random_seed_for_draws"])
                with torch.inference_mode():
                    self.add(f"hift {case} f0", hift.predict_f0(mel), "hift", f"{case}.f0", 5e-3)
                    n = mel.size(2) * hift.upsample_factor
                    draws = NSFNoise.draw(1, hift.m_source.harmonics, n, torch.Generator().manual_seed(seed))
                    source = hift.source(g("f0"), noise=draws)
                    self.add(f"hift {case} source (golden f0)", source, "hift", f"{case}.source", 5e-4)
                    if f"{case}.conv_post_out" in self.fx._files["hift_goldens.safetensors"]:
                        self.add(f"hift {case} conv_post_out", hift.decode_to_spectrum(mel, g("source")), "hift",
                                 f"{case}.conv_post_out", 1e-4)
                    self.add(f"hift {case} wave (golden source)", hift.decode(mel, g("source")), "hift",
                             f"{case}.wave", 1e-4)
                    wave, _ = hift.inference(mel, generator=torch.Generator().manual_seed(seed))
                    self.add(f"hift {case} wave (end to end)", wave, "hift", f"{case}.wave", 1e-3)

            self.guarded(f"hift {case}", run)
        legacy = self.fx.path / "hift_legacy_weight_norm.pt"
        if legacy.is_file():
            def run_legacy() -> None:
                other = self._hift(legacy.name)
                mel, source = self.fx.get("hift", "H1_frontend_mel.mel"), self.fx.get("hift", "H1_frontend_mel.source")
                with torch.inference_mode():
                    diff = _diff(other.decode(mel, source), hift.decode(mel, source))
                self.results.append(StageResult("hift legacy weight_g/weight_v load", diff, 0.0, diff == 0.0,
                                                "same output as the new spelling"))

            self.guarded("hift legacy weight_g/weight_v load", run_legacy)

    # --- streaming ------------------------------------------------------------------------------------

    def check_streaming(self) -> None:
        from .models.nsf import NSFNoise
        from .streaming import FlowPrompt

        meta = self.fx.manifest["addenda"][self.fx.streaming_addendum]
        flow = self.fx.backend.load_flow(self.fx.config.flow, read_state_dict(self.fx.path / "flow.pt"))
        chunker = self.fx.backend.chunker
        hift = self._hift()

        class Recipes:
            """The per-draw seeds of the manifest: flow noise, then NSF phase / sine / unused noise."""

            def _seeds(self, call: int) -> list[int]:
                return [c["seed"] for c in meta["chunks"][call]["random_calls"]]

            def flow_noise(self, call: int, shape: tuple[int, ...]) -> torch.Tensor:
                return torch.randn(shape, generator=torch.Generator().manual_seed(self._seeds(call)[0]))

            def nsf_noise(self, call: int, harmonics: int, length: int) -> NSFNoise:
                _, phase_seed, sine_seed, _ = self._seeds(call)
                u = torch.rand(1, harmonics, 1, generator=torch.Generator().manual_seed(phase_seed))
                low, high = torch.tensor(-math.pi), torch.tensor(math.pi)
                sine = torch.randn(1, harmonics, length, generator=torch.Generator().manual_seed(sine_seed))
                return NSFNoise(phase=low + u * (high - low), sine=sine)

        def run() -> None:
            g = lambda key: self.fx.get("streaming", key)  # noqa: E731
            prompt = FlowPrompt(g("S1.prompt_token").long(), g("S1.prompt_feat"), g("S1.embedding"))
            trace: list[dict] = []
            spec = self.fx.family.upstream_streaming  # upstream's hop schedule, not our lower-latency default
            render = chunker.renderer(flow, hift, spec, prompt, None, draws=Recipes(), trace=trace)
            with torch.inference_mode():
                chunks = [speech for speech, _ in chunker.schedule(g("S1.token")[0].tolist(), render, spec)]
            expected = meta["chunk_samples"]
            self.add_exact("streaming chunk schedule", sum(a != b for a, b in zip([c.shape[1] for c in chunks],
                                                                                 expected)) +
                           abs(len(chunks) - len(expected)), f"chunk lengths {expected}")
            for i, record in enumerate(trace):
                for key, tol in (("flow_mel", 1e-3), ("flow_cache_out", 1e-4), ("hift_mel", 1e-3),
                                 ("source", 5e-4), ("hift_speech", 1e-3)):
                    self.add(f"streaming chunk{i} {key}", record[key], "streaming", f"S1.chunk{i}.{key}", tol,
                             "end to end")
            self.add("streaming chunk1 speech (cross-faded)", trace[-1]["speech"], "streaming", "S1.chunk1.speech",
                     1e-3, "end to end")

        self.guarded("streaming S1", run)

    def run_all(self) -> list[StageResult]:
        self.guarded("frontend", self.check_frontend)
        if (self.fx.path / "tokenizer_goldens.json").is_file():
            self.guarded("tokenizer", self.check_tokenizer)
        if self.fx.has("llm"):
            self.guarded("llm", self.check_llm)
        if self.fx.has("flow"):
            self.guarded("flow", self.check_flow)
        if self.fx.has("hift"):
            self.guarded("hift", self.check_hift)
        if self.fx.has("streaming") and self.fx.streaming_addendum in self.fx.manifest.get("addenda", {}):
            self.guarded("streaming", self.check_streaming)
        return self.results


def run_parity(fixture_dir: Path) -> list[StageResult]:
    """Every stage result for a fixture folder of a family the registry has. Raises CosyVoiceError for
    other folders."""
    family = folder_family(fixture_dir)
    if family is None or family not in BACKENDS:
        found = [f.yaml_name for f in FAMILIES if (fixture_dir / f.yaml_name).is_file()]
        runnable = ", ".join(f"{f.title} ({f.yaml_name})" for f in FAMILIES if f in BACKENDS)
        raise CosyVoiceError(f"{fixture_dir} holds {', '.join(found) or 'no model yaml'}; this engine checks "
                             f"fixtures of {runnable} only")
    return ParityRun(Fixture(fixture_dir, family)).run_all()


def format_table(results: list[StageResult]) -> str:
    width = max(len(r.stage) for r in results) if results else 10
    lines = [f"{'stage':<{width}}  {'max abs diff':>12}  {'tolerance':>9}  ok"]
    for r in results:
        diff = "crash" if math.isinf(r.diff) else f"{r.diff:.3g}"
        lines.append(f"{r.stage:<{width}}  {diff:>12}  {r.tolerance:>9.1g}  {'yes' if r.ok else 'NO'}"
                     + (f"  ({r.note})" if r.note else ""))
    return "\n".join(lines)


def verdict(results: list[StageResult]) -> tuple[bool, str]:
    """(passed, the closing line: "parity: PASS (62 stages)" or "parity: FAIL (2 of 62 stages)")."""
    failed = sum(not r.ok for r in results)
    if failed:
        return False, f"parity: FAIL ({failed} of {len(results)} stages)"
    return True, f"parity: PASS ({len(results)} stages)"
