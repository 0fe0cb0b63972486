"""The PyInstaller bundle: build it with packaging/build.py into a temporary folder, then run it.

The bundle tests are slow (the build takes about a minute here, several on a cold CI
machine); select them with ``-m slow`` or deselect with ``-m "not slow"``. They skip only
when PyInstaller is missing. The icon and .desktop checks at the end are quick.
The checks run the frozen program the way users do, from a folder outside the repository:
``--version``, a headless ``run`` (token for token the same as the source tree), and the
window on Qt's offscreen platform.
"""

from __future__ import annotations

import configparser
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from app import __version__
from app.paths import demo_model_path

ROOT = Path(__file__).resolve().parent.parent
NAME = "LlamaDesk"
SIZE_TARGET_MIB = 250  # the goal; the test prints the size
SIZE_LIMIT_MIB = 400  # a regression past this fails
# Qt libraries of modules the app does not use: none may reach the bundle.
UNWANTED_QT = re.compile(
    r"libQt6(Network|Qml|Quick|WebEngine|Pdf|3D|Multimedia|Designer|Sql|Test|Charts)"
    r"|Qt6(Network|Qml|Quick|WebEngine|Pdf|3D|Multimedia)\w*\.dll"
)
# Qt and Python error signs that must not appear on the frozen program's stderr.
ERROR_SIGNS = ("Traceback", "ModuleNotFoundError", "ImportError", "qt.qpa.plugin", "Could not load")
# What the offscreen platform says about itself; not the app's doing.
OFFSCREEN_NOISE = ("This plugin does not support",)


@dataclass(frozen=True)
class Bundle:
    folder: Path
    executable: Path
    internal: Path  # PyInstaller's contents folder (sys._MEIPASS)
    demo_model_bundled: bool
    build_seconds: float


def slow(test: Callable[..., None]) -> Callable[..., None]:
    """Marks a test that needs the bundle: selectable with ``-m slow``, a build-sized timeout."""
    # Named: pytest's overloads cannot tell a Callable[..., None] from marker arguments.
    marked: Callable[..., None] = pytest.mark.timeout(1800)(pytest.mark.slow(test))
    return marked


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Bundle:
    pytest.importorskip(
        "PyInstaller", reason='PyInstaller is not installed (pip install "pyinstaller>=6.10")'
    )
    out = tmp_path_factory.mktemp("pyinstaller")
    # decided before the build starts: the demo model may still be in training
    demo_present = demo_model_path().is_file()
    t0 = time.monotonic()
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "packaging" / "build.py"),
            "--quiet",
            "--distpath",
            str(out / "dist"),
            "--workpath",
            str(out / "build"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1700,
    )
    seconds = time.monotonic() - t0
    if result.returncode != 0:
        pytest.fail(f"the build failed:\n{result.stdout[-4000:]}\n{result.stderr[-8000:]}")
    folder = out / "dist" / NAME
    exe = folder / (NAME + (".exe" if sys.platform == "win32" else ""))
    internal = folder / "_internal"
    assert exe.is_file(), result.stdout
    bundled = (internal / "resources" / "models" / demo_model_path().name).is_file()
    assert bundled or not demo_present, "the demo model exists but was not bundled"
    return Bundle(folder, exe, internal, bundled, seconds)


def frozen_env(home: Path) -> dict[str, str]:
    env = dict(os.environ)
    for name in ("PYTHONPATH", "PYTHONHOME", "LLAMA_CPP_LIB_PATH", "LD_LIBRARY_PATH"):
        env.pop(name, None)  # nothing from outside may stand in for the bundle's own files
    env["LLAMADESK_HOME"] = str(home)
    env["QT_QPA_PLATFORM"] = "offscreen"
    return env


def run_frozen(bundle: Bundle, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(bundle.executable), *args],
        cwd=tmp_path,  # not the repository: the bundle must not find the source tree
        env=frozen_env(tmp_path / "home"),
        capture_output=True,
        text=True,
        timeout=300,
    )


def folder_size(path: Path) -> int:
    return sum(os.lstat(p).st_size for p in path.rglob("*") if p.is_file() or p.is_symlink())


def assert_clean_stderr(stderr: str) -> None:
    lines = [line for line in stderr.splitlines() if not line.startswith(OFFSCREEN_NOISE)]
    text = "\n".join(lines)
    for sign in ERROR_SIGNS:
        assert sign not in text, text


@slow
def test_bundle_contents_and_size(bundle: Bundle, capsys: pytest.CaptureFixture[str]) -> None:
    size_mib = folder_size(bundle.folder) / 2**20
    with capsys.disabled():
        print(
            f"\n[packaging] {bundle.folder}: {size_mib:.1f} MiB "
            f"(target < {SIZE_TARGET_MIB} MiB), built in {bundle.build_seconds:.0f} s, "
            f"demo model {'included' if bundle.demo_model_bundled else 'absent'}"
        )
    assert size_mib < SIZE_LIMIT_MIB, f"the bundle grew to {size_mib:.1f} MiB"

    # llama.cpp where llama_cpp's loader looks (llama_cpp/lib/lib<name>.so), and by soname
    lib = bundle.internal / "llama_cpp" / "lib"
    if sys.platform.startswith("linux"):
        for name in ("llama", "ggml", "ggml-base", "ggml-cpu"):
            assert (lib / f"lib{name}.so").is_file(), name
            assert (lib / f"lib{name}.so.0").exists(), name
        # every backend library of the build it came from (ggml-rpc, GPU backends)
        import llama_cpp

        built = Path(llama_cpp.__file__).parent / "lib"
        backends = sorted(p.name for p in built.glob("libggml-*.so"))
        assert backends and all((lib / name).is_file() for name in backends), backends

    resources = bundle.internal / "resources"
    assert (resources / "icons" / "llamadesk-256.png").is_file()
    assert (resources / "icons" / "llamadesk.svg").is_file()
    models = resources / "models"
    leftovers = [p.name for p in models.iterdir()] if models.is_dir() else []
    assert all(name.endswith(".gguf") for name in leftovers), leftovers  # no training sidecars
    assert (bundle.internal / "app" / "py.typed").is_file()

    assert (bundle.folder / "llamadesk.desktop").is_file()
    assert (bundle.folder / "llamadesk.png").is_file()

    unwanted = sorted(
        str(p.relative_to(bundle.folder))
        for p in bundle.folder.rglob("*")
        if UNWANTED_QT.search(p.name)
    )
    assert not unwanted, unwanted
    assert not list(bundle.internal.glob("PySide6/QtNetwork*"))
    # (The Hub client's huggingface_hub is pure Python, inside the archive: that the window,
    # which imports it, opens is test_window_opens.)


@slow
def test_frozen_devices_has_the_backends_of_the_build(bundle: Bundle, tmp_path: Path) -> None:
    frozen = run_frozen(bundle, tmp_path, "devices", "--json")
    assert frozen.returncode == 0, frozen.stderr
    source = subprocess.run(
        [sys.executable, "-m", "app", "devices", "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert source.returncode == 0, source.stderr
    assert json.loads(frozen.stdout)["backends"] == json.loads(source.stdout)["backends"]


@slow
def test_frozen_mcp_list_reaches_a_stdio_server(bundle: Bundle, tmp_path: Path) -> None:
    """The MCP client and tool schemas (pydantic, jsonschema, attrs, ...) travel."""
    from tests.mcp.servers import SERVER_SCRIPT

    config = tmp_path / "mcp.json"
    server = {"command": sys.executable, "args": [str(SERVER_SCRIPT), "stdio"]}
    config.write_text(json.dumps({"mcpServers": {"test": server}}), encoding="utf-8")
    frozen = run_frozen(bundle, tmp_path, "mcp", "list", "--config", str(config), "--json")
    assert frozen.returncode == 0, frozen.stderr
    (listed,) = json.loads(frozen.stdout)["servers"]
    assert listed["connected"] and "echo" in {t["name"] for t in listed["tools"]}


@slow
def test_frozen_run_on_a_frozen_rpc_worker(
    bundle: Bundle, tiny_model: Path, tmp_path: Path
) -> None:
    """``run --rpc`` runs itself again in a watched child: the bundle's own executable."""
    from tests.devices.conftest import free_port, rpc_backend_missing

    if rpc_backend_missing():
        pytest.skip("this build has no RPC backend")
    from app.engine.rpc_probe import RpcProbeError, probe

    port = free_port()
    worker = subprocess.Popen(
        [str(bundle.executable), "rpc-worker", "--port", str(port), "--threads", "1"],
        cwd=tmp_path,
        env=frozen_env(tmp_path / "home"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                probe(f"127.0.0.1:{port}", timeout_s=2)
                break
            except RpcProbeError:
                assert worker.poll() is None and time.monotonic() < deadline, "no worker"
                time.sleep(0.5)
        flags = ("--rpc", f"127.0.0.1:{port}", "--gpu-layers", "1")
        split = run_frozen(bundle, tmp_path, "run", str(tiny_model), "hello", *RUN_ARGS, *flags)
        cpu = run_frozen(bundle, tmp_path, "run", str(tiny_model), "hello", *RUN_ARGS)
    finally:
        worker.kill()
        worker.wait(10)
    assert split.returncode == 0, split.stderr
    got = json.loads(split.stdout)
    assert any(d["type"] == "remote" for d in got["devices"])
    assert got["results"][0]["tokens"] == json.loads(cpu.stdout)["results"][0]["tokens"]


@slow
def test_version(bundle: Bundle, tmp_path: Path) -> None:
    result = run_frozen(bundle, tmp_path, "--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"LlamaDesk {__version__}"
    assert_clean_stderr(result.stderr)


RUN_ARGS = ("--raw", "-n", "4", "--temp", "0", "--seed", "0", "-t", "2", "-c", "512", "--json")


@slow
def test_headless_run_matches_the_source_tree(
    bundle: Bundle, tiny_model: Path, tmp_path: Path
) -> None:
    frozen = run_frozen(bundle, tmp_path, "run", str(tiny_model), "hello", *RUN_ARGS)
    assert frozen.returncode == 0, frozen.stderr
    assert_clean_stderr(frozen.stderr)
    source = subprocess.run(
        [sys.executable, "-m", "app", "run", str(tiny_model), "hello", *RUN_ARGS],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert source.returncode == 0, source.stderr
    got = json.loads(frozen.stdout)["results"][0]
    want = json.loads(source.stdout)["results"][0]
    assert len(got["tokens"]) == 4
    assert (got["tokens"], got["text"]) == (want["tokens"], want["text"])


@slow
def test_headless_run_on_the_bundled_demo_model(bundle: Bundle, tmp_path: Path) -> None:
    if not bundle.demo_model_bundled:
        pytest.skip(f"no demo model at {demo_model_path()} when the bundle was built")
    result = run_frozen(bundle, tmp_path, "run", "hello", *RUN_ARGS)  # no model: the demo
    assert result.returncode == 0, result.stderr
    assert_clean_stderr(result.stderr)
    data = json.loads(result.stdout)
    assert Path(data["model"]).resolve().is_relative_to(bundle.folder.resolve()), data["model"]
    assert len(data["results"][0]["tokens"]) == 4


def _mapped_files(pid: int) -> set[str]:
    try:
        maps = Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return set()
    return {line.split(None, 5)[5] for line in maps.splitlines() if len(line.split(None, 5)) == 6}


@slow
def test_window_opens(bundle: Bundle, tmp_path: Path) -> None:
    """The window starts on the offscreen platform and keeps running.

    With ``LLAMADESK_EXIT_AFTER_SHOW=1`` a window that supports it closes itself once shown
    (exit code 0); otherwise the process must still be alive after 5 s, past opening the
    database, with Qt loaded from the bundle, and is then terminated.
    """
    home = tmp_path / "home"
    env = frozen_env(home)
    env["LLAMADESK_EXIT_AFTER_SHOW"] = "1"
    err_path = tmp_path / "stderr.txt"
    with err_path.open("w") as err:
        proc = subprocess.Popen(
            [str(bundle.executable)],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
        try:
            code = proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
            assert (home / "llamadesk.sqlite3").is_file(), "the window did not open its database"
            if sys.platform.startswith("linux"):
                mapped = _mapped_files(proc.pid)
                qt = [f for f in mapped if "libQt6Widgets" in f]
                assert qt, "QtWidgets is not loaded"
                folder = str(bundle.folder.resolve())
                assert all(os.path.realpath(f).startswith(folder) for f in qt), qt
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
    stderr = err_path.read_text(errors="replace")
    if code is not None:
        assert code == 0, f"the window exited with {code}:\n{stderr}"
    assert_clean_stderr(stderr)


# --- the icon and the menu entry (quick, no build) ----------------------------------------

ICONS = ROOT / "resources" / "icons"


def test_desktop_file() -> None:
    path = ROOT / "packaging" / "llamadesk.desktop"
    parser = configparser.ConfigParser(interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # keys are case-sensitive
    parser.read(path, encoding="utf-8")
    entry = parser["Desktop Entry"]
    assert entry["Type"] == "Application" and entry["Name"] == NAME
    assert entry["Exec"].split()[0] == NAME  # the bundle's executable
    assert entry["Icon"] == "llamadesk" and entry["Terminal"] == "false"
    assert entry["Categories"].endswith(";")
    validator = shutil.which("desktop-file-validate")
    if validator:
        result = subprocess.run([validator, str(path)], capture_output=True, text=True)
        assert result.returncode == 0 and not result.stdout.strip(), result.stdout + result.stderr


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_icons() -> None:
    assert b"<svg" in (ICONS / "llamadesk.svg").read_bytes()
    for size in (16, 24, 32, 48, 64, 128, 256, 512):
        assert _png_size((ICONS / f"llamadesk-{size}.png").read_bytes()) == (size, size)
    ico = (ICONS / "llamadesk.ico").read_bytes()
    reserved, kind, count = struct.unpack("<HHH", ico[:6])
    assert (reserved, kind) == (0, 1) and count >= 4
    for i in range(count):
        w, h, _c, _r, _p, _b, length, offset = struct.unpack(
            "<BBBBHHII", ico[6 + 16 * i : 22 + 16 * i]
        )
        assert _png_size(ico[offset : offset + length]) == (w or 256, h or 256)
    icns = (ICONS / "llamadesk.icns").read_bytes()
    assert icns[:4] == b"icns" and struct.unpack(">I", icns[4:8])[0] == len(icns)


def test_spec_keeps_every_qt_module_the_app_imports() -> None:
    """A Qt module that app/ starts to import must come off the spec's exclusion list."""
    spec = (ROOT / "packaging" / "llamadesk.spec").read_text()
    listed = spec.split("EXCLUDED_QT_MODULES = [", 1)[1].split("]", 1)[0]
    excluded = set(re.findall(r'"(Qt\w+)"', listed))
    assert {"QtNetwork", "QtQml", "QtQuick", "QtWebEngineCore"} <= excluded
    imported: set[str] = set()
    for path in (ROOT / "app").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        imported |= set(re.findall(r"PySide6\.(Qt\w+)", text))
        for names in re.findall(r"from PySide6 import \(?([\w\s,]+)\)?", text):
            imported |= {n.strip() for n in names.split(",") if n.strip().startswith("Qt")}
    assert {"QtCore", "QtGui", "QtWidgets"} <= imported
    assert not imported & excluded, sorted(imported & excluded)
