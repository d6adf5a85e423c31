"""Prepared copies (cosyvoice/prepared.py): a fast load writes each model as fast precision leaves it, the next
load fills a meta-built model from it, and the two engines are the same engine: same tensors, same audio. A
damaged, stale or foreign copy is never used; the float file is read through a memory map whose pages are let go
(checkpoint.mapped_pages_dropped)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from cosyvoice_ui import Mode, SynthesisRequest, load_engine
from cosyvoice_ui.cosyvoice.checkpoint import _mapped_ranges, _still_maps, mapped_pages_dropped, read_state_dict
from cosyvoice_ui.cosyvoice.prepared import ENABLED_ENV, FOLDER_NAME, cache_dir_for
from cosyvoice_ui.testing.signals import voice_clip

REQUEST = SynthesisRequest(Mode.ZERO_SHOT, text="Same voice.", prompt_audio=voice_clip(3.0),
                           prompt_text="A prompt transcript.", seed=7)


def _copy(folder: Path, tmp_path: Path) -> Path:
    target = tmp_path / folder.name
    shutil.copytree(folder, target, ignore=shutil.ignore_patterns(FOLDER_NAME))
    return target


def _audio(engine) -> np.ndarray:
    return np.concatenate([chunk.samples for chunk in engine.synthesize(REQUEST)])


def _copies(folder: Path) -> list[str]:
    return sorted(p.name for p in (folder / FOLDER_NAME).glob("*.safetensors"))


@pytest.mark.parametrize("family", ["v1", "v2", "v3"])
def test_a_second_fast_load_reads_the_copy_and_speaks_identically(family, tiny_base, tiny_v2, tiny_v3,
                                                                   tmp_path) -> None:
    folder = _copy({"v1": tiny_base, "v2": tiny_v2, "v3": tiny_v3}[family], tmp_path)
    first = load_engine(folder, device="cpu", precision="fast")
    assert first.info.precision.prepared == "written"
    assert [name.split("-")[0] for name in _copies(folder)] == ["flow", "hift", "llm"]
    second = load_engine(folder, device="cpu", precision="fast")
    assert second.info.precision.prepared == "read"
    assert second.info.precision == first.info.precision.__class__(**{**first.info.precision.__dict__,
                                                                        "prepared": "read"})
    for name in ("llm", "flow", "hift"):
        a, b = getattr(first, name), getattr(second, name)
        assert [type(m) for m in a.modules()] == [type(m) for m in b.modules()]
        assert not any(t.is_meta for t in b.parameters()) and not any(t.is_meta for t in b.buffers())
    assert np.array_equal(_audio(first), _audio(second))


def test_position_tables_are_rebuilt_not_stored(tiny_base, tmp_path) -> None:
    """v1's relative-position sinusoids are derived data: no copy holds them, and a module filled from its copy
    computes them on first use (not left on the meta device it was laid out on)."""
    from safetensors import safe_open

    folder = _copy(tiny_base, tmp_path)
    load_engine(folder, device="cpu", precision="fast")
    for copy in (folder / FOLDER_NAME).glob("*.safetensors"):
        with safe_open(str(copy), framework="pt") as handle:
            assert not [k for k in handle.keys() if "pos_table" in k], copy.name
    second = load_engine(folder, device="cpu", precision="fast")
    assert second.info.precision.prepared == "read"
    table = second.llm.llm.pos_table
    assert not table.vectors(3, torch.device("cpu"), torch.float32).is_meta
    assert np.isfinite(_audio(second)).all()


def test_extra_fast_int4_layers_come_back_from_their_copy(tiny_v3, tmp_path) -> None:
    folder = _copy(tiny_v3, tmp_path)
    first = load_engine(folder, device="cpu", precision="extra-fast")
    second = load_engine(folder, device="cpu", precision="extra-fast")
    assert (first.info.precision.prepared, second.info.precision.prepared) == ("written", "read")
    assert second.info.precision.llm == first.info.precision.llm
    assert np.array_equal(_audio(first), _audio(second))


def test_copies_are_safetensors_and_hold_no_float_linear_of_the_llm(tiny_v3, tmp_path) -> None:
    from safetensors import safe_open

    folder = _copy(tiny_v3, tmp_path)
    load_engine(folder, device="cpu", precision="fast")
    llm = next((folder / FOLDER_NAME).glob("llm-fast-*.safetensors"))
    with safe_open(str(llm), framework="pt") as handle:  # the reference reader accepts what we wrote
        keys = set(handle.keys())
        meta = handle.metadata()
        weight = handle.get_tensor(next(k for k in keys if k.endswith("qkv_proj.int8_weight")))
    assert meta["precision"] == "fast" and meta["source"] == "llm.pt"
    assert weight.dtype == torch.int8
    assert not any(k.endswith("qkv_proj.weight") or k.endswith("q_proj.weight") for k in keys)


def test_a_damaged_copy_is_replaced_and_the_load_still_succeeds(tiny_v2, tmp_path, caplog) -> None:
    folder = _copy(tiny_v2, tmp_path)
    reference = _audio(load_engine(folder, device="cpu", precision="fast"))
    llm = next((folder / FOLDER_NAME).glob("llm-fast-*.safetensors"))
    llm.write_bytes(llm.read_bytes()[: llm.stat().st_size // 2])  # cut in half
    again = load_engine(folder, device="cpu", precision="fast")
    assert again.info.precision.prepared == "written"  # flow and hift read, the llm converted and written again
    assert "does not fit" in caplog.text
    assert np.array_equal(_audio(again), reference)
    assert load_engine(folder, device="cpu", precision="fast").info.precision.prepared == "read"


def test_a_foreign_copy_under_the_right_name_is_refused(tiny_v3, tmp_path) -> None:
    folder = _copy(tiny_v3, tmp_path)
    load_engine(folder, device="cpu", precision="fast")
    flow = next((folder / FOLDER_NAME).glob("flow-fast-*.safetensors"))
    hift = next((folder / FOLDER_NAME).glob("hift-fast-*.safetensors"))
    shutil.copyfile(hift, flow)  # a valid file of another model
    engine = load_engine(folder, device="cpu", precision="fast")
    assert engine.info.precision.prepared == "written"
    assert np.all(np.isfinite(_audio(engine)))


def test_a_changed_model_file_gets_a_new_copy_and_the_old_one_goes(tiny_v3, tmp_path) -> None:
    folder = _copy(tiny_v3, tmp_path)
    load_engine(folder, device="cpu", precision="fast")
    before = _copies(folder)
    state = read_state_dict(folder / "hift.pt")
    key = next(k for k, v in state.items() if v.is_floating_point())
    state[key] = state[key] + 0.01
    torch.save(state, folder / "hift.pt")
    engine = load_engine(folder, device="cpu", precision="fast")
    after = _copies(folder)
    assert engine.info.precision.prepared == "written"
    assert [n for n in after if n.startswith("hift")] != [n for n in before if n.startswith("hift")]
    assert len([n for n in after if n.startswith("hift")]) == 1
    assert [n for n in after if not n.startswith("hift")] == [n for n in before if not n.startswith("hift")]
    sources = json.loads((folder / FOLDER_NAME / "sources.json").read_text())
    assert set(sources) == {"llm.pt", "flow.pt", "hift.pt"}


def test_stock_and_the_switch_write_no_copy(tiny_v2, tmp_path, monkeypatch) -> None:
    folder = _copy(tiny_v2, tmp_path)
    assert load_engine(folder, device="cpu").info.precision.prepared == ""
    monkeypatch.setenv(ENABLED_ENV, "0")
    assert load_engine(folder, device="cpu", precision="fast").info.precision.prepared == ""
    assert not (folder / FOLDER_NAME).exists()


def test_a_read_only_folder_keeps_its_copies_in_the_user_cache(tiny_v3, tmp_path, monkeypatch) -> None:
    import cosyvoice_ui.cosyvoice.prepared as prepared

    folder = _copy(tiny_v3, tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(prepared.os, "access", lambda path, mode: Path(path) != folder.resolve())
    where = cache_dir_for(folder)
    assert where.is_relative_to(tmp_path / "cache") and where.name.startswith(folder.name)
    load_engine(folder, device="cpu", precision="fast")
    assert load_engine(folder, device="cpu", precision="fast").info.precision.prepared == "read"
    assert len(list(where.glob("*.safetensors"))) == 3 and not (folder / FOLDER_NAME).exists()


def _resident_kib(ranges: list[tuple[int, int]]) -> int:
    """Resident KiB of this process's mappings that start at the given addresses (/proc/self/smaps)."""
    starts = {start for start, _ in ranges}
    total, inside = 0, False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                inside = int(head.split("-")[0], 16) in starts
            elif inside and head == "Rss:":
                total += int(line.split()[1])
    return total


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="needs Linux's /proc")
def test_mapped_pages_are_let_go_and_the_values_survive(tmp_path) -> None:
    path = tmp_path / "weights.pt"
    torch.save({"w": torch.arange(4 << 20, dtype=torch.float32)}, path)  # 16 MiB
    state = read_state_dict(path, mapped=True)
    ranges = _mapped_ranges(path.resolve())
    assert ranges, "the file is read through a memory map"
    with mapped_pages_dropped(path, every_s=60.0):  # only the drop at the end
        total = float(state["w"].sum())  # touches every page
        assert _resident_kib(ranges) >= 15 * 1024
    assert _resident_kib(ranges) < 1024
    assert float(state["w"].sum()) == total  # read again from the file: nothing was lost


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="needs Linux's /proc")
def test_pages_go_while_the_block_still_runs(tmp_path) -> None:
    """The drop thread lets pages go during the conversion, not only at its end: a conversion that reads the
    whole file never holds it all at once."""
    import time

    path = tmp_path / "weights.pt"
    torch.save({"w": torch.arange(4 << 20, dtype=torch.float32)}, path)  # 16 MiB
    state = read_state_dict(path, mapped=True)
    ranges = _mapped_ranges(path.resolve())
    with mapped_pages_dropped(path, every_s=0.002):
        total = float(state["w"].sum())
        deadline = time.monotonic() + 5.0
        while _resident_kib(ranges) >= 1024 and time.monotonic() < deadline:
            time.sleep(0.005)
        assert _resident_kib(ranges) < 1024, "the touched pages were still resident inside the block"
        assert float(state["w"].sum()) == total


@pytest.mark.skipif(not Path("/proc/self/map_files").exists(), reason="needs Linux's /proc/self/map_files")
def test_a_range_is_confirmed_only_while_it_maps_the_file(tmp_path) -> None:
    path = tmp_path / "weights.pt"
    other = tmp_path / "other.pt"
    torch.save({"w": torch.zeros(1 << 20)}, path)
    torch.save({"w": torch.zeros(1 << 20)}, other)
    state = read_state_dict(path, mapped=True)
    (start, end), = _mapped_ranges(path.resolve())
    assert _still_maps(start, end, path.resolve())
    assert not _still_maps(start, end, other.resolve())  # another file's name
    assert not _still_maps(start, end + 4096, path.resolve())  # not exactly that mapping
    del state
    import gc

    gc.collect()  # the last view of the map goes: so does the mapping
    assert not _mapped_ranges(path.resolve())
    assert not _still_maps(start, end, path.resolve())


def test_every_fast_setting_is_known_to_change_weights_or_not() -> None:
    import dataclasses

    from cosyvoice_ui.cosyvoice.precision import FastSettings
    from cosyvoice_ui.cosyvoice.prepared import RUN_TIME_FIELDS, WEIGHT_FIELDS

    fields = {f.name for f in dataclasses.fields(FastSettings)}
    assert fields == set(WEIGHT_FIELDS) | set(RUN_TIME_FIELDS), "a new FastSettings field: does it change tensors?"
    assert not set(WEIGHT_FIELDS) & set(RUN_TIME_FIELDS)


def test_run_time_settings_share_one_copy(tiny_v3, tmp_path) -> None:
    from cosyvoice_ui.cosyvoice.precision import FastSettings

    folder = _copy(tiny_v3, tmp_path)
    load_engine(folder, device="cpu", precision="fast")
    other = load_engine(folder, device="cpu", precision="fast", fast=FastSettings(n_timesteps=4,
                                                                                flow_prompt_seconds=2.0))
    assert other.info.precision.prepared == "read" and other.n_timesteps == 4
