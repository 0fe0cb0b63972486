"""The CPU cliff (issue 20, item 2): the app's decode path against a bare ``llama_decode``
loop, with threads = cores - 1 and = cores, 1, 2 and 4 tabs, with and without a busy
neighbour process, on quantized models (Q8_0, Q4_0) and an F16 one.

**The bare loop** is plain llama.cpp: one model, one context, one token per tab per step,
either one batched decode per step or the tabs decoded in turn, no sampling. It loads with
the app's AMX guard (:func:`app.engine.cpu_quirks.apply_cpu_quirks`, the plan each of the
app's loads uses): llama.cpp's AMX kernels crash on quantized batches of more than one
token on some CPUs (this machine's among them), so without it the quantized cases could not
run at all; with it both sides use the same kernels.

**The app's path** is a :class:`app.session.Session` (the session thread and engine the
window drives, without its Qt adapter and database) loading the model with the app's
default context settings and the thread count of the case, in a process with the app's
OpenMP setting (:func:`app.engine.threads.configure_openmp`): its load measures batched
against in-turn decoding (:mod:`app.engine.batching`) and its scheduler uses that choice;
each tab is a conversation whose chat turn samples with the default settings.

llama-cpp-python's wheels build ggml with OpenMP: its worker threads meet at an ``omp
barrier`` after every operation and libgomp spins there (``GOMP_SPINCOUNT``, 300,000 by
default) before sleeping, so a worker the kernel descheduled for a busy neighbour stalls
the others. The policy is read when libgomp loads, so every setting runs in a child
process: the bare loop under ``--spins`` (``default``: libgomp's own, i.e. what plain
llama.cpp does; a number: that spin count, the app's by default too; ``passive``:
``OMP_WAIT_POLICY=PASSIVE``), the app under its own setting. The neighbour is a bounded
busy loop in another process. The conditions alternate per model (quiet, then busy), for
``--rounds`` rounds; each case reports its best round (the machine is shared: another
process only ever slows a case down).

The quantized model has Qwen2.5-0.5B's shape in llama's layout (24 layers, 896 wide, 14
heads, 2 KV heads, FFN 4864) and its 151,936-token vocabulary, random weights; the F16
one a smaller 8-layer shape (as before). Both are written with ``gguf`` (the quantized ones
through ``llama_model_quantize`` from an F16 file) once and cached under
``~/.cache/llamadesk-bench``. Each case runs for ``--seconds``; the app's tokens/s per tab
come from the times its tokens were sampled (``TextStreamed.sampled_at``). Prints ONE JSON
object: tokens/s per case, app/bare per case, busy/quiet per setting, 2- and 4-tab totals against
one tab, which mode the app chose (and its measurement), and the load average.

    python benchmarks/bench_cpu.py [--models q8_0,f16] [--seconds 1] [--rounds 2]
        [--spins default,1000]     # q4_0 too: --models q8_0,q4_0,f16
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.engine.threads import APP_SPINCOUNT
from app.settings_schema import default_threads
from benchmarks.make_model import CACHE_DIR, BenchSpec, write_f16

TABS = (1, 2, 4)
_FTYPES = {"q8_0": 7, "q4_0": 2}  # llama_ftype: LLAMA_FTYPE_MOSTLY_Q8_0 / _Q4_0


@dataclass(frozen=True)
class BenchModel:
    name: str  # "f16", "q8_0", "q4_0"
    spec: BenchSpec

    @property
    def f16_path(self) -> Path:
        return CACHE_DIR / self.spec.file_name.replace("-q4_0.gguf", "-f16.gguf")

    @property
    def path(self) -> Path:
        return CACHE_DIR / self.spec.file_name.replace("-q4_0.gguf", f"-{self.name}.gguf")


# Qwen2.5-0.5B's shape and vocabulary size (llama layout: no biases, untied output).
QUANT_SPEC = BenchSpec(n_embd=896, n_head=14, n_head_kv=2, n_layer=24, n_ff=4864, n_vocab=151936)
F16_SPEC = BenchSpec(n_embd=1024, n_head=16, n_head_kv=4, n_layer=8, n_ff=2816, n_vocab=8000)
MODELS = {
    "q8_0": BenchModel("q8_0", QUANT_SPEC),
    "q4_0": BenchModel("q4_0", QUANT_SPEC),
    "f16": BenchModel("f16", F16_SPEC),
}


def _replace_atomically(path: Path, write: Any) -> None:
    partial = path.with_name(path.name + f".{os.getpid()}.tmp")
    try:
        write(partial)
        os.replace(partial, path)  # a killed run never leaves a half-written model behind
    finally:
        partial.unlink(missing_ok=True)


def model_path(model: BenchModel) -> Path:
    """The model's file, written (and its F16 source, kept for the other types) first."""
    if model.path.exists():
        return model.path
    model.path.parent.mkdir(parents=True, exist_ok=True)
    if not model.f16_path.exists():
        _replace_atomically(model.f16_path, lambda p: write_f16(p, model.spec))
    if model.name != "f16":
        import ctypes

        import llama_cpp

        def quantize(target: Path) -> None:
            params = llama_cpp.llama_model_quantize_default_params()
            params.ftype = _FTYPES[model.name]
            params.nthread = os.cpu_count() or 1
            code = llama_cpp.llama_model_quantize(
                str(model.f16_path).encode(), str(target).encode(), ctypes.byref(params)
            )
            if code != 0:
                raise RuntimeError(f"llama_model_quantize failed with code {code}")

        _replace_atomically(model.path, quantize)
    return model.path


# -- the children -----------------------------------------------------------------------------


def _quiet_llama_log() -> None:
    import ctypes

    import llama_cpp

    def ignore(_level: int, _text: bytes, _data: ctypes.c_void_p) -> None:
        return None

    callback = llama_cpp.llama_log_callback(ignore)
    _quiet_llama_log.keep = callback  # type: ignore[attr-defined]  # alive while llama logs
    llama_cpp.llama_log_set(callback, ctypes.c_void_p(0))


def bare_child(model: Path, seconds: float) -> dict[str, Any]:
    """Every (threads, tabs, mode) case of the bare loop in this process's OpenMP setting."""
    import llama_cpp

    from app.engine.cpu_quirks import amx_guard_active, apply_cpu_quirks

    _quiet_llama_log()
    llama_cpp.llama_backend_init()
    mparams = llama_cpp.llama_model_default_params()
    # The app's plan for this CPU: without it a quantized batch of 2 crashes in AMX here.
    keep = apply_cpu_quirks(mparams, model)
    guard = {
        "amx_guard_active": amx_guard_active(),
        "to_repack": len(keep.placement.repack) if keep else 0,
        "to_plain_cpu": len(keep.placement.plain) if keep else 0,
        "extra_bufts_off": not mparams.use_extra_bufts,
    }
    handle = llama_cpp.llama_model_load_from_file(str(model).encode(), mparams)
    if not handle:
        raise RuntimeError(f"could not load {model}")
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
        for i, (seq, pos) in enumerate(items):
            batch.token[i] = 300 + seq
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
    return {"guard": guard, "cases": cases}


class _Tabs:
    """Conversations' streamed tokens, collected from the session thread."""

    def __init__(self) -> None:
        self.lock = threading.Condition()
        self.pieces: dict[int, list[tuple[float, int]]] = {}  # cid -> (sampled_at, n_tokens)
        self.finished: dict[int, Any] = {}

    def on_event(self, event: Any) -> None:
        from app.session import events as ev

        with self.lock:
            cid = int(event.conversation_id)
            if isinstance(event, ev.TextStreamed) and event.n_tokens:
                self.pieces.setdefault(cid, []).append((event.sampled_at, event.n_tokens))
            elif isinstance(event, (ev.TurnFinished, ev.TurnFailed)):
                self.finished[cid] = event
            self.lock.notify_all()

    def wait(self, ids: list[int], held: dict[int, Any], timeout: float) -> None:
        """Until every one of ``ids`` is in ``held`` (``pieces`` or ``finished``)."""
        with self.lock:
            if not self.lock.wait_for(lambda: all(c in held for c in ids), timeout):
                raise RuntimeError("the app's tabs timed out")


def tab_rate(pieces: list[tuple[float, int]]) -> float:
    """Tokens/s of one tab from its streamed pieces (sampled_at of each piece's oldest
    token, its token count): the tokens before the last piece over the time up to it."""
    if len(pieces) < 2:
        return 0.0
    elapsed = pieces[-1][0] - pieces[0][0]
    return sum(n for _, n in pieces[:-1]) / elapsed if elapsed > 0 else 0.0


def app_child(model: Path, threads: int, seconds: float) -> dict[str, Any]:
    """1, 2 and 4 tabs generating at once through a Session, as the window drives it."""
    from app.engine import ContextSettings, SamplingParams
    from app.session import Session
    from app.session import events as ev
    from app.session.types import ChatMessage, FinishReason

    _quiet_llama_log()
    session = Session()
    loads: queue.Queue[Any] = queue.Queue()
    session.subscribe_session(
        lambda e: loads.put(e) if isinstance(e, (ev.ModelLoaded, ev.ModelLoadFailed)) else None
    )
    started = time.perf_counter()
    # The window's defaults for everything but the thread count under test.
    session.load_model(str(model), ContextSettings(n_threads=threads), fallback=False)
    loaded = loads.get(timeout=600)
    if not isinstance(loaded, ev.ModelLoaded):
        raise RuntimeError(f"load failed: {loaded.message}")
    load_s = time.perf_counter() - started
    choice = loaded.model.batching
    assert choice is not None
    tabs_seen = _Tabs()
    cases: list[dict[str, Any]] = []
    next_id = 1
    sampling = SamplingParams(max_tokens=2048)  # the window's sampler; never the limit here
    for tabs in TABS:
        ids = list(range(next_id, next_id + tabs))
        next_id += tabs
        for cid in ids:
            session.subscribe(cid, tabs_seen.on_event)
            session.open(cid)
        for cid in ids:
            session.submit(
                cid,
                [ChatMessage("user", f"Tell me a long story, number {cid}.")],
                sampling=sampling,
            )
        # Timed from the moment the last tab sampled its first token: every tab is generating.
        tabs_seen.wait(ids, tabs_seen.pieces, 300)
        with tabs_seen.lock:
            t0 = max(tabs_seen.pieces[c][0][0] for c in ids)
        time.sleep(max(0.0, t0 + seconds - time.perf_counter()) + 0.05)  # 50 ms: the last flush
        for cid in ids:
            session.stop(cid)
        tabs_seen.wait(ids, tabs_seen.finished, 300)
        with tabs_seen.lock:
            windows = [[p for p in tabs_seen.pieces[c] if t0 <= p[0] <= t0 + seconds] for c in ids]
            ended_early = [
                c
                for c in ids
                if not isinstance(tabs_seen.finished[c], ev.TurnFinished)
                or tabs_seen.finished[c].result.finish_reason is not FinishReason.ABORTED
            ]
        for cid in ids:
            session.close(cid, save=False)
        if ended_early:
            raise RuntimeError(f"tabs {ended_early} ended before they were stopped")
        cases.append(
            {
                "threads": threads,
                "tabs": tabs,
                "mode": choice.mode.value,
                "tokens": sum(n for w in windows for _, n in w),
                "tokens_per_s": round(sum(tab_rate(w) for w in windows), 2),
            }
        )
    session.shutdown()
    session.join(30.0)
    return {"choice": choice.to_dict(), "load_s": round(load_s, 2), "cases": cases}


# -- the parent -------------------------------------------------------------------------------


def bare_env(spin: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    if spin == "passive":
        env["OMP_WAIT_POLICY"] = "PASSIVE"
    elif spin != "default":
        env["GOMP_SPINCOUNT"] = str(int(spin))
    # The app's own setting must not leak in: the child is a bare llama.cpp loop.
    env["LLAMADESK_OMP_DEFAULTS"] = "0"
    return env


def app_env() -> dict[str, str]:
    """The environment a user starts the app in: no OpenMP settings of their own."""
    drop = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "LLAMADESK_OMP_DEFAULTS")
    return {k: v for k, v in os.environ.items() if k not in drop}


def neighbour(seconds: float) -> subprocess.Popen[bytes]:
    """A bounded busy loop: one core kept busy, ending by itself even if we die."""
    code = f"import time\nend = time.time() + {seconds}\nwhile time.time() < end: pass\n"
    return subprocess.Popen([sys.executable, "-c", code])


def run_child(args: list[str], env: dict[str, str], timeout: float) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, __file__, *args], env=env, capture_output=True, text=True, timeout=timeout
    )
    if done.returncode != 0:
        raise RuntimeError(f"{args[0]} exited with {done.returncode}: {done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 2) if a is not None and b else None


def summarize(
    runs: list[dict[str, Any]], choices: dict[str, Any], spins: Iterable[str]
) -> dict[str, Any]:
    """One model's runs -> per case (app/bare), per setting (busy/quiet, tabs vs one)."""

    def rate(
        who: str, busy: bool, threads: int, tabs: int, mode: str | None = None
    ) -> float | None:
        """The best of the rounds (another process only ever slows a case down)."""
        rates = [
            float(r["tokens_per_s"])
            for r in runs
            if (r["who"], r["neighbour"], r["threads"], r["tabs"]) == (who, busy, threads, tabs)
            and (mode is None or r["mode"] == mode)
        ]
        return max(rates) if rates else None

    app_spin = f"bare spin={APP_SPINCOUNT}"
    bare_who = [f"bare spin={s}" for s in spins]
    cases: list[dict[str, Any]] = []
    settings: list[dict[str, Any]] = []
    for threads in sorted({r["threads"] for r in runs}):
        for busy in (False, True):
            for tabs in TABS:
                app = rate("app", busy, threads, tabs)
                modes = sorted(
                    {
                        r["mode"]
                        for r in runs
                        if (r["who"], r["neighbour"], r["threads"], r["tabs"])
                        == ("app", busy, threads, tabs)
                    }
                )
                mode = "/".join(modes) if modes else None
                row: dict[str, Any] = {
                    "threads": threads,
                    "neighbour": busy,
                    "tabs": tabs,
                    "app_mode": mode,
                    "app": app,
                }
                for who in bare_who:
                    row[f"{who} batched"] = rate(who, busy, threads, tabs, "batched")
                    if tabs > 1:
                        row[f"{who} turns"] = rate(who, busy, threads, tabs, "turns")
                # The bare loop in the mode the app chose, with the app's spin count where
                # it ran (the engine's own cost), else with libgomp's default.
                same = app_spin if app_spin in bare_who else bare_who[0]
                bare_mode = mode if tabs > 1 else "batched"
                row["app_vs_bare_same_mode"] = ratio(
                    app, rate(same, busy, threads, tabs, bare_mode)
                )
                best = [
                    rate(w, busy, threads, tabs, m) for w in bare_who for m in ("batched", "turns")
                ]
                row["app_vs_best_bare"] = ratio(app, max((b for b in best if b), default=None))
                cases.append(row)
        for who in ["app", *bare_who]:
            modes = [None] if who == "app" else ["batched", "turns"]
            for mode in modes:
                label = who if mode is None else f"{who} {mode}"
                s: dict[str, Any] = {"who": label, "threads": threads}
                for busy in (False, True):
                    key = "busy" if busy else "quiet"
                    one = rate(who, busy, threads, 1)
                    s[f"{key}_one_tab"] = one
                    for tabs in (2, 4):
                        s[f"{key}_{tabs}_tabs_vs_one"] = ratio(
                            rate(who, busy, threads, tabs, mode), one
                        )
                s["busy_vs_quiet_one_tab"] = ratio(s["busy_one_tab"], s["quiet_one_tab"])
                s["busy_vs_quiet_2_tabs"] = ratio(
                    rate(who, True, threads, 2, mode), rate(who, False, threads, 2, mode)
                )
                settings.append(s)
    goal = None
    app_threads = default_threads()
    app_row = next((s for s in settings if s["who"] == "app" and s["threads"] == app_threads), None)
    if app_row is not None:
        two = [app_row["quiet_2_tabs_vs_one"], app_row["busy_2_tabs_vs_one"]]
        goal = {
            "setting": f"the app's defaults: threads={app_threads}, GOMP_SPINCOUNT="
            f"{APP_SPINCOUNT}, its own batching choice",
            "busy_vs_quiet": app_row["busy_vs_quiet_one_tab"],
            "busy_at_least_half_quiet": (app_row["busy_vs_quiet_one_tab"] or 0) >= 0.5,
            "two_tabs_total_vs_one": min((t for t in two if t is not None), default=None),
            "two_tabs_at_least_one_tab": all(t is not None and t >= 1.0 for t in two),
        }
    return {"app_goal": goal, "app_choice": choices, "cases": cases, "settings": settings}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--models", default="q8_0,f16", help="of: " + ",".join(MODELS))
    parser.add_argument("--seconds", type=float, default=1.0, help="per case")
    parser.add_argument(
        "--rounds", type=int, default=2, help="each case's best of this many runs (%(default)s)"
    )
    parser.add_argument(
        "--spins",
        default=f"default,{APP_SPINCOUNT}",
        help="the bare loop's OpenMP settings, comma-separated: default (libgomp's), a spin "
        "count, passive (default: %(default)s; the app runs with its own, "
        f"GOMP_SPINCOUNT={APP_SPINCOUNT})",
    )
    parser.add_argument("--bare-child", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--app-child", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bare_child is not None:
        print(json.dumps(bare_child(args.bare_child, args.seconds)))
        return 0
    if args.app_child is not None:
        print(json.dumps(app_child(args.app_child, args.threads, args.seconds)))
        return 0
    spins = args.spins.split(",")
    models = [MODELS[name] for name in args.models.split(",")]
    cores = os.cpu_count() or 1
    thread_counts = sorted({max(1, cores - 1), cores})
    load_before = Path("/proc/loadavg").read_text().split()[:3]
    started = time.perf_counter()
    out: dict[str, Any] = {}
    for model in models:
        path = model_path(model)
        runs: list[dict[str, Any]] = []
        choices: dict[str, Any] = {}
        guard: dict[str, Any] = {}
        for round_ in range(args.rounds):
            for busy in (False, True):  # alternating: quiet then busy, each round
                condition = "busy" if busy else "quiet"
                other = neighbour(args.seconds * 60 + 300) if busy else None
                try:
                    for spin in spins:
                        child = run_child(
                            ["--bare-child", str(path), "--seconds", str(args.seconds)],
                            bare_env(spin),
                            args.seconds * 40 + 300,
                        )
                        guard = child["guard"]
                        for case in child["cases"]:
                            runs.append(
                                {"who": f"bare spin={spin}", "neighbour": busy, "round": round_}
                                | case
                            )
                    for threads in thread_counts:
                        child = run_child(
                            [
                                *("--app-child", str(path), "--threads", str(threads)),
                                *("--seconds", str(args.seconds)),
                            ],
                            app_env(),
                            args.seconds * 40 + 600,
                        )
                        choices[f"threads={threads} {condition} round {round_ + 1}"] = {
                            **child["choice"],
                            "load_s": child["load_s"],
                        }
                        for case in child["cases"]:
                            runs.append({"who": "app", "neighbour": busy, "round": round_} | case)
                finally:
                    if other is not None:
                        other.kill()
                        other.wait()
        out[model.name] = {
            "path": str(path),
            "n_params": model.spec.n_params(),
            "n_vocab": model.spec.n_vocab,
            "bare_loop_amx_guard": guard,
            **summarize(runs, choices, spins),
            "runs": runs,
        }
    print(
        json.dumps(
            {
                "command": " ".join(["python", "benchmarks/bench_cpu.py", *sys.argv[1:]]),
                "cores": cores,
                "seconds_per_case": args.seconds,
                "rounds": args.rounds,
                "wall_s": round(time.perf_counter() - started, 1),
                "loadavg_before": load_before,
                "loadavg_after": Path("/proc/loadavg").read_text().split()[:3],
                "models": out,
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
