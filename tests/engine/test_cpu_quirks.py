"""The AMX guard: the cached verdict, the override plan, and a batch that must not crash."""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import llama_cpp
import pytest

from app.engine import cpu_quirks
from app.engine.cpu_quirks import (
    AMX_WARNING,
    CpuBufferTypes,
    Placement,
    Verdict,
    amx_verdict,
    build_overrides,
    cpu_identity,
    name_patterns,
    plan_placement,
)
from app.engine.gguf_header import TensorInfo

ROOT = Path(__file__).resolve().parents[2]

CPUINFO_AMX = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu sse2 avx2 avx512f amx_bf16 amx_tile amx_int8
"""
CPUINFO_PLAIN = CPUINFO_AMX.replace(" amx_bf16 amx_tile amx_int8", "")

Q4_0, Q8_0, Q6_K, Q4_K, F32, F16 = 2, 8, 14, 12, 0, 1


@pytest.fixture(autouse=True)
def _fresh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLAMADESK_HOME", str(tmp_path / "home"))
    monkeypatch.delenv(cpu_quirks.AMX_ENV, raising=False)
    cpu_quirks.forget_verdicts()


def _probe_counter(verdict: Verdict | None) -> tuple[list[int], object]:
    calls: list[int] = []

    def probe() -> Verdict | None:
        calls.append(1)
        return verdict

    return calls, probe


def test_verdict_is_probed_once_and_kept_in_the_data_folder(tmp_path: Path) -> None:
    identity = cpu_identity(CPUINFO_AMX, "0.3.36")
    calls, probe = _probe_counter(Verdict.CRASHES)
    assert amx_verdict(identity, probe) is Verdict.CRASHES  # type: ignore[arg-type]
    cpu_quirks.forget_verdicts()  # as a new process would: only the file remains
    assert amx_verdict(identity, probe) is Verdict.CRASHES  # type: ignore[arg-type]
    assert calls == [1]
    saved = json.loads((tmp_path / "home" / cpu_quirks.VERDICT_FILE).read_text())
    assert saved[identity.key]["verdict"] == "crashes"
    assert saved[identity.key]["cpu"] == "Intel(R) Xeon(R) Platinum 8480+"


def test_a_new_llama_cpp_version_or_cpu_checks_again() -> None:
    old = cpu_identity(CPUINFO_AMX, "0.3.36")
    new = cpu_identity(CPUINFO_AMX, "0.3.37")
    other_cpu = cpu_identity(CPUINFO_AMX.replace("8480+", "8490H"), "0.3.36")
    assert len({old.key, new.key, other_cpu.key}) == 3
    calls, probe = _probe_counter(Verdict.WORKS)
    for identity in (old, new, other_cpu, old):
        amx_verdict(identity, probe)  # type: ignore[arg-type]
    assert len(calls) == 3


def test_an_undecided_check_is_not_saved() -> None:
    identity = cpu_identity(CPUINFO_AMX, "0.3.36")
    calls, probe = _probe_counter(None)  # the child timed out
    assert amx_verdict(identity, probe) is Verdict.CRASHES  # type: ignore[arg-type]
    cpu_quirks.forget_verdicts()
    amx_verdict(identity, probe)  # type: ignore[arg-type]
    assert len(calls) == 2


def test_a_cpu_without_amx_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    plain = cpu_identity(CPUINFO_PLAIN, "0.3.36")
    assert not plain.has_amx_int8 and cpu_identity(CPUINFO_AMX).has_amx_int8
    monkeypatch.setattr(cpu_quirks, "cpu_identity", lambda: plain)
    monkeypatch.setattr(cpu_quirks, "run_probe", lambda: pytest.fail("no check without AMX"))
    params = llama_cpp.llama_model_default_params()
    assert cpu_quirks.apply_cpu_quirks(params, Path("unused.gguf")) is None
    assert params.use_extra_bufts and not params.tensor_buft_overrides
    assert cpu_quirks.llama_server_flags() == []
    # AMX flags, but a llama.cpp built without AMX (or tiles the OS refused): no check either.
    monkeypatch.setattr(cpu_quirks, "cpu_buffer_types", lambda: CpuBufferTypes(0, 2, 3, True))
    assert not cpu_quirks.amx_guard_active(cpu_identity(CPUINFO_AMX, "0.3.36"))


def test_the_environment_variable_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    amx = cpu_identity(CPUINFO_AMX, "0.3.36")
    monkeypatch.setattr(cpu_quirks, "cpu_buffer_types", lambda: CpuBufferTypes(1, 2, 3, True))
    monkeypatch.setattr(cpu_quirks, "run_probe", lambda: Verdict.WORKS)
    assert not cpu_quirks.amx_guard_active(amx)
    monkeypatch.setenv(cpu_quirks.AMX_ENV, "off")
    assert cpu_quirks.amx_guard_active(amx)
    broken = cpu_identity(CPUINFO_AMX, "0.3.37")  # not checked yet
    monkeypatch.setattr(cpu_quirks, "run_probe", lambda: Verdict.CRASHES)
    monkeypatch.setenv(cpu_quirks.AMX_ENV, "ON")
    assert not cpu_quirks.amx_guard_active(broken)
    monkeypatch.setenv(cpu_quirks.AMX_ENV, "sometimes")  # unknown: auto
    assert cpu_quirks.amx_guard_active(broken)


def _tensor(name: str, ggml_type: int, *dims: int) -> TensorInfo:
    return TensorInfo(name, dims, ggml_type, 0)


TENSORS = [
    # Only looked up by rows while output.weight (below) is there: then AMX never takes it
    # (a tied model's embedding does reach a MUL_MAT: test_a_tied_output_matrix_...).
    _tensor("token_embd.weight", Q4_0, 2048, 32000),
    _tensor("output.weight", Q6_K, 2048, 32000),  # AMX, but CPU_REPACK has no Q6_K on x86
    _tensor("blk.0.attn_q.weight", Q4_0, 2048, 2048),
    _tensor("blk.1.attn_q.weight", Q4_0, 2048, 2048),
    _tensor("blk.0.ffn_down.weight", Q4_K, 5632, 2048),
    _tensor("blk.0.attn_v.weight", Q8_0, 2048, 256),  # no Q8_0 repack on x86
    _tensor("blk.0.attn_norm.weight", F32, 2048),
    _tensor("blk.0.ffn_up.weight", Q4_0, 2048, 5640),  # 5640 % 32: AMX declines
    _tensor("blk.0.attn_k.weight", F16, 2048, 256),  # F16 stays where llama.cpp puts it
    _tensor("blk.0.ffn_gate.weight", Q4_K, 2000, 2048),  # 2000 % 256: AMX declines
]


def test_the_plan_keeps_repack_for_what_it_can_repack() -> None:
    plan = plan_placement(TENSORS, repack_available=True)
    assert plan == Placement(
        repack=("blk.0.attn_q.weight", "blk.1.attn_q.weight", "blk.0.ffn_down.weight"),
        plain=("output.weight", "blk.0.attn_v.weight"),
    )
    without = plan_placement(TENSORS, repack_available=False)
    assert without.repack == () and set(without.plain) == set(plan.repack + plan.plain)


def test_a_tied_output_matrix_is_kept_out_of_amx() -> None:
    # No output.weight: llama.cpp reads token_embd.weight in the logits' MUL_MAT too
    # (SmolLM2, Gemma 3: Q8_0), where AMX crashes on a batch of several logits rows.
    tied = [t for t in TENSORS if t.name != "output.weight"]
    tied[0] = _tensor("token_embd.weight", Q8_0, 576, 49152)
    plan = plan_placement(tied, repack_available=True)
    assert "token_embd.weight" in plan.plain  # a repack buffer cannot serve its GET_ROWS
    assert "token_embd.weight" not in plan.repack
    # With its own output matrix the embedding is only looked up by rows.
    untied = plan_placement([*tied, _tensor("output.weight", Q8_0, 576, 49152)], True)
    assert "token_embd.weight" not in untied.plain + untied.repack
    assert "output.weight" in untied.plain


def test_patterns_match_exactly_the_planned_names() -> None:
    import re

    names = [f"blk.{i}.attn_q.weight" for i in range(12)] + ["output.weight"]
    patterns = name_patterns(names)
    assert len(patterns) == 2  # one per tensor kind, not one per tensor
    all_names = [f"blk.{i}.{k}.weight" for i in range(40) for k in ("attn_q", "attn_qkv")]
    all_names += ["output.weight", "output_norm.weight", "blk.1.attn_q.weight.bias"]
    matched = {n for n in all_names if any(re.search(p, n) for p in patterns)}
    assert matched == set(names)


def test_the_override_array_is_null_terminated_and_points_at_the_buffer_types() -> None:
    plan = plan_placement(TENSORS, repack_available=True)
    built = build_overrides(plan, CpuBufferTypes(amx=11, repack=22, plain=33, avx2=True))
    rows = [(e.pattern, e.buft) for e in built.array]
    assert rows[-1] == (None, None)
    assert sorted(rows[:-1]) == sorted(
        [
            (rb"^blk\.(0|1)\.attn_q\.weight$", 22),
            (rb"^blk\.(0)\.ffn_down\.weight$", 22),
            (rb"^output\.weight$", 33),
            (rb"^blk\.(0)\.attn_v\.weight$", 33),
        ]
    )


_ENGINE_SCRIPT = textwrap.dedent(
    """
    import logging, sys, tempfile
    from pathlib import Path
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(message)s")
    from app.engine import ContextSettings, Engine
    from app.engine.cpu_quirks import quantize_q4_0, write_probe_model
    folder = Path(tempfile.mkdtemp())
    # Tied (the embedding computes the logits) and a logits row for every token of the
    # batch: the scheduler's shape that crashed AMX on SmolLM2 (issue 27).
    f32 = write_probe_model(folder / "f32.gguf", n_layer=2, tied=True)
    q4 = folder / "q4_0.gguf"
    assert quantize_q4_0(f32, q4)
    settings = ContextSettings(n_ctx=128, n_batch=32, n_ubatch=32, n_seq_max=1,
                               n_threads=2, n_threads_batch=2)
    if "--force-guard" in sys.argv:  # the override path, on any CPU
        from app.engine import cpu_quirks
        cpu_quirks.amx_guard_active = lambda identity=None: True
    with Engine.open(q4, settings) as engine:
        if "--force-guard" in sys.argv:
            assert engine.model._cpu_quirks is not None
        import llama_cpp
        import numpy as np
        ctx = engine.context.handle
        batch = llama_cpp.llama_batch_init(16, 0, 1)
        for i in range(16):  # a batch of 16 with 16 logits rows
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = 3 + i, i, 1
            batch.seq_id[i][0], batch.logits[i] = 0, True
        batch.n_tokens = 16
        assert llama_cpp.llama_decode(ctx, batch) == 0
        n_vocab = engine.model.n_vocab
        logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits(ctx), (16 * n_vocab,))
        assert np.isfinite(logits).all() and logits.std() > 0
        print("decoded", len(logits) // n_vocab, "rows", flush=True)
    """
)


def _engine_batch(env_amx: str | None, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, LLAMADESK_HOME=str(home), PYTHONPATH=str(ROOT))
    env.pop(cpu_quirks.AMX_ENV, None)
    if env_amx is not None:
        env[cpu_quirks.AMX_ENV] = env_amx
    return subprocess.run(
        [sys.executable, "-c", _ENGINE_SCRIPT, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _machine_has_amx() -> bool:
    return cpu_identity().has_amx_int8 and cpu_quirks.cpu_buffer_types().amx != 0


@pytest.mark.skipif(not _machine_has_amx(), reason="this CPU has no AMX int8")
def test_a_quantized_batch_decodes_through_the_engine_on_this_amx_cpu(tmp_path: Path) -> None:
    # The first load runs the real check (in its own child); a crash in the decode fails
    # the test instead of killing pytest.
    done = _engine_batch(None, tmp_path / "home")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "decoded" in done.stdout
    saved = json.loads((tmp_path / "home" / cpu_quirks.VERDICT_FILE).read_text())
    (verdict,) = [entry["verdict"] for entry in saved.values()]
    if verdict == Verdict.CRASHES.value:
        assert done.stderr.count(AMX_WARNING) == 1
        # With AMX forced on, the same batch dies in the load check's child (issue 27):
        # the load then goes without extra buffer types, and the batch decodes.
        forced = _engine_batch("on", tmp_path / "home")
        assert forced.returncode == 0, forced.stderr[-2000:]
        assert "crashed with llama.cpp's extra buffer types (SIGSEGV while decoding)" in (
            forced.stderr
        )
        assert "decoded 16 rows" in forced.stdout
    else:
        assert AMX_WARNING not in done.stderr


def test_a_batch_decodes_with_the_overrides_on_any_cpu(tmp_path: Path) -> None:
    # The guard's buffer placement (CPU_REPACK and the plain CPU buffer by override) loads
    # and decodes wherever those buffer types exist, AMX or not.
    if not cpu_quirks.cpu_buffer_types().plain:
        pytest.skip("ggml's CPU buffer types are not reachable here")
    done = _engine_batch(None, tmp_path / "home", "--force-guard")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "decoded" in done.stdout
    assert done.stderr.count(AMX_WARNING) == 1


def _quantized_probe_model(folder: Path) -> Path:
    f32 = cpu_quirks.write_probe_model(folder / "f32.gguf")
    q4 = folder / "q4_0.gguf"
    assert cpu_quirks.quantize_q4_0(f32, q4)
    return q4


def test_apply_sets_overrides_for_the_tensors_amx_would_take(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    q4 = _quantized_probe_model(tmp_path)
    monkeypatch.setattr(cpu_quirks, "amx_guard_active", lambda identity=None: True)
    monkeypatch.setattr(cpu_quirks, "cpu_buffer_types", lambda: CpuBufferTypes(1, 22, 33, True))
    params = llama_cpp.llama_model_default_params()
    kept = cpu_quirks.apply_cpu_quirks(params, q4)
    assert kept is not None and params.use_extra_bufts
    assert params.tensor_buft_overrides == ctypes.addressof(kept.array)
    # Q4_0 layers go to CPU_REPACK; the Q6_K output matrix to the plain buffer.
    assert set(kept.placement.plain) == {"output.weight"}
    assert len(kept.placement.repack) == 2 * 7
    assert "token_embd.weight" not in kept.placement.repack + kept.placement.plain
    # Tied: the embedding (Q6_K from the quantizer, as an output matrix) is the logits'
    # matrix too, so it leaves AMX as well (a plain buffer: it is also read by rows).
    tied_f32 = cpu_quirks.write_probe_model(tmp_path / "tied-f32.gguf", tied=True)
    tied_q4 = tmp_path / "tied-q4_0.gguf"
    assert cpu_quirks.quantize_q4_0(tied_f32, tied_q4)
    tied = cpu_quirks.apply_cpu_quirks(llama_cpp.llama_model_default_params(), tied_q4)
    assert tied is not None and "output.weight" not in tied.placement.plain
    assert "token_embd.weight" in tied.placement.plain
    assert "token_embd.weight" not in tied.placement.repack

    f32_params = llama_cpp.llama_model_default_params()
    assert cpu_quirks.apply_cpu_quirks(f32_params, tmp_path / "f32.gguf") is None
    assert f32_params.use_extra_bufts and not f32_params.tensor_buft_overrides

    taken = llama_cpp.llama_model_default_params()
    taken.tensor_buft_overrides = ctypes.addressof(kept.array)  # someone else's overrides
    assert cpu_quirks.apply_cpu_quirks(taken, q4) is None
    assert not taken.use_extra_bufts
