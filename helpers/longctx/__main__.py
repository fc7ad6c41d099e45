"""The `longctx` command (its entry point; `python -m longctx …` where that is not installed, a borrowed GPU machine)."""

import signal


def run() -> int:
    # Ctrl-C while the command's libraries load ends it as a terminal expects (status 130), with no import traceback;
    # the command installs its own handler once loaded (tools/cli.py)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    from longctx.tools.cli import main

    return main()


if __name__ == "__main__":
    raise SystemExit(run())
