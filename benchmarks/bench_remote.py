"""LlamaDesk's remote engine against the same HTTP client talking to the server directly.

A 10-turn agent-style conversation (each turn a tool result of 40 words, ~230 tokens,
the whole history re-sent each turn, greedy replies of ``--n-gen`` tokens) is run by two
clients: a bare httpx2 client posting the streamed chat completion itself ("direct"), and
a :class:`~app.session.Session` on the :class:`~app.remote.RemoteLoader` ("engine"; timed
where its subscriber gets the text). Each client gets a freshly started server (the same
cold cache, the same greedy replies, so the cached tokens compare turn by turn); which
goes first alternates by round. Per turn: time to first token, tokens/s and the cached
prompt tokens the server reported. Prints one JSON object with every round, the median
over rounds of each round's ratios (direct / engine for the sum of the times to first
token, engine / direct for the median turn's tokens/s: 1.0 is as fast, the goal is
>= 0.97), the same ratio for each turn's best time over the rounds, and whether the
cached tokens were equal turn by turn (on llama-server the engine's token route keeps the
replies' sampled tokens, so it may cache more: their difference in all is printed too):

    python benchmarks/bench_remote.py [--model PATH] [--n-gen G] [--turns N] [--rounds R]
        [--threads T] [--skip-llama-server] [--skip-llamadesk]

The default model is the tests' tiny one (written to the benchmark cache): its decode takes
about a millisecond, so any overhead of the engine path shows. ``llama-server`` is the one
benchmarks/bench_server.py builds (skipped with a note when it is not built).
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.engine import ContextSettings, SamplingParams
from app.engine.cpu_quirks import llama_server_flags
from app.engine.reasoning import Channel
from app.remote import RemoteConnection, RemoteLoader
from app.remote.probe import probe
from app.remote.wire import chat_body
from app.session import ChatMessage, Session
from app.session import events as ev
from app.session.engine_port import ChatPrompt
from benchmarks.bench_server import Server, free_port
from benchmarks.make_model import CACHE_DIR
from tests.support import peers
from tests.support.gguf_models import TinySpec, write_tiny_model

N_CTX = 4096
WORDS = (
    "the cache of the model holds every token of the tool output and the answer so the "
    "next turn reads only what is new while the agent works through its task step by step"
).split()


def tool_output(turn: int) -> str:
    words = [WORDS[(turn * 7 + i) % len(WORDS)] for i in range(40)]
    return f"Tool result {turn}: " + " ".join(words)


def rate_of(n_tokens: int, first: float, last: float) -> float:
    """Tokens after the first over the time from the first piece to the last (a server
    that sends several tokens a piece is measured the same way)."""
    return (n_tokens - 1) / (last - first) if n_tokens > 1 and last > first else 0.0


def direct_turn(
    client: httpx2.Client, url: str, body: dict[str, Any]
) -> tuple[float, float, int, int | None, str]:
    """TTFT (s), tokens/s, tokens, cached tokens, reply text of one streamed request."""
    t0 = time.perf_counter()
    first = last = 0.0
    n_pieces = 0
    usage: dict[str, Any] = {}
    text: list[str] = []
    with client.stream("POST", f"{url}/v1/chat/completions", json=body) as reply:
        if reply.status_code != 200:
            raise SystemExit(f"{url}: HTTP {reply.status_code}: {reply.read().decode()[:300]}")
        for event in httpx2.EventSource(reply):
            if event.data == "[DONE]":
                break
            chunk = json.loads(event.data)
            if chunk.get("usage"):
                usage = chunk["usage"]
            choices = chunk.get("choices") or []
            if choices and choices[0].get("delta", {}).get("content"):
                now = time.perf_counter()
                first = first or now
                last = now
                n_pieces += 1
                text.append(choices[0]["delta"]["content"])
    n = int(usage.get("completion_tokens") or n_pieces)
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
    rate = rate_of(n, first, last)
    return first - t0, rate, n, cached, "".join(text)


def run_direct(url: str, tag: str, turns: int, params: SamplingParams) -> list[dict[str, Any]]:
    conn = RemoteConnection(url)
    out: list[dict[str, Any]] = []
    with httpx2.Client(timeout=600) as client:
        traits = probe(client, conn)
        history: list[ChatMessage] = []
        for i in range(turns):
            history.append(ChatMessage("user", tool_output(i)))
            # the same request the remote engine sends (its slot pinning aside)
            body = chat_body(traits, ChatPrompt(tuple(history), f"Agent {tag}."), params, None)
            body.pop("id_slot", None)
            ttft, rate, n, cached, text = direct_turn(client, url, body)
            history.append(ChatMessage("assistant", text))
            out.append({"ttft_s": ttft, "tok_s": rate, "n_gen": n, "cached": cached})
    return out


def run_engine(url: str, tag: str, turns: int, params: SamplingParams) -> list[dict[str, Any]]:
    loader = RemoteLoader(RemoteConnection(url))
    session = Session(stream_interval_s=0.0, name="bench-remote", loader=loader)
    events: queue.SimpleQueue[Any] = queue.SimpleQueue()
    session.subscribe_session(events.put)
    session.subscribe(1, events.put)
    out: list[dict[str, Any]] = []
    try:
        session.load_model("", ContextSettings())
        while not isinstance(event := events.get(timeout=60), ev.ModelLoaded):
            if isinstance(event, ev.ModelLoadFailed):
                raise SystemExit(event.message)
        session.open(1)
        history: list[ChatMessage] = []
        for i in range(turns):
            history.append(ChatMessage("user", tool_output(i)))
            t0 = time.perf_counter()
            turn = session.submit(1, history, f"Agent {tag}.", params)
            first = last = 0.0
            while True:
                event = events.get(timeout=600)
                if isinstance(event, ev.TextStreamed) and event.channel is Channel.ANSWER:
                    now = time.perf_counter()
                    first = first or now
                    last = now
                elif isinstance(event, ev.TurnFailed):
                    raise SystemExit(event.message)
                elif isinstance(event, ev.TurnFinished) and event.turn_id == turn:
                    result = event.result
                    break
            history.append(ChatMessage("assistant", result.text))
            rate = rate_of(result.n_sampled, first, last)
            cached = result.n_prompt - result.n_prompt_processed
            out.append(
                {"ttft_s": first - t0, "tok_s": rate, "n_gen": result.n_sampled, "cached": cached}
            )
    finally:
        session.shutdown()
        session.join(30)
    return out


Runner = Callable[[str, str, int, SamplingParams], list[dict[str, Any]]]


def on_fresh_server(start: Callable[[], Server], run: Callable[[str], Any]) -> Any:
    """``run(url)`` on a server of its own: both clients find the same cold cache and get
    the same greedy replies, so their cached tokens can be compared turn by turn."""
    server = start()
    try:
        return run(server.url)
    finally:
        server.close()


def compare(
    start: Callable[[], Server], turns: int, rounds: int, params: SamplingParams
) -> dict[str, Any]:
    results: list[dict[str, Any]] = []
    for r in range(rounds):
        order = ("direct", "engine") if r % 2 == 0 else ("engine", "direct")
        runs: dict[str, list[dict[str, Any]]] = {}
        for side in order:
            runner = run_direct if side == "direct" else run_engine

            def run(url: str, runner: Runner = runner) -> list[dict[str, Any]]:
                return runner(url, "Z", turns, params)

            runs[side] = on_fresh_server(start, run)
        direct, engine = runs["direct"], runs["engine"]
        ttft_d = sum(t["ttft_s"] for t in direct)
        ttft_e = sum(t["ttft_s"] for t in engine)
        # the median turn: one turn slowed by the shared machine's other work does not
        # decide the figure
        tok_d = statistics.median(t["tok_s"] for t in direct)
        tok_e = statistics.median(t["tok_s"] for t in engine)
        results.append(
            {
                "order": list(order),
                "ttft_sum_direct_s": round(ttft_d, 4),
                "ttft_sum_engine_s": round(ttft_e, 4),
                "tok_s_median_direct": round(tok_d, 2),
                "tok_s_median_engine": round(tok_e, 2),
                "ttft_ratio": round(ttft_d / ttft_e, 3) if ttft_e else None,
                "tok_s_ratio": round(tok_e / tok_d, 3) if tok_d else None,
                "cached_direct": [t["cached"] for t in direct],
                "cached_engine": [t["cached"] for t in engine],
                "cached_equal": [t["cached"] for t in direct] == [t["cached"] for t in engine],
                # the engine's token route (llama-server) keeps the replies' sampled tokens:
                # it may cache more than a client that re-sends text
                "cached_engine_minus_direct_total": sum(t["cached"] for t in engine)
                - sum(t["cached"] for t in direct),
                "ttft_direct_s": [round(t["ttft_s"], 4) for t in direct],
                "ttft_engine_s": [round(t["ttft_s"], 4) for t in engine],
                "tok_s_direct": [round(t["tok_s"], 2) for t in direct],
                "tok_s_engine": [round(t["tok_s"], 2) for t in engine],
            }
        )
    # each turn's best over the rounds: the figure least touched by the machine's other work
    best_d = sum(min(x["ttft_direct_s"][i] for x in results) for i in range(turns))
    best_e = sum(min(x["ttft_engine_s"][i] for x in results) for i in range(turns))
    ttft_ratios = [x["ttft_ratio"] for x in results if x["ttft_ratio"] is not None]
    tok_ratios = [x["tok_s_ratio"] for x in results if x["tok_s_ratio"] is not None]
    return {
        "ttft_ratio_median": round(statistics.median(ttft_ratios), 3) if ttft_ratios else None,
        "tok_s_ratio_median": round(statistics.median(tok_ratios), 3) if tok_ratios else None,
        "ttft_best_per_turn_ratio": round(best_d / best_e, 3) if best_e else None,
        "ttft_best_per_turn_sum_s": {"direct": round(best_d, 4), "engine": round(best_e, 4)},
        "cached_equal": all(x["cached_equal"] for x in results),
        "cached_engine_minus_direct_total": [
            x["cached_engine_minus_direct_total"] for x in results
        ],
        "rounds": results,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="a GGUF (default: the tests' tiny model); F16/F32 here")
    parser.add_argument("--n-gen", type=int, default=16)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--skip-llama-server", action="store_true")
    parser.add_argument("--skip-llamadesk", action="store_true")
    args = parser.parse_args()
    if args.model:
        model = Path(args.model)
    else:
        model = CACHE_DIR / "tiny-remote-bench.gguf"
        if not model.exists():
            CACHE_DIR.mkdir(parents=True, exist_ok=True)
            write_tiny_model(model, TinySpec(n_ctx_train=N_CTX))
    params = SamplingParams(temperature=0.0, max_tokens=args.n_gen)
    common = ["-c", str(N_CTX), "-t", str(args.threads)]
    out: dict[str, Any] = {
        "model": str(model),
        "turns": args.turns,
        "n_gen": args.n_gen,
        "load": os.getloadavg(),
    }
    if not args.skip_llamadesk:
        port = free_port()
        home = CACHE_DIR / "bench-remote-home"
        home.mkdir(parents=True, exist_ok=True)
        argv = [sys.executable, "-m", "app", "serve", str(model), "--port", str(port), *common]
        env = dict(os.environ, LLAMADESK_HOME=str(home))
        argv += ["--parallel", "2", "--no-persist"]
        out["llamadesk"] = compare(
            lambda: Server("llamadesk", argv, port, env), args.turns, args.rounds, params
        )
    binary = peers.LLAMA_SERVER
    if args.skip_llama_server:
        pass
    elif not binary.exists():
        out["llama-server"] = f"not built ({binary}): run python -m tests.support.peers"
    else:
        port = free_port()
        argv = [str(binary), "-m", str(model), "--port", str(port), *common, "--parallel", "1"]
        argv += ["--no-webui", *llama_server_flags()]
        out["llama-server"] = compare(
            lambda: Server("llama-server", argv, port, dict(os.environ)),
            args.turns,
            args.rounds,
            params,
        )
    out["load_after"] = os.getloadavg()
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
