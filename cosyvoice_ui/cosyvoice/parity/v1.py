"""The CosyVoice-300M goldens: Whisper tokenizer, `TransformerLM` (teacher-forced, greedy, seeded RAS),
`MaskedDiffWithXvec` (conditioning, U-Net call, 10-step mel), HiFT at its rate (f0, source, waves, the legacy
weight-norm spelling) and the upstream streaming schedule replayed with the manifest's per-draw seeds."""

from __future__ import annotations

import json
import math

import torch

from ..checkpoint import read_state_dict
from .common import ParityRun, StageResult, max_abs_diff


class TransformerLMParity(ParityRun):
    """The stages of a fixture whose classes the registry has (`self.fx.backend`)."""

    checks = (("frontend", "check_frontend"), ("tokenizer_goldens.json", "check_tokenizer"), ("llm", "check_llm"),
              ("flow", "check_flow"), ("hift", "check_hift"), ("streaming", "check_streaming"))

    def check_tokenizer(self) -> None:
        goldens = json.loads((self.fx.path / "tokenizer_goldens.json").read_text(encoding="utf-8"))
        block = goldens["whisper_multilingual"]
        tokenizer = self.fx.backend.text_tokenizer(self.fx.path, self.fx.config)
        wrong = sum(tokenizer.encode(case["text"]) != case["ids"] for case in block["cases"])
        wrong += sum(tokenizer.encode(tok) != [i] for tok, i in block.get("special_token_ids", {}).items())
        wrong += int(tokenizer.n_vocab != block.get("n_vocab", tokenizer.n_vocab))
        self.add_exact("tokenizer whisper_multilingual", wrong, f"{len(block['cases'])} strings, ids equal")

    # --- LLM ------------------------------------------------------------------------------------------

    def check_llm(self) -> None:
        from ..models.sampling import RasSampler
        from ..precision import speed_up_llm

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

                    def logp_after(n: int) -> torch.Tensor:
                        continuation = torch.tensor([golden_ras[:n]], dtype=torch.long)
                        return llm.teacher_forced_logp(text, prompt_text, prompt_speech, embedding, continuation)[n]

                    self.add_sampled_tokens(f"llm {case} ras_tokens", ras, golden_ras, sampler.top_k, logp_after,
                                            f"seeded generator {seed}")

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
                    if self.fx.has("flow", f"{case}.est0_out"):
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
        from ..models.nsf import NSFNoise

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
                    if self.fx.has("hift", f"{case}.conv_post_out"):
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
                    diff = max_abs_diff(other.decode(mel, source), hift.decode(mel, source))
                self.results.append(StageResult("hift legacy weight_g/weight_v load", diff, 0.0, diff == 0.0,
                                                "same output as the new spelling"))

            self.guarded("hift legacy weight_g/weight_v load", run_legacy)

    # --- streaming ------------------------------------------------------------------------------------

    def check_streaming(self) -> None:
        from ..models.nsf import NSFNoise
        from ..streaming import FlowPrompt

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
        if self.fx.streaming_addendum not in self.fx.manifest.get("addenda", {}):
            self.checks = tuple(c for c in self.checks if c[1] != "check_streaming")
        return super().run_all()
