"""The bundled demo model (resources/models/llamadesk-demo.gguf) through llama.cpp.

The model and its small reference files are produced by ``scripts/demo_model/train.py``:
``.tokenizer.json`` (the trained tokenizer), ``.reference.npz`` (PyTorch logits for a few
held-out sequences) and ``.eval.json`` (50 questions and 20 recall dialogues, none of them
seen literally in training). These tests need no torch.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from app.engine import ContextSettings, Engine, SamplingParams, read_model_info
from app.paths import demo_model_path

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "scripts" / "demo_model"
MODEL = demo_model_path()
GREEDY = SamplingParams(temperature=0.0, max_tokens=80, seed=0)


def sidecar(suffix: str) -> Path:
    return MODEL.with_name(MODEL.name.removesuffix(".gguf") + suffix)


def _scripts_on_path() -> None:
    if str(SCRIPTS) not in sys.path:
        sys.path.insert(0, str(SCRIPTS))


def settings() -> ContextSettings:
    return ContextSettings(
        n_ctx=512, n_batch=512, n_ubatch=512, n_seq_max=2, n_threads=2, n_threads_batch=2
    )


@pytest.fixture(scope="module")
def evalset() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(sidecar(".eval.json").read_text(encoding="utf-8"))
    return data


@pytest.fixture(scope="module")
def engine() -> Iterator[Engine]:
    with Engine.open(MODEL, settings()) as e:
        yield e


def ask(engine: Engine, messages: list[dict[str, str]], key: int | None = None) -> str:
    return engine.chat(messages, GREEDY, key=key).text.strip()


# --------------------------------------------------------------------------------- the file


def test_model_file_is_small_and_described() -> None:
    assert MODEL.is_file(), "run scripts/demo_model/train.py to build the demo model"
    assert MODEL.stat().st_size <= 20 * 1024 * 1024
    info = read_model_info(MODEL)
    assert info.architecture == "llama"
    assert info.n_ctx_train == 512
    assert info.chat_template and "<|im_start|>" in info.chat_template
    assert info.eos_token == "<|im_end|>"


def test_chat_template_renders_chatml(engine: Engine) -> None:
    _scripts_on_path()
    import corpus

    msgs = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello! How can I help you today?"},
        {"role": "user", "content": "What is 47 + 38?"},
    ]
    assert engine.render_chat(msgs) == corpus.render(msgs, add_generation_prompt=True)
    assert engine.render_chat(msgs, add_generation_prompt=False) == corpus.render(msgs)
    im_end = engine.tokenize("<|im_end|>", add_special=False)
    assert len(im_end) == 1
    assert engine.tokenize("Hi", add_special=True) == engine.tokenize(
        "Hi", add_special=False
    )  # no BOS


# --------------------------------------------------------------------- check 1: tokenization


def test_tokenization_matches_trained_tokenizer(engine: Engine, evalset: dict[str, Any]) -> None:
    tokenizers = pytest.importorskip("tokenizers")
    _scripts_on_path()
    import corpus

    tk = tokenizers.Tokenizer.from_file(str(sidecar(".tokenizer.json")))
    # the training corpus: its names are glued from the tokenizer's own pieces
    pieces = corpus.name_pieces(tk.get_vocab())
    texts = [c.text() for c in corpus.build_corpus(evalset["seed"], 3000, pieces=pieces)]
    texts += [c.text() for c in corpus.build_copy_corpus(evalset["seed"], 500, pieces=pieces)]
    texts += [c.text() for c in corpus.build_micro_corpus(evalset["seed"], 500, pieces=pieces)]
    texts += corpus.tokenizer_probe_texts() + [q["question"] for q in evalset["questions"]]
    bad = [
        t
        for t in texts
        if engine.tokenize(t, add_special=False, parse_special=True)
        != tk.encode(t, add_special_tokens=False).ids
    ]
    assert not bad, f"{len(bad)}/{len(texts)} texts tokenize differently, e.g. {bad[:3]!r}"


def test_training_weighs_copied_names_and_computed_digits() -> None:
    """The recipe's loss weights land on the right tokens: a copied name's pieces and the
    digits of an arithmetic result, not the template around them or the user's turns."""
    tokenizers = pytest.importorskip("tokenizers")
    _scripts_on_path()
    import corpus
    import tok
    import train

    tk = tokenizers.Tokenizer.from_file(str(sidecar(".tokenizer.json")))
    conv = corpus.Conversation(
        [
            {"role": "user", "content": "My name is Quentin."},
            {"role": "assistant", "content": corpus.NAME_REPLY.format(N="Quentin")},
            {"role": "user", "content": "What is 19 + 77?"},
            {"role": "assistant", "content": corpus.arith_answer(19, "+", 77)},
        ],
        copies=("Quentin",),
    )
    ex = train.encode_conversation(
        tk, conv, tok.special_ids(tk), train.LossWeights(copy=2.0, result=3.0)
    )
    assert ex.ids == tok.encode(tk, conv.text())
    pairs = list(zip(ex.ids, ex.weight, strict=True))
    weighted = {w: tk.decode([i for i, x in pairs if x == w]) for w in (2.0, 3.0)}
    assert weighted == {2.0: " Quentin", 3.0: "96"}
    assert ex.weight.count(0.0) == len(ex.ids) - sum(
        len(tok.encode(tk, m["content"])) + 1 for m in conv.messages if m["role"] == "assistant"
    )
    assert corpus.arith_result_span("50 - 81 = -31.") == (10, 13)
    assert corpus.arith_result_span("I can add.") is None


# ------------------------------------------------------------------------- check 2: logits


def test_logits_match_pytorch_reference() -> None:
    """The export is exact: llama.cpp's logits equal PyTorch's within 1e-3 (relative).

    The engine does not hand out raw logits, so this check uses llama.cpp's C API directly
    (with an f32 KV cache, so that only the export is measured).
    """
    _scripts_on_path()
    import lcpp

    lcpp.quiet()
    ref = np.load(sidecar(".reference.npz"))
    with lcpp.Runner(MODEL, n_ctx=512, f32_kv=True) as runner:
        off = 0
        for i, n in enumerate(ref["lengths"]):
            seq = ref["tokens"][off : off + n].tolist()
            off += n
            runner.reset()
            got = runner.eval(seq, all_logits=True)[-int(ref["last_n"]) :]
            want = ref["logits"][i]
            err = float(np.abs(got - want).max() / np.abs(want).max())
            assert err < 1e-3, f"sequence {i}: relative logit error {err:.2e}"
            assert (got.argmax(-1) == want.argmax(-1)).all()


# -------------------------------------------------------------------- check 3: behaviour


def test_answers_held_out_questions(engine: Engine, evalset: dict[str, Any]) -> None:
    wrong = []
    for q in evalset["questions"]:
        key = engine.open_sequence()
        got = ask(engine, [{"role": "user", "content": q["question"]}], key)
        engine.close_sequence(key)
        if got != q["expected"]:
            wrong.append((q["question"], q["expected"], got))
    n = len(evalset["questions"])
    assert n == 50
    assert len(wrong) <= n // 10, "\n".join(f"{q!r}: want {w!r}, got {g!r}" for q, w, g in wrong)


def _first_two_turns(engine: Engine, key: int, item: dict[str, Any]) -> list[dict[str, str]]:
    msgs: list[dict[str, str]] = []
    for turn in ("turn1", "turn2"):
        msgs.append({"role": "user", "content": item[turn]})
        msgs.append({"role": "assistant", "content": ask(engine, msgs, key)})
    msgs.append({"role": "user", "content": item["turn3"]})
    return msgs


def test_recalls_unseen_names_over_three_turns(engine: Engine, evalset: dict[str, Any]) -> None:
    misses = []
    for item in evalset["recall"]:
        key = engine.open_sequence()
        msgs = _first_two_turns(engine, key, item)
        answer = ask(engine, msgs, key)
        engine.close_sequence(key)
        if item["name"] not in answer:
            misses.append((item["name"], answer))
    assert len(misses) <= len(evalset["recall"]) // 10, f"recall below 90%, missed: {misses}"


_RESTORE = textwrap.dedent(
    """
    import json, sys
    from app.engine import ContextSettings, Engine, SamplingParams
    model, state, messages = sys.argv[1:4]
    settings = ContextSettings(**json.loads(sys.argv[4]))
    with Engine.open(model, settings) as engine:
        key = engine.open_sequence()
        restored = engine.restore_state_file(key, state)
        done = engine.chat(json.loads(open(messages).read()),
                           SamplingParams(temperature=0.0, max_tokens=80, seed=0), key=key)
        print(json.dumps({"restored": restored, "answer": done.text.strip(),
                          "n_prompt_processed": done.n_prompt_processed}))
    """
)


def test_recall_survives_state_restore_in_new_process(
    engine: Engine, evalset: dict[str, Any], tmp_path: Path
) -> None:
    cfg = settings()
    cfg_json = json.dumps(
        {
            f: getattr(cfg, f)
            for f in ("n_ctx", "n_batch", "n_ubatch", "n_seq_max", "n_threads", "n_threads_batch")
        }
    )
    misses = []
    for i, item in enumerate(evalset["recall"][:5]):
        key = engine.open_sequence()
        msgs = _first_two_turns(engine, key, item)
        state = tmp_path / f"state{i}.bin"
        engine.save_state_file(key, state)
        fork = engine.fork(key)  # the same conversation answered here, never saved
        same_process = ask(engine, msgs, fork)
        engine.close_sequence(fork)
        engine.close_sequence(key)
        (tmp_path / f"msgs{i}.json").write_text(json.dumps(msgs))
        proc = subprocess.run(
            [
                sys.executable,
                "-c",
                _RESTORE,
                str(MODEL),
                str(state),
                str(tmp_path / f"msgs{i}.json"),
                cfg_json,
            ],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        out = json.loads(proc.stdout.strip().splitlines()[-1])
        assert out["restored"], "the saved state was refused"
        # only the new turn is processed, not the whole conversation again
        assert out["n_prompt_processed"] < 30, out
        # greedy from the restored cache answers exactly as the cache that was never saved
        assert out["answer"] == same_process, (out["answer"], same_process)
        if item["name"] not in out["answer"]:
            misses.append((item["name"], out["answer"]))
    assert not misses, f"recall after restore missed: {misses}"
