"""Start-up: reopening a saved chat from the command line against a bare llama.cpp program.

``llamadesk run MODEL --resume-session FILE -n N PROMPT`` restores a ~2,000-token chat from
its state file and writes N greedy tokens after a short prompt. The peer is
``benchmarks/bare_resume.py``: the same model, context size and threads, llama.cpp's own
``llama_state_seq_load_file`` of the same text, the same prompt and N - a program that
does nothing else. Both run as fresh processes (imports, model load and all), alternating,
after one warm-up each (the page cache and LlamaDesk's first-load check of the model file
are then warm, as for a user who has opened the model before). The figure is the ratio of
medians (goal: LlamaDesk within 1.25x); ``cpu_ratio`` is the same for CPU time (user +
system), steadier than the wall time on a shared machine. ``--against`` measures other
source trees in the same rounds (main before a change). Prints JSON.

    python benchmarks/bench_startup.py [--model PATH] [--tokens 2000] [--rounds 7] [-n 8]
        [--against OTHER_TREE] [--keep DIR]

Without ``--model`` it uses the F16 form of the benchmark model of
``benchmarks/make_model.py`` (TinyLlama 1.1B's shape, 2.2 GB, made once and cached). F16
rather than the Q4_0 file: on CPUs with AMX (Sapphire Rapids and later) llama.cpp 0.3.36
repacks Q4_0/Q8_0/K-quant weights for its AMX kernels, and ``ggml_backend_amx_mul_mat``
crashes on batches of more than one token on some of them (llama.cpp #20824; the machines
here are such). LlamaDesk avoids that (app/engine/cpu_quirks.py), the bare program does
not, and F16 weights run the same kernels in both.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _env(root: Path = ROOT) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(root) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _run(cmd: list[str], home: Path, root: Path = ROOT) -> tuple[float, float]:
    """The command's wall time and CPU time (user + system, its children included), in
    seconds. On a shared machine the CPU time is the steadier of the two: waiting for a
    core counts in the wall time only."""
    env = _env(root)
    env["LLAMADESK_HOME"] = str(home)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, cwd=root)
    elapsed = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return elapsed, cpu


def _median(runs: list[tuple[float, float]], which: int) -> float:
    return statistics.median(r[which] for r in runs)


def _figures(runs: list[tuple[float, float]]) -> dict[str, object]:
    return {
        "median": round(_median(runs, 0), 3),
        "all": [round(w, 3) for w, _ in runs],
        "cpu_median": round(_median(runs, 1), 3),
    }


def _f16_model() -> Path:
    sys.path.insert(0, str(ROOT))
    from benchmarks.make_model import CACHE_DIR, BenchSpec, write_f16

    spec = BenchSpec()
    path = CACHE_DIR / spec.file_name.replace("q4_0", "f16")
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(path.name + f".{os.getpid()}.tmp")
        try:
            write_f16(partial, spec)
            os.replace(partial, path)
        finally:
            partial.unlink(missing_ok=True)
    return path


def _chat_text(n_words: int) -> str:
    topics = ("the river", "a small boat", "the old map", "winter", "the lighthouse")
    return " ".join(f"{topics[i % len(topics)]} and word{i % 97}" for i in range(n_words))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", type=Path, help="a .gguf file (default: the benchmark model)")
    p.add_argument("--tokens", type=int, default=2000, help="about how long the saved chat is")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("-n", type=int, default=1, help="tokens generated after the prompt")
    p.add_argument(
        "--prompt",
        default=" and",
        help="the new text after the restored chat (short by default: this measures the start, "
        "not the prompt's decode, which both programs do alike)",
    )
    p.add_argument("--threads", type=int, default=max(1, (os.cpu_count() or 2) - 1))
    p.add_argument(
        "--against",
        type=Path,
        action="append",
        default=[],
        metavar="ROOT",
        help="another LlamaDesk source tree (e.g. `git archive` of main) measured in the same "
        "rounds with the same state file: before and after a change, on the same machine",
    )
    p.add_argument(
        "--keep",
        type=Path,
        metavar="DIR",
        help="keep the chat and both state files in DIR and reuse them when there (saving "
        "them decodes the whole chat twice: minutes on a slow machine)",
    )
    args = p.parse_args()
    if args.model is None:
        args.model = _f16_model()
    model = str(args.model)
    n_ctx = 2048  # the benchmark model was trained for 2,048 (LlamaDesk caps there)
    py = sys.executable
    with tempfile.TemporaryDirectory(prefix="llamadesk-startup-") as tmp:
        home = Path(tmp) / "home"
        home.mkdir()
        work = Path(tmp)
        if args.keep is not None:
            work = args.keep / f"{Path(model).stem}-{args.tokens}"
            work.mkdir(parents=True, exist_ok=True)
        text_file = work / "chat.txt"
        bare_cmd = [py, str(ROOT / "benchmarks" / "bare_resume.py")]
        env = _env() | {"LLAMADESK_HOME": str(home)}
        # Tokens per word depend on the vocabulary: measure 200 words, then scale.
        ours, bare = work / "ours.state", work / "bare.state"
        common = ["-c", str(n_ctx), "-t", str(args.threads)]
        bare_opts = ["--ctx", str(n_ctx), "--threads", str(args.threads), "-n", str(args.n)]
        count = [*bare_cmd, "count", model, "-", str(text_file)]
        if not (ours.is_file() and bare.is_file() and text_file.is_file()):
            text_file.write_text(_chat_text(200), encoding="utf-8")
            run = subprocess.run(count, env=env, check=True, capture_output=True)
            per_word = int(run.stdout) / 200
            text_file.write_text(_chat_text(int(args.tokens / per_word)), encoding="utf-8")
            save_ours = [py, "-m", "app", "run", model, "--raw", "-n", "1", "--temp", "0"]
            save_ours += [*common, "--save-session", str(ours), "-"]
            with text_file.open("rb") as stdin:
                subprocess.run(save_ours, env=env, stdin=stdin, check=True, capture_output=True)
            save_bare = [*bare_cmd, "save", model, str(bare), str(text_file), *bare_opts]
            subprocess.run(save_bare, env=env, check=True, capture_output=True)
        n_tokens = subprocess.run(count, env=env, check=True, capture_output=True).stdout
        prompt = args.prompt
        resume_ours = [py, "-m", "app", "run", model, "--raw", "--temp", "0", "-n", str(args.n)]
        resume_ours += [*common, "--resume-session", str(ours), prompt]
        resume_bare = [*bare_cmd, "load", model, str(bare), prompt, *bare_opts]
        others = [p.resolve() for p in args.against]
        _run(resume_ours, home)  # warm-up: page cache, the first-load check's verdict
        _run(resume_bare, home)
        for other in others:
            _run(resume_ours, home, other)
        t_ours: list[tuple[float, float]] = []
        t_bare: list[tuple[float, float]] = []
        t_others: dict[Path, list[tuple[float, float]]] = {other: [] for other in others}
        for _ in range(args.rounds):
            t_bare.append(_run(resume_bare, home))
            t_ours.append(_run(resume_ours, home))
            for other in others:
                t_others[other].append(_run(resume_ours, home, other))
        version = [py, "-m", "app", "--version"]
        t_version = statistics.median(_run(version, home)[0] for _ in range(3))
    bare_fig, ours_fig = _figures(t_bare), _figures(t_ours)

    def ratios(runs: list[tuple[float, float]]) -> dict[str, float]:
        """Medians against the bare program's (wall time, CPU time)."""
        return {
            "ratio": round(_median(runs, 0) / _median(t_bare, 0), 3),
            "cpu_ratio": round(_median(runs, 1) / _median(t_bare, 1), 3),
        }

    result: dict[str, object] = {
        "model": model,
        "saved_tokens": int(n_tokens),
        "threads": args.threads,
        "rounds": args.rounds,
        "bare_s": bare_fig,
        "llamadesk_s": ours_fig,
        **ratios(t_ours),
        "goal_ratio": 1.25,
        "version_s": round(t_version, 3),
        "loadavg": os.getloadavg()[0],
    }
    if others:
        result["against"] = {
            str(other): {**_figures(runs), **ratios(runs)} for other, runs in t_others.items()
        }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
