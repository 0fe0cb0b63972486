"""Speculative decoding (n-gram prompt lookup) against none, and against llama-server's.

Workloads, on the real model (SmolLM2-135M-Instruct, tests/support/real_models.py), greedy,
the same threads everywhere:

- editing: "fix the typo in this code" over ~1,700 tokens of Python, the reply begun with a
  code block; the reply repeats some of it. LlamaDesk without and with
  ``speculative="ngram"``, and llama-server with each n-gram ``--spec-type`` (and none), the
  same prompt text through its ``/completion``;
- nothing to look up: a short question whose answer repeats nothing (with and without);
- 4 tabs at once: the editing chat in 4 sequences generating together (total tokens/s).

Generation tokens/s is the engine's own figure (tokens after the first over the time from
the first to the last: app.engine.events.generation_rate) and llama-server's
``timings.predicted_per_second``. Each figure is the best of ``--rounds`` (the machine is
shared). Prints one JSON object with the load average before and after:

    python benchmarks/bench_spec.py [--threads N] [--n-gen G] [--rounds R] [--skip-llama-server]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import httpx2

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.engine import ContextSettings, Engine, SamplingParams
from app.engine.cpu_quirks import llama_server_flags
from benchmarks.bench_server import Server, build_llama_server, free_port
from tests.support.real_models import smollm2_path

N_CTX = 4096
SPEC_TYPES = ("none", "ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache")


def code_prompt() -> str:
    """~1,500 tokens of plain Python with one typo (``retrun``) near the end."""
    parts = []
    names = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota"]
    for i, name in enumerate(names):
        parts.append(
            f'''def load_{name}_records(path, limit={10 * (i + 1)}):
    """Read the {name} records from a CSV file, at most {10 * (i + 1)} of them."""
    records = []
    with open(path, encoding="utf-8") as handle:
        header = handle.readline().strip().split(",")
        for line in handle:
            values = line.strip().split(",")
            if len(values) != len(header):
                continue
            records.append(dict(zip(header, values)))
            if len(records) >= limit:
                break
    return records


def summarize_{name}(records):
    """Count the {name} records by their first column."""
    counts = {{}}
    for record in records:
        key = next(iter(record.values()), "")
        counts[key] = counts.get(key, 0) + 1
    return counts

'''
        )
    head, _, tail = "".join(parts).rpartition("    return counts")
    return head + "    retrun counts" + tail


def editing_messages() -> list[dict[str, str]]:
    return [
        {
            "role": "user",
            "content": "Fix the typo in this code and reply with the whole corrected code:\n\n"
            "```python\n" + code_prompt() + "```",
        }
    ]


NOTHING = [{"role": "user", "content": "Tell me a short story about a fox and a crow."}]


def ours(engine: Engine, prompt: str, n_gen: int, spec: str, tabs: int = 1) -> dict[str, Any]:
    params = SamplingParams(temperature=0, max_tokens=n_gen, speculative=spec, draft_max=8)
    keys = [engine.open_sequence() for _ in range(tabs)]
    try:
        for key in keys:
            engine.set_prompt(key, prompt)
            engine.prefill(key)
        while engine.has_work():
            engine.step()
        for key in keys:
            engine.start(key, params)
        t = time.perf_counter()
        while engine.has_work():
            engine.step()
        elapsed = time.perf_counter() - t
        done = [engine._seqs[k].completion for k in keys]
        total = sum(len(c.tokens) for c in done)
        return {
            "tokens_per_s": round(done[0].tokens_per_second, 2),
            "total_tokens_per_s": round(total / elapsed, 2),
            "n_tokens": total,
            "drafted": sum(c.n_drafted for c in done),
            "accepted": sum(c.n_accepted for c in done),
            "tokens": done[0].tokens,
            "reply_start": done[0].text[:160],
        }
    finally:
        for key in keys:
            engine.close_sequence(key)


def theirs(url: str, prompt: str, n_gen: int) -> dict[str, Any]:
    body = {"prompt": prompt, "n_predict": n_gen, "temperature": 0, "cache_prompt": False}
    r = httpx2.post(f"{url}/completion", json=body, timeout=600)
    r.raise_for_status()
    timings = r.json()["timings"]
    return {
        "tokens_per_s": round(timings["predicted_per_second"], 2),
        "n_tokens": timings["predicted_n"],
        "drafted": timings.get("draft_n", 0),
        "accepted": timings.get("draft_n_accepted", 0),
    }


def best(runs: list[dict[str, Any]]) -> dict[str, Any]:
    top = max(runs, key=lambda r: r.get("total_tokens_per_s", r["tokens_per_s"]))
    return {k: v for k, v in top.items() if k != "tokens"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--n-gen", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--skip-llama-server", action="store_true")
    args = parser.parse_args()
    model = smollm2_path()
    result: dict[str, Any] = {
        "model": str(model),
        "threads": args.threads,
        "n_gen": args.n_gen,
        "loadavg_before": os.getloadavg(),
    }
    settings = ContextSettings(
        n_ctx=N_CTX * 4, n_batch=512, n_ubatch=512, n_seq_max=5, n_threads=args.threads
    )
    settings.n_threads_batch = args.threads
    with Engine.open(model, settings) as engine:
        # The same text for both servers: the chat rendered, and the reply begun with a code
        # block (unprompted, the 135M model explains the code instead of repeating it).
        editing = engine.render_chat(editing_messages()) + "```python\n"
        nothing = engine.render_chat(NOTHING)
        result["editing_prompt_tokens"] = len(engine.tokenize(editing))
        runs: dict[str, list[dict[str, Any]]] = {}
        for _ in range(args.rounds):
            for name, messages, spec, tabs in (
                ("editing_off", editing, "off", 1),
                ("editing_ngram", editing, "ngram", 1),
                ("nothing_off", nothing, "off", 1),
                ("nothing_ngram", nothing, "ngram", 1),
                ("tabs4_off", editing, "off", 4),
                ("tabs4_ngram", editing, "ngram", 4),
            ):
                runs.setdefault(name, []).append(ours(engine, messages, args.n_gen, spec, tabs))
        same = runs["editing_off"][0]["tokens"] == runs["editing_ngram"][0]["tokens"]
        result["llamadesk"] = {name: best(r) for name, r in runs.items()}
        result["editing_same_tokens"] = same
    ld = result["llamadesk"]
    result["speedup_editing"] = round(
        ld["editing_ngram"]["tokens_per_s"] / ld["editing_off"]["tokens_per_s"], 3
    )
    result["speedup_nothing"] = round(
        ld["nothing_ngram"]["tokens_per_s"] / ld["nothing_off"]["tokens_per_s"], 3
    )
    result["speedup_tabs4_total"] = round(
        ld["tabs4_ngram"]["total_tokens_per_s"] / ld["tabs4_off"]["total_tokens_per_s"], 3
    )
    if not args.skip_llama_server:
        binary = build_llama_server()
        peer: dict[str, Any] = {}
        for kind in SPEC_TYPES:
            port = free_port()
            argv = [str(binary), "-m", str(model), "--port", str(port), "-c", str(N_CTX)]
            argv += ["-t", str(args.threads), "-tb", str(args.threads), "--parallel", "1"]
            argv += ["--no-webui", "--spec-type", kind, *llama_server_flags()]
            server = Server(f"llama-server {kind}", argv, port, dict(os.environ))
            try:
                peer[kind] = best(
                    [theirs(server.url, editing, args.n_gen) for _ in range(args.rounds)]
                )
            finally:
                server.close()
        result["llama_server_editing"] = peer
        spec_kinds = [k for k in SPEC_TYPES if k != "none"]
        top = max(spec_kinds, key=lambda k: float(peer[k]["tokens_per_s"]))
        result["llama_server_best_ngram"] = top
        result["vs_llama_server_best_ngram"] = round(
            ld["editing_ngram"]["tokens_per_s"] / peer[top]["tokens_per_s"], 3
        )
    result["loadavg_after"] = os.getloadavg()
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
