"""Self-test of bench/concurrency_client.py, bench/concurrency_table.py and
bench/concurrency.sh: runs the client against the mocks on free loopback ports, the
table on lines it makes, and the script for a few seconds (its sdk side). The openai
checks and the script's run need the bench venv (bench/concurrency.sh makes it:
~/.cache/easeoff-bench-sdks) and are skipped without it. About 30 seconds.

  python3 bench/concurrency_test.py

Exits non-zero when a check fails."""

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
VENV_PYTHON = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "easeoff-bench-sdks", "bin", "python")
failures = 0


def check(what: str, ok: bool, detail: object = "") -> None:
    global failures
    print(f"{'ok  ' if ok else 'FAIL'} {what}" + (f": {detail}" if detail != "" else ""))
    failures += 0 if ok else 1


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Mock:
    def __init__(self, script: str, style: str, *options: str):
        self.port = free_port()
        self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, script), style, str(self.port), *options])
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"{script} {style} {options} did not start")
                time.sleep(0.02)
        self.url = f"http://127.0.0.1:{self.port}"

    def counts(self) -> dict:
        with urllib.request.urlopen(self.url + "/__counts", timeout=5) as r:
            return json.load(r)

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(5)


def client(python: str, kind: str, url: str, workers: int, seconds: float, env: dict | None = None) -> dict:
    r = subprocess.run([python, os.path.join(HERE, "concurrency_client.py"), kind, url, str(workers), str(seconds), "t"],
                       capture_output=True, text=True, timeout=seconds + 60, env={**os.environ, **(env or {})})
    if r.returncode != 0:
        raise SystemExit(f"concurrency_client.py {kind} failed: {r.stderr[-500:]}")
    return json.loads(r.stdout)


def test_github_client() -> None:
    m = Mock("vendor_mock.py", "github", "points=0", "concurrent=3", "latency=0.2")
    try:
        out = client(sys.executable, "github", m.url, 5, 2.0)
        c = m.counts()
        check("github client, no retry-after: the 2 refused workers would wait a minute, so they stop (abandoned), the 3 others go on",
              out["abandoned"] == 2 and out["errors"] == 0 and out["waits"] == 0 and 24 <= out["ok"] <= 31, out)
        check("github client: the mock saw the token at most 3 in flight, 2 refusals", c["in_flight_max"].get("token bench") == 3
              and c["concurrent_refused"] == 2, (c["in_flight_max"], c["concurrent_refused"]))
        check("github client: elapsed ends with the run", 2.0 <= out["elapsed"] <= 2.5, out["elapsed"])
    finally:
        m.close()
    m = Mock("vendor_mock.py", "github", "points=0", "concurrent=3", "latency=0.3", "concurrent_retry_after=1")
    try:
        out = client(sys.executable, "github", m.url, 4, 2.5)
        check("github client honours retry-after: 1 (then 2: doubled while refused again)",
              out["waits"] >= 1 and out["waited"] >= 1 and out["errors"] == 0, out)
        out = client(sys.executable, "github", m.url, 4, 1.0, {"GH_RETRIES": "0"})
        check("github client GH_RETRIES=0: a refusal raises at once, named", out["errors"] >= 1
              and any("secondary rate limit" in k for k in out["errors_by"]), out["errors_by"])
    finally:
        m.close()


def test_openai_client() -> None:
    if not os.path.exists(VENV_PYTHON):
        print(f"skip the openai client: no {VENV_PYTHON}")
        return
    m = Mock("model_server.py", "tgi", "slots=1", "min_s=0.2", "max_s=0.2")
    try:
        out = client(VENV_PYTHON, "openai", m.url, 3, 2.0)
        c = m.counts()
        check("openai client: successes as the mock counts them, the SDK's retries among its attempts",
              out["ok"] >= 5 and out["ok"] == c["ok"] and c["attempts"] > c["ok"] and abs(out["p50"] - 0.2) < 0.1, (out, c["attempts"]))
        check("openai client: errors are named by class and status", all(k.startswith("RateLimitError 429") for k in out["errors_by"]), out["errors_by"])
    finally:
        m.close()


def test_table() -> None:
    work = tempfile.mkdtemp(prefix="concurrency-test.")
    model = {"style": "tgi", "slots": 8, "queue": 0, "attempts": 200, "refused": 50, "busy": 0.9, "max_in_flight": 8}
    gh = {"refused": 10, "seen": 1000, "in_flight_max_total": 100, "mean_in_flight": {"token bench": 80.0}}
    lines = {
        "tgi-sdk": [dict(ok=100, errors=20, elapsed=30.0, p50=1.0, p99=2.0, run=1, workers=24, limit=8, mock=model)],
        "github-concurrent-sdk": [dict(ok=6000, errors=0, abandoned=50, elapsed=30.0, run=1, workers=150, limit=100, mock=gh)],
        "github-concurrent-easeoff": [dict(ok=9000, errors=1, abandoned=0, elapsed=30.0, run=1, workers=150, limit=100, mock=dict(gh, in_flight_max_total=99))],
        "github-fleet-sdk": [dict(ok=1000, errors=0, abandoned=0, elapsed=30.0, run=1, workers=40, limit=100, mock=gh)] * 4,
    }
    for name, rows in lines.items():
        with open(os.path.join(work, f"{name}.jsonl"), "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
    r = subprocess.run([sys.executable, os.path.join(HERE, "concurrency_table.py"), work, "30", "1", "tgi", "github-concurrent", "github-fleet"],
                       capture_output=True, text=True, timeout=30)
    shutil.rmtree(work)
    out = r.stdout
    shown = lambda row: (row in out, "" if row in out else out)
    check("table: tgi's row (calls, busy, errors, refused of attempts, p50, p99)",
          *shown("| openai SDK alone | 100 | 3.3 | 90 % | 20 | 25.0 % | 1000 | 2000 | 8 |"))
    check("table: github's ratio to the client alone, in flight against the limit",
          *shown("| through easeoff | 18000 | 1.50 | 1 | 0 | 1.0 % | 99 | 80 % |"))
    check("table: a fleet's calls/min are its clients' together", *shown("| documented retry loop alone | 8000 | 1.00 |"))


def test_script() -> None:
    if not os.path.exists(VENV_PYTHON):
        print(f"skip bench/concurrency.sh: no {VENV_PYTHON}")
        return
    env = dict(os.environ, SCENARIOS="tgi github-concurrent", SIDES="sdk", GH_WORKERS="15", GH_CONCURRENT="10")
    r = subprocess.run(["bash", os.path.join(HERE, "concurrency.sh"), "3", "1"], capture_output=True, text=True, timeout=120, env=env)
    good = r.returncode == 0 and "\ntgi: 8 slots" in r.stdout and "\ngithub-concurrent: at most 10 in flight" in r.stdout \
        and "| documented retry loop alone |" in r.stdout
    check("concurrency.sh SIDES=sdk, 3 s: exits 0 and prints both tables", good, "" if good else (r.returncode, r.stdout[-600:], r.stderr[-600:]))
    r = subprocess.run(["bash", os.path.join(HERE, "concurrency.sh"), "3", "1"], capture_output=True, text=True, timeout=30,
                       env=dict(env, SIDES="sdk main", EASEOFF_BEFORE="/nonexistent"))
    check("concurrency.sh: a main side without EASEOFF_BEFORE is refused before anything runs", r.returncode == 1 and "EASEOFF_BEFORE" in r.stderr, r.stderr)


began = time.monotonic()
test_github_client()
test_openai_client()
test_table()
test_script()
print(f"{'all passed' if not failures else f'{failures} failed'} in {time.monotonic() - began:.1f} s")
sys.exit(1 if failures else 0)
