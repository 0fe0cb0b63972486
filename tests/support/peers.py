"""llama.cpp's own programs, built from the sources vendored in llama-cpp-python's sdist.

The tests and benchmarks measure the app against llama.cpp's ``llama-server`` and host RPC
devices with its ``ggml-rpc-server``; pip builds neither. ``python -m tests.support.peers``
downloads the pinned sdist from the package registry (``pip download``), unpacks it and
builds both programs once into a cache outside the checkout (``LLAMADESK_PEERS`` or
``~/.cache/llamadesk-peers``), keyed by the llama-cpp-python version; later runs find them
there and do nothing. The README's test command runs it before pytest, so CI tests against
the real peers instead of skipping them. Two builds at once (two checkouts' CI, a benchmark
and a test run) take turns on a lock file in the cache (``flock``, so a build that dies
frees it): the second finds the first's programs and does nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows: no flock; builds there are one at a time by hand
    fcntl = None  # type: ignore[assignment]

LLAMA_CPP_PYTHON = "0.3.36"  # the version pyproject.toml pins
TARGETS = ("llama-server", "ggml-rpc-server")

ROOT = (
    Path(os.environ.get("LLAMADESK_PEERS", "~/.cache/llamadesk-peers")).expanduser()
    / f"llama-cpp-python-{LLAMA_CPP_PYTHON}"
)
SOURCE = ROOT / "src"  # the sdist's vendor/llama.cpp
BUILD = ROOT / "build"
BIN = BUILD / "bin"
LLAMA_SERVER = Path(os.environ.get("LLAMADESK_LLAMA_SERVER", BIN / "llama-server"))
RPC_SERVER = Path(os.environ.get("LLAMADESK_RPC_SERVER", BIN / "ggml-rpc-server"))

CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_BUILD_TOOLS=ON",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_APP=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",  # no download of the web UI
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_CURL=OFF",
    "-DGGML_RPC=ON",
)


LOCK_NAME = "build.lock"
WAITING = "another build of the peers is under way; waiting for it"


@contextlib.contextmanager
def build_lock(root: Path = ROOT) -> Iterator[None]:
    """Hold the cache's lock file (saying so on stderr when another build has it)."""
    root.mkdir(parents=True, exist_ok=True)
    with open(root / LOCK_NAME, "a+b") as handle:
        if fcntl is not None:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                print(WAITING, file=sys.stderr, flush=True)
                fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            if fcntl is not None:
                fcntl.flock(handle, fcntl.LOCK_UN)


def built() -> bool:
    return LLAMA_SERVER.exists() and RPC_SERVER.exists()


def _fetch_source() -> None:
    """The sdist's vendored llama.cpp into SOURCE (through pip: the registry is the one
    place these machines reach)."""
    if (SOURCE / "tools" / "server").is_dir():
        return
    with tempfile.TemporaryDirectory(prefix="llamadesk-sdist-") as tmp:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-binary",
                ":all:",
                "--no-deps",
                f"llama-cpp-python=={LLAMA_CPP_PYTHON}",
                "-d",
                tmp,
            ],
            check=True,
        )
        (archive,) = Path(tmp).glob("llama_cpp_python-*.tar.gz")
        unpacked = Path(tmp) / "unpacked"
        with tarfile.open(archive) as tar:
            tar.extractall(unpacked, filter="data")
        (top,) = unpacked.iterdir()
        partial = SOURCE.with_name("src.partial")
        shutil.rmtree(partial, ignore_errors=True)
        ROOT.mkdir(parents=True, exist_ok=True)
        shutil.move(str(top / "vendor" / "llama.cpp"), partial)
        # The sdist keeps the submodule's ".git" pointer file, which names a folder that
        # is not there: cmake's version probe would complain about it at every configure.
        (partial / ".git").unlink(missing_ok=True)
        partial.rename(SOURCE)


def build(jobs: int | None = None) -> None:
    """Build both peers unless they are there already (one build at a time)."""
    if built():
        return
    with build_lock():
        if not built():  # another build may have made them while this one waited
            _build(jobs)


def _build(jobs: int | None) -> None:
    started = time.monotonic()
    _fetch_source()
    jobs = jobs or int(os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", os.cpu_count() or 2))
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    subprocess.run(
        ["cmake", "-S", str(SOURCE), "-B", str(BUILD), *generator, *CMAKE_FLAGS],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    subprocess.run(
        ["cmake", "--build", str(BUILD), "-j", str(jobs), "--target", *TARGETS],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    print(f"built {', '.join(TARGETS)} in {time.monotonic() - started:.0f} s into {BIN}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.support.peers",
        description="Build llama.cpp's llama-server and ggml-rpc-server from the vendored "
        f"sources of llama-cpp-python {LLAMA_CPP_PYTHON} (cached in {ROOT}).",
    )
    parser.add_argument("-j", "--jobs", type=int, default=None, help="parallel compile jobs")
    args = parser.parse_args(argv)
    build(args.jobs)
    if not built():
        print(f"the build finished but {LLAMA_SERVER} or {RPC_SERVER} is missing", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
