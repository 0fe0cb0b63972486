"""Entry point of the frozen app (PyInstaller's script): the ``llamadesk`` command.

Without a subcommand it opens the window; ``--version``, ``run``, ``inspect`` ... work as in
the installed ``llamadesk`` command.
"""

from __future__ import annotations

import multiprocessing

from app.cli import main

if __name__ == "__main__":
    multiprocessing.freeze_support()  # a no-op unless a child process is started
    raise SystemExit(main())
