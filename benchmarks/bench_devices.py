"""CPU only against CPU + an RPC device on loopback: the same model, the same greedy reply.

Starts ``llamadesk rpc-worker`` on 127.0.0.1 (a free port) and runs ``llamadesk run --json``
with every layer on the CPU and with ``--gpu-layers N`` on the worker, alternating, and
prints JSON: prompt and generation speed of each and their ratios (the loopback worker
computes on this machine's CPU, so the ratio is the cost of the RPC round trips). Needs a
llama-cpp-python with the RPC backend (the README's install command). Load from other
programs changes both figures: ``/proc/loadavg`` is printed with them.

With ``--llama-server`` it also runs llama.cpp's own ``llama-server --rpc`` (built from the
vendored sources with ``-DGGML_RPC=ON`` by ``python -m tests.support.peers``) on the
same worker, model, split, threads and prompt, and prints LlamaDesk's speed over its
(``vs_llama_server``; goal >= 0.95). Both figures are the engines' own timings of the
same work (the prompt once, then ``--n-gen`` greedy tokens).

    .venv/bin/python benchmarks/bench_devices.py [--model M.gguf] [--gpu-layers all] [--runs 3]
        [--llama-server [PATH]]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.devices.conftest import cli_env, rpc_backend_missing, start_worker  # noqa: E402
from tests.support import peers  # noqa: E402


def _run(model: Path, n_gen: int, extra: list[str]) -> dict[str, Any]:
    prompt = PROMPT
    done = subprocess.run(
        [
            *(sys.executable, "-m", "app", "run", str(model), prompt, "--raw", "--json"),
            *("-n", str(n_gen), "--temp", "0", "-c", "2048", *extra),
        ],
        capture_output=True,
        text=True,
        env=cli_env(),
        cwd=ROOT,
        check=True,
    )
    data = json.loads(done.stdout)
    t = data["timings"]
    return {
        "prompt_tps": t["prompt_tokens"] / max(1e-9, t["prompt_ms"] / 1000),
        "gen_tps": t["gen_tokens_per_s"],
        "gen_tokens": t["generated_tokens"],
        "tokens": data["results"][0]["tokens"],
    }


PROMPT = " ".join(["the quick brown fox jumps over the lazy dog"] * 12)


def _llama_server_runs(
    binary: Path,
    model: Path,
    endpoint: str,
    gpu_layers: str,
    threads: int,
    n_gen: int,
    runs: int,
    grammar: Path | None = None,
) -> list[dict[str, Any]]:
    """``llama-server --rpc`` on the same worker: its /completion timings, ``runs`` times
    (the prompt cache off, so each run reads the whole prompt)."""
    import httpx2

    from app.engine.cpu_quirks import llama_server_flags  # the app's own AMX rule
    from benchmarks.bench_server import Server, free_port

    ngl = {"all": "999", "none": "0"}.get(gpu_layers, gpu_layers)
    port = free_port()
    argv = [str(binary), "-m", str(model), "--port", str(port), "--rpc", endpoint]
    argv += ["-ngl", ngl, "-c", "2048", "-t", str(threads), "-tb", str(threads), "--no-webui"]
    argv += ["--parallel", "1", *llama_server_flags()]
    server = Server("llama-server", argv, port, dict(cli_env()))
    out = []
    try:
        for _ in range(runs):
            body: dict[str, Any] = {
                "prompt": PROMPT,
                "n_predict": n_gen,
                "temperature": 0,
                "cache_prompt": False,
            }
            if grammar is not None:  # the same replies as LlamaDesk's run --grammar
                body["grammar"] = grammar.read_text()
            reply = httpx2.post(f"{server.url}/completion", json=body, timeout=600).json()
            t = reply["timings"]
            out.append(
                {
                    "prompt_tps": t["prompt_per_second"],
                    "gen_tps": t["predicted_per_second"],
                    "gen_tokens": t["predicted_n"],
                }
            )
    finally:
        server.close()
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", type=Path, default=None)
    parser.add_argument("--gpu-layers", default="all")
    parser.add_argument("--n-gen", type=int, default=64)
    parser.add_argument("--runs", type=int, default=3)
    # The worker computes with one thread (tests.devices.conftest.start_worker): the CPU
    # side uses as many, or the comparison measures thread counts, not the RPC hops.
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--llama-server",
        nargs="?",
        type=Path,
        const=peers.LLAMA_SERVER,
        default=None,
        metavar="PATH",
        help="also compare with llama.cpp's llama-server --rpc (default: the one "
        "python -m tests.support.peers builds)",
    )
    parser.add_argument(
        "--grammar",
        type=Path,
        default=None,
        help="a GBNF file both sides follow (a reply the tiny models cannot end early)",
    )
    args = parser.parse_args()
    reason = rpc_backend_missing()
    if reason:
        print(json.dumps({"error": reason}))
        return 1
    model = args.model
    if model is None:
        from tests.support.arch_models import write_arch_model

        model = write_arch_model(Path(tempfile.mkdtemp()) / "llama.gguf", "llama")
    worker = start_worker()
    try:
        cpu, rpc = [], []
        for _ in range(args.runs):
            threads = ["-t", str(args.threads)]
            if args.grammar is not None:
                threads += ["--grammar", str(args.grammar)]
            cpu.append(_run(model, args.n_gen, [*threads, "--gpu-layers", "none"]))
            rpc.append(
                _run(
                    model,
                    args.n_gen,
                    [*threads, "--rpc", worker.endpoint, "--gpu-layers", args.gpu_layers],
                )
            )
        peer = (
            _llama_server_runs(
                args.llama_server,
                model,
                worker.endpoint,
                args.gpu_layers,
                args.threads,
                args.n_gen,
                args.runs,
                args.grammar,
            )
            if args.llama_server is not None
            else []
        )
    finally:
        worker.stop()

    def median(rows: list[dict[str, Any]], key: str) -> float:
        values: list[float] = [r[key] for r in rows]  # the rows hold JSON
        return round(statistics.median(values), 2)

    result: dict[str, Any] = {
        "model": str(model),
        "gpu_layers": args.gpu_layers,
        "cpu": {"prompt_tps": median(cpu, "prompt_tps"), "gen_tps": median(cpu, "gen_tps")},
        "cpu_rpc": {"prompt_tps": median(rpc, "prompt_tps"), "gen_tps": median(rpc, "gen_tps")},
        "same_tokens": all(c["tokens"] == r["tokens"] for c, r in zip(cpu, rpc, strict=True)),
        "loadavg": Path("/proc/loadavg").read_text().split()[:3],
    }
    result["prompt_ratio"] = round(result["cpu_rpc"]["prompt_tps"] / result["cpu"]["prompt_tps"], 3)
    result["gen_ratio"] = round(result["cpu_rpc"]["gen_tps"] / result["cpu"]["gen_tps"], 3)
    if peer:
        theirs = {"prompt_tps": median(peer, "prompt_tps"), "gen_tps": median(peer, "gen_tps")}
        theirs["gen_tokens"] = median(peer, "gen_tokens")
        result["cpu_rpc"]["gen_tokens"] = median(rpc, "gen_tokens")
        result["llama_server_rpc"] = theirs
        result["vs_llama_server"] = {
            key: round(result["cpu_rpc"][key] / theirs[key], 3) for key in ("prompt_tps", "gen_tps")
        }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
