"""The GBNF grammars in resources/grammars: llama.cpp parses them, and a random-weight
tiny model constrained by them writes replies of the reasoning shape they promise."""

from __future__ import annotations

import ctypes
import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import llama_cpp
import pytest

from app.engine.grammar_bounds import (
    LIMITS,
    GrammarBoundsError,
    GrammarSyntaxError,
    check_grammar,
    measure_grammar,
)
from app.engine.json_grammar import SchemaGrammarError, schema_grammar
from app.engine.reasoning import ReasoningFormat, split_reasoning
from app.engine.settings import SamplingParams, SettingsError

GRAMMARS_DIR = Path(__file__).resolve().parents[2] / "resources" / "grammars"

# grammar file -> (format, prompt opened the reasoning, has reasoning)
SHAPES: dict[str, tuple[ReasoningFormat, bool, bool]] = {
    "think-then-answer": (ReasoningFormat.THINK_TAGS, False, True),
    "open-think-answer": (ReasoningFormat.THINK_TAGS, True, True),
    "think-brackets": (ReasoningFormat.THINK_BRACKETS, False, True),
    "harmony": (ReasoningFormat.HARMONY, False, True),
    "answer-only": (ReasoningFormat.THINK_TAGS, False, False),
}


@pytest.fixture(scope="module")
def model(tiny_model: Path) -> Iterator[llama_cpp.llama_model_p]:
    params = llama_cpp.llama_model_default_params()
    handle = llama_cpp.llama_model_load_from_file(str(tiny_model).encode(), params)
    assert handle
    yield handle
    llama_cpp.llama_model_free(handle)


def _generate(model: llama_cpp.llama_model_p, grammar: str, max_tokens: int = 200) -> str:
    vocab = llama_cpp.llama_model_get_vocab(model)
    ctx_params = llama_cpp.llama_context_default_params()
    ctx_params.n_ctx = 512
    ctx_params.n_batch = 512
    ctx = llama_cpp.llama_init_from_model(model, ctx_params)
    assert ctx
    chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
    try:
        sampler = llama_cpp.llama_sampler_init_grammar(vocab, grammar.encode(), b"root")
        assert sampler, "llama.cpp could not parse the grammar"
        llama_cpp.llama_sampler_chain_add(chain, sampler)
        llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_greedy())
        prompt = b"hello"
        tokens = (llama_cpp.llama_token * 16)()
        n = llama_cpp.llama_tokenize(vocab, prompt, len(prompt), tokens, 16, True, False)
        assert n > 0
        batch = llama_cpp.llama_batch_get_one(tokens, n)
        pieces = bytearray()
        buf = ctypes.create_string_buffer(64)
        for _ in range(max_tokens):
            assert llama_cpp.llama_decode(ctx, batch) == 0
            token = llama_cpp.llama_sampler_sample(chain, ctx, -1)
            if llama_cpp.llama_vocab_is_eog(vocab, token):
                break
            size = llama_cpp.llama_token_to_piece(vocab, token, buf, len(buf), 0, False)
            pieces += buf.raw[:size]
            one = (llama_cpp.llama_token * 1)(token)
            batch = llama_cpp.llama_batch_get_one(one, 1)
        return pieces.decode("utf-8")
    finally:
        llama_cpp.llama_sampler_free(chain)
        llama_cpp.llama_free(ctx)


def test_every_grammar_is_listed() -> None:
    assert sorted(p.stem for p in GRAMMARS_DIR.glob("*.gbnf")) == sorted(SHAPES)


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_grammar_gives_the_reasoning_shape(model: llama_cpp.llama_model_p, name: str) -> None:
    grammar = (GRAMMARS_DIR / f"{name}.gbnf").read_text(encoding="utf-8")
    reply = _generate(model, grammar)
    assert reply == _generate(model, grammar)  # deterministic
    fmt, opened, has_reasoning = SHAPES[name]
    reasoning, answer = split_reasoning(reply, fmt, opened)
    assert answer.split(), reply
    assert bool(reasoning.split()) is has_reasoning, reply
    for text in (reasoning, answer):
        assert "<" not in text and "[" not in text, reply


# -- bounds: what reaches llama.cpp's parser (app/engine/grammar_bounds.py) ----------------


def _nested(depth: int) -> str:
    return "root ::= " + "(" * depth + '"a"' + ")" * depth + "\n"


def _chain(length: int) -> str:
    """Rules that each begin with the next: llama.cpp's left-recursion check recurses."""
    return (
        "root ::= r0\n"
        + "".join(f"r{i} ::= r{i + 1}\n" for i in range(length))
        + (f'r{length} ::= "a"\n')
    )


def _doubling(levels: int, first: str = 'r1 ::= "a" | ""') -> str:
    """Each rule is the one below twice, and may be empty: 2**levels of something."""
    rules = [first] + [f'r{i} ::= r{i - 1} r{i - 1} | ""' for i in range(2, levels + 1)]
    return f"root ::= r{levels}\n" + "\n".join(rules) + "\n"


# Realistic schemas (OpenAI structured-output style): each must still become a grammar.
REALISTIC_SCHEMAS: list[dict[str, Any]] = [
    {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 200},
            "age": {"type": "integer", "minimum": 0, "maximum": 150},
            "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 10},
            "address": {
                "type": "object",
                "properties": {
                    "street": {"type": "string"},
                    "zip": {"type": "string", "pattern": "^[0-9]{5}$"},
                },
                "required": ["street"],
            },
            "notes": {"type": "string", "minLength": 1, "maxLength": 500},
        },
        "required": ["name", "age"],
        "additionalProperties": False,
    },
    {"type": "string", "maxLength": 1000},
    {"type": "array", "items": {"type": "number"}, "minItems": 1, "maxItems": 1000},
    {"enum": [f"option-{i}" for i in range(2000)]},
    {
        "type": "object",
        "properties": {
            "steps": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "explanation": {"type": "string"},
                        "output": {"type": "string"},
                    },
                    "required": ["explanation", "output"],
                    "additionalProperties": False,
                },
            },
            "final_answer": {"type": "string"},
        },
        "required": ["steps", "final_answer"],
        "additionalProperties": False,
    },
    {
        "type": "object",
        "properties": {
            "user": {
                "type": "object",
                "properties": {
                    "id": {"type": "integer"},
                    "roles": {"type": "array", "items": {"enum": ["admin", "user"]}},
                    "profile": {
                        "type": "object",
                        "properties": {"bio": {"type": "string", "maxLength": 300}},
                    },
                },
                "required": ["id"],
            }
        },
    },
]


def test_realistic_grammars_are_within_every_bound() -> None:
    from llama_cpp.llama_grammar import JSON_GBNF

    texts = [p.read_text(encoding="utf-8") for p in sorted(GRAMMARS_DIR.glob("*.gbnf"))]
    texts += [JSON_GBNF] + [schema_grammar(schema) for schema in REALISTIC_SCHEMAS]
    for text in texts:
        shape = measure_grammar(text)
        assert shape.rules > 0 and shape.elements > 0
    # the nesting limit is what lets maxLength 1,000 through, and nothing more
    assert measure_grammar(schema_grammar({"type": "string", "maxLength": 1000})).depth == 1000


@pytest.mark.parametrize(
    ("grammar", "sentence"),
    [
        (
            _nested(20_000),
            "nests groups more than 1,000 deep (at line 1, column 1010); at most 1,000.",
        ),
        (_nested(1_001), "at most 1,000."),
        (_chain(3_000), "rules begin with other rules more than 2,000 deep; at most 2,000."),
        ("root ::= " + '"a"{0,2000} ' * 30 + "\n", "more than 25,000 rules"),
        ('root ::= "' + "a" * 1000 + '"{2000}\n', "more than 1,000,000 elements"),
        (_doubling(15), "in more than 4,000 ways"),
        (_doubling(30, 'r1 ::= ""'), "would read more than 20,000,000 elements"),
        ('root ::= "a"{3,1}\n', "the most must be at least the least."),
        (
            "root ::= " + '"a" ' * 200_000 + "\n",
            "The grammar has 800,010 characters; at most 500,000.",
        ),
    ],
    ids=[
        "nest-20000",
        "nest-1001",
        "chain",
        "rules",
        "elements",
        "ways",
        "left-steps",
        "m>n",
        "chars",
    ],
)
def test_a_grammar_beyond_a_bound_is_refused_naming_it(grammar: str, sentence: str) -> None:
    with pytest.raises(GrammarBoundsError) as refused:
        check_grammar(grammar)
    assert sentence in str(refused.value)
    with pytest.raises(SettingsError) as invalid:
        SamplingParams(grammar=grammar).validate()
    assert invalid.value.field == "grammar" and sentence in str(invalid.value)


@pytest.mark.parametrize(
    ("grammar", "sentence"),
    [
        (
            'root ::= b root "x" | "y"\nb ::= c\nc ::= "" | "z"\n',
            "left-recursive at the rule 'root'",
        ),
        ("root ::= root", "left-recursive at the rule 'root'"),
        ('root ::= "a\x00"', "NUL character"),
        ('root ::= "\ud800"', "lone UTF-16 surrogate"),
        ('root ::= ( "a"', "expecting ')' at line 1, column 15."),
        ("root ::= x", "the rule 'x' is used but never defined."),
        ('x ::= "a"', "no 'root' rule"),
        ('root ::= "a"{2001}', "a repetition of more than 2,000 times"),
        ('root ::= "a"{99999999999999999999999}', "number too large"),
    ],
)
def test_a_grammar_llama_cpp_cannot_use_is_refused_with_the_place(
    grammar: str, sentence: str
) -> None:
    with pytest.raises(GrammarSyntaxError) as refused:
        check_grammar(grammar)
    assert sentence in str(refused.value)


def test_the_bounds_read_grammars_as_llama_cpp_does(tmp_path: Path) -> None:
    """Mutants of the bundled grammars and random token soups: each one this reading accepts
    llama.cpp accepts, and each one it calls invalid llama.cpp refuses (llama.cpp runs in a
    child, since it may hang or crash on what the bounds refuse: those are not sent)."""
    import random

    from llama_cpp.llama_grammar import JSON_GBNF

    pieces = ['"a"', '"b\\n"', "[a-z]", "[^x]", "[]", "[a-]", ".", "x", "root", "(", ")",
              "|", "*", "+", "?", "{2}", "{0,3}", "{1,}", "{,2}", "{3,1}", " ", "\n", "\n  ",
              "#c\n", "<[5]>", "!<[7]>", '"\\x4', '"\\q"', "::=", "\r\n", '"', "[", '""',
              "{2001}", "{0,2001}"]  # fmt: skip
    rng = random.Random(18)
    seeds = [p.read_text(encoding="utf-8") for p in sorted(GRAMMARS_DIR.glob("*.gbnf"))]
    seeds.append(JSON_GBNF)
    sent: list[tuple[str, bool]] = []
    for _ in range(600):
        if rng.random() < 0.5:
            text = rng.choice(seeds)
            for _ in range(rng.randint(1, 3)):
                k = rng.randrange(len(text) + 1)
                if rng.random() < 0.5:
                    text = text[:k] + rng.choice(pieces) + text[k:]
                else:
                    text = text[:k] + text[k + rng.randint(1, 3) :]
        else:
            names = ["root", "x", "y"][: rng.randint(1, 3)]
            text = "\n".join(
                f"{name} ::= " + "".join(rng.choice(pieces) for _ in range(rng.randint(1, 8)))
                for name in names
            )
        try:
            check_grammar(text)
            sent.append((text, True))
        except GrammarSyntaxError:
            sent.append((text, False))
        except GrammarBoundsError:
            pass
    assert sum(ok for _, ok in sent) > 100 and sum(not ok for _, ok in sent) > 100
    cases = tmp_path / "cases.json"
    cases.write_text(json.dumps([text for text, _ in sent]))
    child = subprocess.run(
        [sys.executable, "-c", _LLAMA_VERDICTS, str(cases)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == 0, child.stderr[-2000:]
    verdicts = json.loads(child.stdout)
    disagree = [text for (text, ok), llama in zip(sent, verdicts, strict=True) if ok != llama]
    assert not disagree, disagree[:3]


# llama.cpp's own verdict (a sampler or NULL) on each grammar of a JSON file; no vocabulary is
# needed for grammars without named tokens.
_LLAMA_VERDICTS = """
import json, os, sys
import llama_cpp
os.dup2(os.open(os.devnull, os.O_WRONLY), 2)  # the parser prints each error and grammar
verdicts = []
for text in json.load(open(sys.argv[1])):
    sampler = llama_cpp.llama_sampler_init_grammar(None, text.encode(), b"root")
    verdicts.append(bool(sampler))
    if sampler:
        llama_cpp.llama_sampler_free(sampler)
print(json.dumps(verdicts))
"""

# Builds a grammar sampler from the text of argv[1] on a thread with a stack of argv[2] KiB
# (what threads get varies by platform); prints "built" or "refused", or dies.
_LLAMA_BUILD = """
import sys, threading
import llama_cpp
text = open(sys.argv[1]).read()
def build():
    sampler = llama_cpp.llama_sampler_init_grammar(None, text.encode(), b"root")
    print("built" if sampler else "refused", flush=True)
threading.stack_size(int(sys.argv[2]) * 1024)
thread = threading.Thread(target=build)
thread.start()
thread.join()
"""


def _build_in_child(
    tmp_path: Path, grammar: str, stack_kib: int
) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "grammar.gbnf"
    path.write_text(grammar)
    return subprocess.run(
        [sys.executable, "-c", _LLAMA_BUILD, str(path), str(stack_kib)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_llama_cpp_dies_on_what_the_bounds_refuse_and_not_at_the_bounds(tmp_path: Path) -> None:
    """Without the check llama.cpp's parser overflows the stack (SIGSEGV) on 20,000 nested
    groups, on the 8 MiB of a Linux thread; at the limits it builds the sampler even on a
    1 MiB thread stack (what some platforms give), so the limits are the margin."""
    hostile = _build_in_child(tmp_path, _nested(20_000), 8192)
    assert hostile.returncode == -signal.SIGSEGV, (hostile.returncode, hostile.stdout)
    assert "built" not in hostile.stdout
    with pytest.raises(GrammarBoundsError):
        check_grammar(_nested(20_000))
    at_limits = [_nested(LIMITS.max_depth), _chain(LIMITS.max_left_depth - 2)]
    for grammar in at_limits:
        check_grammar(grammar)
        built = _build_in_child(tmp_path, grammar, 1024)
        assert built.returncode == 0 and built.stdout.strip() == "built", built


def test_a_schema_that_repeats_too_much_is_refused_before_it_is_written_out() -> None:
    for schema, sentence in [
        ({"type": "string", "maxLength": 100_000}, "'maxLength' of 100,000"),
        ({"type": "string", "maxLength": 30_000}, "'maxLength' of 30,000"),
        ({"type": "string", "minLength": 10**12}, "'minLength' of 1,000,000,000,000"),
        ({"type": "array", "items": {"type": "string"}, "maxItems": 5000}, "'maxItems' of 5,000"),
        ({"type": "string", "pattern": "^a{0,100000}$"}, "'pattern' quantifier {0,100000}"),
        ({"properties": {"a": {"items": {"maxLength": 2000}}}}, "'maxLength' of 2,000"),
    ]:
        with pytest.raises(SchemaGrammarError) as refused:
            schema_grammar(schema)
        assert sentence in str(refused.value) and "at most 1,000." in str(refused.value)
    # many fields each at the limit: the grammar they make is what is refused
    wide = {"properties": {f"p{i}": {"type": "string", "maxLength": 1000} for i in range(80)}}
    with pytest.raises(SchemaGrammarError, match="characters; at most 500,000"):
        schema_grammar(wide)


def test_run_refuses_a_hostile_grammar_file_with_a_sentence(
    tiny_model: Path, tmp_path: Path
) -> None:
    hostile = tmp_path / "deep.gbnf"
    hostile.write_text(_nested(20_000))
    result = subprocess.run(
        [sys.executable, "-m", "app", "run", str(tiny_model), "hello", "--grammar", str(hostile)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 2, (result.returncode, result.stderr[-500:])
    assert (
        f"The grammar file {hostile} cannot be used: The grammar nests groups more than 1,000 deep"
        in result.stderr
    )
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    "schema",
    [
        {
            "type": "object",
            "properties": {
                "color": {"enum": ["red", "green", "blue"]},
                "count": {"enum": list(range(10))},
                "ok": {"type": "boolean"},
            },
            "required": ["color", "count", "ok"],
            "additionalProperties": False,
        },
        {"type": "array", "items": {"enum": [1, 2, 3]}, "minItems": 2, "maxItems": 3},
    ],
)
def test_a_schema_grammar_gives_a_reply_that_parses(
    model: llama_cpp.llama_model_p, schema: dict[str, Any]
) -> None:
    reply = json.loads(_generate(model, schema_grammar(schema), max_tokens=400))
    if schema["type"] == "object":
        assert set(reply) == {"color", "count", "ok"} and reply["color"] in ("red", "green", "blue")
        assert 0 <= reply["count"] <= 9 and isinstance(reply["ok"], bool)
    else:
        assert 2 <= len(reply) <= 3 and set(reply) <= {1, 2, 3}


def test_a_schema_nested_beyond_python_s_recursion_is_a_sentence() -> None:
    schema: dict[str, Any] = {}
    inner = schema
    for _ in range(5000):
        inner["items"] = {}
        inner = inner["items"]
    with pytest.raises(SchemaGrammarError, match="nested too deeply"):
        schema_grammar(schema)
