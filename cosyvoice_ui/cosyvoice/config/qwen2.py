"""The Qwen2 backbone's shape: the fields of a Hugging Face Qwen2 `config.json` that inference needs.

v2 and v3 folders carry it as `CosyVoice-BlankEN/config.json` (the yaml does not say it); the registry reads it
when a folder loads and puts it in `QwenLMConfig.qwen`, and `models/qwen2.py` builds the backbone from it. It is
a config record like the others here, so `config/` never needs `models/`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ...errors import ConfigError


@dataclass(frozen=True)
class Qwen2Config:
    """The fields of a Hugging Face Qwen2 `config.json` that inference needs."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1e6
    tie_word_embeddings: bool = True
    max_position_embeddings: int = 32768
    head_dim: int | None = None  # absent from Qwen2 configs: hidden_size / num_attention_heads

    def __post_init__(self) -> None:
        if self.num_attention_heads % self.num_key_value_heads:
            raise ConfigError(f"Qwen2 config: {self.num_attention_heads} attention heads are not a multiple of "
                              f"{self.num_key_value_heads} key/value heads")
        if self.head_dim is None and self.hidden_size % self.num_attention_heads:
            raise ConfigError(f"Qwen2 config: hidden_size {self.hidden_size} is not divisible by "
                              f"{self.num_attention_heads} heads")

    @property
    def head_width(self) -> int:
        return self.head_dim if self.head_dim is not None else self.hidden_size // self.num_attention_heads

    @classmethod
    def from_dict(cls, data: dict) -> Qwen2Config:
        """From a parsed `config.json`; refuses what this implementation does not do."""
        act = data.get("hidden_act", "silu")
        if act != "silu":
            raise ConfigError(f"Qwen2 config: hidden_act {act!r} is not supported (only silu)")
        if data.get("rope_scaling"):
            raise ConfigError(f"Qwen2 config: rope_scaling {data['rope_scaling']!r} is not supported")
        if data.get("use_sliding_window"):
            raise ConfigError("Qwen2 config: sliding-window attention is not supported")
        try:
            return cls(
                vocab_size=int(data["vocab_size"]),
                hidden_size=int(data["hidden_size"]),
                intermediate_size=int(data["intermediate_size"]),
                num_hidden_layers=int(data["num_hidden_layers"]),
                num_attention_heads=int(data["num_attention_heads"]),
                # HF's default when the key is absent: plain multi-head attention
                num_key_value_heads=int(data.get("num_key_value_heads", data["num_attention_heads"])),
                rms_norm_eps=float(data.get("rms_norm_eps", 1e-6)),
                rope_theta=float(data.get("rope_theta", 10000.0)),
                tie_word_embeddings=bool(data.get("tie_word_embeddings", False)),
                max_position_embeddings=int(data.get("max_position_embeddings", 32768)),
                head_dim=int(data["head_dim"]) if data.get("head_dim") else None,
            )
        except KeyError as exc:
            raise ConfigError(f"Qwen2 config.json lacks {exc.args[0]!r}") from exc

    @classmethod
    def from_json(cls, path: str | Path) -> Qwen2Config:
        """Read `config.json` (the file, or the `CosyVoice-BlankEN` folder holding it)."""
        path = Path(path)
        if path.is_dir():
            path = path / "config.json"
        if not path.is_file():
            raise ConfigError(f"{path.name} is missing from {path.parent.name}/ (the Qwen2 backbone's config)")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{path.parent.name}/{path.name} cannot be read as JSON: {exc}") from exc
        return cls.from_dict(data)
