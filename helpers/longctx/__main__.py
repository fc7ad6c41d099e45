"""`python -m longctx …`: the `longctx` command where its entry point is not installed (a borrowed GPU machine)."""

import sys

from .cli import main

sys.exit(main())
