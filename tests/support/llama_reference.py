"""llama.cpp's own ``llama-simple``, built against the installed libllama, as a reference.

llama-cpp-python's source distribution carries llama.cpp's sources. We take three things
from it — ``llama.h``, ggml's headers and ``examples/simple/simple.cpp`` — and compile that
one file against the shared libraries the installed wheel ships, so the reference runs
exactly the same llama.cpp build as the engine. The result is cached between runs.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import llama_cpp

CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "llamadesk-tests"


class ReferenceUnavailable(RuntimeError):
    pass


def llama_simple() -> Path:
    """Path of a ``llama-simple`` binary matching the installed llama-cpp-python."""
    version = importlib.metadata.version("llama-cpp-python")
    lib_dir = Path(llama_cpp.__file__).parent / "lib"
    target = CACHE / f"llama-simple-{version}"
    if target.is_file():
        return target
    compiler = shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")
    if compiler is None:
        raise ReferenceUnavailable("no C++ compiler to build llama-simple")
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        download = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--no-binary",
                ":all:",
                "-d",
                str(work),
                f"llama-cpp-python=={version}",
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
        archives = list(work.glob("*.tar.gz"))
        if download.returncode != 0 or not archives:
            raise ReferenceUnavailable(
                f"cannot fetch the llama-cpp-python {version} sources: {download.stderr[-300:]}"
            )
        src = work / "src"
        with tarfile.open(archives[0]) as tar:
            wanted = [
                m
                for m in tar.getmembers()
                if "/vendor/llama.cpp/include/" in m.name
                or "/vendor/llama.cpp/ggml/include/" in m.name
                or m.name.endswith("/vendor/llama.cpp/examples/simple/simple.cpp")
            ]
            tar.extractall(src, members=wanted, filter="data")
        root = next(src.glob("*/vendor/llama.cpp"))
        output = work / "llama-simple"
        build = subprocess.run(
            [
                compiler,
                "-std=c++17",
                "-O2",
                str(root / "examples/simple/simple.cpp"),
                "-I",
                str(root / "include"),
                "-I",
                str(root / "ggml/include"),
                "-L",
                str(lib_dir),
                "-lllama",
                "-lggml",
                "-lggml-base",
                f"-Wl,-rpath,{lib_dir}",
                "-o",
                str(output),
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
        if build.returncode != 0:
            raise ReferenceUnavailable(f"llama-simple did not build: {build.stderr[-500:]}")
        shutil.move(str(output), target)
    return target


def run_llama_simple(model: Path, prompt: str, n_predict: int) -> bytes:
    """What llama-simple prints on stdout: the prompt's pieces, then the greedy tokens'."""
    result = subprocess.run(
        [str(llama_simple()), "-m", str(model), "-n", str(n_predict), prompt],
        capture_output=True,
        timeout=300,
    )
    if result.returncode != 0:
        raise RuntimeError(f"llama-simple failed: {result.stderr.decode(errors='replace')[-500:]}")
    return result.stdout
