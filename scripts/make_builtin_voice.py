"""Record the built-in example voice (cosyvoice_ui/serving/assets/builtin_voice.flac) with the offline default voice.

The file is the default voice of base models (zero-shot only), which have no preset speakers. Run once;
the result is shipped in the package. Needs the offline voice's packages (requirements-offline.txt).

    python scripts/make_builtin_voice.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import soundfile as sf

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from cosyvoice_ui.serving.default_voice import BUILTIN_AUDIO, BUILTIN_META  # noqa: E402
from cosyvoice_ui.serving.backends import OFFLINE_ID, load_any  # noqa: E402
from cosyvoice_ui.types import Mode, SynthesisRequest  # noqa: E402

TRANSCRIPT = "I love exploring new places, meeting people and trying different kinds of food."


def main() -> int:
    engine = load_any(OFFLINE_ID)
    try:
        speaker = engine.info.speakers[0]
        request = SynthesisRequest(Mode.SFT, text=TRANSCRIPT, speaker=speaker, seed=1)
        wave = np.concatenate([c.samples for c in engine.synthesize(request)])
        rate = engine.info.sample_rate
    finally:
        engine.close()
    sf.write(BUILTIN_AUDIO, wave, rate, format="FLAC", subtype="PCM_16")
    BUILTIN_META.write_text(json.dumps({"transcript": TRANSCRIPT, "recorded_by": f"offline default voice, "
                                        f"preset {speaker}, seed 1"}, ensure_ascii=False, indent=2) + "\n")
    print(f"wrote {BUILTIN_AUDIO.relative_to(REPO)} ({len(wave) / rate:.2f} s at {rate} Hz)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
