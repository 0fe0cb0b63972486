"""Full-text search benchmark: 100,000 messages in a temporary LLAMADESK_HOME.

Prints one JSON object: insert throughput (through the public API, in batches and one
commit per message), reply-flush latency, search median/p95 per query, open/quick_check
time and the file size. Target: search under 50 ms at 100,000 messages.
``sidebar_search``: the sidebar's query (``search_conversations``, one row per
conversation), which runs off the GUI thread because it can take longer than a frame
(~16 ms) on common words.

    python benchmarks/bench_search.py [--messages N] [--repeat R]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

COMMON = (
    "the a of to and in is it you that for on with as this be are was not but can have "
    "or an will your from by if at what all my one so do more use how about which when"
).split()
TOPICS = "llama alpaca model context token python sqlite kernel quantization gguf prompt".split()


def vocabulary(rng: random.Random, size: int = 20000) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyzéü"
    words = set(COMMON + TOPICS)
    while len(words) < size:
        words.add("".join(rng.choice(letters) for _ in range(rng.randint(3, 11))))
    ordered = COMMON + TOPICS + sorted(words - set(COMMON) - set(TOPICS))
    return ordered


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=25)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    home = tempfile.mkdtemp(prefix="llamadesk-bench-")
    os.environ["LLAMADESK_HOME"] = home
    from app.storage import Database

    rng = random.Random(args.seed)
    words = vocabulary(rng)
    cum = list(itertools.accumulate(1.0 / (rank + 1) for rank in range(len(words))))

    def text(n_words: int) -> str:
        return " ".join(rng.choices(words, cum_weights=cum, k=n_words))

    db = Database.open()
    per_conversation = 40
    start = time.perf_counter()
    made = 0
    while made < args.messages:
        with db.transaction():
            for _ in range(25):  # 25 conversations (1,000 messages) per transaction
                c = db.create_conversation()
                parent = None
                for j in range(min(per_conversation, args.messages - made)):
                    role = "user" if j % 2 == 0 else "assistant"
                    n = rng.randint(5, 40) if role == "user" else rng.randint(30, 250)
                    parent = db.add_message(c.id, role, text(n), parent).id
                    made += 1
                if made >= args.messages:
                    break
    fill_s = time.perf_counter() - start

    # One commit per message, as the GUI does it.
    c = db.create_conversation()
    t0 = time.perf_counter()
    single = 200
    parent = None
    for _ in range(single):
        parent = db.add_message(c.id, "user", text(30), parent).id
    single_ms = (time.perf_counter() - t0) / single * 1000

    # Streaming flushes of a growing reply (~4,000 words at the end).
    reply = db.begin_reply(c.id, parent)
    content = ""
    flush_times = []
    for _ in range(100):
        content += " " + text(40)
        t0 = time.perf_counter()
        db.update_reply(reply.id, content)
        flush_times.append((time.perf_counter() - t0) * 1000)
    db.finish_reply(reply.id, content)

    queries = {
        "common word": "the",
        "topic word": "llama",
        "two words": "llama context",
        "prefix (typing)": "quant",
        "one letter (typing)": "q",
        "three common words": "the of and",
        "rare word": words[-1],
        "fts syntax": '"NEAR(llama AND" -context*',
        "no hit": "zzzzqqqq",
    }

    def timed(search: Callable[[str], int]) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for label, query in queries.items():
            times = []
            hits = 0
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                hits = search(query)
                times.append((time.perf_counter() - t0) * 1000)
            times.sort()
            out[label] = {
                "query": query,
                "hits": hits,
                "median_ms": round(statistics.median(times), 2),
                "p95_ms": round(times[max(0, int(len(times) * 0.95) - 1)], 2),
            }
        return out

    results = timed(lambda q: len(db.search(q, limit=50)))
    sidebar = timed(lambda q: len(db.search_conversations(q, limit=50)))
    db.close()

    t0 = time.perf_counter()
    db = Database.open()
    open_ms = (time.perf_counter() - t0) * 1000
    t0 = time.perf_counter()
    db._all("PRAGMA quick_check")
    quick_check_ms = (time.perf_counter() - t0) * 1000
    t0 = time.perf_counter()
    db.list_conversations()
    list_ms = (time.perf_counter() - t0) * 1000
    conversations = len(db.list_conversations())
    db.close()
    size = sum(p.stat().st_size for p in Path(home).iterdir() if p.is_file())

    print(
        json.dumps(
            {
                "messages": args.messages,
                "conversations": conversations,
                "db_mb": round(size / 1e6, 1),
                "insert_batched_msgs_per_s": round(args.messages / fill_s),
                "insert_one_commit_each_ms": round(single_ms, 3),
                "update_reply_ms_median": round(statistics.median(flush_times), 3),
                "update_reply_ms_max": round(max(flush_times), 3),
                "open_ms": round(open_ms, 1),
                "quick_check_ms": round(quick_check_ms, 1),
                "list_conversations_ms": round(list_ms, 1),
                "search": results,
                "search_worst_p95_ms": max(r["p95_ms"] for r in results.values()),
                "sidebar_search": sidebar,
                "sidebar_search_worst_p95_ms": max(r["p95_ms"] for r in sidebar.values()),
            },
            indent=1,
        )
    )
    import shutil

    shutil.rmtree(home, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
