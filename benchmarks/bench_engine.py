"""Engine speed against a bare ``llama_decode`` loop and llama-cpp-python's ``Llama``.

On the 1.1B-shaped Q4_0 model of ``benchmarks/make_model.py`` (written on the first run and
cached), in one process and with the same threads and context parameters for everyone:

* one tab: greedy tokens/s of ``Engine`` vs a bare loop on ``llama_cpp`` calls vs
  ``Llama.generate`` (temperature 0) - target: engine >= 0.97x bare;
* four tabs: ``Engine`` with four generating tabs vs a bare four-sequence batched loop (one
  ``llama_decode`` per step with one token per sequence) - target: engine >= 0.95x bare;
* state: re-processing a 2,000-token sequence vs ``save_state_file`` +
  ``restore_state_file`` into a fresh sequence - target: restore >= 20x faster.

Generation speed is timed from the first sampled token on (the prompt is excluded), over
``--gen`` steps of one decode each. The machine is shared, so the implementations advance in
lockstep - one step each, in turn (A B C A B C ..., rotated every round) - for ``--repeat``
rounds, and every step is timed: tokens/s come from the median step (robust to the process
being descheduled), ratios are ours / bare within this run; the ratio of total times is
reported too. Prints ONE JSON object on stdout (llama.cpp's log goes to stderr):

    python benchmarks/bench_engine.py [--threads 2] [--gen 64] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import llama_cpp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.engine import Engine
from app.engine.context import DecodeResult
from app.engine.events import Finished
from app.engine.settings import ContextSettings, SamplingParams
from benchmarks.make_model import BenchSpec, ensure_model

TARGET_ONE_TAB = 0.97
TARGET_FOUR_TABS = 0.95
TARGET_RESTORE_SPEEDUP = 20.0
FIRST_NORMAL_TOKEN = 261  # after <unk> <s> </s>, 256 byte tokens, <|im_start|> <|im_end|>


def prompt_tokens(n: int, n_vocab: int, seed: int) -> list[int]:
    """BOS then ``n - 1`` random word tokens (no control tokens)."""
    rng = random.Random(seed)
    return [1] + [rng.randrange(FIRST_NORMAL_TOKEN, n_vocab) for _ in range(n - 1)]


# ------------------------------------------------------------------------------ runs

# A run is one generation (1 or 4 sequences) of one implementation: created with its prompt
# processed and first token sampled (untimed), then advanced by ``step()`` - one decode with
# one token per sequence and the sampling - which the driver times call by call.


class BareLoop:
    """The reference: llama.cpp's ``batched`` example in Python, nothing else."""

    def __init__(self, model: llama_cpp.llama_model_p, settings: ContextSettings) -> None:
        # The engine's llama_model: both decode with the very same weights in memory. (Two
        # loads of one file differ by a few % in speed: the repacked Q4_0 weights are copied
        # to fresh memory whose placement, not the code, decides - the last loaded wins.)
        self.model = model
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = settings.n_ctx
        params.n_batch = settings.n_batch
        params.n_ubatch = settings.n_ubatch
        params.n_seq_max = settings.n_seq_max
        params.n_threads = settings.n_threads
        params.n_threads_batch = settings.n_threads_batch
        params.kv_unified = settings.kv_unified
        params.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_AUTO
        params.no_perf = True
        self.ctx = llama_cpp.llama_init_from_model(self.model, params)
        if not self.ctx:
            raise RuntimeError("cannot create the bare context")
        self.memory = llama_cpp.llama_get_memory(self.ctx)
        self.batch = llama_cpp.llama_batch_init(settings.n_batch, 0, 1)
        chain = llama_cpp.llama_sampler_chain_default_params()
        chain.no_perf = True
        self.samplers = []
        for _ in range(settings.n_seq_max):
            sampler = llama_cpp.llama_sampler_chain_init(chain)
            llama_cpp.llama_sampler_chain_add(sampler, llama_cpp.llama_sampler_init_greedy())
            self.samplers.append(sampler)

    def add(self, token: int, pos: int, seq: int, logits: bool) -> None:
        b = self.batch
        i = b.n_tokens
        b.token[i] = token
        b.pos[i] = pos
        b.n_seq_id[i] = 1
        b.seq_id[i][0] = seq
        b.logits[i] = logits
        b.n_tokens = i + 1

    def decode(self) -> None:
        code = llama_cpp.llama_decode(self.ctx, self.batch)
        if code != 0:
            raise RuntimeError(f"llama_decode returned {code}")

    def sample(self, seq: int, row: int) -> int:
        return int(llama_cpp.llama_sampler_sample(self.samplers[seq], self.ctx, row))

    def close(self) -> None:
        for sampler in self.samplers:
            llama_cpp.llama_sampler_free(sampler)
        llama_cpp.llama_batch_free(self.batch)
        llama_cpp.llama_free(self.ctx)


class BareRun:
    """All prompts in one batch, then one ``llama_decode`` per step, one token per sequence."""

    def __init__(self, loop: BareLoop, prompts: Sequence[list[int]]) -> None:
        self.loop = loop
        self.n_past = [len(p) for p in prompts]
        llama_cpp.llama_memory_clear(loop.memory, True)
        loop.batch.n_tokens = 0
        rows = []
        for seq, prompt in enumerate(prompts):
            for pos, token in enumerate(prompt):
                loop.add(token, pos, seq, pos == len(prompt) - 1)
            rows.append(loop.batch.n_tokens - 1)
        loop.decode()
        self.out = [[loop.sample(seq, row)] for seq, row in enumerate(rows)]
        self.decode_s: list[float] = []  # per step: the time inside llama_decode

    def step(self) -> None:
        loop = self.loop
        loop.batch.n_tokens = 0
        for seq, out in enumerate(self.out):
            loop.add(out[-1], self.n_past[seq], seq, True)
            self.n_past[seq] += 1
        t = time.perf_counter()
        loop.decode()
        self.decode_s.append(time.perf_counter() - t)
        for seq, out in enumerate(self.out):
            out.append(loop.sample(seq, seq))

    def finish(self) -> list[list[int]]:
        return self.out


class EngineRun:
    """One tab per prompt through the public ``Engine`` API, greedy."""

    def __init__(self, engine: Engine, prompts: Sequence[list[int]], n_gen: int) -> None:
        self.engine = engine
        self.keys = [engine.open_sequence() for _ in prompts]
        self.done: dict[int, list[int]] = {}
        for key, prompt in zip(self.keys, prompts, strict=True):
            engine.set_tokens(key, prompt)
            engine.start(key, SamplingParams(temperature=0.0, max_tokens=n_gen + 1))
        engine.step()  # every prompt fits one batch: each tab has sampled its first token
        if not all(engine.info(k).generating for k in self.keys):
            raise RuntimeError("the prompts did not fit in one step")
        # Time the engine's llama_decode calls too: step time minus decode time is the
        # engine's own Python work, a figure the machine's noise hardly touches.
        self.decode_s: list[float] = []
        self._in_decode = 0.0
        self.ctx = engine.context
        assert self.ctx is not None
        decode = self.ctx.decode

        def timed_decode() -> DecodeResult:
            t = time.perf_counter()
            try:
                return decode()
            finally:
                self._in_decode += time.perf_counter() - t

        object.__setattr__(self.ctx, "decode", timed_decode)  # on this instance only

    def step(self) -> None:
        self._in_decode = 0.0
        for event in self.engine.step():
            if isinstance(event, Finished):
                self.done[event.key] = list(event.completion.tokens)
        self.decode_s.append(self._in_decode)

    def finish(self) -> list[list[int]]:
        del self.ctx.__dict__["decode"]
        if self.engine.has_work():
            raise RuntimeError("the engine took more steps than the bare loop")
        for key in self.keys:
            self.engine.close_sequence(key)
        return [self.done[k] for k in self.keys]


class LlamaRun:
    """``Llama.generate`` at temperature 0 (greedy sampler); each ``next()`` is one step."""

    def __init__(self, llm: Any, prompt: list[int]) -> None:
        llm.reset()
        self.gen = llm.generate(prompt, temp=0.0, reset=True)
        self.out = [next(self.gen)]
        self.decode_s: list[float] = []  # not instrumented

    def step(self) -> None:
        self.out.append(next(self.gen))

    def finish(self) -> list[list[int]]:
        self.gen.close()
        return [self.out]


Run = BareRun | EngineRun | LlamaRun


@dataclass
class Timings:
    steps: dict[str, list[float]] = field(default_factory=dict)  # every step, every round
    decode: dict[str, list[float]] = field(default_factory=dict)  # inside llama_decode
    rounds: dict[str, list[list[float]]] = field(default_factory=dict)
    outputs: dict[str, list[list[int]]] = field(default_factory=dict)  # the last round's


def lockstep(factories: dict[str, Callable[[int], Run]], n_gen: int, repeat: int) -> Timings:
    """Advance every implementation one step at a time, in turn, timing each step.

    The machine is shared: interleaving step by step (A B C A B C...; the order rotates by
    round) gives every implementation the same share of the noise, which runs one after
    another do not, and no implementation ever runs twice in a row (warm caches).
    """
    names = list(factories)
    result = Timings({n: [] for n in names}, {n: [] for n in names}, {n: [] for n in names}, {})
    for r in range(repeat):
        order = names[r % len(names) :] + names[: r % len(names)]
        runs = {n: factories[n](n_gen) for n in order}
        times: dict[str, list[float]] = {n: [] for n in names}
        for _ in range(n_gen):
            for n in order:
                run = runs[n]
                t = time.perf_counter()
                run.step()
                times[n].append(time.perf_counter() - t)
        for n in names:
            result.outputs[n] = runs[n].finish()
            result.steps[n] += times[n]
            result.decode[n] += runs[n].decode_s
            result.rounds[n].append(times[n])
    return result


def summary(t: Timings, n_seq: int, target: float) -> dict[str, Any]:
    """Tokens/s from the median step (robust to descheduling) and from the total time."""
    med = {n: statistics.median(v) for n, v in t.steps.items()}
    mean = {n: statistics.fmean(v) for n, v in t.steps.items()}
    ratio = med["bare"] / med["engine"]
    outside = {
        n: statistics.median(s - d for s, d in zip(t.steps[n], t.decode[n], strict=True))
        for n in ("engine", "bare")
    }
    decode = statistics.median(t.decode["bare"])
    result: dict[str, Any] = {
        **{f"{n}_tok_s": round(n_seq / m, 3) for n, m in med.items()},
        "ratio_engine_vs_bare": round(ratio, 4),
        "target": target,
        "pass": ratio >= target,
        "ratio_engine_vs_bare_total_time": round(mean["bare"] / mean["engine"], 4),
        "ratio_engine_vs_bare_per_round": [
            round(statistics.median(b) / statistics.median(e), 4)
            for b, e in zip(t.rounds["bare"], t.rounds["engine"], strict=True)
        ],
        "median_step_ms": {n: round(m * 1000, 2) for n, m in med.items()},
        "mean_step_ms": {n: round(m * 1000, 2) for n, m in mean.items()},
        "median_decode_ms": {
            n: round(statistics.median(t.decode[n]) * 1000, 2) for n in ("engine", "bare")
        },
        # Python work per step outside llama_decode (batch, sampling, events): nearly immune
        # to the noise, and the ratio it implies at the bare loop's decode time.
        "outside_decode_ms_per_step": {n: round(v * 1000, 3) for n, v in outside.items()},
        "ratio_implied_by_outside_decode": round(
            (decode + outside["bare"]) / (decode + outside["engine"]), 4
        ),
    }
    if "llama_class" in med:
        result["ratio_llama_class_vs_bare"] = round(med["bare"] / med["llama_class"], 4)
    return result


# ------------------------------------------------------------------------------ state


def engine_state(engine: Engine, tokens: list[int], restores: int, check: bool) -> dict[str, Any]:
    """Re-process ``tokens`` in a fresh tab, save it to a file, close the tab, and restore
    the file ``restores`` times into a fresh tab (the tab reopened after a restart)."""
    key = engine.open_sequence()
    result: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="llamadesk-bench-") as tmp:
        path = Path(tmp) / "tab.state"
        try:
            engine.set_tokens(key, tokens)
            start = time.perf_counter()
            engine.prefill(key)
            while engine.has_work():
                engine.step()
            result["reprocess_s"] = time.perf_counter() - start
            start = time.perf_counter()
            result["state_bytes"] = engine.save_state_file(key, path)
            result["save_s"] = time.perf_counter() - start
            # Re-decodes the last token (the cache keeps its length): the reference below.
            original = engine.next_logits(key) if check else None
        finally:
            engine.close_sequence(key)
        result["restore_s"] = []
        for _ in range(restores):
            other = engine.open_sequence()
            try:
                start = time.perf_counter()
                ok = engine.restore_state_file(other, path)
                result["restore_s"].append(time.perf_counter() - start)
                if not ok or engine.tokens(other) != tokens:
                    raise RuntimeError("the state was not restored")
                if original is not None:  # the restored cache predicts what the original did
                    restored = engine.next_logits(other)
                    top2 = np.sort(original)[-2:]
                    result["check"] = {
                        "same_next_token": int(original.argmax()) == int(restored.argmax()),
                        "logits_max_abs_diff": round(float(np.abs(original - restored).max()), 6),
                        "logits_std": round(float(original.std()), 4),
                        "top2_margin": round(float(top2[1] - top2[0]), 6),
                    }
                    original = None
            finally:
                engine.close_sequence(other)
    return result


# ------------------------------------------------------------------------------ driver


def run(args: argparse.Namespace) -> dict[str, Any]:
    spec = BenchSpec()
    path = Path(args.model) if args.model else ensure_model(spec=spec)
    settings = ContextSettings(
        n_ctx=args.n_ctx,
        n_batch=512,
        n_ubatch=512,
        n_seq_max=4,
        n_threads=args.threads,
        n_threads_batch=args.threads,
        kv_unified=True,
        flash_attn="auto",
    )
    wall = time.perf_counter()
    report: dict[str, Any] = {
        "model": str(path),
        "model_mib": round(path.stat().st_size / 2**20, 1),
        "shape": "1.1B llama: 22 layers, 2048 wide, 32 heads, 4 KV heads, FFN 5632, vocab 32000, Q4_0",
        "threads": args.threads,
        "cpu_count": os.cpu_count(),
        "context": {
            "n_ctx": 0,  # filled in below: what the engine's context got
            "n_batch": settings.n_batch,
            "n_ubatch": settings.n_ubatch,
            "n_seq_max": settings.n_seq_max,
            "kv_unified": True,
            "flash_attn": "auto (Llama class: flash_attn=True)",
        },
        "prompt_tokens": args.prompt,
        "gen_tokens_per_measurement": args.gen,
        "repeat": args.repeat,
        "loadavg_start": [round(x, 2) for x in os.getloadavg()],
    }
    prompts = [prompt_tokens(args.prompt, spec.n_vocab, seed) for seed in range(4)]

    engine = Engine.open(path, settings)
    assert engine.context is not None
    # The engine holds the context to the model's training length: everyone gets the same.
    settings.n_ctx = report["context"]["n_ctx"] = engine.context.n_ctx
    from llama_cpp import Llama

    llm = Llama(
        model_path=str(path),
        n_ctx=settings.n_ctx,
        n_batch=settings.n_batch,
        n_ubatch=settings.n_ubatch,
        n_threads=args.threads,
        n_threads_batch=args.threads,
        flash_attn=True,
        verbose=True,  # never False: it redirects the process's stdout/stderr
    )
    assert engine.model is not None
    bare = BareLoop(engine.model.handle, settings)
    try:
        one_factories: dict[str, Callable[[int], Run]] = {
            "engine": lambda n: EngineRun(engine, prompts[:1], n),
            "bare": lambda _n: BareRun(bare, prompts[:1]),
            "llama_class": lambda _n: LlamaRun(llm, prompts[0]),
        }
        four_factories: dict[str, Callable[[int], Run]] = {
            "engine": lambda n: EngineRun(engine, prompts, n),
            "bare": lambda _n: BareRun(bare, prompts),
        }
        # Warm-up: page the weights in, let every context allocate its compute buffers.
        lockstep(one_factories, 4, 1)
        lockstep(four_factories, 4, 1)

        one = lockstep(one_factories, args.gen, args.repeat)
        report["one_tab"] = summary(one, 1, TARGET_ONE_TAB)
        out = one.outputs
        report["one_tab"]["same_tokens_engine_bare_llama"] = (
            out["engine"] == out["bare"] == out["llama_class"]
        )

        four = lockstep(four_factories, args.gen, args.repeat)
        report["four_tabs"] = summary(four, 4, TARGET_FOUR_TABS)
        report["four_tabs"]["bare_batched_vs_one_sequence"] = round(
            4 * statistics.median(one.steps["bare"]) / statistics.median(four.steps["bare"]), 3
        )
        report["four_tabs"]["same_tokens_engine_bare"] = (
            four.outputs["engine"] == four.outputs["bare"]
        )

        long = prompt_tokens(args.state_tokens, spec.n_vocab, seed=99)
        states = [
            engine_state(engine, long, args.restores, check=(i == 0))
            for i in range(args.state_repeat)
        ]
        reprocess = statistics.median(s["reprocess_s"] for s in states)
        restore = statistics.median(x for s in states for x in s["restore_s"])
        speedup = reprocess / restore
        report["state"] = {
            "tokens": args.state_tokens,
            "reprocess_s": round(reprocess, 3),
            "reprocess_tok_s": round(args.state_tokens / reprocess, 1),
            "save_s": round(statistics.median(s["save_s"] for s in states), 4),
            "restore_s": round(restore, 4),
            "state_mib": round(states[0]["state_bytes"] / 2**20, 2),
            "restore_speedup": round(speedup, 1),
            "target": TARGET_RESTORE_SPEEDUP,
            "pass": speedup >= TARGET_RESTORE_SPEEDUP,
            "restored_vs_original_next_logits": states[0].get("check"),
            "samples": {
                "reprocess_s": [round(s["reprocess_s"], 3) for s in states],
                "restore_s": [round(x, 4) for s in states for x in s["restore_s"]],
            },
        }
    finally:
        bare.close()
        engine.close()
        llm.close()
    report["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    report["wall_s"] = round(time.perf_counter() - wall, 1)
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--model", default=None, help="default: make_model.py's cached model")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--gen", type=int, default=64, help="tokens per measurement")
    parser.add_argument("--prompt", type=int, default=32, help="prompt tokens per tab")
    parser.add_argument("--repeat", type=int, default=3, help="alternating rounds")
    parser.add_argument("--n-ctx", type=int, default=2048, help="the model was trained on 2048")
    parser.add_argument("--state-tokens", type=int, default=2000)
    parser.add_argument("--state-repeat", type=int, default=2, help="re-processing runs")
    parser.add_argument("--restores", type=int, default=3, help="restores per re-processing")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)

    # Only the JSON goes to stdout: anything else printed on fd 1 (by llama.cpp or
    # llama-cpp-python) is sent to stderr while the benchmark runs.
    sys.stdout.flush()
    real_stdout = os.dup(1)
    os.dup2(2, 1)
    try:
        report = run(args)
    finally:
        sys.stdout.flush()
        os.dup2(real_stdout, 1)
        os.close(real_stdout)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
