"""How far the "fast" and "extra-fast" precisions move the output from stock, on the same input and noise.

Any family (v1, v2, v3). Token-to-wave: a stock engine renders the same speech tokens with each change
alone (flow steps, flow prompt, the int8 or bf16 estimator, bf16 HiFT, no classifier-free guidance), then every fast
change together and every extra-fast change together. The flow noise is one fixed draw (a shorter prompt
takes its last frames, so the generated frames see identical noise) and so is the vocoder's NSF noise
(drawn the way the family's sine generator draws; v3's fixed buffer is rebuilt from the seed too).
Renders are whole-utterance calls of the engine's own flow and vocoder (streaming is not measured).
Reported per variant: mel L1 (mean |Δ| over the generated frames, in log-mel units) and max |Δ|, the
waveform SNR in dB (stock as the signal) and the mean |Δ| of the waveform's log STFT magnitude
(phase-blind).

The scale is how much two stock renders differ: stock with other flow and NSF noise. A change whose mel
L1 is at most a quarter of that (`THRESHOLD`) is "fast"; anything more is "extra-fast only", a clearly
labelled opt-in (issue 14). A vocoder-only change (bf16 HiFT) leaves the mel exactly as it is, so its
mel verdict says nothing: its log-spectrum L1 ÷ the seed row's is given for that.

LLM: teacher-forced log-probabilities of the stock and the int8 LLM (fast) and the int4 one (extra-fast)
over the same tokens: top-1 agreement and the mean KL divergence per step.

With random weights these numbers only show numerical sensitivity, not audible quality.
"""

from __future__ import annotations

import copy
import math
from dataclasses import asdict, dataclass

import torch
from torch import nn

from cosyvoice_ui.cosyvoice.checkpoint import read_state_dict
from cosyvoice_ui.cosyvoice.kernels import snake_available
from cosyvoice_ui.cosyvoice.models.fused_linears import fuse_linear_gelus, onednn_fused_gelu_works
from cosyvoice_ui.cosyvoice.models.linears import Int4Linear, int4_kernels_available
from cosyvoice_ui.cosyvoice.models.nsf import CausalSineGen2, FixedNSFNoise, NSFNoise
from cosyvoice_ui.cosyvoice.precision import (FastSettings, bf16_is_native, int8_estimator_wanted,
                                              llm_attention_precision, llm_rows_precision, settings_for)
from cosyvoice_ui.cosyvoice.registry import backend_for

THRESHOLD = 0.25  # mel L1 ÷ the noise-seed spread; above it a change is not fast mode
SEED_ROW = "stock, other noise seed"
FAST_ROW = "fast (all token-to-wave changes)"
EXTRA_ROW = "extra-fast (all, no guidance)"
SEED_OFFSET = 100  # the other seed of the scale row


def verdict(ratio: float) -> str:
    """A change is "fast" when it moves the mel by at most a quarter of the noise-seed spread."""
    return "fast" if ratio <= THRESHOLD else "extra-fast only"


def seed_ratio(mel_l1: float, seed_mel_l1: float) -> float:
    """mel_l1 ÷ the seed spread (0 for 0 ÷ 0, inf for something ÷ 0)."""
    if seed_mel_l1 > 0:
        return mel_l1 / seed_mel_l1
    return 0.0 if mel_l1 == 0 else math.inf


class FixedDraws:
    """The noise of one render, all from `seed`: a flow draw [1, F, frames] (a shorter call takes its last
    frames) and the vocoder's NSF draws."""

    def __init__(self, seed: int, frames: int, mel_bins: int) -> None:
        self.noise = torch.randn(1, mel_bins, frames, generator=torch.Generator().manual_seed(seed))
        self.seed = seed

    def flow_noise(self, frames: int) -> torch.Tensor:
        assert frames <= self.noise.size(-1), f"noise for {self.noise.size(-1)} frames, {frames} asked"
        return self.noise[..., self.noise.size(-1) - frames:]

    def nsf_noise(self, hift: nn.Module, length: int) -> NSFNoise:
        """Draws of the kind the vocoder's own sine generator makes: v1/v2 per call from a generator (in
        radians for v1, cycles for v2); v3's fixed uniform buffer, here rebuilt from the seed."""
        generator = torch.Generator().manual_seed(self.seed + 1)
        sine_gen = hift.m_source.l_sin_gen
        if isinstance(sine_gen, CausalSineGen2):
            fixed = FixedNSFNoise.from_generator(generator, hift.m_source.harmonics, length)
            return NSFNoise(phase=fixed.rand_ini.unsqueeze(-1), sine=fixed.sine(length).transpose(1, 2))
        return sine_gen.draw(1, length, generator)


def _vocode(hift: nn.Module, mel: torch.Tensor, draws: FixedDraws) -> torch.Tensor:
    noise = draws.nsf_noise(hift, mel.size(2) * hift.upsample_factor)
    if getattr(hift, "causal", False):
        # The v3 vocoder's `inference` always uses its own fixed noise; these are its steps (finalize=True)
        # with the given draws.
        return hift.decode(mel, hift.source(hift.predict_f0(mel), noise=noise))
    wave, _ = hift.inference(mel, noise=noise)
    return wave


def _render(engine, model_input, tokens: torch.Tensor, draws: FixedDraws) -> tuple[torch.Tensor, torch.Tensor]:
    """One whole-utterance render as the engine does it (its flow prompt cap and step count), with the
    given noise: (generated mel [1, F, M2], wave [S])."""
    prompt = engine._flow_prompt(model_input)
    frames = prompt.prompt_feat.size(1) + engine.flow.generated_frames(tokens.size(1))
    with torch.inference_mode():
        mel, _ = engine.flow.inference(tokens, prompt.prompt_token, prompt.prompt_feat, prompt.embedding,
                                       noise=draws.flow_noise(frames), n_timesteps=engine.n_timesteps)
        wave = _vocode(engine.hift, mel, draws)
    return mel, wave.reshape(-1)


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


@dataclass(frozen=True)
class Change:
    """One token-to-wave variant: what differs from the stock engine (None: as stock)."""

    n_timesteps: int | None = None
    flow_prompt_seconds: float | None = None
    estimator: nn.Module | None = None  # a converted copy of the flow's estimator
    hift: nn.Module | None = None  # a converted copy of the vocoder
    guidance: bool = True  # False: the flow's inference_cfg_rate set to 0 (no unconditional row)
    seed_offset: int = 0  # other noise (the scale row)


def token_to_wave_deviation(engine, model_input, tokens: list[int], variants: dict[str, Change],
                            seed: int = 0) -> dict[str, dict]:
    """Compare each variant's render with the stock render of `engine` (a stock engine, restored after)."""
    ids = torch.tensor([tokens], dtype=torch.long)
    frames = model_input.prompt_mel.size(1) + engine.flow.generated_frames(len(tokens))
    bins = model_input.prompt_mel.size(2)
    decoder = engine.flow.decoder
    # The variants swap the flow's estimator and the vocoder for converted copies and turn guidance off (a
    # measurement tool may reach in; the engine never does), and put the stock ones back at the end.
    saved = (engine.n_timesteps, engine.flow_prompt_seconds, decoder.estimator, engine.hift,
             decoder.inference_cfg_rate)
    try:
        reference = _render(engine, model_input, ids, FixedDraws(seed, frames, bins))
        results = {}
        for name, change in variants.items():
            engine.n_timesteps = saved[0] if change.n_timesteps is None else change.n_timesteps
            engine.flow_prompt_seconds = saved[1] if change.flow_prompt_seconds is None else change.flow_prompt_seconds
            decoder.estimator = saved[2] if change.estimator is None else change.estimator
            engine.hift = saved[3] if change.hift is None else change.hift
            decoder.inference_cfg_rate = saved[4] if change.guidance else 0.0
            draws = FixedDraws(seed + change.seed_offset, frames, bins)
            results[name] = _compare(reference, _render(engine, model_input, ids, draws))
    finally:
        (engine.n_timesteps, engine.flow_prompt_seconds, decoder.estimator, engine.hift,
         decoder.inference_cfg_rate) = saved
    return results


def with_verdicts(results: dict[str, dict], scale: str = SEED_ROW) -> dict[str, dict]:
    """Each row with its mel L1 ÷ the scale row's (`seed_ratio`) and `verdict` (the scale row's is "scale"),
    and the same ratio for the log-spectrum L1 (`logspec_seed_ratio`): a vocoder-only change leaves the mel
    as it is, so only the waveform columns show it."""
    spread, spec_spread = results[scale]["mel_l1"], results[scale]["wave_logspec_l1"]
    out = {}
    for name, row in results.items():
        ratio = seed_ratio(row["mel_l1"], spread)
        out[name] = {**row, "seed_ratio": ratio, "logspec_seed_ratio": seed_ratio(row["wave_logspec_l1"], spec_spread),
                     "verdict": "scale" if name == scale else verdict(ratio)}
    return out


def fast_variants(engine, fast: FastSettings, extra_fast: FastSettings) -> tuple[dict[str, Change], list[str]]:
    """The scale row, each token-to-wave change of `fast` and `extra_fast` alone, then each mode whole; and
    what was left out (bf16 without native support: the engine keeps float32 there too)."""
    native = bf16_is_native()
    estimators: dict[tuple, nn.Module] = {}  # ("int8",) or ("bf16", matmul attention)
    hifts: dict[bool, nn.Module] = {}  # by whether its Snake activations run on the kernel

    def converts(settings: FastSettings) -> bool:
        return uses_int8_estimator(engine, settings) or (settings.bf16_estimator and native)

    def estimator(settings: FastSettings) -> nn.Module:
        """The estimator copy `apply_precision` would make for `settings` (int8 where it takes it, else bf16)."""
        int8 = uses_int8_estimator(engine, settings)
        key = ("int8",) if int8 else ("bf16", settings.matmul_attention)
        if key not in estimators:
            converted = copy.deepcopy(engine.flow.estimator)  # to_int8 / to_bf16 unpack stock's packed linears
            if int8:
                converted.to_int8(kept_dtype=torch.bfloat16 if native else None)
            else:  # and as fast mode runs it after loading: the feed-forwards' GELU fused where oneDNN can
                converted.to_bf16(matmul_attention=settings.matmul_attention)
                if onednn_fused_gelu_works(torch.bfloat16):
                    fuse_linear_gelus(converted, skip=("time_embed",))
            estimators[key] = converted
        return estimators[key]

    def estimator_name(settings: FastSettings) -> str:
        if uses_int8_estimator(engine, settings):
            return "int8 estimator"
        return "bf16 estimator" + (", matmul attention" if settings.matmul_attention else "")

    def bf16_hift(settings: FastSettings) -> nn.Module:
        """The vocoder as fast mode runs it: bf16 convolutions, time-major, the Snake kernel where it is built."""
        kernel = settings.kernel_snake and snake_available()
        if kernel not in hifts:
            converted = copy.deepcopy(engine.hift)
            converted.set_conv_dtype(torch.bfloat16)
            converted.use_time_major()
            if kernel:
                converted.use_snake_kernel()
            hifts[kernel] = converted
        return hifts[kernel]


    def changes(settings: FastSettings) -> dict[str, Change]:
        """Each change of `settings` alone, by name."""
        out = {f"{settings.n_timesteps} flow steps": Change(n_timesteps=settings.n_timesteps),
               f"flow prompt {settings.flow_prompt_seconds:g} s": Change(
                   flow_prompt_seconds=settings.flow_prompt_seconds)}
        if converts(settings):
            out[estimator_name(settings)] = Change(estimator=estimator(settings))
        if settings.bf16_hift and native:
            out[hift_row(settings)] = Change(hift=bf16_hift(settings))
        if not settings.guidance:
            out["no classifier-free guidance"] = Change(guidance=False)
        return out

    def whole(settings: FastSettings) -> Change:
        return Change(n_timesteps=settings.n_timesteps, flow_prompt_seconds=settings.flow_prompt_seconds,
                      estimator=estimator(settings) if converts(settings) else None,
                      hift=bf16_hift(settings) if settings.bf16_hift and native else None, guidance=settings.guidance)

    variants = {SEED_ROW: Change(seed_offset=SEED_OFFSET), **changes(fast), **changes(extra_fast),
                FAST_ROW: whole(fast), EXTRA_ROW: whole(extra_fast)}
    skipped = []
    if not native and any((s.bf16_estimator and not uses_int8_estimator(engine, s)) or s.bf16_hift
                          for s in (fast, extra_fast)):
        skipped.append("bf16 estimator and HiFT: this CPU has no native bf16, so fast mode keeps them float32")
    return variants, skipped


def hift_row(settings: FastSettings) -> str:
    """The name of fast's vocoder row: bf16 convolutions, with the Snake kernel where this machine runs it."""
    return "bf16 HiFT convolutions" + (", one-pass Snake" if settings.kernel_snake and snake_available() else "")


def uses_int8_estimator(engine, settings: FastSettings) -> bool:
    """Whether `apply_precision` gives this engine's estimator int8 linears under `settings` (as it decides)."""
    return int8_estimator_wanted(settings, engine.flow.estimator, "cpu")


def llm_deviation(engine, model_input, tokens: list[int], bits: int = 8) -> dict[str, float]:
    """Teacher-forced agreement of the int8 (or int4, `bits=4`) LLM, loaded afresh from the folder, with the
    stock one (its full causal pass). The int8 LLM runs as fast mode decodes (`stepped_logp`: the prefill, then
    one step a token, with fast's row layout, attention kernel and caches where this machine has them)."""
    backend = backend_for(engine.folder.family)
    int8 = backend.load_llm(engine.config.llm, read_state_dict(engine.folder.path / "llm.pt"), engine.folder.path)
    int8.fuse_qkv()  # as apply_precision does
    if bits == 4:
        int8.quantize_int4()
        # Teacher forcing runs every position as one batch, which an Int4Linear would send to its int8
        # copy (its prefill path); run them on the 4-bit weights, as decoding does (prompt rows included:
        # slightly harsher than a real decode, whose prefill is int8).
        for module in int8.modules():
            if isinstance(module, Int4Linear):
                module.int8_for_rows = False
    else:
        int8.quantize_int8()
        llm_rows_precision(int8, "fast", "cpu")  # the layout fast's int8 rows take on this CPU, as the loader does
        llm_attention_precision(int8, "fast", "cpu")  # and its decoding attention (kernel, bf16 caches)
    args = (model_input.text, model_input.prompt_text, model_input.llm_prompt_tokens, model_input.llm_embedding,
            torch.tensor([tokens], dtype=torch.long))
    with torch.inference_mode():
        ref = engine.llm.teacher_forced_logp(*args)
        # int8: through decoding's own path (a prefill, then one step a token: its caches and attention); int4
        # keeps the one full pass above, on its 4-bit weights throughout.
        low = int8.teacher_forced_logp(*args) if bits == 4 else int8.stepped_logp(*args)
    kl = (ref.exp() * (ref - low)).sum(dim=-1)
    return {"top1_agreement": float((ref.argmax(-1) == low.argmax(-1)).float().mean()),
            "mean_kl": float(kl.mean()), "max_abs_logp_diff": float((ref - low).abs().max()),
            "steps": int(ref.size(0))}


def fast_deviation(stock_engine, model_input, tokens: list[int], fast: FastSettings | None = None,
                   extra_fast: FastSettings | None = None, seed: int = 0) -> dict:
    """The whole report for a stock engine of any family: token-to-wave rows with verdicts, the int8
    LLM's agreement (when either mode quantises it), the settings measured and what was left out."""
    fast = fast or settings_for("fast")
    extra_fast = extra_fast or settings_for("extra-fast")
    variants, skipped = fast_variants(stock_engine, fast, extra_fast)
    rows = with_verdicts(token_to_wave_deviation(stock_engine, model_input, tokens, variants, seed))
    int4 = any(s.int4_llm for s in (fast, extra_fast)) and int4_kernels_available()
    int8 = any(s.int8_llm and not (s.int4_llm and int4) for s in (fast, extra_fast))
    return {"family": stock_engine.folder.family.name, "threshold": THRESHOLD, "scale": SEED_ROW,
            "token_to_wave": rows, "llm_int8": llm_deviation(stock_engine, model_input, tokens) if int8 else {},
            "llm_int4": llm_deviation(stock_engine, model_input, tokens, bits=4) if int4 else {},
            "settings": {"fast": asdict(fast), "extra-fast": asdict(extra_fast)}, "skipped": skipped}
