"""The CPU cliff (issue 20, item 2): a bare ``llama_decode`` loop with threads = cores - 1
and = cores, 1, 2 and 4 tabs (one batched decode per step, or the tabs decoded in turn),
with and without a busy neighbour process, under OpenMP wait policies.

llama-cpp-python's wheels build ggml with OpenMP: its worker threads meet at an
``omp barrier`` after every operation and libgomp spins there (``GOMP_SPINCOUNT``, 300,000
by default) before sleeping, so a worker the kernel descheduled for a busy neighbour stalls
the others. ``ggml_threadpool_params.poll`` does not apply in an OpenMP build (it is the
non-OpenMP threadpool's setting). The policy is read when libgomp loads, so each setting
runs in a child process (``--spins``: ``default``, ``passive`` = ``OMP_WAIT_POLICY=PASSIVE``,
or a spin count). The neighbour is a bounded busy loop in another process.

On an F16 model (llama.cpp's AMX kernels crash on quantized weights with batches > 1 on
this machine) of a smaller 1.1B-like shape, written once and cached. Each case runs for
``--seconds``; conditions alternate (quiet, busy, quiet, busy ... per setting). Prints ONE
JSON object: tokens/s per case, the busy/quiet ratio per setting and thread count, the two-
and four-tab totals against one tab, and the load average.

    python benchmarks/bench_cpu.py [--seconds 2] [--spins default,passive,20000]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.engine.threads import APP_SPINCOUNT
from app.settings_schema import default_threads
from benchmarks.make_model import CACHE_DIR, BenchSpec, write_f16

SPEC = BenchSpec(n_embd=1024, n_head=16, n_head_kv=4, n_layer=8, n_ff=2816, n_vocab=8000)
TABS = (1, 2, 4)


def model_path() -> Path:
    path = CACHE_DIR / SPEC.file_name.replace("-q4_0.gguf", "-f16.gguf")
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(path.name + f".{os.getpid()}.tmp")
        write_f16(partial, SPEC)
        os.replace(partial, path)
    return path


def spin_env(spin: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    if spin == "passive":
        env["OMP_WAIT_POLICY"] = "PASSIVE"
    elif spin != "default":
        env["GOMP_SPINCOUNT"] = str(int(spin))
    # The app's own setting must not leak in: the child is a bare llama.cpp loop.
    env["LLAMADESK_OMP_DEFAULTS"] = "0"
    return env


def child(model: Path, seconds: float) -> list[dict[str, Any]]:
    """Every (threads, tabs, mode) case in this process's OpenMP setting."""
    import llama_cpp

    llama_cpp.llama_backend_init()
    mparams = llama_cpp.llama_model_default_params()
    handle = llama_cpp.llama_model_load_from_file(str(model).encode(), mparams)
    cores = os.cpu_count() or 1
    params = llama_cpp.llama_context_default_params()
    params.n_ctx, params.n_batch, params.n_ubatch, params.n_seq_max = 2048, 64, 64, 4
    params.kv_unified = True
    params.n_threads = params.n_threads_batch = cores
    params.no_perf = True
    ctx = llama_cpp.llama_init_from_model(handle, params)
    memory = llama_cpp.llama_get_memory(ctx)
    batch = llama_cpp.llama_batch_init(64, 0, 1)

    def decode(items: list[tuple[int, int]]) -> None:  # (seq, pos)
        batch.n_tokens = 0
        for i, (seq, pos) in enumerate(items):
            batch.token[i] = 100 + seq
            batch.pos[i] = pos
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = seq
            batch.logits[i] = True
        batch.n_tokens = len(items)
        if llama_cpp.llama_decode(ctx, batch) != 0:
            raise RuntimeError("llama_decode failed")

    cases: list[dict[str, Any]] = []
    for threads in sorted({max(1, cores - 1), cores}):
        llama_cpp.llama_set_n_threads(ctx, threads, threads)
        for tabs in TABS:
            for mode in ("batched", "turns") if tabs > 1 else ("batched",):
                llama_cpp.llama_memory_clear(memory, True)
                decode([(s, 0) for s in range(tabs)])
                pos, produced = 1, 0
                start = time.perf_counter()
                while time.perf_counter() - start < seconds and pos < 1500:
                    if mode == "batched":
                        decode([(s, pos) for s in range(tabs)])
                    else:
                        for s in range(tabs):
                            decode([(s, pos)])
                    produced += tabs
                    pos += 1
                elapsed = time.perf_counter() - start
                cases.append(
                    {
                        "threads": threads,
                        "tabs": tabs,
                        "mode": mode,
                        "tokens": produced,
                        "tokens_per_s": round(produced / elapsed, 2),
                    }
                )
    llama_cpp.llama_batch_free(batch)
    llama_cpp.llama_free(ctx)
    llama_cpp.llama_model_free(handle)
    return cases


def neighbour(seconds: float) -> subprocess.Popen[bytes]:
    """A bounded busy loop: one core kept busy, ending by itself even if we die."""
    code = f"import time\nend = time.time() + {seconds}\nwhile time.time() < end: pass\n"
    return subprocess.Popen([sys.executable, "-c", code])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=2.0, help="per case")
    parser.add_argument(
        "--spins",
        default=f"default,{APP_SPINCOUNT},passive",
        help="comma-separated OpenMP settings (the app's: GOMP_SPINCOUNT=%(default)s's 2nd)",
    )
    parser.add_argument("--child", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(child(args.child, args.seconds)))
        return 0
    model = model_path()
    load_before = Path("/proc/loadavg").read_text().split()[:3]
    runs: list[dict[str, Any]] = []
    for spin in args.spins.split(","):
        for busy in (False, True):  # alternating: quiet then busy for each setting
            other = neighbour(args.seconds * 20 + 60) if busy else None
            try:
                done = subprocess.run(
                    [
                        sys.executable,
                        __file__,
                        "--child",
                        str(model),
                        "--seconds",
                        str(args.seconds),
                    ],
                    env=spin_env(spin),
                    capture_output=True,
                    text=True,
                    timeout=args.seconds * 40 + 120,
                )
            finally:
                if other is not None:
                    other.kill()
                    other.wait()
            if done.returncode != 0:
                print(done.stderr[-2000:], file=sys.stderr)
                return 1
            for case in json.loads(done.stdout.strip().splitlines()[-1]):
                runs.append({"spin": spin, "neighbour": busy, **case})
    summary: list[dict[str, Any]] = []
    for spin in args.spins.split(","):
        for threads in sorted({r["threads"] for r in runs}):

            def rate(busy: bool, tabs: int, mode: str, s: str = spin, t: int = threads) -> float:
                return next(
                    r["tokens_per_s"]
                    for r in runs
                    if (r["spin"], r["neighbour"], r["threads"], r["tabs"], r["mode"])
                    == (s, busy, t, tabs, mode)
                )

            row: dict[str, Any] = {"spin": spin, "threads": threads}
            for busy in (False, True):
                key = "busy" if busy else "quiet"
                one = rate(busy, 1, "batched")
                row[f"{key}_one_tab"] = one
                for tabs in (2, 4):
                    best = max(rate(busy, tabs, "batched"), rate(busy, tabs, "turns"))
                    row[f"{key}_{tabs}_tabs_batched_vs_one"] = round(
                        rate(busy, tabs, "batched") / one, 2
                    )
                    row[f"{key}_{tabs}_tabs_best_vs_one"] = round(best / one, 2)
            row["busy_vs_quiet"] = round(row["busy_one_tab"] / row["quiet_one_tab"], 2)
            summary.append(row)
    # The app's defaults: its spin count and threads = all cores but one.
    app_rows = [
        r for r in summary if r["spin"] == str(APP_SPINCOUNT) and r["threads"] == default_threads()
    ]
    goal = None
    if app_rows:
        row = app_rows[0]
        goal = {
            "setting": f"GOMP_SPINCOUNT={APP_SPINCOUNT}, threads={default_threads()}",
            "busy_vs_quiet": row["busy_vs_quiet"],
            "busy_at_least_half_quiet": row["busy_vs_quiet"] >= 0.5,
            "two_tabs_total_vs_one": min(
                row["quiet_2_tabs_best_vs_one"], row["busy_2_tabs_best_vs_one"]
            ),
            "two_tabs_at_least_one_tab": min(
                row["quiet_2_tabs_best_vs_one"], row["busy_2_tabs_best_vs_one"]
            )
            >= 1.0,
        }
    print(
        json.dumps(
            {
                "app_goal": goal,
                "model": {"path": str(model), "n_params": SPEC.n_params(), "type": "F16"},
                "cores": os.cpu_count(),
                "seconds_per_case": args.seconds,
                "loadavg_before": load_before,
                "loadavg_after": Path("/proc/loadavg").read_text().split()[:3],
                "summary": summary,
                "runs": runs,
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
