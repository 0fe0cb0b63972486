"""Child process of test_crash.py: writes conversations and streams replies until killed.

Usage: python crash_child.py DB_PATH LOG_PATH SEED. After each commit it appends one line
to LOG_PATH with a single write() (so a SIGKILL never leaves half a line):
  C cid                     conversation created
  U mid cid sha256          user message committed (sha256 of its content)
  R mid cid                 reply begun (status partial)
  P mid n                   the first n characters of reply_text(mid) are committed
  F mid n status            reply finished with reply_text(mid)[:n] and status
  K cid id,id,...           forked conversation and the ids of its copied thread
"""

from __future__ import annotations

import hashlib
import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from app.storage import Database

WORDS = [
    "llama",
    "alpaca",
    "вигонь",
    "羊驼",
    "🦙",
    "camelid",
    "wool",
    "Ñandú",
    "\n\n",
    "—",
    "the",
    "a",
]


def reply_text(message_id: int) -> str:
    """The full reply the fake model streams for this message id (deterministic)."""
    rng = random.Random(message_id * 7919)
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(50, 700)))


def user_text(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 60)))


def main() -> None:
    db_path, log_path, seed = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    rng = random.Random(seed)
    log_fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def log(line: str) -> None:
        os.write(log_fd, (line + "\n").encode("utf-8"))

    db = Database.open(db_path)
    log("READY")
    conversations = [c.id for c in db.list_conversations()]
    while True:
        if not conversations or rng.random() < 0.2:
            c = db.create_conversation(system_prompt=user_text(rng), sampling={"seed": seed})
            conversations.append(c.id)
            log(f"C {c.id}")
        cid = rng.choice(conversations)
        thread = db.get_thread(cid)
        parent = thread[-1].id if thread else None
        if thread and rng.random() < 0.2:  # edit an earlier user message: a new branch
            users = [m for m in thread if m.role == "user"]
            if users:
                parent = rng.choice(users).parent_id
        text = user_text(rng)
        user = db.add_message(cid, "user", text, parent)
        log(f"U {user.id} {cid} {hashlib.sha256(text.encode()).hexdigest()}")
        for _ in range(rng.choice([1, 1, 2])):  # sometimes regenerate: a sibling reply
            reply = db.begin_reply(cid, user.id, model_path="/models/fake.gguf")
            log(f"R {reply.id} {cid}")
            full = reply_text(reply.id)
            flush_every = rng.uniform(0.005, 0.05)
            last_flush = time.monotonic()
            n = 0
            while n < len(full):
                n = min(len(full), n + rng.randint(1, 12))  # one "token"
                time.sleep(0.0005)
                if time.monotonic() - last_flush >= flush_every:
                    db.update_reply(reply.id, full[:n])
                    log(f"P {reply.id} {n}")
                    last_flush = time.monotonic()
            status = rng.choice(["complete", "complete", "stopped"])
            db.finish_reply(reply.id, full[:n], status, token_count=n // 4, tokens_per_second=42.0)
            log(f"F {reply.id} {n} {status}")
        if rng.random() < 0.05:
            leaf = db.get_conversation(cid).current_leaf_id
            if leaf is not None:
                fork = db.fork_conversation(cid, leaf)
                conversations.append(fork.id)
                ids = ",".join(str(m.id) for m in db.get_thread(fork.id))
                log(f"K {fork.id} {ids}")


if __name__ == "__main__":
    main()
