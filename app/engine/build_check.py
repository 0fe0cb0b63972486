"""``python -m app.engine.build_check [BACKEND ...]``: exit 0 when the installed llama.cpp
has these backends (default ``rpc``), else 1 with the reinstall command on stderr.

The README's install line runs it after ``pip install``: pip's wheel cache ignores
``CMAKE_ARGS``, so a cached llama-cpp-python built without the RPC backend would otherwise
be installed silently; only then is it rebuilt (with ``--no-cache-dir``).
"""

from __future__ import annotations

import sys

from app.engine.devices import BACKEND_BUILDS, backends, install_command


def main(argv: list[str]) -> int:
    wanted = [name.lower() for name in argv] or ["rpc"]
    have = set(backends())
    missing = [name for name in wanted if name not in have]
    if not missing:
        print(f"llama.cpp backends: {', '.join(sorted(have))}")
        return 0
    flags = " ".join(
        b.cmake_flag for b in BACKEND_BUILDS if b.name in [*wanted, "rpc"] and b.cmake_flag
    )
    print(
        f"This llama-cpp-python lacks the {', '.join(missing)} backend; rebuild it with: "
        f"{install_command(flags)}",
        file=sys.stderr,
    )
    return 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
