"""Try a model file's first load and decodes in a child process, where a crash cannot reach
the app.

llama.cpp's loader asserts (``GGML_ASSERT``: the process aborts) in many places a damaged
header can reach; :mod:`app.engine.header_checks` finds the known ones first, and this
catches the rest; and which CPU kernels llama.cpp picks for a model (its "extra buffer
types": AMX, CPU_REPACK) is only known to be safe on this machine by running them (issue
27: SIGSEGV in ``ggml_backend_amx_mul_mat`` on a tied-embedding model). Before a file is
loaded for real, a child process (``python -m app.engine.load_check PATH``, or a child
forked from a warm helper: see :mod:`app.engine.load_check_runner`) loads it as the app
does (memory-mapped, so the pages are shared with the app's own load; the CPU guard of
:mod:`app.engine.cpu_quirks` applied), tokenizes a short text, and decodes the shapes the
app decodes: one token of each of :data:`N_SEQ` sequences with logits for every row (the
scheduler's batch, where the AMX crash was), one token, and a prompt chunk of
``min(n_batch, 512)`` tokens. It reports OK, or llama.cpp's refusal.

A child that runs out of time (:func:`default_timeout`: the load is real, a cold file is
read from disk) is no verdict: in the prompt chunk, the risky shapes passed (OK, kept);
before it, this load goes without extra buffer types and the next one checks again.

If the child dies, it is tried again without extra buffer types (llama-server's
``--no-repack``); when that one lives, the model is loaded that way and the user is told
(:attr:`Verdict.notice`). If it dies too, the model is refused with a sentence built from
its signal, the phase it died in and the last lines llama.cpp printed.

The verdict is kept by a hash of what such a load reads (:meth:`GGUFHeader.digest`: the
header's metadata and tensor infos and the file's size, not the weights), of this CPU
(:func:`cpu_quirks.cpu_identity`), the llama.cpp build and the CPU guard's version, in the
data folder's ``load_checks`` (and in memory), so a known file costs a hash of its header
(milliseconds) and an edited one, another CPU or another build is tried again.

``LLAMADESK_FAULT_EXTRA_BUFTS_CRASH`` (tests only) makes the child die of SIGSEGV when it
starts decoding: ``1`` only with extra buffer types, ``always`` in both tries.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
import re
import signal
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from app import paths
from app.engine import load_check_runner
from app.engine.errors import ModelLoadError
from app.engine.gguf_header import GGUFHeader
from app.engine.load_check_child import FAULT_ENV as FAULT_ENV
from app.engine.load_check_child import MARKER as _MARKER
from app.engine.load_check_child import MAX_CHUNK as MAX_CHUNK
from app.engine.load_check_child import N_SEQ as N_SEQ
from app.engine.load_check_child import NO_EXTRA_BUFTS as _NO_EXTRA_BUFTS
from app.engine.load_check_child import PHASE as _PHASE
from app.engine.load_check_child import PROBE_TEXT as PROBE_TEXT
from app.engine.load_check_child import child_main as child_main
from app.fsutil import atomic_write_bytes

log = logging.getLogger(__name__)
# FAULT_ENV, MAX_CHUNK, N_SEQ, PROBE_TEXT and child_main are the child's (load_check_child),
# also under this module's name, where their callers find them.

# Bump when the child checks more (older verdicts are then not trusted). 2: a real load
# and the app's decode shapes, again without extra buffer types if that crashes.
CHECK_VERSION = 2
TIMEOUT_S = 120.0  # plus the time to read the file (READ_RATE): the load is real
READ_RATE = 100e6  # bytes per second a slow disk reads
# Signals of a crash inside llama.cpp (an assert aborts; a bad read faults).
_CRASH_SIGNALS = {signal.SIGABRT, signal.SIGSEGV, signal.SIGBUS, signal.SIGFPE, signal.SIGILL}


@dataclass(frozen=True)
class Verdict:
    """``ok``, or ``message``: the sentence for the user. ``source`` says where it came
    from: "memory", "disk" or "child". ``extra_bufts`` False: the model crashed llama.cpp
    with its extra buffer types and must be loaded without them (``message`` then says
    so, for the user: :attr:`notice`)."""

    ok: bool
    message: str = ""
    source: str = "child"
    extra_bufts: bool = True

    @property
    def notice(self) -> str:
        """What the user is told about a model that loads on the slower path ("": none)."""
        return self.message if self.ok and not self.extra_bufts else ""


_memo: dict[str, Verdict] = {}
_lock = threading.Lock()


@functools.cache
def _machine_key() -> str:
    """This CPU, the llama.cpp build (its version and the CPU features it was built for)
    and the CPU guard's version and mode: a verdict holds for these only."""
    import llama_cpp

    from app.engine import cpu_quirks
    from app.engine.backend import ensure_backend

    ensure_backend()
    build = (llama_cpp.llama_print_system_info() or b"").decode("utf-8", "replace")
    return "|".join(
        (
            cpu_quirks.cpu_identity().key,
            llama_cpp.__version__,
            build,
            str(cpu_quirks.GUARD_VERSION),
        )
    )


def _amx_arg(guard_active: bool) -> str:
    """The child's ``--amx``: this process's decision (it probed the CPU once), so the
    child neither probes again nor decides otherwise."""
    return "off" if guard_active else "on"


# The model settings that say where the weights go and how they are read: the child
# places them as the app does, and a verdict holds for that placement only.
PLACEMENT_FIELDS = (
    "gpu_layers",
    "split_mode",
    "main_device",
    "tensor_split",
    "devices",
    "rpc_servers",
    "use_mmap",
    "use_mlock",
)
Placement = Mapping[str, object]


def placement_of(settings: object) -> dict[str, object]:
    """The :data:`PLACEMENT_FIELDS` of a ``ModelSettings``."""
    return {name: getattr(settings, name) for name in PLACEMENT_FIELDS}


def _placement_text(placement: Placement | None, n_gpu_layers: int) -> str:
    chosen = {k: placement[k] for k in PLACEMENT_FIELDS if k in placement} if placement else {}
    return json.dumps({**chosen, "n_gpu_layers": n_gpu_layers}, sort_keys=True)


def cache_key(
    header: GGUFHeader,
    *,
    extra_bufts: bool = True,
    placement: Placement | None = None,
    n_gpu_layers: int = 0,
) -> str:
    from app.engine import cpu_quirks

    h = hashlib.blake2b(digest_size=16)
    guard = _amx_arg(cpu_quirks.amx_guard_active())  # what the first try runs
    tried = "all" if extra_bufts else "safe"
    where = _placement_text(placement, n_gpu_layers)
    h.update(f"{CHECK_VERSION}|{_machine_key()}|{guard}|{tried}|{where}|{header.digest()}".encode())
    return h.hexdigest()


def cache_dir() -> Path:
    return paths.private_dir("load_checks")


CRASHED_NOTICE = (
    "{name} crashed llama.cpp in an earlier session, so it runs without llama.cpp's faster "
    "CPU kernels from now on (as llama-server's --no-repack), which may be slower."
)


def _crash_key(header: GGUFHeader) -> str:
    """A crash of the app itself with this file on this machine and build (whatever its
    placement): its loads go without extra buffer types."""
    h = hashlib.blake2b(digest_size=16)
    h.update(f"crashed|{CHECK_VERSION}|{_machine_key()}|{header.digest()}".encode())
    return h.hexdigest()


def remember_crash(path: Path) -> str:
    """The app (the window, ``run``, ``serve``) crashed in llama.cpp with ``path``: keep
    the verdict that it loads without extra buffer types (a crash of the real load is
    proof the check's child did not see), so not only the next load goes the safe way.
    The sentence that says so; "" when the file cannot be read (nothing is kept)."""
    from app.engine.gguf_header import GGUFHeaderError, read_header

    try:
        header = read_header(path)
    except (GGUFHeaderError, OSError, ValueError):  # gone, or a remote model's address
        return ""
    key = _crash_key(header)
    verdict = Verdict(True, CRASHED_NOTICE.format(name=path.name), "disk", extra_bufts=False)
    with _lock:
        _write_cached(key, verdict, path)
    return verdict.message


def _crashed(header: GGUFHeader) -> Verdict | None:
    # Read from the data folder each time (a small file): another process (``run``'s
    # supervisor, the window's next start) writes it.
    return _read_cached(_crash_key(header))


def check(
    path: Path,
    header: GGUFHeader,
    *,
    architecture: str = "",
    n_gpu_layers: int = 0,
    timeout: float | None = None,
    extra_bufts: bool = True,
    placement: Placement | None = None,
) -> Verdict:
    """The verdict on loading ``path`` (whose parsed header is ``header``): from memory, the
    data folder, or a child process that tries the load. ``extra_bufts`` False: the user
    chose to load without extra buffer types (safe settings), so only that is tried.
    ``placement``: the model's :data:`PLACEMENT_FIELDS` (None: the CPU, memory-mapped),
    applied in the child as the app applies them, and part of the verdict's key.
    ``timeout``: for each child (None: :func:`default_timeout`)."""
    if timeout is None:
        timeout = default_timeout(path)
    with _lock:
        crashed = _crashed(header) if extra_bufts else None
        if crashed is not None:  # the app crashed with it: only the safe way is checked
            extra_bufts = False
        key = cache_key(
            header, extra_bufts=extra_bufts, placement=placement, n_gpu_layers=n_gpu_layers
        )
        verdict = _memo.get(key)
        if verdict is not None:
            verdict = dataclasses.replace(verdict, source="memory")
        else:
            verdict = _read_cached(key)
            if verdict is None:
                verdict, keep = _run_checks(
                    path, architecture, n_gpu_layers, timeout, extra_bufts, placement
                )
                if keep:
                    _write_cached(key, verdict, path)
            if verdict.source != "unchecked":
                _memo[key] = verdict
        if crashed is not None and verdict.ok:
            notice = CRASHED_NOTICE.format(name=path.name)  # this file's name, not the kept one's
            return dataclasses.replace(verdict, message=notice, extra_bufts=False)
        return verdict


def ensure_loadable(
    path: Path,
    header: GGUFHeader,
    *,
    architecture: str = "",
    n_gpu_layers: int = 0,
    timeout: float | None = None,
    extra_bufts: bool = True,
    placement: Placement | None = None,
) -> Verdict:
    """:func:`check`, raising :class:`ModelLoadError` with its sentence when it fails."""
    verdict = check(
        path,
        header,
        architecture=architecture,
        n_gpu_layers=n_gpu_layers,
        timeout=timeout,
        extra_bufts=extra_bufts,
        placement=placement,
    )
    if not verdict.ok:
        raise ModelLoadError(verdict.message)
    return verdict


def default_timeout(path: Path) -> float:
    """How long a child may take: :data:`TIMEOUT_S`, plus reading the file at
    :data:`READ_RATE` (a cold 40 GB file takes minutes to map in)."""
    try:
        size = path.stat().st_size
    except OSError:
        size = 0
    return TIMEOUT_S + size / READ_RATE


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
    extra = data.get("extra_bufts", True)
    return Verdict(
        data["ok"],
        message if isinstance(message, str) else "",
        "disk",
        extra if isinstance(extra, bool) else True,
    )


def _write_cached(key: str, verdict: Verdict, path: Path) -> None:
    record = {
        "ok": verdict.ok,
        "message": verdict.message,
        "extra_bufts": verdict.extra_bufts,
        "file": path.name,
        "checked_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    try:
        atomic_write_bytes(cache_dir() / f"{key}.json", json.dumps(record).encode("utf-8"))
    except OSError as exc:  # a read-only data folder: the check runs again next time
        log.warning("could not keep the load check of %s: %s", path.name, exc)


# -- the parent side ----------------------------------------------------------------------


def _run_checks(
    path: Path,
    architecture: str,
    n_gpu_layers: int,
    timeout: float,
    extra_bufts: bool,
    placement: Placement | None = None,
) -> tuple[Verdict, bool]:
    """The verdict of one child, or of a second one without extra buffer types when the
    first crashed; and whether it is kept (see :func:`_run_child`)."""
    if extra_bufts:
        verdict, keep, crash = _run_child(
            path, architecture, n_gpu_layers, timeout, True, placement
        )
        if crash is None:
            return verdict, keep
        log.warning(
            "the load check of %s crashed with llama.cpp's extra buffer types (%s while "
            "%s); trying without them",
            path.name,
            _signal_name(crash[0]),
            crash[1],
        )
    verdict, keep, crash = _run_child(path, architecture, n_gpu_layers, timeout, False, placement)
    if crash is not None or not verdict.ok or not extra_bufts:
        return verdict, keep
    return Verdict(
        True,
        f"{path.name} crashed llama.cpp with its faster CPU kernels on this computer, so it "
        "runs without them (as llama-server's --no-repack), which may be slower.",
        "child",
        extra_bufts=False,
    ), keep


def _run_child(
    path: Path,
    architecture: str,
    n_gpu_layers: int,
    timeout: float,
    extra_bufts: bool,
    placement: Placement | None = None,
) -> tuple[Verdict, bool, tuple[int, str] | None]:
    """The child's verdict, whether it says something about the file (kept) rather than
    about this run (a timeout, a child that could not start), and, when the child died of
    a crash signal, that signal and the phase it died in ("loading" or "decoding")."""
    started = time.monotonic()
    from app.engine import cpu_quirks

    amx = _amx_arg(cpu_quirks.amx_guard_active())
    args = [str(path), "--n-gpu-layers", str(n_gpu_layers), "--amx", amx]
    if not extra_bufts:
        args.append(_NO_EXTRA_BUFTS)
    if placement:
        args += ["--placement", json.dumps(dict(placement))]
    try:
        outcome = load_check_runner.run_check(args, timeout)
    except OSError as exc:
        log.warning("the load check of %s could not start: %s", path.name, exc)
        return Verdict(True, "", "unchecked"), False, None
    code = outcome.returncode
    log.info("load check of %s: exit %s in %.2f s", path.name, code, time.monotonic() - started)
    if code is None:
        if _phase(outcome.stdout, exact=True) == "decode-chunk":
            # Only the prompt chunk was left, and it is slow, not broken (the shapes where
            # kernels crashed, several rows and one token, passed).
            log.info("the load check of %s ran out of time in its prompt chunk", path.name)
            return Verdict(True, extra_bufts=extra_bufts), True, None
        # A slow disk or a busy computer: this load goes the safe way, the next checks again.
        return (
            Verdict(
                True,
                f"LlamaDesk could not finish checking {path.name} within {timeout:.0f} s (the "
                "computer may be busy), so it runs without llama.cpp's faster CPU kernels "
                "this time; the next load checks again.",
                "unchecked",
                extra_bufts=False,
            ),
            False,
            None,
        )
    result = _result_line(outcome.stdout)
    if code == 0 and result is not None:
        if result.get("ok") is True:
            return Verdict(True, extra_bufts=extra_bufts), True, None
        said = str(result.get("said") or "")
        if n_gpu_layers > 0 and any(w in said.lower() for w in ("alloc", "memory")):
            # A device that cannot hold this many layers: the app's own load says so and
            # tries fewer (offload_loader); the check is about crashes, not about room.
            log.info("the load check of %s: the devices could not hold it (%s)", path.name, said)
            return Verdict(True, "", "unchecked"), False, None
        message = refusal_message(path, architecture, said)
        # Memory is about this computer now, not the file: try again next time.
        return Verdict(False, message), "memory" not in said.lower(), None
    if code < 0 and -code in _CRASH_SIGNALS:
        phase = _phase(outcome.stdout)
        if phase == "decoding":
            message = decode_crash_message(path, -code, outcome.stderr)
        else:
            message = crash_message(path, -code, outcome.stderr)
        return Verdict(False, message), True, (-code, phase)
    # The child itself failed (killed from outside, a Python error): not a verdict on the
    # file. The load goes on as before the check existed, and the next one checks again.
    log.warning(
        "the load check of %s ended with %s: %s",
        path.name,
        code,
        _tail(outcome.stderr, 3) or "no output",
    )
    return Verdict(True, "", "unchecked"), False, None


def _phase(stdout: str, *, exact: bool = False) -> str:
    """The phase the child was in last: "loading" (the default) or "decoding"; ``exact``:
    the child's own word ("load", "decode", "decode-chunk"; "" before any)."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(_PHASE):
            said = line[len(_PHASE) :].strip()
            if exact:
                return said
            return "decoding" if said.startswith("decode") else "loading"
    return "" if exact else "loading"


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


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
    """The sentence for a child that died of ``signum`` while loading; it quotes
    llama.cpp's assertion (or its last lines)."""
    name = _signal_name(signum)
    detail = _said(stderr)
    return (
        f"The model file {path.name} is damaged: llama.cpp stops with {name} when it loads "
        f"it{detail}. LlamaDesk did not load it; download it again."
    )


def decode_crash_message(path: Path, signum: int, stderr: str) -> str:
    """The sentence for a model whose decodes crashed the child in both tries."""
    return (
        f"LlamaDesk did not load {path.name}: llama.cpp crashes ({_signal_name(signum)}) "
        "when it runs this model on this computer, also without its faster CPU kernels"
        f"{_said(stderr)}."
    )


def _said(stderr: str) -> str:
    """ ": <llama.cpp's assertion or last error line>", or "" when it said none."""
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
    return f": {said[-300:]}" if said else ""


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


if __name__ == "__main__":
    raise SystemExit(child_main())
