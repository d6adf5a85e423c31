"""`/health` and `/v1/models` say which precision the model computes in (issue 25): the mode it will load in
before it is loaded, and each stage's form once it is."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from cosyvoice_ui.settings import Settings
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
