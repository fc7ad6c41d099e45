"""`python -m longctx …`: the `longctx` command where its entry point is not installed (a borrowed GPU machine)."""

from longctx.tools.cli import main

raise SystemExit(main())
