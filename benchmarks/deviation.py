"""How far the "fast" precision moves the output from stock, on the same input and the same noise.

Token-to-wave: the stock engine renders the same speech tokens with each fast-mode change alone (flow
steps, flow prompt, bf16 estimator, bf16 HiFT) and all together; the flow noise is one fixed draw (a shorter prompt takes its last frames, so the generated
frames see identical noise) and the vocoder's NSF noise is fixed too. Reported per variant: mel L1 (mean
|Δ| over the generated frames, in log-mel units), waveform SNR in dB (stock as the signal) and the
mean |Δ| of the waveform's log STFT magnitude (phase-blind). For scale, the same numbers for stock with
another noise seed, i.e. how much two stock renders differ.

LLM: teacher-forced log-probabilities of the stock and the int8 LLM over the same tokens: top-1
agreement and the mean KL divergence per step.

With random weights these numbers only show numerical sensitivity, not audible quality.
"""

from __future__ import annotations

import copy
import math
from dataclasses import asdict

import torch

from cosyvoice_ui.cosyvoice.checkpoint import read_state_dict
from cosyvoice_ui.cosyvoice.models.nsf import NSFNoise
from cosyvoice_ui.cosyvoice.precision import FastSettings, bf16_is_native
from cosyvoice_ui.cosyvoice.registry import backend_for


class FixedDraws:
    """Scripted draws for `TokenToWave`: one flow noise tensor (cut from the front when the prompt is
    shorter) and one NSF draw per length, all from `seed`."""

    def __init__(self, seed: int, frames: int, mel_bins: int) -> None:
        self.noise = torch.randn(1, mel_bins, frames, generator=torch.Generator().manual_seed(seed))
        self.seed = seed

    def flow_noise(self, call: int, shape: tuple[int, ...]) -> torch.Tensor:
        assert shape[-1] <= self.noise.size(-1), f"noise for {self.noise.size(-1)} frames, {shape[-1]} asked"
        return self.noise[..., self.noise.size(-1) - shape[-1]:]

    def nsf_noise(self, call: int, harmonics: int, length: int) -> NSFNoise:
        return NSFNoise.draw(1, harmonics, length, torch.Generator().manual_seed(self.seed + 1))


def _render(engine, model_input, tokens: torch.Tensor, draws: FixedDraws) -> tuple[torch.Tensor, torch.Tensor]:
    trace: list[dict] = []
    render = engine.chunker.renderer(engine.flow, engine.hift, engine.config_streaming,
                                     engine._flow_prompt(model_input), None, engine.n_timesteps, draws=draws,
                                     trace=trace)
    with torch.inference_mode():
        wave = render(tokens, True)
    return trace[0]["flow_mel"], wave.reshape(-1)


def _log_spectrum(wave: torch.Tensor) -> torch.Tensor:
    spec = torch.stft(wave, 1024, 256, window=torch.hann_window(1024), return_complex=True)
    return spec.abs().clamp(min=1e-5).log()


def _compare(ref: tuple[torch.Tensor, torch.Tensor], other: tuple[torch.Tensor, torch.Tensor]) -> dict[str, float]:
    (mel0, wav0), (mel1, wav1) = ref, other
    noise = (wav1 - wav0).double().pow(2).sum()
    snr = 10 * math.log10(float(wav0.double().pow(2).sum() / noise)) if noise > 0 else math.inf
    # SNR punishes any phase drift (a slightly different f0 soon decorrelates the samples); the log
    # spectrum distance does not, so both are given.
    return {"mel_l1": float((mel1 - mel0).abs().mean()), "mel_max_abs": float((mel1 - mel0).abs().max()),
            "wave_snr_db": round(snr, 2),
            "wave_logspec_l1": float((_log_spectrum(wav1) - _log_spectrum(wav0)).abs().mean())}


def flow_deviation(engine, model_input, tokens: list[int], fast: FastSettings, seed: int = 0) -> dict[str, dict]:
    """Mel/wave deviation of each fast-mode flow change from stock, on a stock `engine` (restored after)."""
    ids = torch.tensor([tokens], dtype=torch.long)
    frames = model_input.prompt_mel.size(1) + engine.flow.generated_frames(len(tokens))
    draws = FixedDraws(seed, frames, model_input.prompt_mel.size(2))
    # The variants swap the flow's estimator and the vocoder for converted copies (a measurement tool may
    # reach in; the engine never does), and put the stock ones back at the end.
    saved = (engine.n_timesteps, engine.flow_prompt_seconds, engine.flow.decoder.estimator, engine.hift)
    bf16 = hift16 = None
    if fast.bf16_estimator and bf16_is_native():
        bf16 = copy.deepcopy(engine.flow.estimator)
        bf16.to_bf16(matmul_attention=fast.matmul_attention)
    if fast.bf16_hift and bf16_is_native():
        hift16 = copy.deepcopy(engine.hift)
        hift16.set_conv_dtype(torch.bfloat16)
    variants = {
        "stock, other noise seed": {"draws": FixedDraws(seed + 100, frames, model_input.prompt_mel.size(2))},
        f"{fast.n_timesteps} flow steps": {"n_timesteps": fast.n_timesteps},
        f"flow prompt {fast.flow_prompt_seconds:g} s": {"flow_prompt_seconds": fast.flow_prompt_seconds},
    }
    if bf16 is not None:
        name = "bf16 estimator" + (", matmul attention" if fast.matmul_attention else "")
        variants[name] = {"estimator": bf16}
    if hift16 is not None:
        variants["bf16 HiFT convolutions"] = {"hift": hift16}
    variants["fast (all token-to-wave changes)"] = {
        "n_timesteps": fast.n_timesteps, "flow_prompt_seconds": fast.flow_prompt_seconds,
        **({"estimator": bf16} if bf16 is not None else {}), **({"hift": hift16} if hift16 is not None else {})}
    try:
        reference = _render(engine, model_input, ids, draws)
        results = {}
        for name, change in variants.items():
            engine.n_timesteps = change.get("n_timesteps", saved[0])
            engine.flow_prompt_seconds = change.get("flow_prompt_seconds", saved[1])
            engine.flow.decoder.estimator = change.get("estimator", saved[2])
            engine.hift = change.get("hift", saved[3])
            results[name] = _compare(reference, _render(engine, model_input, ids, change.get("draws", draws)))
    finally:
        engine.n_timesteps, engine.flow_prompt_seconds, engine.flow.decoder.estimator, engine.hift = saved
    return results


def llm_deviation(engine, model_input, tokens: list[int]) -> dict[str, float]:
    """Teacher-forced agreement of the int8 LLM (loaded afresh from the folder) with the stock one."""
    backend = backend_for(engine.folder.family)
    int8 = backend.load_llm(engine.config.llm, read_state_dict(engine.folder.path / "llm.pt"))
    int8.fuse_qkv()  # as apply_precision does
    int8.quantize_int8()
    args = (model_input.text, model_input.prompt_text, model_input.llm_prompt_tokens, model_input.llm_embedding,
            torch.tensor([tokens], dtype=torch.long))
    with torch.inference_mode():
        ref = engine.llm.teacher_forced_logp(*args)
        low = int8.teacher_forced_logp(*args)
    kl = (ref.exp() * (ref - low)).sum(dim=-1)
    return {"top1_agreement": float((ref.argmax(-1) == low.argmax(-1)).float().mean()),
            "mean_kl": float(kl.mean()), "max_abs_logp_diff": float((ref - low).abs().max())}


def fast_deviation(stock_engine, model_input, tokens: list[int], fast: FastSettings | None = None,
                   seed: int = 0) -> dict:
    fast = fast or FastSettings()
    return {"flow": flow_deviation(stock_engine, model_input, tokens, fast, seed),
            "llm_int8": llm_deviation(stock_engine, model_input, tokens) if fast.int8_llm else {},
            "settings": asdict(fast)}
