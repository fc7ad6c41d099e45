"""`python -m longctx …`: the `longctx` command where its entry point is not installed (a borrowed GPU machine)."""

import sys

from longctx.tools.cli import main

sys.exit(main())
