"""Read an official CosyVoice yaml (any generation) as inert data.

The official files are HyperPyYAML: `!new:pkg.Class` (construct), `!name:pkg.func` (partial),
`!apply:func` (call at load time) and `!ref <key>` (reference, with simple arithmetic). We parse
them with a *safe* YAML loader where each tag becomes a plain `Tagged` record; nothing is imported
or executed (the `!apply:` seed calls are ignored). The class paths are only checked against the
registry's allow-list (`registry.py`); a family's parser (e.g. `config/v1.py`) turns the data into records.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ...errors import ConfigError


@dataclass(frozen=True)
class Tagged:
    """A HyperPyYAML tagged node: `kind` is "new", "name" or "apply"; `target` the dotted path."""

    kind: str
    target: str
    args: Any  # dict for mappings, list for sequences, None for empty nodes


@dataclass(frozen=True)
class Ref:
    expression: str  # e.g. "<chunk_size> * <token_mel_ratio>"


class _InertLoader(yaml.SafeLoader):
    """SafeLoader that records HyperPyYAML tags instead of acting on them."""


def _construct_tagged(kind: str):
    def construct(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> Tagged:
        if isinstance(node, yaml.MappingNode):
            args: Any = loader.construct_mapping(node, deep=True)
        elif isinstance(node, yaml.SequenceNode):
            args = loader.construct_sequence(node, deep=True)
        else:
            value = loader.construct_scalar(node)
            args = None if value in ("", None) else value
        return Tagged(kind=kind, target=suffix, args=args)

    return construct


def _construct_ref(loader: yaml.SafeLoader, node: yaml.Node) -> Ref:
    return Ref(str(loader.construct_scalar(node)))


for _kind in ("new", "name", "apply"):
    _InertLoader.add_multi_constructor(f"!{_kind}:", _construct_tagged(_kind))
_InertLoader.add_constructor("!ref", _construct_ref)
# YAML 1.1 does not read "1e-06" (no dot) as a float; HyperPyYAML does. Match it.
_InertLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)

_REF_KEY = re.compile(r"<([^<>]+)>")
_ARITHMETIC = re.compile(r"^[0-9eE+\-*/(). ]+$")


def _lookup(root: dict, key: str) -> Any:
    """Resolve `a`, `a[b]` or `a.b` inside the top-level mapping."""
    parts = [p for p in re.split(r"[\[\].]", key) if p]
    value: Any = root
    for part in parts:
        if not isinstance(value, dict) or part not in value:
            raise ConfigError(f"yaml reference <{key}> points to nothing")
        value = value[part]
    return value


def _resolve(value: Any, root: dict, depth: int = 0) -> Any:
    if depth > 50:
        raise ConfigError("yaml references are circular")
    if isinstance(value, Ref):
        expr = value.expression.strip()
        whole = _REF_KEY.fullmatch(expr)
        if whole:
            return _resolve(_lookup(root, whole.group(1)), root, depth + 1)
        # Arithmetic such as "<chunk_size> * <token_mel_ratio>": substitute scalars, then evaluate
        # with a whitelist of characters (digits and operators only, never names).
        def scalar(match: re.Match) -> str:
            target = _resolve(_lookup(root, match.group(1)), root, depth + 1)
            if not isinstance(target, (int, float)):
                raise ConfigError(f"yaml arithmetic {expr!r} uses non-number <{match.group(1)}>")
            return repr(target)

        text = _REF_KEY.sub(scalar, expr)
        if not _ARITHMETIC.match(text):
            raise ConfigError(f"yaml reference {expr!r} is not simple arithmetic")
        return eval(text, {"__builtins__": {}}, {})  # noqa: S307 - digits and operators only
    if isinstance(value, Tagged):
        return Tagged(value.kind, value.target, _resolve(value.args, root, depth + 1))
    if isinstance(value, dict):
        return {k: _resolve(v, root, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [_resolve(v, root, depth + 1) for v in value]
    return value


def read_yaml(path: str | Path, overrides: dict | None = None) -> dict:
    """Parse a HyperPyYAML file into plain data with references resolved. Executes nothing."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read {path.name}: {exc.strerror or exc}") from exc
    try:
        root = yaml.load(text, Loader=_InertLoader)  # noqa: S506 - SafeLoader subclass
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path.name} is not valid yaml: {exc}") from exc
    if not isinstance(root, dict):
        raise ConfigError(f"{path.name} should be a mapping of settings, found {type(root).__name__}")
    root = {k: v for k, v in root.items() if not (isinstance(v, Tagged) and v.kind == "apply")}
    root.update(overrides or {})
    return {k: _resolve(v, root) for k, v in root.items()}
