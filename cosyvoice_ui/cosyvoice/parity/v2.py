"""The CosyVoice2-0.5B goldens: `Qwen2LM` (shared Qwen checks), the causal flow (`CausalMaskedDiffWithXvec`:
conditioning, the first causal U-Net call, the 10-step mel of every case with its streaming / finalize flags)
and the 24 kHz `HiFTGenerator` with `SineGen2` (draw recipe, f0, source, spectrum, waves)."""

from __future__ import annotations

import torch

from .common import max_abs_diff
from .qwen import QwenParity

FLOW_INPUTS = ("token", "prompt_token", "prompt_feat", "embedding")
EST0_INPUTS = ("x", "mask", "mu", "t", "spks", "cond")


class CausalFlowParity(QwenParity):
    """The stages of a causal-flow (U-Net) Qwen generation's fixture."""

    # --- flow ---------------------------------------------------------------------------------------

    def check_flow(self) -> None:
        flow = self.load_flow()
        for case, meta in self.fx.stages("flow").items():
            self.guarded(f"flow {case}", lambda case=case, meta=meta: self._check_flow_case(flow, case, meta))

    def _check_flow_case(self, flow, case: str, meta: dict) -> None:
        def g(key: str) -> torch.Tensor:
            return self.fx.get("flow", f"{case}.{key}")

        streaming, finalize = bool(meta["streaming"]), bool(meta["finalize"])
        inputs = tuple(g(name) for name in FLOW_INPUTS)
        flags = f"streaming={streaming}, finalize={finalize}"
        with torch.inference_mode():
            c = flow.condition(*inputs, streaming=streaming, finalize=finalize)
            self.add(f"flow {case} spks", c.spks, "flow", f"{case}.spks", 1e-5)
            self.add(f"flow {case} encoder_proj_out", c.encoder_proj_out, "flow", f"{case}.encoder_proj_out", 1e-4)
            self.add(f"flow {case} mu", c.mu, "flow", f"{case}.mu", 1e-4, flags)
            self.add(f"flow {case} cond", c.cond, "flow", f"{case}.cond", 0.0)
            self.add(f"flow {case} noise (fixed buffer)", flow.decoder.initial_noise(c.mu.size(2), c.mu.device,
                                                                                     c.mu.dtype),
                     "flow", f"{case}.noise", 0.0)
            if self.fx.has("flow", f"{case}.est0_out"):
                est = flow.estimator(*(g(f"est0_{n}") for n in EST0_INPUTS),
                                     streaming=bool(g("est0_streaming").item()))
                self.add(f"flow {case} est0_out (causal U-Net)", est, "flow", f"{case}.est0_out", 1e-4)
            mel, _ = flow.inference(*inputs, streaming=streaming, finalize=finalize)
            self.add(f"flow {case} mel ({meta.get('n_timesteps', 10)} steps)", mel, "flow", f"{case}.mel", 1e-3,
                     flags)

    # --- HiFT ---------------------------------------------------------------------------------------

    def check_hift(self) -> None:
        hift = self.load_vocoder()
        for case, meta in self.fx.stages("hift").items():
            self.guarded(f"hift {case}", lambda case=case, meta=meta: self._check_hift_case(hift, case, meta))

    def _check_hift_case(self, hift, case: str, meta: dict) -> None:
        def g(key: str) -> torch.Tensor:
            return self.fx.get("hift", f"{case}.{key}")

        mel, seed = g("mel"), int(meta["random_seed_for_draws"])
        with torch.inference_mode():
            if self.fx.has("hift", f"{case}.sine_noise_draw"):  # the manifest's recipe gives upstream's draws
                generator = torch.Generator().manual_seed(seed)
                draws = hift.m_source.l_sin_gen.draw(1, g("sine_noise_draw").size(1), generator)
                diff = max(max_abs_diff(draws.phase.squeeze(-1), g("rand_ini_draw")),
                           max_abs_diff(draws.sine.transpose(1, 2), g("sine_noise_draw")))
                self.add_diff(f"hift {case} draws (recipe seed {seed})", diff, 0.0, "rand_ini and sine noise")
            self.add(f"hift {case} f0", hift.predict_f0(mel), "hift", f"{case}.f0", 5e-3)
            source = hift.source(g("f0"), torch.Generator().manual_seed(seed))
            self.add(f"hift {case} source (golden f0)", source, "hift", f"{case}.source", 5e-4)
            if self.fx.has("hift", f"{case}.conv_post_out"):
                self.add(f"hift {case} conv_post_out", hift.decode_to_spectrum(mel, g("source")), "hift",
                         f"{case}.conv_post_out", 1e-4)
            self.add(f"hift {case} wave (golden source)", hift.decode(mel, g("source")), "hift", f"{case}.wave", 1e-4)
            wave, _ = hift.inference(mel, generator=torch.Generator().manual_seed(seed))
            self.add(f"hift {case} wave (end to end)", wave, "hift", f"{case}.wave", 1e-3, end_to_end=True)
