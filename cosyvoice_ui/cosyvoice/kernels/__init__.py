"""Kernels of our own, compiled for this machine at first use and cached (issue 26).

`int8_linear.cpp`: int8 linears whose one-row products (decoding steps) stream the weights faster than fbgemm's
dynamic linear on AVX-512 VNNI CPUs (`KernelInt8Linear` in models/int8_kernel_linear.py uses it). It needs a C++ compiler
and torch's headers (both come with a development machine, not with a slim container image); it is built once
per source, torch version and flags into the user's cache (~30 s on 2 cores) and loaded from there afterwards.
Wherever it cannot be built, or its probe disagrees with the reference arithmetic, `int8_linear_available()`
says False and the engine keeps fbgemm's linears: never an error, at worst the previous speed.

`COSYVOICE_INT8_KERNEL=0` turns it off; `COSYVOICE_KERNEL_DIR` moves the build cache.
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

KERNEL_ENV = "COSYVOICE_INT8_KERNEL"
KERNEL_DIR_ENV = "COSYVOICE_KERNEL_DIR"
SOURCE = Path(__file__).with_name("int8_linear.cpp")
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


def build_key() -> str:
    """One build per source, torch version and flags (a changed file or torch gets its own build)."""
    digest = hashlib.sha256()
    for part in (SOURCE.read_bytes(), torch.__version__.encode(), " ".join(CFLAGS + LDFLAGS).encode()):
        digest.update(part)
        digest.update(b"\0")
    return digest.hexdigest()[:16]


def why_not_int8_linear() -> str | None:
    """Why this machine cannot run the kernel (before trying to build it), or None when it may."""
    if os.environ.get(KERNEL_ENV, "1").strip() == "0":
        return f"{KERNEL_ENV}=0"
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        return "not an x86-64 Linux machine"
    missing = REQUIRED_CPU_FLAGS - cpu_flags()
    if missing:
        return f"the CPU lacks {', '.join(sorted(missing))}"
    if not shutil.which(os.environ.get("CXX", "c++")):  # the compiler torch's extension loader calls
        return "no C++ compiler"
    return None


@functools.cache  # built and probed once per process
def int8_linear_available() -> bool:
    """True when `torch.ops.cosyvoice_kernels.int8_linear` is loaded and agrees with the reference arithmetic."""
    reason = why_not_int8_linear()
    if reason is not None:
        log.info("int8 decoding kernel not used: %s", reason)
        return False
    try:
        failed = build_folder() / FAILED_MARK
    except OSError as error:  # an unwritable cache: nowhere to build
        log.warning("int8 decoding kernel not used: its build folder cannot be made (%s)", error.strerror or error)
        return False
    if failed.exists():  # a build that failed here once is not retried by every process (delete the file to retry)
        log.info("int8 decoding kernel not used: its build failed before (%s)", failed)
        return False
    try:
        _load()
        agrees = _probe()
    except Exception as error:  # a failed compile or load: keep fbgemm, say why in the log
        message = (str(error).strip().splitlines() or ["unknown error"])[-1]
        log.warning("int8 decoding kernel not used: building it failed (%s)", message)
        try:
            failed.write_text(message + "\n", encoding="utf-8")
        except OSError:
            pass
        return False
    if not agrees:
        log.warning("int8 decoding kernel not used: its probe disagreed with the reference arithmetic")
    return agrees


def builds_now() -> bool:
    """True when the next `int8_linear_available()` call will compile the kernel (this process has not asked yet,
    the machine may run it, and no build or failed build is in the cache): a loader can say so first."""
    if int8_linear_available.cache_info().currsize or why_not_int8_linear() is not None:
        return False
    try:
        folder = build_folder()
    except OSError:
        return False
    return not (folder / FAILED_MARK).exists() and not any(folder.glob("*.so"))


def _load() -> None:
    if hasattr(torch.ops.cosyvoice_kernels, "int8_linear"):  # loaded earlier in this process
        return
    from torch.utils.cpp_extension import load_inline

    log.info("loading the int8 decoding kernel (built once per machine, ~30 s the first time)")
    load_inline(f"cosyvoice_int8_linear_{build_key()}", cpp_sources=[SOURCE.read_text()], extra_cflags=list(CFLAGS),
                extra_ldflags=list(LDFLAGS), build_directory=str(build_folder()), is_python_module=False,
                verbose=False)


def build_folder() -> Path:
    """This source's build folder under `kernel_dir()` (made if missing)."""
    folder = kernel_dir() / f"int8_linear-{build_key()}"
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


def _probe() -> bool:
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
