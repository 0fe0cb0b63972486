"""What the damaged-file guard adds to a model load: header checks, the child check, the cache.

For the demo model and a 150k-token vocabulary model (tests/support/big_vocab.py) it times
``read_header`` (the baseline every load already pays), the new header checks, the header
digest, a first load check (helper starting / helper warm), a cached one (from the data
folder / from memory), and ``Model()`` with and without a cached verdict. Prints JSON, in
milliseconds (best of ``--runs``). Compare the numbers with the baseline of the same run:
on a busy machine all of them grow.

    .venv/bin/python benchmarks/bench_load_check.py [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.engine import load_check, load_check_runner
from app.engine.gguf_header import read_header
from app.engine.header_checks import hparams_problem, vocabulary_problem
from app.engine.model import Model
from app.paths import demo_model_path
from tests.support.big_vocab import write_big_vocab_model


def best_ms(fn: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return round(min(times) * 1000, 2)


def once_ms(fn: Callable[[], object]) -> float:
    return best_ms(fn, 1)


def forget_all() -> None:
    load_check.forget()
    for entry in load_check.cache_dir().glob("*.json"):
        entry.unlink()


def measure(path: Path, runs: int) -> dict[str, object]:
    header = read_header(path)

    def cached_from_disk() -> None:
        load_check.forget()
        assert load_check.check(path, header).source == "disk"

    def load() -> None:
        Model(path).close()

    load_check_runner.close_helper()
    forget_all()
    first_cold = once_ms(lambda: load_check.check(path, header))
    forget_all()
    first_warm = once_ms(lambda: load_check.check(path, header))
    result: dict[str, object] = {
        "tokens": len(header.fields["tokenizer.ggml.tokens"]),
        "header_mb": round(header.header_end / 1e6, 2),
        "read_header_baseline": best_ms(lambda: read_header(path), runs),
        "vocabulary_checks": best_ms(lambda: vocabulary_problem(header, path.name), runs),
        "hparams_checks": best_ms(lambda: hparams_problem(header, path.name, "llama"), runs),
        "digest": best_ms(header.digest, runs),
        "first_check_helper_starting": first_cold,
        "first_check_helper_warm": first_warm,
        "cached_check_disk": best_ms(cached_from_disk, runs),
        "cached_check_memory": best_ms(lambda: load_check.check(path, header), runs),
        "model_load_verdict_cached": best_ms(load, max(1, runs // 2)),
    }
    forget_all()
    result["model_load_first_helper_warm"] = once_ms(load)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["LLAMADESK_HOME"] = str(Path(tmp) / "home")
        big = write_big_vocab_model(Path(tmp) / "qwen2-vocab.gguf", "qwen2")
        report = {
            "loadavg": os.getloadavg(),
            "demo": measure(demo_model_path(), args.runs),
            "qwen2_vocab": measure(big, args.runs),
        }
        load_check_runner.close_helper()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
