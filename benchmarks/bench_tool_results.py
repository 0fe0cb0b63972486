"""Peak memory and time of ``llamadesk run --mcp`` when a tool answers megabytes (issue 27,
item 6): the run process's own peak RSS (``ru_maxrss`` of itself, not of the MCP server,
which builds the result) and the wall time of the whole run, on the tiny test model.

    python -m benchmarks.bench_tool_results [MB ...]      (default: 10 50)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.mcp.test_run_mcp_tools import QWEN25, SERVER
from tests.support.gguf_models import TinySpec, write_tiny_model

ROOT = Path(__file__).resolve().parents[1]
# The run in a wrapper that says its own peak RSS (KiB on Linux) on its last stderr line.
WRAPPER = (
    "import atexit, resource, runpy, sys\n"
    "atexit.register(lambda: print('peak_kib', resource.getrusage(resource.RUSAGE_SELF)"
    ".ru_maxrss, file=sys.stderr))\n"
    "sys.argv = ['llamadesk', *sys.argv[1:]]\n"
    "runpy.run_module('app', run_name='__main__')\n"
)


def measure(folder: Path, model: Path, megabytes: int) -> dict[str, object]:
    script = folder / "server.py"
    script.write_text(SERVER, encoding="utf-8")
    config = folder / "mcp.json"
    size = str(megabytes * 1_000_000)
    servers = {"one": {"command": sys.executable, "args": [str(script), "one", size]}}
    config.write_text(json.dumps({"mcpServers": servers}), encoding="utf-8")
    args = [str(model), "go", "--mcp", str(config), "--tool-choice", "big", "--allow", "big"]
    args += ["--temp", "0", "-n", "200", "-c", "8192", "--max-rounds", "1", "--json"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LLAMADESK_HOME": str(folder / "home")}
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", WRAPPER, "run", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )
    took = time.monotonic() - started
    peak = [line for line in done.stderr.splitlines() if line.startswith("peak_kib")]
    rounds = json.loads(done.stdout)["rounds"] if done.returncode == 0 else []
    return {
        "megabytes": megabytes,
        "exit": done.returncode,
        "seconds": round(took, 1),
        "peak_rss_mb": round(int(peak[-1].split()[1]) / 1024) if peak else None,
        "outcome": rounds[0][0]["outcome"] if rounds else None,
        "result_chars": len(rounds[0][0]["result"]) if rounds else None,
    }


def main() -> None:
    sizes = [int(a) for a in sys.argv[1:]] or [10, 50]
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        model = write_tiny_model(
            folder / "qwen25.gguf", TinySpec(chat_template=QWEN25.read_text(), n_ctx_train=8192)
        )
        for megabytes in sizes:
            print(json.dumps(measure(folder, model, megabytes)), flush=True)


if __name__ == "__main__":
    main()
