"""The Fun-CosyVoice3-0.5B goldens: `CosyVoice3LM` (shared Qwen checks, incl. EOS before min_len), the DiT
flow (`CausalMaskedDiffWithDiT`: pre-lookahead conditioning, the first DiT call and its internals, the chunk
attention mask, the 10-step mel per case), the causal vocoder (`CausalHiFTGenerator`: fixed noise replayed
from upstream's construction RNG, f0, source, spectrum, waves, finalize and look-ahead cases) and upstream's
streamed request (flow calls, accumulated mel re-vocoded from scratch, emitted chunk lengths and speech)."""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from .common import max_abs_diff
from .qwen import QwenParity
from .v2 import FLOW_INPUTS

EST0_INTERNALS = ("time_embed", "input_embed", "block0_attn_out", "block0_out")


def est0_inputs(goldens: Mapping[str, torch.Tensor], case: str) -> tuple:
    """The first DiT call as upstream made it: CFG batch of two (row 1 zeros), mask of ones."""
    g = {n: goldens[f"{case}.{n}"] for n in ("noise", "mu", "spks", "cond", "est0_t", "est0_streaming")}
    with_zeros = {n: torch.cat([g[n], torch.zeros_like(g[n])]) for n in ("mu", "spks", "cond")}
    frames = g["noise"].size(2)
    return (torch.cat([g["noise"], g["noise"]]), torch.ones(2, 1, frames), with_zeros["mu"], g["est0_t"],
            with_zeros["spks"], with_zeros["cond"], bool(g["est0_streaming"].item()))


def estimator_call_internals(est: nn.Module, inputs: tuple) -> dict[str, torch.Tensor]:
    """One DiT call on `inputs` (`est0_inputs`' order, mask included): its output ("out"), the outputs of the
    time and input embeddings and of block 0's attention and block 0, and the rotary table ("rope_freqs")."""
    x, mask, mu, t, spks, cond, streaming = inputs
    seen: dict[str, torch.Tensor] = {}
    block0 = est.transformer_blocks[0]
    watched = {"time_embed": est.time_embed, "input_embed": est.input_embed, "block0_attn_out": block0.attn,
               "block0_out": block0}
    hooks = [module.register_forward_hook(lambda m, a, o, name=name: seen.__setitem__(name, o))
             for name, module in watched.items()]
    try:
        with torch.inference_mode():
            seen["out"] = est(x, mask, mu, t, spks, cond, streaming)
            seen["rope_freqs"] = est.rotary_embed(x.size(2))
    finally:
        for h in hooks:
            h.remove()
    return seen


def causal_source_golden(goldens: Mapping[str, torch.Tensor], case: str) -> torch.Tensor:
    """A HiFT case's source; the look-ahead case's is the prefix of H2's (the fixture's README: bitwise, so
    not repeated), as long as its f0 (samples per f0 frame taken from H2)."""
    if f"{case}.source" in goldens:
        return goldens[f"{case}.source"]
    full = goldens["H2_flow_mel.source"]
    per_frame = full.size(-1) // goldens["H2_flow_mel.f0"].size(1)
    return full[..., : per_frame * goldens[f"{case}.f0"].size(1)]


def stream_chunks(hift: nn.Module, call_mels: list[torch.Tensor], token_offsets: list[int], finals: list[bool],
                  token_mel_ratio: int) -> list[torch.Tensor]:
    """Upstream's streamed vocoding (`CosyVoice3Model.tts(stream=True)`): each flow call's mel from frame
    ratio · its token offset is appended to the accumulated mel, the vocoder re-runs from scratch on all of
    it (final or not) and the samples after the previous call's are emitted. Returns the emitted chunks."""
    mel = call_mels[0][..., :0]
    chunks: list[torch.Tensor] = []
    offset = 0
    for call_mel, token_offset, finalize in zip(call_mels, token_offsets, finals):
        mel = torch.cat([mel, call_mel[..., token_mel_ratio * token_offset:]], dim=-1)
        wave, _ = hift.inference(mel, finalize)
        chunks.append(wave[:, offset:])
        offset = wave.size(1)
    return chunks


class DiTFlowParity(QwenParity):
    """The stages of a DiT-flow Qwen generation's fixture, with its causal vocoder and streamed request."""

    checks = (*QwenParity.checks, ("stream", "check_stream"))

    # --- flow ---------------------------------------------------------------------------------------

    def _inputs_case(self, case: str) -> str:
        """F3 shares F1's inputs (the manifest's `inputs_identical_to`); the fixture does not repeat them."""
        same = self.fx.stages("flow")[case].get("inputs_identical_to")
        return same.split()[0] if same else case

    def check_flow(self) -> None:
        flow = self.load_flow()
        for case, meta in self.fx.stages("flow").items():
            self.guarded(f"flow {case}", lambda case=case, meta=meta: self._check_flow_case(flow, case, meta))

    def _check_flow_case(self, flow, case: str, meta: dict) -> None:
        source = self._inputs_case(case)
        goldens = self.fx.file("flow")
        streaming, finalize = bool(meta["streaming"]), bool(meta["finalize"])
        inputs = tuple(goldens[f"{source}.{name}"] for name in FLOW_INPUTS)
        flags = f"streaming={streaming}, finalize={finalize}"
        with torch.inference_mode():
            if source == case:
                c = flow.condition(*inputs, finalize=finalize)
                self.add(f"flow {case} pre_lookahead_out", c.encoder_proj_out, "flow", f"{case}.pre_lookahead_out",
                         1e-5)
                for name in ("mu", "spks", "cond"):
                    self.add(f"flow {case} {name}", getattr(c, name), "flow", f"{case}.{name}",
                             0.0 if name == "cond" else 1e-5)
                self.add(f"flow {case} noise (fixed buffer)", flow.decoder.initial_noise(
                    c.mu.size(2), c.mu.device, c.mu.dtype), "flow", f"{case}.noise", 0.0)
            if f"{case}.est0_out" in goldens:
                call = est0_inputs(goldens, case)
                seen = estimator_call_internals(flow.estimator, call)
                self.add(f"flow {case} est0_out (DiT)", seen["out"], "flow", f"{case}.est0_out", 1e-4)
                for name in ("rope_freqs", *EST0_INTERNALS):
                    if f"{case}.est0_{name}" in goldens:
                        self.add(f"flow {case} est0_{name}", seen[name], "flow", f"{case}.est0_{name}", 1e-4)
                if f"{case}.est0_attn_mask" in goldens:
                    golden = goldens[f"{case}.est0_attn_mask"].bool()
                    ours = flow.estimator.attention_mask(call[1], golden.size(-1), call[-1], torch.device("cpu"))
                    wrong = int((ours.expand_as(golden) != golden).sum()) if ours is not None else golden.numel()
                    self.add_exact(f"flow {case} est0_attn_mask", wrong, "chunk attention, every left chunk")
            mel, _ = flow.inference(*inputs, streaming=streaming, finalize=finalize)
            self.add(f"flow {case} mel ({meta.get('n_timesteps', 10)} steps)", mel, "flow", f"{case}.mel", 1e-3,
                     flags)

    # --- HiFT ---------------------------------------------------------------------------------------

    def check_hift(self) -> None:
        hift = self.load_vocoder()
        goldens = self.fx.file("hift")
        noise = hift.m_source.l_sin_gen.fixed_noise  # what the registry's vocoder was built with
        if "fixed_noise.rand_ini" in goldens:
            self.add("hift fixed_noise rand_ini (replayed)", noise.rand_ini, "hift", "fixed_noise.rand_ini", 0.0)
            head = goldens["fixed_noise.sine_waves_head"]
            self.add("hift fixed_noise sine_waves head (replayed)", noise.sine(head.size(1)), "hift",
                     "fixed_noise.sine_waves_head", 0.0)
        for case, meta in self.fx.stages("hift").items():
            self.guarded(f"hift {case}", lambda case=case, meta=meta: self._check_hift_case(hift, case, meta))

    def _check_hift_case(self, hift, case: str, meta: dict) -> None:
        goldens = self.fx.file("hift")
        mel, finalize = goldens[f"{case}.mel"], bool(meta["finalize"])
        source = causal_source_golden(goldens, case)
        note = f"finalize={finalize}"
        with torch.inference_mode():
            self.add(f"hift {case} f0", hift.predict_f0(mel, finalize), "hift", f"{case}.f0", 5e-3, note)
            diff = max_abs_diff(hift.source(goldens[f"{case}.f0"]), source)
            self.add_diff(f"hift {case} source (golden f0)", diff,
                          self.fx.tolerance("hift", f"{case}.source", 5e-4), "" if f"{case}.source" in goldens
                          else "golden: H2's source prefix")
            if f"{case}.conv_post_out" in goldens:
                self.add(f"hift {case} conv_post_out", hift.decode_to_spectrum(mel, source, finalize), "hift",
                         f"{case}.conv_post_out", 1e-4)
            trimmed = mel if finalize else mel[..., : -hift.f0_predictor.look_ahead]
            self.add(f"hift {case} wave (golden source)", hift.decode(trimmed, source, finalize), "hift",
                     f"{case}.wave", 1e-4, note)
            wave, _ = hift.inference(mel, finalize)
            self.add(f"hift {case} wave (end to end)", wave, "hift", f"{case}.wave", 1e-3, note, end_to_end=True)

    # --- streaming: upstream's tts(stream=True) on the greedy tokens ----------------------------------

    def check_stream(self) -> None:
        flow, hift = self.load_flow(), self.load_vocoder()
        for case, meta in self.fx.stages("stream").items():
            self.guarded(f"stream {case}", lambda case=case, meta=meta: self._check_stream_case(flow, hift, case, meta))

    def _check_stream_case(self, flow, hift, case: str, meta: dict) -> None:
        goldens = self.fx.file("stream")
        token = goldens[f"{case}.token"]
        prompt = tuple(goldens[f"{case}.{name}"] for name in FLOW_INPUTS[1:])
        same = meta.get("flow_call_mel_identical_to", {})
        call_mels: list[torch.Tensor] = []
        with torch.inference_mode():
            for i, call in enumerate(meta["flow_calls"]):
                call_mel, _ = flow.inference(token[:, : call["n_tokens"]], *prompt, streaming=bool(call["streaming"]),
                                             finalize=bool(call["finalize"]))
                call_mels.append(call_mel)
                note = f"{call['n_tokens']} tokens, streaming={call['streaming']}, finalize={call['finalize']}"
                if f"{case}.flow_mel_{i}" in goldens:
                    self.add(f"stream {case} call{i} flow mel", call_mel, "stream", f"{case}.flow_mel_{i}", 1e-3, note)
                elif str(i) in same:  # "flow_goldens F2_stream_chunk0.mel (bitwise; ...)"
                    file, key = same[str(i)].split()[:2]
                    self.add(f"stream {case} call{i} flow mel", call_mel, file.removesuffix("_goldens"), key, 1e-3,
                             note)
            chunks = stream_chunks(hift, call_mels, meta["token_offsets"],
                                   [bool(c["finalize"]) for c in meta["hift_calls"]],
                                   self.fx.config.flow.token_mel_ratio)
        expected = meta["chunk_samples"]
        self.add_tokens(f"stream {case} chunk schedule", [c.size(1) for c in chunks], expected,
                        f"chunk lengths {expected}")
        self.add(f"stream {case} speech", torch.cat(chunks, dim=1), "stream", f"{case}.speech", 1e-3, "end to end")
