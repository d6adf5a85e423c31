"""Load official `llm.pt` / `flow.pt` / `hift.pt` state dicts into our modules, strictly.

Every key rename is a named function below with the reason for it; nothing is renamed silently.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from torch import nn

from ..errors import CheckpointError
from .families import redownload_hint

log = logging.getLogger(__name__)

StateDict = dict[str, torch.Tensor]

_G_SUFFIXES = (".weight_g", ".parametrizations.weight.original0")
_V_SUFFIXES = (".weight_v", ".parametrizations.weight.original1")


def read_state_dict(path: str | Path, mapped: bool = False) -> StateDict:
    """`torch.load` a plain state dict safely (tensors only, on CPU). mapped: the tensors are views of a private
    memory map of the file (pages are read when touched; see `mapped_pages_dropped`)."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path.name} is missing from {path.parent.name}/ (expected a torch state dict); "
                              f"{redownload_hint(path.parent)}")
    try:
        data = torch.load(path, map_location="cpu", weights_only=True, mmap=mapped)
    except Exception as exc:  # torch raises several types for corrupt/truncated files
        # torch's own text is long, names full paths and advises weights_only=False (unsafe): logged only.
        log.warning("torch cannot read %s: %s: %s", path, type(exc).__name__, exc)
        raise CheckpointError(f"{path.name} in {path.parent.name}/ is damaged or incomplete (it cannot be read as "
                              f"a torch state dict); {redownload_hint(path.parent)}") from exc
    if not isinstance(data, dict) or not all(isinstance(v, torch.Tensor) for v in data.values()):
        raise CheckpointError(f"{path.name} is not a plain state dict of tensors")
    return data


def strip_generator_prefix(sd: StateDict) -> StateDict:
    """hift.pt saved from the GAN training wrapper carries `generator.` in its keys; upstream drops
    every occurrence before loading, so do we."""
    return {k.replace("generator.", ""): v for k, v in sd.items()}


def fold_weight_norm(sd: StateDict) -> StateDict:
    """Replace weight-norm pairs (g, v) by the effective weight W = g * v / ||v||.

    Both spellings occur in the official files: the old `name.weight_g/weight_v` and the new
    `name.parametrizations.weight.original0/original1`. The norm runs over every dim but 0 of the
    stored tensor (out-channels for Conv1d, in-channels for ConvTranspose1d), which is what `g`'s
    shape [dim0, 1, 1] encodes. Our modules hold plain `.weight`s, so inference pays nothing for it.
    """
    out: StateDict = {}
    pending_v: dict[str, torch.Tensor] = {}
    pending_g: dict[str, torch.Tensor] = {}
    for key, value in sd.items():
        g_suffix = next((s for s in _G_SUFFIXES if key.endswith(s)), None)
        v_suffix = next((s for s in _V_SUFFIXES if key.endswith(s)), None)
        if g_suffix:
            pending_g[key[: -len(g_suffix)]] = value
        elif v_suffix:
            pending_v[key[: -len(v_suffix)]] = value
        else:
            out[key] = value
    if set(pending_g) != set(pending_v):
        lonely = sorted(set(pending_g) ^ set(pending_v))
        raise CheckpointError(f"weight-norm keys come without their pair: {lonely[:5]}")
    for name, g in pending_g.items():
        v = pending_v[name]
        dims = tuple(range(1, v.dim()))
        norm = v.double().pow(2).sum(dim=dims, keepdim=True).sqrt()
        out[f"{name}.weight"] = (g.double() * v.double() / norm).to(v.dtype)
    return out


_INIT_FUNCTIONS = ("uniform_", "normal_", "trunc_normal_", "constant_", "ones_", "zeros_", "xavier_uniform_",
                   "xavier_normal_", "kaiming_uniform_", "kaiming_normal_", "orthogonal_")
_init_lock = threading.Lock()


@contextmanager
def weights_left_uninitialised() -> Iterator[None]:
    """Build modules whose weights a checkpoint will replace without initialising them first: the
    `torch.nn.init` fills that torch's layers call on construction do nothing inside this block, so
    their `torch.empty` storage is never written and costs no resident memory. Loading then swaps the
    file's tensors in (`load_strict(..., assign=True)`): a full-size LLM no longer sits in memory twice
    (random init + file) while it loads. Buffers computed in `__init__` (rotary tables, fixed noise)
    are untouched by this. Serialised by a lock, and only for the build, since the patch is global."""
    with _init_lock:
        saved = {name: getattr(nn.init, name) for name in _INIT_FUNCTIONS if hasattr(nn.init, name)}
        try:
            for name in saved:
                setattr(nn.init, name, _leave)
            yield
        finally:
            for name, fn in saved.items():
                setattr(nn.init, name, fn)


def _leave(tensor: torch.Tensor, *args, **kwargs) -> torch.Tensor:
    return tensor


def load_strict(module: nn.Module, sd: StateDict, file_name: str, assign: bool = False) -> None:
    """`load_state_dict(strict=True)` with an error that names the differing keys and shapes.
    assign: the module takes the state dict's tensors instead of copying them (no second copy in
    memory; the caller must not reuse `sd`'s tensors elsewhere)."""
    expected = module.state_dict()
    missing = sorted(set(expected) - set(sd))
    unexpected = sorted(set(sd) - set(expected))
    wrong_shape = sorted(k for k in set(expected) & set(sd) if expected[k].shape != sd[k].shape)
    if missing or unexpected or wrong_shape:
        parts = []
        if missing:
            parts.append(f"{len(missing)} missing (e.g. {missing[:3]})")
        if unexpected:
            parts.append(f"{len(unexpected)} unexpected (e.g. {unexpected[:3]})")
        if wrong_shape:
            k = wrong_shape[0]
            parts.append(f"{len(wrong_shape)} with another shape (e.g. {k}: file {tuple(sd[k].shape)}, "
                         f"model {tuple(expected[k].shape)})")
        raise CheckpointError(f"{file_name} does not match the architecture in the yaml: " + "; ".join(parts)
                              + ". Is the yaml from the same model folder?")
    if assign:  # a copy would cast to the module's dtypes; assigned tensors must arrive in them
        sd = {k: v if v.dtype == expected[k].dtype else v.to(expected[k].dtype) for k, v in sd.items()}
    module.load_state_dict(sd, strict=True, assign=assign)


MADV_DONTNEED = 4  # Linux


@contextmanager
def mapped_pages_dropped(path: Path, every_s: float = 0.002) -> Iterator[None]:
    """While the block converts a file read with `read_state_dict(path, mapped=True)`, a thread tells the kernel
    every `every_s` that this process no longer needs the mapping's pages it has touched.

    Converting a float file to int8 touches every page once; without this they all stay resident until the
    mapping goes, and the process peaks at the whole float file plus its int8 copy. Dropping pages of a private
    file mapping that nobody wrote to loses nothing: a later read faults them in again from the file. Linux only;
    elsewhere (or without libc's madvise) the block runs unchanged.

    Why 2 ms: a bf16 conversion reads a few GB/s, so a 50 ms period let ~100 MB of float pages pile up between
    drops, and that pile sat on top of the peak (benchmarks/load_memory.py, v1 cold). The mapping's place is
    looked up once in /proc/self/maps (~0.3 ms) and then only confirmed before each drop through
    /proc/self/map_files (~2 µs): dropping pages of a range that some other mapping has since taken would zero
    live memory, so a range that is no longer exactly this file's mapping is looked up again instead."""
    madvise = _madvise()
    target = Path(path).resolve()
    if madvise is None:
        yield
        return
    stop = threading.Event()

    def drop() -> None:
        ranges: list[tuple[int, int]] = []
        while not stop.wait(every_s):
            if not ranges or not all(_still_maps(start, end, target) for start, end in ranges):
                ranges = _mapped_ranges(target)
            for start, end in ranges:
                madvise(start, end - start, MADV_DONTNEED)

    thread = threading.Thread(target=drop, name="drop-mapped-pages", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        for start, end in _mapped_ranges(target):
            madvise(start, end - start, MADV_DONTNEED)


def _still_maps(start: int, end: int, path: Path) -> bool:
    """True while [start, end) is exactly one mapping of `path` in this process (a link in /proc/self/map_files;
    False where that is unreadable, which sends the caller back to /proc/self/maps)."""
    try:
        return os.readlink(f"/proc/self/map_files/{start:x}-{end:x}") == str(path)
    except OSError:
        return False


def _madvise():
    import ctypes
    import ctypes.util
    import sys

    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        function = libc.madvise
    except (OSError, AttributeError):
        return None
    function.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    function.restype = ctypes.c_int
    return function


def _mapped_ranges(path: Path) -> list[tuple[int, int]]:
    """(start, end) of this process's mappings of `path`, from /proc/self/maps."""
    ranges = []
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                fields = line.split(maxsplit=5)
                if len(fields) == 6 and fields[5].rstrip("\n") == str(path):
                    start, end = fields[0].split("-")
                    ranges.append((int(start, 16), int(end, 16)))
    except OSError:
        return []
    return ranges
