"""What every family's parity run shares: the stage record, the fixture folder's goldens and manifest, the
collector of stage results (one `check_*` method per golden group) and the frontend features' checks."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch

from ..config import read_yaml
from ..families import FamilySpec


class ParityBackend(Protocol):
    """What a parity run reads of its family's registry entry (`registry.FamilyBackend`, which names each
    family's run, so this package does not import it back): the family, the config parser, the text tokenizer,
    the chunker and the parts' loaders."""

    family: FamilySpec
    parse_config: Callable[..., Any]
    text_tokenizer: Callable[..., Any]
    chunker: Any

    def load_llm(self, config: Any, state_dict: Any, model_dir: Path | None = None) -> Any: ...

    def load_flow(self, config: Any, state_dict: Any) -> Any: ...

    def load_vocoder(self, config: Any, state_dict: Any, model: Any = None) -> Any: ...


@dataclass(frozen=True)
class StageResult:
    stage: str
    diff: float  # max abs difference (or number of mismatching ids for exact stages)
    tolerance: float
    ok: bool
    note: str = ""


def max_abs_diff(ours: torch.Tensor, golden: torch.Tensor) -> float:
    """Max abs difference in float64; inf when the shapes differ (a wrong length is a failed stage)."""
    ours, golden = ours.detach().cpu().double(), golden.detach().cpu().double()
    if ours.shape != golden.shape:
        return math.inf
    return float((ours - golden).abs().max()) if ours.numel() else 0.0


class Fixture:
    """Access to one fixture folder's goldens and manifest, its family's classes (the registry's backend)
    and its parsed yaml."""

    def __init__(self, path: Path, backend: ParityBackend) -> None:
        from safetensors.torch import load_file

        self.path = path
        self.family = family = backend.family
        self.backend = backend
        self.manifest = json.loads((path / "manifest.json").read_text(encoding="utf-8"))
        self._files = {f.name: load_file(str(f)) for f in sorted(path.glob("*_goldens.safetensors"))}
        self.config = self.backend.parse_config(read_yaml(path / family.yaml_name), family.yaml_name)

    @property
    def streaming_addendum(self) -> str:
        """The manifest's section on the family's streaming goldens (e.g. its chunk lengths and seeds)."""
        return f"{self.family.name}_streaming"

    def get(self, file: str, key: str) -> torch.Tensor:
        return self._files[f"{file}_goldens.safetensors"][key]

    def has(self, file: str, key: str | None = None) -> bool:
        name = f"{file}_goldens.safetensors"
        return name in self._files and (key is None or key in self._files[name])

    def keys(self, file: str) -> list[str]:
        return list(self.file(file))

    def file(self, file: str) -> dict[str, torch.Tensor]:
        """Every golden of `<file>_goldens.safetensors` (empty when the fixture has no such file)."""
        return self._files.get(f"{file}_goldens.safetensors", {})

    def stages(self, group: str) -> dict:
        return self.manifest.get("stages", {}).get(group, {})

    def tolerance(self, file: str, key: str, default: float) -> float:
        entry = self.manifest.get("tensors", {}).get(f"{file}_goldens.safetensors:{key}", {})
        return float((entry.get("tolerance") or {}).get("atol", default))


class ParityRun:
    """Collects stage results. Subclasses (one per family) add their `check_*` methods and list them in
    `checks`: (golden file that must exist, method name)."""

    checks: tuple[tuple[str, str], ...] = (("frontend", "check_frontend"),)

    def __init__(self, fixture_dir: Path, backend: ParityBackend) -> None:
        """backend: the registry's entry of the fixture's family (its classes are what the run checks)."""
        self.fx = Fixture(fixture_dir, backend)
        self.results: list[StageResult] = []

    def add(self, stage: str, ours: torch.Tensor, file: str, key: str, default_tol: float, note: str = "", *,
            end_to_end: bool = False) -> None:
        """One stage against golden `key`: the manifest's tolerance for it, else `default_tol`; `end_to_end`
        stages (a wave from the mel, not from the saved source) take `default_tol` (the READMEs' wider one)."""
        tol = default_tol if end_to_end else self.fx.tolerance(file, key, default_tol)
        diff = max_abs_diff(ours, self.fx.get(file, key))
        self.results.append(StageResult(stage, diff, tol, diff <= tol, note))

    def add_exact(self, stage: str, mismatches: int, note: str = "") -> None:
        self.results.append(StageResult(stage, float(mismatches), 0.0, mismatches == 0, note))

    def add_tokens(self, stage: str, ours: list[int], golden: list[int], note: str = "") -> None:
        """Exact ids: mismatching positions plus the length difference."""
        self.add_exact(stage, sum(a != b for a, b in zip(ours, golden)) + abs(len(ours) - len(golden)), note)

    def add_sampled_tokens(self, stage: str, ours: list[int], golden: list[int], top_k: int,
                           logp_after: Callable[[int], torch.Tensor], note: str = "") -> None:
        """Seeded sampled ids (`sampled_tokens_agree`): the mismatch count, passing where the rule allows."""
        ok, why = sampled_tokens_agree(ours, golden, top_k, logp_after)
        mismatches = sum(a != b for a, b in zip(ours, golden)) + abs(len(ours) - len(golden))
        self.results.append(StageResult(stage, float(mismatches), 0.0, ok, f"{note}; {why}" if why else note))

    def add_diff(self, stage: str, diff: float, tol: float, note: str = "") -> None:
        self.results.append(StageResult(stage, diff, tol, diff <= tol, note))

    def guarded(self, stage: str, fn: Callable[[], None]) -> None:
        try:
            fn()
        except Exception as exc:  # a crash in one stage is reported as that stage failing
            self.results.append(StageResult(stage, math.inf, 0.0, False, f"{type(exc).__name__}: {exc}"))

    def run_all(self) -> list[StageResult]:
        for file, method in self.checks:
            if file == "frontend" or self.fx.has(file) or (self.fx.path / file).is_file():
                self.guarded(method.removeprefix("check_"), getattr(self, method))
        return self.results

    # --- frontend (every family: the prompt mel of the yaml's feat_extractor, whisper, CAM++ fbank) -------

    def check_frontend(self) -> None:
        from ..frontend import features

        cfg = self.fx.config.mel
        basis = features.slaney_mel_filters(cfg.sampling_rate, cfg.n_fft, cfg.num_mels, cfg.fmin, cfg.fmax)
        self.add("frontend mel_basis", torch.from_numpy(basis), "frontend", "mel_basis", 1e-6)
        # the recording at the model's rate: the one wave golden that is not the 16 kHz one
        wave_key = next(k for k in self.fx.keys("frontend") if k.startswith("wave_") and k != "wave_16k")
        wave = self.fx.get("frontend", wave_key)
        self.add("frontend speech_feat_mel", features.matcha_mel(wave, cfg), "frontend", "speech_feat_mel", 1e-4)
        wave16 = self.fx.get("frontend", "wave_16k")
        self.add("frontend whisper_log_mel_128", features.whisper_log_mel(wave16), "frontend",
                 "whisper_log_mel_128", 1e-4)
        if self.fx.has("frontend", "kaldi_fbank_80"):
            self.add("frontend kaldi_fbank_80", features.kaldi_fbank(wave16[0]), "frontend", "kaldi_fbank_80", 1e-3)
        self.add("frontend kaldi_fbank_80_cmn", features.campplus_features(wave16[0])[0], "frontend",
                 "kaldi_fbank_80_cmn", 1e-3)


def sampled_tokens_agree(ours: list[int], golden: list[int], top_k: int,
                         logp_after: Callable[[int], torch.Tensor]) -> tuple[bool, str]:
    """Whether seeded sampled ids agree with upstream's: (verdict, what happened; "" when identical).

    The fixtures' READMEs: sampled tokens reproduce bit for bit only where the floats do. On another CPU (oneDNN's
    kernels differ by machine) a draw within float noise of a cumulative-probability boundary can pick the
    neighbouring token, and the rest of the sequence follows its own path. That is accepted only in the last
    quarter of the sequence and only where upstream's token was one ours could have drawn there: within the
    sampler's top-k of our log-probabilities after upstream's prefix (`logp_after(n)`: the row that predicts
    golden[n] given golden[:n])."""
    if ours == golden:
        return True, ""
    first = next((i for i, (a, b) in enumerate(zip(ours, golden)) if a != b), min(len(ours), len(golden)))
    if first < len(golden) * 3 // 4:
        return False, f"diverges at step {first} of {len(golden)}"
    if first < len(golden) and golden[first] not in logp_after(first).topk(top_k).indices.tolist():
        return False, f"diverges at step {first}, upstream's token outside our top-{top_k}"
    return True, f"a sampling flip at step {first} of {len(golden)} (upstream's token in our top-{top_k})"
