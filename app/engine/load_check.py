"""Try a model file's first load in a child process, where an abort cannot reach the app.

llama.cpp's loader asserts (``GGML_ASSERT``: the process aborts) in many places a damaged
header can reach; :mod:`app.engine.header_checks` finds the known ones first, and this
catches the rest. Before a file is loaded for real, a child process
(``python -m app.engine.load_check PATH``, or a child forked from a warm helper: see
:mod:`app.engine.load_check_runner`) loads it with ``no_alloc`` - llama.cpp parses the
header and every tensor info, checks the data against the file size, reads the
hyper-parameters and the whole vocabulary and creates every tensor of the architecture,
without reading or allocating weights - and tokenizes a short text. It reports OK, or
llama.cpp's refusal; if it dies, its signal and the last lines llama.cpp printed become the
sentence for the user.

The verdict is kept by a hash of what such a load reads (:meth:`GGUFHeader.digest`: the
header's metadata and tensor infos and the file's size, not the weights) and of the
llama.cpp version, in the data folder's ``load_checks`` (and in memory), so a known file
costs a hash of its header (milliseconds) and an edited one is tried again.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from app import paths
from app.engine import load_check_runner
from app.engine.errors import ModelLoadError
from app.engine.gguf_header import GGUFHeader
from app.fsutil import atomic_write_bytes

log = logging.getLogger(__name__)

# Bump when the child checks more (older verdicts are then not trusted).
CHECK_VERSION = 1
TIMEOUT_S = 120.0
# The text the child tokenizes: letters, digits, spaces, a newline and non-ASCII, what any
# first prompt holds (some tokenizers only fail when they first run).
PROBE_TEXT = "Hello, world! 123\n  Grüße, 你好 🙂"
# Signals of a crash inside llama.cpp (an assert aborts; a bad read faults).
_CRASH_SIGNALS = {signal.SIGABRT, signal.SIGSEGV, signal.SIGBUS, signal.SIGFPE, signal.SIGILL}
_MARKER = "LLAMADESK-LOAD-CHECK "  # the child's one result line on stdout


@dataclass(frozen=True)
class Verdict:
    """``ok``, or ``message``: the sentence for the user. ``source`` says where it came
    from: "memory", "disk" or "child"."""

    ok: bool
    message: str = ""
    source: str = "child"


_memo: dict[str, Verdict] = {}
_lock = threading.Lock()


def cache_key(header: GGUFHeader) -> str:
    import llama_cpp

    h = hashlib.blake2b(digest_size=16)
    h.update(f"{CHECK_VERSION}|{llama_cpp.__version__}|{header.digest()}".encode())
    return h.hexdigest()


def cache_dir() -> Path:
    return paths.private_dir("load_checks")


def check(
    path: Path,
    header: GGUFHeader,
    *,
    architecture: str = "",
    n_gpu_layers: int = 0,
    timeout: float = TIMEOUT_S,
) -> Verdict:
    """The verdict on loading ``path`` (whose parsed header is ``header``): from memory, the
    data folder, or a child process that tries the load."""
    key = cache_key(header)
    with _lock:
        verdict = _memo.get(key)
        if verdict is not None:
            return Verdict(verdict.ok, verdict.message, "memory")
        verdict = _read_cached(key)
        if verdict is None:
            verdict, keep = _run_child(path, architecture, n_gpu_layers, timeout)
            if keep:
                _write_cached(key, verdict, path)
        if verdict.source != "unchecked":
            _memo[key] = verdict
        return verdict


def ensure_loadable(
    path: Path,
    header: GGUFHeader,
    *,
    architecture: str = "",
    n_gpu_layers: int = 0,
    timeout: float = TIMEOUT_S,
) -> Verdict:
    """:func:`check`, raising :class:`ModelLoadError` with its sentence when it fails."""
    verdict = check(
        path, header, architecture=architecture, n_gpu_layers=n_gpu_layers, timeout=timeout
    )
    if not verdict.ok:
        raise ModelLoadError(verdict.message)
    return verdict


def forget() -> None:
    """Drop the verdicts kept in memory (the data folder's stay)."""
    with _lock:
        _memo.clear()


# -- the cache ----------------------------------------------------------------------------


def _read_cached(key: str) -> Verdict | None:
    file = cache_dir() / f"{key}.json"
    try:
        data = json.loads(file.read_text("utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("ok"), bool):
        return None
    message = data.get("message")
    return Verdict(data["ok"], message if isinstance(message, str) else "", "disk")


def _write_cached(key: str, verdict: Verdict, path: Path) -> None:
    record = {
        "ok": verdict.ok,
        "message": verdict.message,
        "file": path.name,
        "checked_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    try:
        atomic_write_bytes(cache_dir() / f"{key}.json", json.dumps(record).encode("utf-8"))
    except OSError as exc:  # a read-only data folder: the check runs again next time
        log.warning("could not keep the load check of %s: %s", path.name, exc)


# -- the parent side ----------------------------------------------------------------------


def _run_child(
    path: Path, architecture: str, n_gpu_layers: int, timeout: float
) -> tuple[Verdict, bool]:
    """The child's verdict, and whether it says something about the file (kept) rather
    than about this run (a timeout, a child that could not start)."""
    started = time.monotonic()
    try:
        outcome = load_check_runner.run_check(
            [str(path), "--n-gpu-layers", str(n_gpu_layers)], timeout
        )
    except OSError as exc:
        log.warning("the load check of %s could not start: %s", path.name, exc)
        return Verdict(True, "", "unchecked"), False
    code = outcome.returncode
    log.info("load check of %s: exit %s in %.2f s", path.name, code, time.monotonic() - started)
    if code is None:
        return Verdict(
            False,
            f"LlamaDesk could not check {path.name} within {timeout:.0f} s before loading it "
            "(the computer may be busy). Try again.",
            "unchecked",
        ), False
    result = _result_line(outcome.stdout)
    if code == 0 and result is not None:
        if result.get("ok") is True:
            return Verdict(True), True
        said = str(result.get("said") or "")
        message = refusal_message(path, architecture, said)
        # Memory is about this computer now, not the file: try again next time.
        return Verdict(False, message), "memory" not in said.lower()
    if code < 0 and -code in _CRASH_SIGNALS:
        return Verdict(False, crash_message(path, -code, outcome.stderr)), True
    # The child itself failed (killed from outside, a Python error): not a verdict on the
    # file. The load goes on as before the check existed, and the next one checks again.
    log.warning(
        "the load check of %s ended with %s: %s",
        path.name,
        code,
        _tail(outcome.stderr, 3) or "no output",
    )
    return Verdict(True, "", "unchecked"), False


def _result_line(stdout: str) -> dict[str, object] | None:
    for line in reversed(stdout.splitlines()):
        if line.startswith(_MARKER):
            try:
                data = json.loads(line[len(_MARKER) :])
            except ValueError:
                return None
            return data if isinstance(data, dict) else None
    return None


def _tail(text: str, n: int) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return " | ".join(lines[-n:])


def crash_message(path: Path, signum: int, stderr: str) -> str:
    """The sentence for a child that died of ``signum``; it quotes llama.cpp's assertion
    (or its last lines)."""
    try:
        name = signal.Signals(signum).name
    except ValueError:
        name = f"signal {signum}"
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    said = next(
        (line for line in reversed(lines) if "GGML_ASSERT" in line or "GGML_ABORT" in line),
        None,
    )
    if said is None:
        said = next((line for line in reversed(lines) if "error" in line.lower()), None)
    if said:
        # "/tmp/pip-install-…/vendor/llama.cpp/src/llama-vocab.cpp:2544: GGML_ASSERT(…)":
        # the source file's name is enough.
        said = re.sub(r"\S*/([^/\s]+:\d+)", r"\1", said)
    detail = f": {said[-300:]}" if said else ""
    return (
        f"The model file {path.name} is damaged: llama.cpp stops with {name} when it loads "
        f"it{detail}. LlamaDesk did not load it; download it again."
    )


def refusal_message(path: Path, architecture: str, said: str) -> str:
    """The sentence for a load that llama.cpp refused, from what it logged (``said``)."""
    lowered = said.lower()
    if "unknown model architecture" in lowered:
        return (
            f"{path.name} uses the model architecture '{architecture}', which this version of "
            "llama.cpp does not support. Update LlamaDesk or choose another model."
        )
    missing = re.search(r"tensor '([^']+)' not found", said)
    if missing:
        return (
            f"{path.name} is incomplete or damaged: the weight '{missing.group(1)}' is missing. "
            "Download or copy it again."
        )
    shape = re.search(r"tensor '([^']+)' has wrong shape", said)
    if shape:
        return f"{path.name} is damaged: the weight '{shape.group(1)}' has the wrong shape for this model."
    if "wrong number of tensors" in lowered or "missing tensor" in lowered:
        return f"{path.name} is incomplete or damaged (weights are missing). Download or copy it again."
    if "failed to allocate" in lowered or "out of memory" in lowered:
        return f"There is not enough memory to load {path.name}. Close other programs or choose a smaller model."
    # "llama_model_load: error loading model: error loading model vocabulary: <why>
    # llama_model_load_from_file_impl: failed to load model": <why> is the news.
    why = re.sub(r"\s*llama_model_load_from_file_impl: failed to load model\.?", "", said)
    why = why.rsplit("error loading model", 1)[-1].lstrip(": ").strip().rstrip(".")
    if not why:
        return f"llama.cpp could not load {path.name}. The file may be damaged; download it again."
    return (
        f"llama.cpp could not load {path.name} ({why[:200]}). The file may be damaged; "
        "download it again."
    )


# -- the child side -----------------------------------------------------------------------


def child_main(argv: Sequence[str] | None = None) -> int:
    """Load the file as the app would, without weights; print one result line."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--serve"]:  # the warm helper (load_check_runner): fork per check
        return load_check_runner.serve(child_main)
    parser = argparse.ArgumentParser(prog="python -m app.engine.load_check")
    parser.add_argument("path")
    parser.add_argument("--n-gpu-layers", type=int, default=0)
    args = parser.parse_args(argv)
    # llama.cpp's warnings and errors go to stderr, where the parent reads the last ones
    # if this process dies.
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    llama_logger = logging.getLogger("llama.cpp")
    llama_logger.addHandler(handler)
    llama_logger.setLevel(logging.WARNING)

    import ctypes

    import llama_cpp

    from app.engine import llama_log
    from app.engine.backend import ensure_backend

    ensure_backend()
    params = llama_cpp.llama_model_default_params()
    params.no_alloc = True  # parse, check and create every tensor; read and allocate none
    params.n_gpu_layers = args.n_gpu_layers
    params.load_mode = llama_cpp.LLAMA_LOAD_MODE_NONE
    llama_log.clear()
    handle = llama_cpp.llama_model_load_from_file(os.fsencode(args.path), params)
    if not handle:
        _report({"ok": False, "said": " ".join(llama_log.recent_errors(2))})
        return 0
    vocab = llama_cpp.llama_model_get_vocab(handle)
    n_vocab = int(llama_cpp.llama_vocab_n_tokens(vocab))
    data = PROBE_TEXT.encode("utf-8")
    capacity = len(data) + 16
    tokens = (llama_cpp.llama_token * capacity)()
    n = llama_cpp.llama_tokenize(vocab, data, len(data), tokens, capacity, True, True)
    buf = ctypes.create_string_buffer(256)
    for token in list(tokens[: max(n, 0)]):
        if 0 <= token < n_vocab:
            llama_cpp.llama_token_to_piece(vocab, token, buf, len(buf), 0, True)
    llama_cpp.llama_model_free(handle)
    _report({"ok": True, "n_vocab": n_vocab})
    return 0


def _report(result: dict[str, object]) -> None:
    sys.stdout.write(_MARKER + json.dumps(result) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    raise SystemExit(child_main())
