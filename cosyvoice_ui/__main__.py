"""`python -m cosyvoice_ui` → the command line interface."""

import sys

from .cli.main import main

sys.exit(main())
