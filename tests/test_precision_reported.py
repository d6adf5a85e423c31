"""`/health` and `/v1/models` say which precision the model computes in (issue 25): the mode it will load in
before it is loaded, and each stage's form once it is. With no `--precision` (the default "auto") an app on a CPU
reports, loads and shows in the UI's radio "fast", never "auto"; `--precision stock` still gives stock."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

import pytest

from cosyvoice_ui.settings import Settings
from cosyvoice_ui.web.flags import build_parser, settings_from_args
from cosyvoice_ui.web.server import create_app
from tests.web_client import LOOPBACK


def test_health_and_models_report_the_precision_in_effect(tiny_sft: Path, tmp_path: Path) -> None:
    settings = Settings(model_dir=tiny_sft, voices_dir=tmp_path / "v", glossary_dir=tmp_path / "g",
                        projects_dir=tmp_path / "p", idle_unload_s=0, precision="fast",
                        extra={"output_dir": str(tmp_path / "out")})
    with TestClient(create_app(settings), base_url=LOOPBACK) as client:
        before = client.get("/health").json()["model"]["precision"]
        assert before == {"mode": "fast", "loaded": False}
        assert client.post("/tts", json={"text": "Hello there.", "speaker": "英文女"}).status_code == 200
        health = client.get("/health").json()["model"]["precision"]
        listed = client.get("/v1/models").json()["data"][0]["precision"]
    assert health == listed and health["mode"] == "fast" and health["loaded"] is True
    assert "int8" in health["llm"]  # what the stage runs as, not only the mode's name
    from cosyvoice_ui.cosyvoice.models.linears import int8_matrix_units

    from cosyvoice_ui.cosyvoice.kernels import int8_linear_available

    # where the int8 rows run: prefills on oneDNN where the CPU has AMX (and the owner did not turn it off), else
    # every call on the project's own kernel where it builds, else fbgemm (nothing to report)
    if int8_matrix_units():
        assert health["llm_rows"].startswith("oneDNN int8")
    elif int8_linear_available():
        assert health["llm_rows"].startswith("own int8 kernel")
    else:
        assert health["llm_rows"] == ""
    assert health["llm_step"] == "recorded graph"  # every family's one-row decoding step is recorded on a CPU


def radio_value(client: TestClient, key: str) -> object:
    """The value the page's radio labelled by `key` is sent with (Gradio's /config)."""
    config = client.get("/config").json()
    found = [c["props"].get("value") for c in config["components"]
             if c.get("type") == "radio" and key in str(c["props"].get("label"))]
    assert len(found) == 1, found
    return found[0]


@pytest.mark.parametrize(("flags", "mode", "llm"), [((), "fast", "int8"), (("--precision", "stock"), "stock", "fp32")],
                         ids=["default", "stock"])
def test_the_default_on_a_cpu_is_fast_and_stock_stays_stock(tiny_sft: Path, tmp_path: Path, flags: tuple[str, ...],
                                                            mode: str, llm: str) -> None:
    args = build_parser().parse_args(["--model-dir", str(tiny_sft), "--device", "cpu", "--idle-unload", "0",
                                      "--voices-dir", str(tmp_path / "v"), "--glossary-dir", str(tmp_path / "g"),
                                      "--projects-dir", str(tmp_path / "p"), "--output-dir", str(tmp_path / "out"),
                                      *flags])
    settings = settings_from_args(args)
    with TestClient(create_app(settings), base_url=LOOPBACK) as client:
        assert client.get("/health").json()["model"]["precision"] == {"mode": mode, "loaded": False}
        listed = client.get("/v1/models").json()["data"][0]["precision"]
        assert (listed["mode"], listed["loaded"]) == (mode, False)
        assert radio_value(client, "precision") == mode
        assert client.post("/tts", json={"text": "Hello there.", "speaker": "英文女"}).status_code == 200
        health = client.get("/health").json()["model"]["precision"]
        listed = client.get("/v1/models").json()["data"][0]["precision"]
        shown = radio_value(client, "precision")
    assert health == listed and health["mode"] == mode and health["loaded"] is True and shown == mode
    assert health["llm"].startswith(llm)  # the tiny random model really loaded in that mode
