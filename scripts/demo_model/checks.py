"""llama.cpp-side checks of the exported demo model (no torch needed).

1. llama.cpp tokenizes the whole corpus exactly like the trained tokenizer;
2. llama.cpp's logits match the PyTorch reference logits (``.reference.npz``) within 1e-3;
3. greedy answers to the 50 evaluation questions are >= 90% exactly right, and the recall
   of unseen names over three turns is >= 90% right, also when the KV state is saved after
   turn 2 and restored in a new process before turn 3.

``python checks.py restore MODEL STATE MESSAGES_JSON`` is the subprocess half of the last check.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import corpus  # noqa: E402
import lcpp  # noqa: E402

Message = dict[str, str]
LOGIT_TOL = 1e-3
MIN_ACCURACY = 0.9


def sidecar(out: Path, suffix: str) -> Path:
    return out.with_name(out.name.removesuffix(".gguf") + suffix)


class ChatRunner(lcpp.Runner):
    """A Runner that keeps the cached token list and reuses the longest common prefix."""

    def __init__(self, path: Path | str, n_threads: int = 2) -> None:
        super().__init__(path, n_ctx=512, n_threads=n_threads, f32_kv=False)
        self.cached: list[int] = []

    def reset(self) -> None:
        super().reset()
        self.cached = []

    def chat(self, messages: list[Message], max_tokens: int = 80) -> str:
        import llama_cpp as lc

        toks = self.tokenize(corpus.render(messages, add_generation_prompt=True))
        lcp = 0
        while lcp < min(len(toks), len(self.cached)) and toks[lcp] == self.cached[lcp]:
            lcp += 1
        lcp = min(lcp, len(toks) - 1)
        if lcp < len(self.cached):
            lc.llama_memory_seq_rm(lc.llama_get_memory(self.ctx), 0, lcp, -1)
            self.cached = self.cached[:lcp]
            self.n_past = lcp
        new = toks[lcp:]
        logits = self.eval(new)[-1]
        self.cached += new
        out = b""
        for _ in range(max_tokens):
            t = int(np.argmax(logits))
            logits = self.eval([t])[-1]
            self.cached.append(t)
            if self.is_eog(t):
                break
            out += self.piece(t)
        return out.decode("utf-8", errors="replace").strip()

    def save(self, path: Path) -> None:
        self.save_state(path)
        path.with_suffix(".tokens.json").write_text(json.dumps(self.cached))

    def load(self, path: Path) -> None:
        self.load_state(path)
        self.cached = json.loads(path.with_suffix(".tokens.json").read_text())
        assert self.n_past == len(self.cached)


# ---------------------------------------------------------------------------------------------


def check_tokenization(
    model: Path, tokenizer_json: Path, texts: list[str]
) -> tuple[int, int, list[str]]:
    from tokenizers import Tokenizer

    tk = Tokenizer.from_file(str(tokenizer_json))
    bad: list[str] = []
    with lcpp.Runner(model, n_ctx=64) as r:
        for t in texts:
            if r.tokenize(t) != tk.encode(t, add_special_tokens=False).ids:
                bad.append(t)
    return len(texts) - len(bad), len(texts), bad[:5]


def check_logits(model: Path, ref_npz: Path, f32_kv: bool = True) -> float:
    ref = np.load(ref_npz)
    worst = 0.0
    with lcpp.Runner(model, n_ctx=512, f32_kv=f32_kv) as r:
        off = 0
        for i, n in enumerate(ref["lengths"]):
            seq = ref["tokens"][off : off + n].tolist()
            off += n
            r.reset()
            got = r.eval(seq, all_logits=True)[-int(ref["last_n"]) :]
            want = ref["logits"][i]
            worst = max(worst, float(np.abs(got - want).max() / np.abs(want).max()))
    return worst


def eval_questions(runner: ChatRunner, evalset: dict) -> list[tuple[str, str, str]]:
    rows = []
    for q in evalset["questions"]:
        runner.reset()
        got = runner.chat([{"role": "user", "content": q["question"]}])
        rows.append((q["question"], q["expected"], got))
    return rows


def eval_recall(
    runner: ChatRunner, model: Path, evalset: dict, restore: bool, limit: int | None = None
) -> list[tuple[str, str]]:
    """Three-turn dialogues; returns (name, final answer)."""
    results = []
    items = evalset["recall"][:limit]
    with tempfile.TemporaryDirectory() as tmp:
        for i, item in enumerate(items):
            runner.reset()
            msgs: list[Message] = []
            for turn in ("turn1", "turn2"):
                msgs.append({"role": "user", "content": item[turn]})
                msgs.append({"role": "assistant", "content": runner.chat(msgs)})
            msgs.append({"role": "user", "content": item["turn3"]})
            if restore:
                state = Path(tmp) / f"s{i}.bin"
                runner.save(state)
                (Path(tmp) / f"m{i}.json").write_text(json.dumps(msgs))
                proc = subprocess.run(
                    [
                        sys.executable,
                        str(Path(__file__)),
                        "restore",
                        str(model),
                        str(state),
                        str(Path(tmp) / f"m{i}.json"),
                    ],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                answer = json.loads(proc.stdout.strip().splitlines()[-1])["answer"]
            else:
                answer = runner.chat(msgs)
            results.append((item["name"], answer))
    return results


def run_all(out: Path, seed: int = 0, threads: int = 2) -> int:
    lcpp.quiet()
    ok = True
    t0 = time.time()
    evalset = json.loads(sidecar(out, ".eval.json").read_text())

    from tokenizers import Tokenizer

    trained = Tokenizer.from_file(str(sidecar(out, ".tokenizer.json")))
    pieces = corpus.name_pieces(trained.get_vocab())
    texts = [c.text() for c in corpus.build_corpus(seed, _n_conversations(), pieces=pieces)]
    # and the start of the copy dialogues: the only random letters ("ß", "ø") seen in training
    texts += [c.text() for c in corpus.build_copy_corpus(seed, 5000, pieces=pieces)]
    texts += [c.text() for c in corpus.build_micro_corpus(seed, 5000, pieces=pieces)]
    texts += corpus.tokenizer_probe_texts() + [q["question"] for q in evalset["questions"]]
    good, total, bad = check_tokenization(out, sidecar(out, ".tokenizer.json"), texts)
    print(f"[check 1] tokenization equal on {good}/{total} texts", flush=True)
    if good != total:
        ok = False
        print("  mismatches:", bad)

    err = check_logits(out, sidecar(out, ".reference.npz"))
    err16 = check_logits(out, sidecar(out, ".reference.npz"), f32_kv=False)
    print(f"[check 2] max relative logit error {err:.2e} (f32 KV), {err16:.2e} (default f16 KV)")
    ok &= err <= LOGIT_TOL

    runner = ChatRunner(out, n_threads=threads)
    rows = eval_questions(runner, evalset)
    n_right = sum(got == want for _, want, got in rows)
    print(f"[check 3] questions: {n_right}/{len(rows)} exactly right")
    for q, want, got in rows:
        if got != want:
            print(f"  WRONG: {q!r}\n    want {want!r}\n    got  {got!r}")
    ok &= n_right >= MIN_ACCURACY * len(rows)
    for restore in (False, True):
        res = eval_recall(runner, out, evalset, restore=restore)
        n_rec = sum(name in ans for name, ans in res)
        label = "with save/restore in a new process" if restore else "in one process"
        print(f"[check 3] recall {label}: {n_rec}/{len(res)}")
        for name, ans in res:
            if name not in ans:
                print(f"  WRONG: {name!r} -> {ans!r}")
        ok &= n_rec >= MIN_ACCURACY * len(res)
    runner.close()
    print(f"checks {'PASSED' if ok else 'FAILED'} in {time.time() - t0:.0f}s")
    return 0 if ok else 1


def _n_conversations() -> int:
    from train import N_CONVERSATIONS

    return N_CONVERSATIONS


def _restore_main(model: str, state: str, messages: str) -> None:
    lcpp.quiet()
    runner = ChatRunner(model)
    runner.load(Path(state))
    answer = runner.chat(json.loads(Path(messages).read_text()))
    runner.close()
    print(json.dumps({"answer": answer}))


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "restore":
        _restore_main(*sys.argv[2:])
    else:
        print(__doc__)
        sys.exit(2)
