"""Prepared copies: each model file as fast precision leaves it (int8 linears, bf16 layers), stored beside the
folder so that later loads skip the float detour.

Without a copy, a fast load reads the whole float file and then quantises it: the process peaks near the float
size plus the quantised size (2.1-2.2x the tensors it keeps). With one, the loader builds the module on the
`meta` device (no memory), runs the same precision transforms there (they build the layout without values:
`models/linears.py`), and fills every tensor from the copy, one at a time (`fill`).

A copy is a safetensors file (no pickle, so a copy is no more trusted than the folder's own `llm.pt`; written
and read one tensor at a time, with bounds checked), named `<file>-<precision>-<key>.safetensors`. The key covers the source file's sha256,
the precision and its settings, the transforms the CPU chose (bf16 native, int4 kernels), the format and the torch
version. A changed source file gets a new key; the old copy is deleted when the new one is written. The sha256
of each source file is remembered by its size and mtime (`sources.json`), so a load hashes a file only when it
changed. Copies live in `<folder>/.prepared/`, or, when the folder is read-only, in the user's cache folder.

What a module holds (`tensors_of`) is read generically: every parameter, buffer and plain tensor attribute of
every submodule, by path, and each int8 dynamic linear's weight as int8 values with its scale and zero point.
Filling checks names, shapes and dtypes against the meta-built module and that no meta tensor is left; any
mismatch drops the copy and the loader takes the float path.
"""

from __future__ import annotations

import hashlib
import json
import logging
import mmap
import os
import struct
import warnings
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import nn
from torch.ao.nn.quantized.dynamic import Linear as DynamicQuantLinear

from ..files import atomic_path

log = logging.getLogger(__name__)

FORMAT = 3  # bump when what a copy holds changes (2: int8 weights per output channel; 3: no position tables)
FOLDER_NAME = ".prepared"
# The `FastSettings` fields that change tensors (the others, such as flow steps, act at run time).
WEIGHT_FIELDS = ("int8_llm", "int4_llm", "bf16_estimator", "int8_estimator", "matmul_attention", "bf16_hift")
RUN_TIME_FIELDS = ("n_timesteps", "flow_prompt_seconds", "guidance", "chunked_last_pass",
                   "onednn_int8_rows", "kernel_int8_llm", "kernel_attention",
                   "bf16_decode_cache", "kernel_snake")  # a test keeps the two lists complete
ENABLED_ENV = "COSYVOICE_PREPARED_MODELS"  # "0" turns prepared copies off (read and write)

_DTYPES = {torch.float32: "F32", torch.float64: "F64", torch.bfloat16: "BF16", torch.float16: "F16",
           torch.int8: "I8", torch.uint8: "U8", torch.int32: "I32", torch.int64: "I64", torch.bool: "BOOL"}
_INT8 = (".int8_weight", ".int8_scale", ".int8_zero_point", ".int8_bias")


class PreparedMismatch(Exception):
    """A prepared copy does not fit the module built for it (another build of the code, a damaged file)."""


def enabled() -> bool:
    return os.environ.get(ENABLED_ENV, "1") != "0"


def cache_dir_for(model_dir: Path) -> Path:
    """Where a folder's copies live: `<folder>/.prepared` when the folder is writable, else a folder named after
    it in the user's cache."""
    model_dir = Path(model_dir).resolve()
    if os.access(model_dir, os.W_OK):
        return model_dir / FOLDER_NAME
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    tag = hashlib.sha256(str(model_dir).encode()).hexdigest()[:12]
    return base / "cosyvoice_ui" / "prepared" / f"{model_dir.name}-{tag}"


# --- which copy ------------------------------------------------------------------------------------------


def source_sha256(path: Path, folder: Path) -> str:
    """sha256 of a model file, remembered in `folder/sources.json` by size and mtime (hashed again only when
    either changed)."""
    stat = path.stat()
    index_path = folder / "sources.json"
    try:
        index = json.loads(index_path.read_text())
    except (OSError, ValueError):
        index = {}
    known = index.get(path.name) if isinstance(index, dict) else None
    if isinstance(known, dict) and known.get("size") == stat.st_size and known.get("mtime_ns") == stat.st_mtime_ns:
        return str(known["sha256"])
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    index = index if isinstance(index, dict) else {}
    index[path.name] = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": digest.hexdigest()}
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with atomic_path(index_path) as tmp:
            tmp.write_text(json.dumps(index, indent=1))
    except OSError as exc:
        log.info("cannot remember the hash of %s (%s)", path.name, exc)
    return digest.hexdigest()


@dataclass(frozen=True)
class PreparedModels:
    """The copies of one folder at one precision; `settings` is everything else the transforms depend on."""

    model_dir: Path
    folder: Path
    precision: str
    settings: dict

    @classmethod
    def for_folder(cls, model_dir: Path, precision: str, settings: object, choices: dict) -> PreparedModels:
        """settings: the precision's `FastSettings`; choices: what the CPU decided (bf16 native, int4 kernels)."""
        fields = {name: value for name, value in (asdict(settings) if settings is not None else {}).items()
                  if name in WEIGHT_FIELDS}
        return cls(Path(model_dir), cache_dir_for(model_dir), precision,
                   {**fields, **choices, "format": FORMAT, "torch": torch.__version__.split("+")[0]})

    def path_for(self, file_name: str) -> Path:
        sha = source_sha256(self.model_dir / file_name, self.folder)
        key = hashlib.sha256(json.dumps({"sha256": sha, "precision": self.precision, **self.settings},
                                        sort_keys=True).encode()).hexdigest()[:16]
        return self.folder / f"{Path(file_name).stem}-{self.precision}-{key}.safetensors"

    def load(self, file_name: str, build: Callable[[], nn.Module],
             transform: Callable[[nn.Module], dict]) -> tuple[nn.Module, dict] | None:
        """The module built on `meta`, transformed and filled from its copy, with the transform's record; None
        when there is no usable copy (a damaged or mismatched one is deleted)."""
        path = self.path_for(file_name)
        if not path.is_file():
            return None
        try:
            with torch.device("meta"):
                module = build()
                done = transform(module)
        except (NotImplementedError, RuntimeError, ValueError, TypeError) as exc:  # a layout meta cannot build
            log.warning("cannot lay out %s without its values (%s); loading the float file instead", file_name, exc)
            return None
        try:
            fill(module, path)
        except (PreparedMismatch, OSError, ValueError, RuntimeError, AttributeError, TypeError) as exc:
            log.warning("the prepared copy of %s does not fit this build (%s); loading the float file instead",
                        file_name, exc)
            path.unlink(missing_ok=True)
            return None
        return module.eval(), done

    def save(self, file_name: str, module: nn.Module) -> None:
        """Write the module's copy (atomically) and delete older copies of the same file at this precision.
        Best effort: a full disk or a read-only place only costs the next load its speed."""
        try:
            path = self.path_for(file_name)
            self.folder.mkdir(parents=True, exist_ok=True)
            with atomic_path(path) as tmp:
                write(module, tmp, {"source": file_name, "precision": self.precision})
            for old in self.folder.glob(f"{Path(file_name).stem}-{self.precision}-*.safetensors"):
                if old != path:
                    old.unlink(missing_ok=True)
            log.info("wrote the prepared copy of %s (%s, %.0f MB)", file_name, self.precision,
                     path.stat().st_size / 2**20)
        except (OSError, PreparedMismatch) as exc:
            log.warning("cannot write a prepared copy of %s (%s); every load will convert the float file",
                        file_name, exc)


# --- what a module holds ---------------------------------------------------------------------------------


def _owned(module: nn.Module) -> Iterator[tuple[str, nn.Module]]:
    """(path, submodule) for every submodule that holds tensors of its own (the packed-params holder of an int8
    linear belongs to the linear)."""
    for name, sub in module.named_modules():
        if type(sub).__name__ == "LinearPackedParams":
            continue
        yield name, sub


def _tensor_slots(sub: nn.Module) -> Iterator[tuple[str, str, torch.Tensor]]:
    """(kind, name, tensor) of one submodule's own tensors: parameters, buffers, plain tensor attributes."""
    for name, value in sub._parameters.items():
        if value is not None:
            yield "param", name, value
    for name, value in sub._buffers.items():
        if value is not None:
            yield "buffer", name, value
    for name, value in vars(sub).items():
        if isinstance(value, torch.Tensor) and not name.startswith("_"):
            yield "attr", name, value
        elif _helper(value):  # e.g. a position table object a module keeps
            for inner, tensor in vars(value).items():
                if isinstance(tensor, torch.Tensor):
                    yield "attr", f"{name}.{inner}", tensor


def _helper(value: object) -> bool:
    """A plain object of this package that a module holds (not a module, tensor or container)."""
    return (not isinstance(value, (nn.Module, torch.Tensor, type)) and hasattr(value, "__dict__")
            and type(value).__module__.startswith(__package__ or "cosyvoice_ui"))


class _LastUnpacked:
    """The int8 values of the linear read last: its parts are read one after another, so each linear is
    unpacked once per pass, and only one unpacked copy exists at a time."""

    def __init__(self) -> None:
        self.linear: nn.Module | None = None
        self.values: tuple = ()

    def of(self, linear: DynamicQuantLinear) -> tuple:
        if linear is not self.linear:
            self.linear, self.values = None, ()
            self.values, self.linear = linear._packed_params._weight_bias(), linear
        return self.values


def _entries(module: nn.Module, last: _LastUnpacked) -> Iterator[tuple[str, Callable[[], torch.Tensor]]]:
    """(key, producer) of every tensor a copy stores; producers run one at a time while writing."""
    for path, sub in _owned(module):
        prefix = f"{path}." if path else ""
        if isinstance(sub, DynamicQuantLinear):
            yield from _int8_entries(prefix, sub, last)
        for _, name, tensor in _tensor_slots(sub):
            yield prefix + name, (lambda t=tensor: t)


def _int8_entries(prefix: str, linear: DynamicQuantLinear,
                  last: _LastUnpacked) -> Iterator[tuple[str, Callable[[], torch.Tensor]]]:
    def part(index: int) -> torch.Tensor:
        weight, bias = last.of(linear)
        if index == 3:
            return bias
        if index == 0:
            return weight.int_repr()
        if weight.qscheme() == torch.per_tensor_affine:
            return torch.tensor([weight.q_scale() if index == 1 else weight.q_zero_point()],
                                dtype=torch.float64 if index == 1 else torch.int64)
        if weight.qscheme() == torch.per_channel_affine and weight.q_per_channel_axis() == 0:
            return weight.q_per_channel_scales().double() if index == 1 else weight.q_per_channel_zero_points().long()
        raise PreparedMismatch(f"an int8 linear quantised as {weight.qscheme()}, which copies do not store")

    has_bias = last.of(linear)[1] is not None
    for index, suffix in enumerate(_INT8):
        if index < 3 or has_bias:
            yield prefix + suffix[1:], (lambda i=index: part(i))


# --- the file: safetensors, written one tensor at a time ------------------------------------------------


def _identity(tensor: torch.Tensor) -> tuple:
    """Equal for two tensors that are the same memory (tied weights are often two parameters over one
    storage, as `load_state_dict(assign=True)` leaves a file's shared tensors)."""
    return (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape), tensor.stride(),
            tensor.dtype)


def write(module: nn.Module, path: Path, metadata: dict[str, str]) -> None:
    """Store `module`'s tensors in safetensors format, producing and writing each tensor in turn (the whole
    copy never sits in memory twice). A tensor that is another's alias (tied weights) is stored once and
    recorded in the metadata."""
    layout, aliases, seen, producers, offset = {}, {}, {}, [], 0
    last = _LastUnpacked()
    for key, produce in _entries(module, last):
        tensor = produce()
        if tensor.device.type != "cpu" or tensor.dtype not in _DTYPES:
            raise OSError(f"{key}: a {tensor.dtype} tensor on {tensor.device} cannot be stored")
        identity = _identity(tensor)
        if identity in seen:
            aliases[key] = seen[identity]
            continue
        if not key.endswith(_INT8):  # int8 parts are new tensors per call: no identity to share
            seen[identity] = key
        size = tensor.numel() * tensor.element_size()
        layout[key] = {"dtype": _DTYPES[tensor.dtype], "shape": list(tensor.shape), "data_offsets": [0, size]}
        producers.append((key, produce, tensor.element_size(), key.endswith(_INT8)))
        del tensor
    # The tensors a model keeps are mapped when read (`_CopyReader`): stored widest element first from the
    # 8-byte aligned start, each sits aligned to its element size. The int8 parts are read by copy and come last,
    # each linear's together (it is unpacked once per pass).
    producers.sort(key=lambda entry: (entry[3], -entry[2] if not entry[3] else 0))
    for key, _, size_of, _ in producers:
        size = layout[key]["data_offsets"][1]
        layout[key]["data_offsets"] = [offset, offset + size]
        offset += size
    header = {"__metadata__": {**metadata, "format": str(FORMAT), "aliases": json.dumps(aliases)}, **layout}
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)  # the data starts 8-byte aligned
    with open(path, "wb") as out:
        out.write(struct.pack("<Q", len(encoded)))
        out.write(encoded)
        for key, produce, _, _ in producers:
            tensor = produce().detach().contiguous()
            if tensor.numel():
                out.write(memoryview(tensor.reshape(-1).view(torch.uint8).numpy()))  # no copy of a large table
            del tensor
        out.flush()
        os.fsync(out.fileno())


class _CopyReader:
    """A copy's tensors, one at a time: the int8 parts (packed into new layouts at once) by plain reads into
    fresh tensors, and the tensors the model keeps as views of a private memory map of the copy (their pages
    are read when first used, and a kept float table, such as a text embedding, stays mostly on disk)."""

    MAX_HEADER = 64 << 20

    def __init__(self, path: Path) -> None:
        self.handle = open(path, "rb")
        self.mapped: mmap.mmap | None = None  # stays open while a tensor views it (frombuffer holds it)
        size = os.fstat(self.handle.fileno()).st_size
        (length,) = struct.unpack("<Q", self.handle.read(8) or b"\0" * 8)
        if not 2 <= length <= min(self.MAX_HEADER, size - 8):
            raise PreparedMismatch("the copy's header is damaged")
        header = json.loads(self.handle.read(length))
        self.metadata: dict[str, str] = header.pop("__metadata__", {}) or {}
        self.start = 8 + length
        names = {code: dtype for dtype, code in _DTYPES.items()}
        self.entries: dict[str, tuple[torch.dtype, list[int], int, int]] = {}
        for key, entry in header.items():
            dtype = names.get(entry.get("dtype"))
            begin, end = entry.get("data_offsets", (0, -1))
            shape = entry.get("shape", [])
            count = 1
            for dim in shape:
                count *= dim
            if dtype is None or not 0 <= begin <= end <= size - self.start or \
                    end - begin != count * torch.empty((), dtype=dtype).element_size():
                raise PreparedMismatch(f"{key}: the copy's entry is damaged")
            self.entries[key] = (dtype, shape, begin, end)

    def keys(self) -> set[str]:
        return set(self.entries)

    def get(self, key: str) -> torch.Tensor:
        dtype, shape, begin, end = self.entries[key]
        start = self.start + begin
        if not key.endswith(_INT8) and end > begin and start % torch.empty((), dtype=dtype).element_size() == 0:
            if self.mapped is None:
                self.mapped = mmap.mmap(self.handle.fileno(), 0, access=mmap.ACCESS_COPY)
            count = (end - begin) // torch.empty((), dtype=dtype).element_size()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # ACCESS_COPY is writable; nothing writes the weights
                return torch.frombuffer(self.mapped, dtype=dtype, count=count, offset=start).reshape(shape)
        tensor = torch.empty(shape, dtype=dtype)
        if end > begin:
            view = memoryview(tensor.reshape(-1).view(torch.uint8).numpy())
            if os.preadv(self.handle.fileno(), [view], self.start + begin) != end - begin:
                raise PreparedMismatch(f"{key}: the copy ends early")
        return tensor

    def close(self) -> None:
        self.handle.close()


def fill(module: nn.Module, path: Path) -> None:
    """Give a meta-built, transformed module the tensors of its copy at `path`, in place."""
    reader = _CopyReader(path)
    try:
        _fill_from(module, reader)
    finally:
        reader.close()


def _fill_from(module: nn.Module, reader: _CopyReader) -> None:
    meta = reader.metadata
    if meta.get("format") != str(FORMAT):
        raise PreparedMismatch(f"format {meta.get('format')} (this build reads {FORMAT})")
    aliases: dict[str, str] = json.loads(meta.get("aliases", "{}"))
    stored = reader.keys()
    shared = set(aliases.values())
    read: dict[str, torch.Tensor] = {}

    def get(key: str) -> torch.Tensor:
        source = aliases.get(key, key)
        if source not in stored:
            raise PreparedMismatch(f"{key} is not in the copy")
        if source in read:
            return read[source]
        tensor = reader.get(source)
        if source in shared:
            read[source] = tensor  # the same memory for every name that shares it
        return tensor

    used: set[str] = set()
    for prefix, sub in _owned(module):
        prefix = f"{prefix}." if prefix else ""
        if isinstance(sub, DynamicQuantLinear):
            _fill_int8(sub, prefix, get, used)
        for kind, name, slot in list(_tensor_slots(sub)):
            tensor = get(prefix + name)
            used.add(prefix + name)
            if tensor.shape != slot.shape or tensor.dtype != slot.dtype:
                raise PreparedMismatch(f"{prefix}{name}: copy {tuple(tensor.shape)} {tensor.dtype}, module "
                                       f"{tuple(slot.shape)} {slot.dtype}")
            if kind == "param":
                sub._parameters[name] = nn.Parameter(tensor, requires_grad=False)
            elif kind == "buffer":
                sub._buffers[name] = tensor
            else:
                owner, _, attr = name.rpartition(".")
                if owner:  # a helper object, possibly a frozen dataclass: filling is part of building it
                    object.__setattr__(getattr(sub, owner), attr, tensor)
                else:
                    setattr(sub, attr, tensor)
    left = (stored | set(aliases)) - used
    if left:
        raise PreparedMismatch(f"{len(left)} tensors of the copy have no place (e.g. {sorted(left)[:3]})")
    on_meta = [f"{path}.{name}" for path, sub in _owned(module) for _, name, t in _tensor_slots(sub) if t.is_meta]
    if on_meta:
        raise PreparedMismatch(f"{len(on_meta)} tensors were not filled (e.g. {on_meta[:3]})")


def _fill_int8(linear: DynamicQuantLinear, prefix: str, get: Callable[[str], torch.Tensor], used: set[str]) -> None:
    keys = [prefix + suffix[1:] for suffix in _INT8]
    values = get(keys[0]), get(keys[1]), get(keys[2])
    used.update(keys[:3])
    bias = None
    if linear._packed_params._weight_bias()[1] is not None:  # the slot was built with a bias
        bias = get(keys[3])
        used.add(keys[3])
    weight, scale, zero_point = values
    if tuple(weight.shape) != (linear.out_features, linear.in_features) or weight.dtype != torch.int8:
        raise PreparedMismatch(f"{prefix}: copy {tuple(weight.shape)} {weight.dtype}, module "
                               f"({linear.out_features}, {linear.in_features}) int8")
    if scale.numel() == 1:
        qweight = torch._make_per_tensor_quantized_tensor(weight, float(scale), int(zero_point))
    else:
        qweight = torch._make_per_channel_quantized_tensor(weight, scale, zero_point, 0)
    linear.set_weight_bias(qweight, bias)
