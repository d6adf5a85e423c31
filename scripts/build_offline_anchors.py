"""Rebuild cosyvoice_ui/offline/data/anchors.npz, the offline voice's table of styles and their d-vectors
(a few minutes of CPU). Needs the offline voice's packages (requirements-offline.txt).

    python scripts/build_offline_anchors.py
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from cosyvoice_ui.offline.anchors import ANCHOR_FILE, build_anchor_table  # noqa: E402
from cosyvoice_ui.offline.assets import load_assets  # noqa: E402
from cosyvoice_ui.offline.frontend import OfflineFrontend  # noqa: E402
from cosyvoice_ui.offline.kokoro import KokoroModel  # noqa: E402
from cosyvoice_ui.offline.matching import VoiceMatcher  # noqa: E402
from cosyvoice_ui.offline.styles import StyleSpace  # noqa: E402

log = logging.getLogger("build_offline_anchors")


def main() -> int:
    logging.basicConfig(level=logging.INFO)
    assets = load_assets()
    space = StyleSpace(assets.voices)
    matcher = VoiceMatcher.create(space, KokoroModel(assets.model), OfflineFrontend(assets.vocab), anchors=None)
    table = build_anchor_table(space, matcher.measure, progress=lambda i, n: log.info("anchor %d/%d", i, n))
    out = REPO / "cosyvoice_ui" / "offline" / "data" / ANCHOR_FILE
    out.parent.mkdir(exist_ok=True)
    table.save(out)
    log.info("wrote %s (%d rows)", out.name, len(table.labels))
    return 0


if __name__ == "__main__":
    sys.exit(main())
