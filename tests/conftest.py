"""Shared test fixtures: paths to the golden data in ../shared/fixtures (skipped when absent)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Bad takes are checked and reported everywhere, but not re-rendered unless a test asks: the tiny random models
# are never the right length, so the default 2 retries would triple every synthesis of the suite. Set before any
# Settings or CLI parser is built (subprocesses inherit it); the tests of retrying pass their own count.
os.environ.setdefault("COSYVOICE_TAKE_RETRIES", "0")
# Outputs carry the watermark everywhere but here: many tests compare rendered samples with the engine's own (or
# with each other across doors, processes and thread counts). The tests of the mark turn it on themselves
# (Settings(watermark=True), COSYVOICE_WATERMARK=1 for the processes they start): tests/test_watermark*.py.
os.environ.setdefault("COSYVOICE_WATERMARK", "0")

REPO = Path(__file__).resolve().parents[1]
SHARED_FIXTURES = REPO.parent / "shared" / "fixtures"


def fixture_dir(name: str) -> Path:
    """The golden folder `name`. Without ../shared beside the repo the test is skipped with the reason,
    except under CI (CI=true), where golden data must be there: a missing folder fails the run."""
    path = SHARED_FIXTURES / name
    if not path.is_dir():
        reason = f"golden fixtures not found at ../shared/fixtures/{name} (clone the shared data beside the repo)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    return path


@pytest.fixture(scope="session")
def v1_fixture() -> Path:
    return fixture_dir("cosyvoice1-tiny")


def _tiny(tmp_path_factory: pytest.TempPathFactory, name: str, **options) -> Path:
    from cosyvoice_ui.testing.tiny_model import write_tiny_model

    return write_tiny_model(tmp_path_factory.mktemp("models") / name, **options)


@pytest.fixture(scope="session", autouse=True)
def _audit_trail_in_tmp(tmp_path_factory: pytest.TempPathFactory) -> None:
    """A public server keeps an audit trail by default (`settings.DEFAULT_AUDIT_LOG`, in the working folder):
    the public apps tests build in this process write theirs to a temporary folder, not into the checkout."""
    import cosyvoice_ui.settings as settings

    settings.DEFAULT_AUDIT_LOG = tmp_path_factory.mktemp("audit") / "audit.jsonl"


@pytest.fixture(scope="session", autouse=True)
def _single_thread() -> None:
    """Tiny models run faster on one thread (and tests are never timed)."""
    import torch

    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random CosyVoice-300M folder (no preset speakers)."""
    return _tiny(tmp_path_factory, "tiny-base")


@pytest.fixture(scope="session")
def tiny_sft(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random CosyVoice-300M-SFT folder (7 preset speakers)."""
    return _tiny(tmp_path_factory, "tiny-sft", sft=True)


@pytest.fixture(scope="session")
def tiny_instruct(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random CosyVoice-300M-Instruct folder."""
    return _tiny(tmp_path_factory, "tiny-instruct", instruct=True)



@pytest.fixture(scope="session")
def tiny_v2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random CosyVoice2-0.5B folder (with 7 preset speakers in spk2info.pt)."""
    return _tiny(tmp_path_factory, "tiny-v2", family="v2", sft=True)


@pytest.fixture(scope="session")
def tiny_v3(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Fun-CosyVoice3-0.5B folder (no preset speakers)."""
    return _tiny(tmp_path_factory, "tiny-v3", family="v3")


# Under pytest-xdist (test.sh: `-n 2 --dist loadfile --no-loadscope-reorder`) each test file runs whole on one
# worker, so a module's fixtures (a loaded engine, a served app) are built once. The longest files go first, so
# that neither worker is left with one of them at the end (longest first in a measured run on the 2-core machine,
# December 2026; a file not listed keeps its place after them). Without xdist the order is the same.
# (Not --dist loadgroup: xdist 3.8 names a group by editing the test's node id, which pytest 9 no longer reads.)
LONGEST_FIRST = (
    "tests/test_container_image.py", "tests/offline/test_engine_real.py",
    "tests/test_cluster_netns.py", "tests/reliability/test_bad_input_rest.py", "tests/reliability/test_bad_input_cli.py",
    "tests/test_surfaces_v2v3.py", "tests/reliability/test_soak_short.py", "tests/reliability/test_bad_input_ui.py",
    "tests/ui/test_browser.py", "tests/test_bench_smoke.py", "tests/test_cli_studio.py",
    "tests/reliability/test_hostile_load.py", "tests/test_engine.py", "tests/test_cli.py", "tests/test_batch.py",
)


# Outside the inner-loop tier (`bash test.sh --fast` = -m "not slow"), besides the tests marked slow in their files:
# each of these took over 3 s (a file: most of its tests did) in a measured run, mostly real syntheses on tiny
# models through a whole surface. Whole files, or file::test (every parametrisation).
SLOW_HERE = frozenset((
    # The bad-input corpora through each door (the one speech job's checks run in the fast tier).
    "tests/reliability/test_bad_input_rest.py", "tests/reliability/test_bad_input_cli.py",
    "tests/reliability/test_bad_input_ui.py",
    "tests/reliability/test_api_fuzz.py", "tests/reliability/test_frontend_properties.py",
    "tests/reliability/test_faults_models.py", "tests/reliability/test_faults_process.py",
    "tests/reliability/test_faults_stream.py", "tests/test_surfaces_v2v3.py", "tests/test_bad_takes_bench.py",
    "tests/test_bench_smoke.py", "tests/test_batch.py", "tests/test_gpu_v3_smoke.py", "tests/ui/test_mcp.py",
    # Decompression bombs and their memory bounds; engines built per family for the deviation table.
    "tests/reliability/test_hostile_documents.py", "tests/reliability/test_hostile_audio.py",
    "tests/test_deviation.py", "tests/test_fourth_family.py",
    "tests/test_default_voice.py::test_marking_a_saved_voice_as_default_over_the_api",
    "tests/test_default_voice.py::test_base_model_speaks_text_alone_with_the_builtin_voice",
    "tests/test_default_voice.py::test_cli_synth_with_only_text_on_a_base_model",
    "tests/test_api.py::test_unseeded_request_reports_a_seed_that_reproduces_it",
    "tests/test_api.py::test_repeated_seeded_request_is_served_from_cache_without_the_model",
    "tests/test_api.py::test_openai_python_client_request_shape",
    "tests/test_api_transcribe.py::test_tiny_whisper_end_to_end",
    "tests/studio/test_render.py::test_end_to_end_on_a_tiny_cosyvoice2",
    "tests/studio/test_render.py::test_end_to_end_on_the_offline_voice",
    "tests/studio/test_audiobook.py::test_end_to_end_on_the_offline_voice_with_the_default_voice",
    "tests/studio/test_audiobook.py::test_end_to_end_on_a_tiny_cosyvoice_model",
    "tests/test_cli.py::test_synth_every_mode_on_a_tiny_model",
    "tests/test_cli.py::test_parity_command_fails_on_altered_weights",
    "tests/test_cli.py::test_parity_command_passes_on_the_fixture",
    "tests/test_cli.py::test_synth_instruct_and_stream_to_mp3",
    "tests/test_cli.py::test_bad_requests_exit_2_with_a_message",
    "tests/test_cli_studio.py::test_script_on_a_tiny_model_writes_mix_stems_and_subtitles_that_match",
    "tests/test_cli_studio.py::test_book_on_a_tiny_model_yields_three_chapters_and_a_chaptered_m4b",
    "tests/test_cli_studio.py::test_plain_synth_subtitles_match_the_audio_on_a_tiny_model",
    "tests/reliability/test_sharing.py::test_local_batch_is_not_throttled_and_public_gets_429_with_retry_after",
    "tests/reliability/test_sharing.py::test_no_auth_and_loopback_stay_open",
    "tests/reliability/test_sharing.py::test_gradio_api_accepts_the_api_key",
    "tests/reliability/test_sharing.py::test_gradio_client_needs_the_login_or_the_key",
    "tests/reliability/test_faults_storage.py::test_kill_9_while_writing_then_restart_keeps_every_record_whole",
    "tests/test_deviation.py::test_report_has_every_row_with_finite_numbers",
    "tests/test_engine.py::test_fast_precision_streams",
    "tests/test_engine.py::test_saved_voices_in_every_voice_mode",
    "tests/test_engine.py::test_folders_load_as_their_family",
    "tests/test_engine.py::test_streamed_audio_has_the_whole_length",
    "tests/test_engine.py::test_long_text_is_split_and_streamed_in_chunks",
    "tests/test_engine.py::test_text_modes_produce_plausible_length",
    "tests/test_voices.py::test_manager_registers_library_voices_on_every_load",
    "tests/test_voices.py::test_engine_computes_features_once_then_reads_them",
    "tests/test_takes_retry.py::test_tiny_cosyvoice_fills_tokens_and_is_checked",
    "tests/test_remote.py::test_thin_client_synthesis_equals_local",
    "tests/test_remote.py::test_thin_client_reads_the_family_facts_of_a_v3_instance",
    "tests/test_remote.py::test_server_keeps_serving_concurrent_requests",
    "tests/test_streaming.py::test_chunked_audio_matches_whole_length_and_joins_without_spikes",
    "tests/test_fast_mode.py::test_stock_engine_is_stock_and_explicit_steps_win",
    "tests/test_fast_mode.py::test_extra_fast_v3_drops_guidance_and_still_speaks",
    "tests/test_api_studio.py::test_tts_with_subtitles_and_a_glossary_on_the_tiny_model",
    "tests/test_api.py::test_client_leaving_a_stream_frees_the_queue",
    "tests/test_api.py::test_tts_returns_base64_audio_with_seed_and_cache_headers",
))


def _file_of(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


def _unique_node_ids(items: list[pytest.Item]) -> None:
    """Schemathesis (4.32 under pytest 9) gives every operation's test the same node id, "[POST /tts]" only in its
    name; xdist schedules by node id and would run one of them. Each such test gets its name in its id."""
    from collections import Counter

    from _pytest.nodeid import coerce_node_id  # pytest 9 keeps the id as a structured NodeId

    counts = Counter(item.nodeid for item in items)
    for item in items:
        if counts[item.nodeid] > 1 and item.name not in item.nodeid:
            item._id = coerce_node_id(f"{item.nodeid.rsplit('::', 1)[0]}::{item.name}")


@pytest.hookimpl(tryfirst=True)  # before the mark plugin's hook, which deselects -m "not slow"
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _unique_node_ids(items)
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(_file_of(item), len(rank)))  # stable: a file's own order is kept
    for item in items:
        path = _file_of(item)
        if path in SLOW_HERE or item.nodeid.split("[", 1)[0] in SLOW_HERE:
            item.add_marker(pytest.mark.slow)
