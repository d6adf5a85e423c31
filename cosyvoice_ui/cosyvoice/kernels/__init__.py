"""Kernels of our own, compiled for this machine at first use and cached (issue 26).

One extension, three ops:
- `int8_linear.cpp`: int8 linears whose one-row products (decoding steps) stream the weights faster than fbgemm's
  dynamic linear on AVX-512 VNNI CPUs (`KernelInt8Linear` in models/int8_kernel_linear.py uses it);
- `decode_attention.cpp`: a decoding step's attention (one query per head over the cached keys, v1's relative
  positions or v2/v3's shared key heads) in one pass over the cache, where torch runs two or three products and a
  softmax (models/transformer.py and models/qwen2.py take it when switched on; fast mode does so for v1);
- `snake.cpp`: the vocoder's Snake activation in one pass over the signal, where torch runs five element-wise ops
  (models/hift.py's `Snake` takes it when switched on; fast mode does so).

It needs a C++ compiler and torch's headers (both come with a development machine, not with a slim container
image); it is built once per source, torch version and flags into the user's cache (~30 s on 2 cores) and loaded
from there afterwards. Wherever it cannot be built, or an op's probe disagrees with the reference arithmetic, that
op's `*_available()` says False and the engine keeps torch's own ops: never an error, at worst the previous speed.

`COSYVOICE_KERNELS=0` turns them off (as does the older `COSYVOICE_INT8_KERNEL=0`); `COSYVOICE_KERNEL_DIR` moves the
build cache.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import platform
import shutil
from pathlib import Path

import torch

log = logging.getLogger(__name__)

KERNEL_ENV = "COSYVOICE_KERNELS"
OLD_KERNEL_ENV = "COSYVOICE_INT8_KERNEL"  # the fifteenth pass's name for the same switch, still read
KERNEL_DIR_ENV = "COSYVOICE_KERNEL_DIR"
SOURCES = tuple(Path(__file__).with_name(name) for name in ("int8_linear.cpp", "decode_attention.cpp", "snake.cpp"))
OPS = ("int8_linear", "decode_attention", "snake")  # what the extension registers under torch.ops.cosyvoice_kernels
# AVX-512 with VNNI; no -march=native, so the cached build states what it needs and nothing more.
CFLAGS = ("-O3", "-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mavx512vnni", "-fopenmp",
          "-ffp-contract=off")  # no fused multiply-adds: every path rounds the same way
# torch's wheel ships its own libgomp.so.1, already loaded in the process: the kernel joins its OpenMP threads.
LDFLAGS = ("-fopenmp",)
FAILED_MARK = "BUILD_FAILED"  # written into a build folder whose build failed, with the compiler's last line
REQUIRED_CPU_FLAGS = frozenset({"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni"})


def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags as Linux reports them (empty where unknown)."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as info:
            for line in info:
                if line.startswith("flags"):
                    return frozenset(line.partition(":")[2].split())
    except OSError:
        pass
    return frozenset()


def kernel_dir() -> Path:
    """Where builds are cached: COSYVOICE_KERNEL_DIR, else the user's cache folder."""
    explicit = os.environ.get(KERNEL_DIR_ENV)
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "cosyvoice_ui" / "kernels"


@functools.cache  # the sources and torch do not change under a running process: read and hashed once
def build_key() -> str:
    """One build per source, torch version and flags (a changed file or torch gets its own build)."""
    digest = hashlib.sha256()
    for part in (*(source.read_bytes() for source in SOURCES), torch.__version__.encode(),
                 " ".join(CFLAGS + LDFLAGS).encode()):
        digest.update(part)
        digest.update(b"\0")
    return digest.hexdigest()[:16]


def why_not_built() -> str | None:
    """Why this machine cannot run the kernels (before trying to build them), or None when it may."""
    for name in (KERNEL_ENV, OLD_KERNEL_ENV):
        if os.environ.get(name, "1").strip() == "0":
            return f"{name}=0"
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        return "not an x86-64 Linux machine"
    missing = REQUIRED_CPU_FLAGS - cpu_flags()
    if missing:
        return f"the CPU lacks {', '.join(sorted(missing))}"
    if not shutil.which(os.environ.get("CXX", "c++")):  # the compiler torch's extension loader calls
        return "no C++ compiler"
    return None


@functools.cache  # built and loaded once per process
def built() -> bool:
    """True when the extension is loaded (built now or earlier); False, with the reason in the log, where not."""
    reason = why_not_built()
    if reason is not None:
        log.info("own kernels not used: %s", reason)
        return False
    try:
        failed = build_folder() / FAILED_MARK
    except OSError as error:  # an unwritable cache: nowhere to build
        log.warning("own kernels not used: their build folder cannot be made (%s)", error.strerror or error)
        return False
    if failed.exists():  # a build that failed here once is not retried by every process (delete the file to retry)
        log.info("own kernels not used: their build failed before (%s)", failed)
        return False
    try:
        _load()
    except Exception as error:  # a failed compile or load: keep torch's ops, say why in the log
        message = (str(error).strip().splitlines() or ["unknown error"])[-1]
        log.warning("own kernels not used: building them failed (%s)", message)
        try:
            failed.write_text(message + "\n", encoding="utf-8")
        except OSError:
            pass
        return False
    return True


@functools.cache  # probed once per process
def int8_linear_available() -> bool:
    """True when `torch.ops.cosyvoice_kernels.int8_linear` is loaded and agrees with the reference arithmetic."""
    return built() and _probed(_probe_int8_linear, "int8 decoding kernel")


@functools.cache  # probed once per process
def decode_attention_available() -> bool:
    """True when `torch.ops.cosyvoice_kernels.decode_attention` is loaded and agrees with the reference."""
    return built() and _probed(_probe_decode_attention, "decoding attention kernel")


@functools.cache  # probed once per process
def snake_available() -> bool:
    """True when `torch.ops.cosyvoice_kernels.snake` is loaded and agrees with the reference."""
    return built() and _probed(_probe_snake, "Snake kernel")


def _probed(probe, name: str) -> bool:
    """The probe's verdict; a probe that raises (a broken build) counts as a disagreement, said in the log."""
    try:
        agrees = probe()
    except Exception as error:  # noqa: BLE001  (an op that fails its probe is not used; the engine keeps torch's)
        log.warning("%s not used: its probe failed (%s)", name, (str(error).strip().splitlines() or ["?"])[-1])
        return False
    if not agrees:
        log.warning("%s not used: its probe disagreed with the reference arithmetic", name)
    return agrees


def builds_now() -> bool:
    """True when the next `built()` call will compile the kernels (this process has not asked yet, the machine may
    run them, and no build or failed build is in the cache): a loader can say so first."""
    if built.cache_info().currsize or why_not_built() is not None:
        return False
    try:
        folder = build_folder()
    except OSError:
        return False
    return not (folder / FAILED_MARK).exists() and not any(folder.glob("*.so"))


def _load() -> None:
    if all(hasattr(torch.ops.cosyvoice_kernels, op) for op in OPS):  # loaded before
        return
    from torch.utils.cpp_extension import load_inline

    log.info("loading the decoding kernels (built once per machine, ~30 s the first time)")
    load_inline(f"cosyvoice_kernels_{build_key()}", cpp_sources=[source.read_text() for source in SOURCES],
                extra_cflags=list(CFLAGS), extra_ldflags=list(LDFLAGS), build_directory=str(build_folder()),
                is_python_module=False, verbose=False)


def build_folder() -> Path:
    """These sources' build folder under `kernel_dir()` (made if missing)."""
    folder = kernel_dir() / f"ops-{build_key()}"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def reference_int8_linear(x: torch.Tensor, levels: torch.Tensor, scales: torch.Tensor,
                          bias: torch.Tensor | None) -> torch.Tensor:
    """The kernel's arithmetic in plain torch ops (float64 for the exact integer sums): x [M, K] float32, levels
    int8 [N, K], scales [N] → [M, N]. Rows are quantised to int8 with the symmetric scale absmax/127."""
    absmax = x.abs().amax(dim=1)
    scale = torch.where(absmax > 0, absmax / 127, torch.ones_like(absmax))
    q = torch.round(x * (1 / scale)[:, None]).clamp(-127, 127)
    dots = (q.double() @ levels.double().t()).float()
    y = dots * (scale[:, None] * scales[None, :])
    return y if bias is None else y + bias


def pack_levels(levels: torch.Tensor) -> torch.Tensor:
    """int8 [N, K] → the kernel's layout [ceil(N/16), ceil(K/4), 16, 4], zero-padded. Each 4 inputs of a row move
    as one 4-byte word (3.5x faster than moving single bytes)."""
    n, k = levels.shape
    blocks, k4 = -(-n // 16), -(-k // 4)
    padded = levels.contiguous()
    if (blocks * 16, k4 * 4) != (n, k):
        padded = levels.new_zeros(blocks * 16, k4 * 4)
        padded[:n, :k] = levels
    words = padded.view(torch.int32).view(blocks, 16, k4)
    return words.transpose(1, 2).contiguous().view(torch.int8).view(blocks, k4, 16, 4)


def _probe_int8_linear() -> bool:
    """Odd shapes (tails in both dimensions), 1-4 rows (decoding) and many (a prefill): close to the reference,
    and a row's output the same bits whatever the other rows of the call."""
    generator = torch.Generator().manual_seed(0)
    op = torch.ops.cosyvoice_kernels.int8_linear
    for n, k in ((37, 70), (64, 256)):
        levels = torch.randint(-128, 128, (n, k), dtype=torch.int8, generator=generator)
        scales = torch.rand(n, generator=generator) * 0.01 + 1e-3
        bias = torch.randn(n, generator=generator)
        packed, sums = pack_levels(levels), levels.sum(dim=1, dtype=torch.int32)
        x = torch.randn(21, k, generator=generator)
        with torch.inference_mode():
            every = op(x, packed, n, scales, sums, bias)
            ref = reference_int8_linear(x, levels, scales, bias)
            if not torch.allclose(every, ref, rtol=1e-5, atol=1e-5 * float(ref.abs().max())):
                return False
            for rows in (1, 2, 3, 4):
                if not torch.equal(op(x[:rows], packed, n, scales, sums, bias), every[:rows]):
                    return False
    return True


def reference_decode_attention(query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                               position_query: torch.Tensor | None, positions: torch.Tensor | None,
                               scale: float) -> torch.Tensor:
    """The attention kernel's arithmetic in plain torch ops (float64): query [H, D], keys/values [G, K, D] (query
    head h reads key head h // (H/G)), optionally position_query [H, D] with positions [H, K, D] → [H, D]."""
    per_group = query.size(0) // keys.size(0)
    keys, values = keys.double().repeat_interleave(per_group, 0), values.double().repeat_interleave(per_group, 0)
    scores = torch.einsum("hd,hkd->hk", query.double(), keys)
    if positions is not None:
        scores = scores + torch.einsum("hd,hkd->hk", position_query.double(), positions.double())
    return torch.einsum("hk,hkd->hd", torch.softmax(scores * scale, dim=-1), values).float()


def _probe_decode_attention() -> bool:
    """Strided caches, a key count and a head width with tails, shared key heads and relative positions: close to
    the reference."""
    generator = torch.Generator().manual_seed(0)
    op = torch.ops.cosyvoice_kernels.decode_attention
    for heads, key_heads, width, with_positions in ((4, 4, 64, True), (6, 2, 24, False)):
        keys = torch.randn(key_heads, 40, width, generator=generator)[:, :37]
        values = torch.randn(key_heads, 40, width, generator=generator)[:, :37]
        query = torch.randn(heads, width, generator=generator)
        position_query = torch.randn(heads, width, generator=generator) if with_positions else None
        positions = torch.randn(heads, 37, width, generator=generator) if with_positions else None
        with torch.inference_mode():
            out = op(query, keys, values, position_query, positions, 0.25)
        ref = reference_decode_attention(query, keys, values, position_query, positions, 0.25)
        if not torch.allclose(out, ref, rtol=1e-5, atol=1e-5):
            return False
    return True


def reference_snake(x: torch.Tensor, alpha: torch.Tensor, inv_alpha: torch.Tensor) -> torch.Tensor:
    """The Snake kernel's arithmetic in plain torch ops (float64, rounded once to x's dtype): x [B, C, T],
    alpha and inv_alpha [C] → x + inv_alpha · sin²(alpha · x)."""
    wide = x.double()
    a, inv = alpha.double().view(1, -1, 1), inv_alpha.double().view(1, -1, 1)
    return (wide + inv * torch.sin(a * wide) ** 2).to(x.dtype)


def _probe_snake() -> bool:
    """Both layouts (channels adjacent, time adjacent), both dtypes, channel and time counts with tails, arguments
    up to a few hundred radians: within float32 rounding of the reference (bf16: one rounding step)."""
    generator = torch.Generator().manual_seed(0)
    op = torch.ops.cosyvoice_kernels.snake
    for channels, frames in ((20, 37), (64, 5)):
        alpha = torch.rand(channels, generator=generator) * 3 + 0.05
        inv_alpha = 1 / alpha
        x = torch.randn(2, channels, frames, generator=generator) * 40
        for layout in (x, x.transpose(1, 2).contiguous().transpose(1, 2)):
            for dtype, tolerance in ((torch.float32, 1e-5), (torch.bfloat16, 1e-2)):
                values = layout.to(dtype)
                with torch.inference_mode():
                    out = op(values, alpha, inv_alpha)
                ref = reference_snake(values, alpha, inv_alpha)
                if out.dtype != dtype or out.stride() != values.stride():
                    return False
                if not torch.allclose(out.double(), ref.double(), rtol=tolerance, atol=tolerance):
                    return False
    return True
