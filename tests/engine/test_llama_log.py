"""llama.cpp's log goes through ``logging`` (collapsed, quiet by default), never raw to stderr.

A child process (llama.cpp writes to file descriptor 2, which pytest's capture of
``sys.stderr`` would not see) runs the app's logging setup, opens a real context on a tiny
model and fills its cache until llama.cpp warns "failed to find a memory slot".
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = r"""
import json, logging, sys
sys.path.insert(0, sys.argv[1])
from app.cli import _configure_logging
from app.engine import ContextSettings
from app.engine import llama_log
from app.engine.context import Context
from app.engine.model import Model

_configure_logging(sys.argv[3] == "1")
seen = []

class Keep(logging.Handler):
    def emit(self, record):
        seen.append([record.levelname, record.getMessage(), getattr(record, "llama_repeats", None)])

logging.getLogger("llama.cpp").addHandler(Keep(logging.DEBUG))
model = Model(sys.argv[2])
ctx = Context(model, ContextSettings(n_ctx=256, n_batch=64, n_ubatch=64, n_seq_max=1,
                                     n_threads=1, n_threads_batch=1))
pos, codes = 0, []
for _ in range(12):
    ctx.batch.clear()
    ctx.batch.add_span([1] * 64, pos, 0, True)
    result = ctx.decode()
    codes.append(result.code)
    if result.ok:
        pos += 64
llama_log.flush_repeats()
ctx.close()
model.close()
print(json.dumps({"codes": codes, "seen": seen, "recent": llama_log.recent_errors(5)}))
"""


def run_child(model: Path, verbose: bool) -> tuple[dict[str, object], str]:
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(ROOT), str(model), "1" if verbose else "0"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


@pytest.mark.parametrize("verbose", [False, True])
def test_llama_warnings_go_through_logging_collapsed(tiny_model: Path, verbose: bool) -> None:
    out, stderr = run_child(tiny_model, verbose)
    codes = out["codes"]
    assert isinstance(codes, list) and codes.count(1) >= 3  # the cache was full: no slot
    recent = out["recent"]
    assert isinstance(recent, list)
    assert any("failed to find a memory slot" in line for line in recent)
    # nothing raw on stderr: a bare llama.cpp line would start with "decode:"
    assert not any(line.startswith("decode:") for line in stderr.splitlines()), stderr
    if verbose:
        # -v: llama.cpp's log on stderr, through logging (named), the warning collapsed
        slot_lines = [line for line in stderr.splitlines() if "memory slot" in line]
        assert slot_lines and all(line.startswith("llama.cpp: ") for line in slot_lines)
        assert len(slot_lines) == 2, slot_lines  # once, then "(N more times)"
        assert "more times" in slot_lines[1]
        seen = out["seen"]
        assert isinstance(seen, list)
        slot = [s for s in seen if "memory slot" in s[1]]
        assert slot[0][0] == "WARNING" and slot[0][2] == 0
        assert slot[1][2] == codes.count(1) - 1
    else:
        assert "memory slot" not in stderr, stderr  # quiet by default
        assert "llama_context" not in stderr and "llama_model_loader" not in stderr
