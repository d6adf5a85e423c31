"""`--mcp`: the real app serves synthesize / list_voices / save_voice through Gradio's MCP server
(streamable HTTP on loopback), driven with the `mcp` client package."""

from __future__ import annotations

import asyncio
import base64
import io
import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from cosyvoice_ui.settings import Settings
from cosyvoice_ui.testing.signals import voice_clip
from cosyvoice_ui.ui.api_tools import MCP_TOOLS

from .launch import running_app

pytest.importorskip("mcp", reason="the mcp package is not installed (requirements.txt)")
TRANSCRIPT = "希望你以后能够做的比我还好呦。"


@pytest.fixture(scope="module")
def app_url(tiny_sft: Path, tmp_path_factory) -> str:
    with running_app(tiny_sft, tmp_path_factory.mktemp("mcp-app"), "--mcp") as url:
        yield url


def _mcp(url: str, work):
    """Run `work(session)` in one MCP session over streamable HTTP; return what it returns."""
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async def main():
        async with streamable_http_client(url + "gradio_api/mcp/") as (read, write, _):
            async with ClientSession(read, write) as session:
                await session.initialize()
                return await asyncio.wait_for(work(session), timeout=120)

    return asyncio.run(main())


def _texts(result) -> list[str]:
    return [c.text for c in result.content if getattr(c, "type", "") == "text"]


def _fetch_audio(url: str) -> tuple[np.ndarray, int]:
    import httpx

    response = httpx.get(url, timeout=30)
    assert response.status_code == 200, response.text[:200]
    wave, rate = sf.read(io.BytesIO(response.content))
    assert np.isfinite(wave).all() and np.abs(wave).max() > 0
    return wave, rate


@pytest.mark.slow
def test_tools_are_listed_with_descriptions(app_url: str) -> None:
    async def work(session):
        return (await session.list_tools()).tools

    tools = {tool.name: tool for tool in _mcp(app_url, work)}
    assert sorted(tools) == sorted(MCP_TOOLS)  # the tab endpoints (clone, preset, ...) are not tools
    for tool in tools.values():
        assert len(tool.description) > 40, tool.name
        for name, schema in tool.inputSchema.get("properties", {}).items():
            assert schema.get("description", "").strip(), f"{tool.name}.{name} has no description"
    assert tools["synthesize"].inputSchema["required"] == ["text"]
    assert set(tools["synthesize"].inputSchema["properties"]) == {"text", "voice", "instructions", "speed", "seed",
                                                                  "format"}
    assert set(tools["save_voice"].inputSchema["required"]) == {"name", "audio"}


@pytest.mark.slow
def test_synthesize_list_and_save_voices(app_url: str, tmp_path: Path) -> None:
    clip = voice_clip(3.5, 16000)
    buffer = io.BytesIO()
    sf.write(buffer, clip.samples, clip.sample_rate, format="WAV")
    recording = "data:audio/wav;base64," + base64.b64encode(buffer.getvalue()).decode()

    async def work(session):
        voices = await session.call_tool("list_voices", {})
        spoken = await session.call_tool("synthesize", {"text": "Hello from an MCP client.", "voice": "英文女",
                                                        "seed": 5})
        saved = await session.call_tool("save_voice", {"name": "MCP Narrator", "audio": recording,
                                                       "transcript": TRANSCRIPT})
        cloned = await session.call_tool("synthesize", {"text": "A saved voice speaks.", "voice": "mcp-narrator"})
        again = await session.call_tool("list_voices", {})
        return voices, spoken, saved, cloned, again

    voices, spoken, saved, cloned, again = _mcp(app_url, work)
    listing = json.loads(_texts(voices)[0])
    assert "英文女" in listing["presets"] and listing["saved"] == []
    assert not spoken.isError, _texts(spoken)
    url = _texts(spoken)[0]
    assert url.startswith(app_url) and url.endswith(".wav")
    wave, rate = _fetch_audio(url)
    assert rate == 22050 and 0.3 < len(wave) / rate < 4.0
    assert not saved.isError, _texts(saved)
    record = json.loads(_texts(saved)[0])
    assert record["id"] == "mcp-narrator" and record["transcript"] == TRANSCRIPT and record["duration_s"] == 3.5
    assert not cloned.isError, _texts(cloned)
    assert _fetch_audio(_texts(cloned)[0])[1] == 22050
    assert [v["id"] for v in json.loads(_texts(again)[0])["saved"]] == ["mcp-narrator"]


@pytest.mark.slow
def test_errors_reach_the_client_as_clear_messages(app_url: str) -> None:
    async def work(session):
        return [await session.call_tool("synthesize", {"text": "Hi.", "voice": "nobody"}),
                await session.call_tool("synthesize", {"text": "   "}),
                await session.call_tool("save_voice", {"name": "", "audio": "data:audio/wav;base64,AAAA"}),
                await session.call_tool("clone", {"text": "Hi."})]

    unknown, empty, unnamed, not_a_tool = _mcp(app_url, work)
    for result in (unknown, empty, unnamed, not_a_tool):
        assert result.isError
        text = " ".join(_texts(result))
        assert "Traceback" not in text and "object at 0x" not in text and "/tmp/" not in text, text
    assert "nobody" in _texts(unknown)[0] and "英文女" in _texts(unknown)[0]
    assert "empty" in _texts(empty)[0]
    assert "needs a name" in _texts(unnamed)[0]
    assert "clone" in _texts(not_a_tool)[0]


def test_mcp_with_a_password_is_refused(tmp_path: Path) -> None:
    """MCP clients cannot log in, so `--mcp --auth` stops at startup with the reason (nothing is built)."""
    from cosyvoice_ui.errors import ConfigError
    from cosyvoice_ui.web.server import check_mcp

    check_mcp(Settings(mcp=False, auth=(("user", "secret"),)))
    check_mcp(Settings(mcp=True))
    with pytest.raises(ConfigError, match="--mcp cannot be combined with --auth"):
        check_mcp(Settings(mcp=True, auth=(("user", "secret"),)))
