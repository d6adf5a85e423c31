"""What the two Qwen2-LM generations' parity runs share: loading the parts through the registry (the LLM
with the folder's `CosyVoice-BlankEN/config.json`), and the LLM goldens (teacher-forced input, hidden state and
log-probs; greedy over the robust prefix with its stop and chosen / per-step log-probs; seeded RAS)."""

from __future__ import annotations

import torch
from torch import nn

from ..checkpoint import read_state_dict
from ..models.sampling import RasSampler, greedy
from .common import ParityRun, max_abs_diff

LLMInputs = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]


def greedy_run(model: nn.Module, inputs: LLMInputs) -> tuple[list[int], list[int], list[torch.Tensor]]:
    """Greedy decode of a Qwen speech LLM: (yielded tokens, every pick including a stopping one, every
    step's log-probs as the sampler saw them, i.e. after the min-length mask)."""
    picks: list[int] = []
    rows: list[torch.Tensor] = []

    def recording_greedy(logp: torch.Tensor, decoded: list[int], gen: torch.Generator | None) -> int:
        token = greedy(logp, decoded, gen)
        picks.append(token)
        rows.append(logp.clone())
        return token

    tokens = list(model.inference(*inputs, sampler=recording_greedy))
    return tokens, picks, rows


class QwenParity(ParityRun):
    """Parity of a Qwen2-LM generation, on the registry's classes for the family: the LLM checks here,
    the flow and vocoder checks in the family's subclass."""

    checks = (("frontend", "check_frontend"), ("llm", "check_llm"), ("flow", "check_flow"), ("hift", "check_hift"))

    def load_llm(self) -> nn.Module:
        return self.fx.backend.load_llm(self.fx.config.llm, read_state_dict(self.fx.path / "llm.pt"), self.fx.path)

    def load_flow(self) -> nn.Module:
        return self.fx.backend.load_flow(self.fx.config.flow, read_state_dict(self.fx.path / "flow.pt"))

    def load_vocoder(self) -> nn.Module:
        return self.fx.backend.load_vocoder(self.fx.config.hift, read_state_dict(self.fx.path / "hift.pt"),
                                            self.fx.config)

    # --- LLM --------------------------------------------------------------------------------------------

    def check_llm(self) -> None:
        from ..precision import speed_up_llm

        llm = self.load_llm()
        speed_up_llm(llm, "cpu")  # check the kernels the engine's stock precision actually runs
        for case, meta in self.fx.stages("llm").items():
            self.guarded(f"llm {case}", lambda case=case, meta=meta: self._check_llm_case(llm, case, meta))

    def _check_llm_case(self, llm: nn.Module, case: str, meta: dict) -> None:
        def g(key: str) -> torch.Tensor:
            return self.fx.get("llm", f"{case}.{key}")

        def has(key: str) -> bool:
            return self.fx.has("llm", f"{case}.{key}")

        inputs: LLMInputs = (g("text").long(), g("prompt_text").long(), g("prompt_speech_token").long(),
                             g("embedding") if has("embedding") else None)
        text, prompt_text, prompt_speech, _ = inputs
        with torch.inference_mode():
            if has("tf_continuation"):
                continuation = g("tf_continuation").long()
                lm_input = llm.build_input(text, prompt_text, torch.cat([prompt_speech, continuation], dim=1))
                self.add(f"llm {case} tf_lm_input", lm_input, "llm", f"{case}.tf_lm_input", 1e-6)
                self.add(f"llm {case} tf_hidden", llm.llm(lm_input), "llm", f"{case}.tf_hidden", 1e-4)
                self.add(f"llm {case} tf_logp", llm.teacher_forced_logp(*inputs, continuation), "llm",
                         f"{case}.tf_logp", 2e-4)
            tokens, picks, rows = greedy_run(llm, inputs)
        golden = g("greedy_tokens")[0].tolist()
        robust = int(meta.get("greedy_robust_prefix_len", len(golden)))
        wrong = sum(a != b for a, b in zip(tokens[:robust], golden[:robust]))
        wrong += abs(min(len(tokens), robust) - min(len(golden), robust))
        self.add_exact(f"llm {case} greedy_tokens", wrong, f"first {min(robust, len(golden))} of {len(golden)} tokens")
        stopped_on = picks[-1] if picks and picks[-1] >= llm.speech_token_size else None
        expected_len = int(meta.get("greedy_len", len(golden)))
        self.add_exact(f"llm {case} greedy stop", int(len(tokens) != expected_len) +
                       int(stopped_on != meta.get("greedy_stop_token")),
                       f"{expected_len} tokens, stop id {meta.get('greedy_stop_token')}")
        if has("greedy_chosen_logp"):
            n = g("greedy_chosen_logp").numel()
            chosen = torch.tensor([float(rows[i][picks[i]]) for i in range(min(n, len(picks)))])
            self.add(f"llm {case} greedy_chosen_logp", chosen, "llm", f"{case}.greedy_chosen_logp", 2e-4)
        if has("greedy_step_logp"):  # unmasked goldens: compared where our min-length mask left values
            ours, ref = torch.stack(rows), g("greedy_step_logp")
            tol = self.fx.tolerance("llm", f"{case}.greedy_step_logp", 2e-4)
            if ours.shape != ref.shape:
                diff = float("inf")
            else:
                finite = torch.isfinite(ours)
                masked_ok = int((~finite).sum()) == min(len(rows), int(meta["min_len"]))
                diff = max_abs_diff(ours[finite], ref[finite]) if masked_ok else float("inf")
            self.add_diff(f"llm {case} greedy_step_logp", diff, tol, "unmasked entries")
        if has("ras_tokens"):
            seed = int(meta.get("ras_seed", 0))
            sampler = RasSampler.from_config(llm.cfg.sampling)
            with torch.inference_mode():
                ras = list(llm.inference(*inputs, sampler=sampler, generator=torch.Generator().manual_seed(seed)))
            golden_ras = g("ras_tokens")[0].tolist()

            def logp_after(n: int) -> torch.Tensor:
                with torch.inference_mode():
                    return llm.teacher_forced_logp(*inputs, torch.tensor([golden_ras[:n]], dtype=torch.long))[n]

            self.add_sampled_tokens(f"llm {case} ras_tokens", ras, golden_ras, sampler.top_k, logp_after,
                                    f"seeded generator {seed}")
