"""`--precision` on the app and the CLI: every mode of `cosyvoice/precision.py` is accepted and reaches the load
options, nonsense is refused with the modes listed, the help says what each mode changes, and building the
parsers loads no torch (commands that never load a model stay quick)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from cosyvoice_ui.cli.main import build_parser as cli_parser
from cosyvoice_ui.cosyvoice.precision import PRECISIONS
from cosyvoice_ui.web.flags import PRECISION_HELP, settings_from_args
from cosyvoice_ui.web.flags import build_parser as app_parser

REPO = Path(__file__).resolve().parents[1]


def synth_args(*flags: str):
    return cli_parser().parse_args(["synth", "--text", "hi", "--out", "x.wav", *flags])


@pytest.mark.parametrize("mode", PRECISIONS)
def test_every_mode_reaches_the_app_settings_and_the_cli(mode: str) -> None:
    settings = settings_from_args(app_parser().parse_args(["--precision", mode]))
    assert settings.precision == mode and settings.load_options().precision == mode
    assert synth_args("--precision", mode).precision == mode


def test_auto_is_the_default_and_can_be_asked_for() -> None:
    """auto: fast on a CPU, stock on a GPU, resolved at load (tests/test_precision_auto.py)."""
    assert settings_from_args(app_parser().parse_args([])).precision == "auto"
    assert synth_args().precision == "auto"
    assert settings_from_args(app_parser().parse_args(["--precision", "auto"])).load_options().precision == "auto"
    assert synth_args("--precision", "auto").precision == "auto"


def test_the_cli_loads_with_the_mode_asked_for(monkeypatch) -> None:
    import cosyvoice_ui.serving.backends as backends
    from cosyvoice_ui.cli.main import _load

    seen = []
    monkeypatch.setattr(backends, "open_engine", lambda model_dir, models_dir, options, progress: seen.append(options))
    _load(synth_args("--precision", "extra-fast"), None)
    assert [o.precision for o in seen] == ["extra-fast"]


@pytest.mark.parametrize("parse", [lambda argv: app_parser().parse_args(argv),
                                   lambda argv: cli_parser().parse_args(["synth", "--out", "x.wav", *argv])],
                         ids=["app", "cli"])
def test_nonsense_is_refused_with_the_modes_listed(parse, capsys) -> None:
    with pytest.raises(SystemExit) as stop:
        parse(["--precision", "turbo"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "--precision: invalid choice: 'turbo'" in err
    assert all(repr(mode) in err for mode in ("auto", *PRECISIONS))
    assert "Traceback" not in err


def test_the_help_says_what_each_mode_changes(capsys) -> None:
    with pytest.raises(SystemExit):
        app_parser().parse_args(["--help"])
    shown = "".join(capsys.readouterr().out.split())  # argparse wraps lines, also after hyphens
    assert "".join(PRECISION_HELP.split()) in shown
    for mode, change in (("auto (default)", "fast on a CPU, stock on a GPU"), ("stock", "upstream's numbers"),
                         ("fast", "int8 LLM"),
                         ("extra-fast", "without the flow's classifier-free guidance")):
        assert f"{mode}: " in PRECISION_HELP and change in PRECISION_HELP


def test_building_the_parsers_loads_no_torch() -> None:
    code = ("import sys; from cosyvoice_ui.cli.main import build_parser; from cosyvoice_ui.web import flags; "
            "build_parser().parse_args(['list-models']); flags.build_parser().parse_args([]); "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "False"
