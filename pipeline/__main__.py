"""python -m pipeline: the job's command line (pipeline/cli.py)."""

import sys

from .cli import main

sys.exit(main())
