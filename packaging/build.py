"""Build the one-folder LlamaDesk app with PyInstaller: ``python packaging/build.py``.

Needs the app's dependencies and PyInstaller in the running Python
(``pip install -e ".[dev]"`` or ``pip install . "pyinstaller>=6.10"``). Writes
``dist/LlamaDesk/`` (run ``dist/LlamaDesk/LlamaDesk``; no subcommand opens the window) and
uses ``build/`` as the work folder; ``--distpath`` and ``--workpath`` move them. The demo
model is bundled when ``resources/models/llamadesk-demo.gguf`` exists.

Install on Linux with a menu entry (the bundle carries ``llamadesk.desktop`` and
``llamadesk.png`` next to the executable)::

    sudo cp -r dist/LlamaDesk /opt/LlamaDesk
    sudo ln -sf /opt/LlamaDesk/LlamaDesk /usr/local/bin/LlamaDesk
    install -Dm644 dist/LlamaDesk/llamadesk.desktop ~/.local/share/applications/llamadesk.desktop
    install -Dm644 dist/LlamaDesk/llamadesk.png \\
        ~/.local/share/icons/hicolor/256x256/apps/llamadesk.png
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "packaging" / "llamadesk.spec"
NAME = "LlamaDesk"


def folder_size(path: Path) -> int:
    """Bytes in the files under ``path`` (symlinks counted once, as links)."""
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            total += os.lstat(os.path.join(dirpath, name)).st_size
    return total


def build(distpath: Path, workpath: Path, quiet: bool = False) -> Path:
    """Run PyInstaller on the spec; return the bundle folder."""
    if importlib.util.find_spec("PyInstaller") is None:
        raise SystemExit('PyInstaller is not installed: pip install "pyinstaller>=6.10"')
    cmd = [
        sys.executable,
        "-m",
        "PyInstaller",
        "--noconfirm",
        "--clean",
        "--distpath",
        str(distpath),
        "--workpath",
        str(workpath),
        "--log-level",
        "WARN" if quiet else "INFO",
        str(SPEC),
    ]
    env = dict(os.environ, PYTHONHASHSEED="0")  # reproducible bytecode ordering
    subprocess.run(cmd, cwd=ROOT, env=env, check=True)
    return distpath / NAME


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build dist/LlamaDesk/ with PyInstaller.")
    parser.add_argument("--distpath", type=Path, default=ROOT / "dist", help="default: dist/")
    parser.add_argument("--workpath", type=Path, default=ROOT / "build", help="default: build/")
    parser.add_argument("-q", "--quiet", action="store_true", help="only PyInstaller's warnings")
    args = parser.parse_args(argv)
    t0 = time.monotonic()
    try:
        bundle = build(args.distpath.resolve(), args.workpath.resolve(), quiet=args.quiet)
    except subprocess.CalledProcessError as exc:
        print(f"build.py: PyInstaller failed (exit code {exc.returncode})", file=sys.stderr)
        return 1
    size = folder_size(bundle)
    print(f"built {bundle} in {time.monotonic() - t0:.0f} s: {size / 2**20:.1f} MiB")
    print(f"try: {bundle / NAME} --version")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
