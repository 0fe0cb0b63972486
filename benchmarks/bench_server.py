"""The API server against llama.cpp's own ``llama-server``, same model, context and threads.

Measures, for each server in the same run:

- aggregate generation tokens/s with 1 and 4 concurrent streaming clients (greedy, a fixed
  number of tokens each: the benchmark model never ends a reply early);
- time to first token of a client re-sending a ~2,000-token chat: cold (a new conversation)
  and warm (the same conversation again with one more exchange; the median of three);
- the HTTP layer alone: ``GET /health`` requests/s for 1 and 8 clients on keep-alive
  connections and for 1 client opening a connection per request (with ``--model`` a tiny
  model, the generation figures also measure mostly the transport).

Both servers stay up and take turns for ``--rounds`` rounds; the JSON has every round and
the best of each figure (the shared machine's other work slows some rounds down), and the
ratios of the bests.

``llama-server`` is built once from the sources vendored in the llama-cpp-python sdist
(``tools/server``) into the benchmark cache. Prints one JSON object:

    python benchmarks/bench_server.py [--model PATH] [--threads N] [--n-gen G] [--rounds R]
        [--skip-llama-server]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.engine.cpu_quirks import llama_server_flags
from benchmarks.make_model import CACHE_DIR, ensure_model
from tests.support import peers

ROOT = Path(__file__).resolve().parents[1]
N_CTX = 2048  # the benchmark model was trained for 2,048 (LlamaDesk caps there)


def build_llama_server(jobs: int = 2) -> Path:
    """``llama-server`` built from the vendored sources (cached: tests/support/peers.py)."""
    peers.build(jobs)
    return peers.LLAMA_SERVER


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    def __init__(self, name: str, argv: list[str], port: int, env: dict[str, str]) -> None:
        self.name = name
        self.url = f"http://127.0.0.1:{port}"
        self.proc = subprocess.Popen(
            argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT
        )
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"{name} exited with {self.proc.returncode}")
            try:
                if httpx2.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            except httpx2.HTTPError:
                pass
            time.sleep(0.2)
        raise SystemExit(f"{name} did not start")

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def stream(
    url: str, messages: list[dict[str, str]], n_gen: int, extra: dict[str, Any]
) -> Iterator[tuple[float, dict[str, Any]]]:
    body = {
        "messages": messages,
        "max_tokens": n_gen,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
        **extra,
    }
    with (
        httpx2.Client(timeout=600) as client,
        client.stream("POST", f"{url}/v1/chat/completions", json=body) as reply,
    ):
        if reply.status_code != 200:
            raise SystemExit(f"{url}: {reply.status_code} {reply.read().decode()[:500]}")
        for line in reply.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                yield time.perf_counter(), json.loads(line[6:])


def generation(url: str, clients: int, n_gen: int) -> dict[str, Any]:
    """Aggregate tokens/s of ``clients`` concurrent streams (from the first token of any to
    the last of all) and the tokens each got."""
    firsts: list[float] = []
    lasts: list[float] = []
    counts: list[int] = []

    def run(i: int) -> None:
        first = last = 0.0
        n = 0
        msgs = [{"role": "user", "content": f"client {i}: tell me about llamas."}]
        for t, chunk in stream(url, msgs, n_gen, {"cache_prompt": False}):
            usage = chunk.get("usage")
            if usage:
                n = int(usage["completion_tokens"])
            elif chunk.get("choices") and chunk["choices"][0]["delta"].get("content"):
                first = first or t
                last = t
        firsts.append(first)
        lasts.append(last)
        counts.append(n)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    span = max(lasts) - min(firsts)
    total = sum(counts)
    return {
        "clients": clients,
        "tokens": total,
        "seconds": round(span, 3),
        "tok_s": round(total / span, 2),
    }


def ttft(url: str, messages: list[dict[str, str]], extra: dict[str, Any]) -> tuple[float, Any]:
    """Seconds to the first answer token, and the server's ``timings`` (cache_n, prompt_n)."""
    t0 = time.perf_counter()
    first: float | None = None
    timings: Any = None
    for t, chunk in stream(url, messages, 4, extra):
        if chunk.get("timings"):
            timings = {k: chunk["timings"].get(k) for k in ("cache_n", "prompt_n", "prompt_ms")}
        if first is None and chunk.get("choices") and chunk["choices"][0]["delta"].get("content"):
            first = t - t0
    return (first if first is not None else time.perf_counter() - t0), timings


def warm_vs_cold(
    url: str, name: str, llamadesk: bool, tag: str, warm_runs: int = 3
) -> dict[str, Any]:
    """A ~2,000-token chat, its first send (cold) and its re-sends with one more exchange
    (warm). The warm figure is the median of ``warm_runs``: one warm send decodes
    only ~30 tokens, and on a shared machine a single short decode can take several times
    its usual time when the other process takes a core. ``tag`` starts the chat: every
    round's cold send is cold (llama-server would otherwise find the last round's prompt)."""

    def count(text: str) -> int:
        reply = httpx2.post(f"{url}/tokenize", json={"content": text}, timeout=60)
        return len(reply.json()["tokens"])

    sentence = "the llama is a calm animal and the llama is my friend. "
    long = f"{tag}: " + sentence * max(1, round(2000 / count(sentence)))
    history = [{"role": "user", "content": long}]
    conv = {"conversation": f"bench-{time.time_ns()}"} if llamadesk else {"cache_prompt": True}
    tokens = list(range(count(long)))
    cold, cold_timings = ttft(url, history, conv)
    warms: list[float] = []
    warm_timings: list[Any] = []
    for i in range(warm_runs):
        # The same chat with one more exchange each time (not all of them: the chat stays
        # ~2,000 tokens in a 2,048 context), so every warm send decodes the same ~30 tokens.
        resent = [
            *history,
            {"role": "assistant", "content": "Yes."},
            {"role": "user", "content": f"More, part {i + 1}?"},
        ]
        seconds, timings = ttft(url, resent, conv)
        warms.append(seconds)
        warm_timings.append(timings)
    warm = statistics.median(warms)
    return {
        "prompt_tokens": len(tokens),
        "cold_ttft_s": round(cold, 4),
        "warm_ttft_s": round(warm, 4),
        "warm_ttft_runs_s": [round(w, 4) for w in warms],
        "cold_timings": cold_timings,
        "warm_timings": warm_timings,
        "speedup": round(cold / warm, 1) if warm > 0 else None,
    }


def requests_per_second(
    url: str, clients: int, keep_alive: bool, seconds: float = 2.0
) -> dict[str, Any]:
    """``GET /health`` answered per second by ``clients`` threads for ``seconds``, and the
    median latency: on one connection each (keep-alive) or a new connection per request."""
    latencies: list[float] = []
    lock = threading.Lock()
    stop = time.perf_counter() + seconds

    def run() -> None:
        mine: list[float] = []
        limits = httpx2.Limits(max_keepalive_connections=1 if keep_alive else 0)
        with httpx2.Client(timeout=30, limits=limits) as client:
            while time.perf_counter() < stop:
                t0 = time.perf_counter()
                reply = client.get(f"{url}/health")
                if reply.status_code != 200:
                    raise SystemExit(f"{url}/health: {reply.status_code}")
                mine.append(time.perf_counter() - t0)
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=run) for _ in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    span = time.perf_counter() - t0
    return {
        "clients": clients,
        "keep_alive": keep_alive,
        "requests": len(latencies),
        "req_s": round(len(latencies) / span, 1),
        "median_ms": round(statistics.median(latencies) * 1000, 3),
    }


def measure(server: Server, n_gen: int, llamadesk: bool, tag: str) -> dict[str, Any]:
    return {
        "gen_1": generation(server.url, 1, n_gen),
        "gen_4": generation(server.url, 4, n_gen),
        "resend_2000": warm_vs_cold(server.url, server.name, llamadesk, tag),
        "health_1": requests_per_second(server.url, 1, keep_alive=True),
        "health_8": requests_per_second(server.url, 8, keep_alive=True),
        "health_1_new_conn": requests_per_second(server.url, 1, keep_alive=False),
    }


def best(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The best of the rounds for each figure (the least disturbed by other work on a
    shared machine): the highest tokens/s, the shortest times to first token."""
    cold = min(r["resend_2000"]["cold_ttft_s"] for r in rounds)
    warm = min(r["resend_2000"]["warm_ttft_s"] for r in rounds)
    return {
        "gen_1_tok_s": max(r["gen_1"]["tok_s"] for r in rounds),
        "gen_4_tok_s": max(r["gen_4"]["tok_s"] for r in rounds),
        "cold_ttft_s": cold,
        "warm_ttft_s": warm,
        "speedup": round(cold / warm, 1) if warm > 0 else None,
        **{
            f"{key}_req_s": max(r[key]["req_s"] for r in rounds)
            for key in ("health_1", "health_8", "health_1_new_conn")
        },
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="a GGUF (default: the 1.1B Q4_0 benchmark model)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--n-gen", type=int, default=64)
    parser.add_argument("--skip-llama-server", action="store_true")
    parser.add_argument(
        "--rounds", type=int, default=3, help="measurement rounds per server (best of them)"
    )
    parser.add_argument("--build-only", action="store_true")
    args = parser.parse_args()
    if args.build_only:
        print(build_llama_server())
        return 0
    model = Path(args.model) if args.model else ensure_model()
    result: dict[str, Any] = {
        "model": str(model),
        "n_ctx": N_CTX,
        "threads": args.threads,
        "n_gen": args.n_gen,
    }
    common = ["-c", str(N_CTX), "-t", str(args.threads), "--parallel", "4"]
    env = dict(os.environ)
    home = CACHE_DIR / "bench-server-home"
    home.mkdir(parents=True, exist_ok=True)
    servers: list[tuple[Server, bool]] = []
    try:
        port = free_port()
        servers.append(
            (
                Server(
                    "llamadesk",
                    [
                        sys.executable,
                        "-m",
                        "app",
                        "serve",
                        str(model),
                        "--port",
                        str(port),
                        *common,
                        "--resident",
                        "4",
                    ],
                    port,
                    dict(env, LLAMADESK_HOME=str(home)),
                ),
                True,
            )
        )
        if not args.skip_llama_server:
            binary = build_llama_server()
            port = free_port()
            servers.append(
                (
                    Server(
                        "llama-server",
                        [
                            str(binary),
                            "-m",
                            str(model),
                            "--port",
                            str(port),
                            *common,
                            "-tb",
                            str(args.threads),
                            "-b",
                            "512",
                            "-ub",
                            "512",
                            "--no-webui",
                            "--kv-unified",
                            # On a CPU whose AMX kernels crash, the app keeps weights off
                            # AMX (app/engine/cpu_quirks.py); the peer must too, or it dies.
                            *llama_server_flags(),
                        ],
                        port,
                        env,
                    ),
                    False,
                )
            )
        # Both stay up (an idle server takes no CPU) and take turns, round after round:
        # a burst of other work on the machine then hits one round, not one server.
        for server, _ in servers:
            generation(server.url, 1, 8)  # first-use costs out of the way
        rounds: dict[str, list[dict[str, Any]]] = {server.name: [] for server, _ in servers}
        for i in range(args.rounds):
            for server, llamadesk in servers:
                tag = f"round {i} {time.time_ns()}"
                rounds[server.name].append(measure(server, args.n_gen, llamadesk, tag))
    finally:
        for server, _ in servers:
            server.close()
    for name, key in (("llamadesk", "llamadesk"), ("llama-server", "llama_server")):
        if name in rounds:
            result[key] = {"best": best(rounds[name]), "rounds": rounds[name]}
    if "llama_server" in result:
        ours_best, theirs_best = result["llamadesk"]["best"], result["llama_server"]["best"]
        for key in ("gen_1", "gen_4"):
            ratio = ours_best[f"{key}_tok_s"] / theirs_best[f"{key}_tok_s"]
            result[f"{key}_ratio"] = round(ratio, 3)
        # the same, round by round (each pair measured minutes apart at most)
        for key in ("gen_1", "gen_4"):
            result[f"{key}_ratio_by_round"] = [
                round(a[key]["tok_s"] / b[key]["tok_s"], 3)
                for a, b in zip(rounds["llamadesk"], rounds["llama-server"], strict=True)
            ]
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
