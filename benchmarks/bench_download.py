"""Download throughput: LlamaDesk's DownloadManager against curl, same file, same server.

Serves a 200 MB file from the test suite's fake Hub on 127.0.0.1 and downloads it with
the app's real client (HEAD, redirect to /cdn, GET, SHA-256 verification, move into the
library) and with ``curl -L`` of the same resolve URL. Prints JSON; the goal is a ratio of
at least 0.9.

    .venv/bin/python benchmarks/bench_download.py [--mb 200] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.hub.client import HubClient
from app.hub.download import DownloadManager, DownloadRequest
from tests.hub.fake_hub import FakeHub

REPO = "bench/Big-GGUF"
NAME = "big-Q8_0.gguf"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=200)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    if shutil.which("curl") is None:
        print(json.dumps({"error": "curl is not installed"}))
        return 1
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        os.environ["LLAMADESK_HOME"] = str(tmp / "home")
        source = tmp / NAME
        with open(source, "wb") as fh:
            block = os.urandom(1 << 20)
            fh.write(b"GGUF")
            for _ in range(args.mb):
                fh.write(block)
        size = source.stat().st_size
        hub = FakeHub().start()
        hub.add_repo(REPO)
        hub.add_file(REPO, NAME, source)
        client = HubClient(hub.url)
        url = client.url(REPO, NAME)
        request = DownloadRequest.of(REPO, client.details(REPO).entries[0])
        app_times, curl_times = [], []
        for _ in range(args.runs):
            out = tmp / "curl.out"
            t0 = time.perf_counter()
            subprocess.run(["curl", "-sSfL", "-o", str(out), url], check=True)
            curl_times.append(time.perf_counter() - t0)
            out.unlink()

            library = tmp / "library"
            shutil.rmtree(library, ignore_errors=True)
            manager = DownloadManager(
                client, downloads_dir=tmp / "downloads", library_dir=library, progress_interval=0.25
            )
            t0 = time.perf_counter()
            job = manager.enqueue(request)
            status = manager.wait(job)
            app_times.append(time.perf_counter() - t0)
            manager.close()
            if status.state != "finished":
                print(json.dumps({"error": status.message}))
                return 1
        hub.stop()
    app_best, curl_best = min(app_times), min(curl_times)
    result = {
        "file_bytes": size,
        "runs": args.runs,
        "llamadesk_mb_s": round(size / app_best / 1e6, 1),
        "curl_mb_s": round(size / curl_best / 1e6, 1),
        "ratio": round(curl_best / app_best, 3),
        "llamadesk_includes": "HEAD + redirect + GET + SHA-256 verify + move",
        "llamadesk_seconds": [round(t, 3) for t in app_times],
        "curl_seconds": [round(t, 3) for t in curl_times],
        "goal_ratio": 0.9,
    }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
