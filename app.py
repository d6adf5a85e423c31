"""CosyVoice Studio: `python app.py [--model-dir D] [--share] [--auth user:pass] ...` (see --help)."""

import sys

from cosyvoice_ui.web.flags import main

if __name__ == "__main__":
    sys.exit(main())
