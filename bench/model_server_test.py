"""Self-test of bench/model_server.py: starts the mock on free loopback ports and checks
what it takes from TGI's and Ollama's documentation and source. Standard library only
(the `openai` SDK check runs when the bench venv has it), about ten seconds.

  python3 bench/model_server_test.py

Exits non-zero when a check fails."""

import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MOCK = os.path.join(HERE, "model_server.py")
VENV_PYTHON = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "easeoff-bench-sdks", "bin", "python")
CHAT = {"model": "m", "messages": [{"role": "user", "content": "say ok"}]}
OLLAMA_BUSY = "server busy, please try again.  maximum pending requests exceeded"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Mock:
    def __init__(self, style: str, *options: str):
        self.port = free_port()
        self.proc = subprocess.Popen([sys.executable, MOCK, style, str(self.port), *options])
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"the mock {style} {options} did not start")
                time.sleep(0.02)

    def call(self, path: str = "/v1/chat/completions", body: dict | None = CHAT, method: str = "POST") -> tuple[int, dict, dict, float]:
        """One call on a connection of its own: status, headers, body, seconds."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        began = time.monotonic()
        data = json.dumps(body).encode() if body is not None else None
        conn.request(method, path, body=data, headers={"content-type": "application/json"} if data else {})
        r = conn.getresponse()
        raw = r.read()
        took = time.monotonic() - began
        conn.close()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, json.loads(raw) if raw else {}, took

    def together(self, n: int, path: str = "/v1/chat/completions", body: dict = CHAT, stagger: float = 0.0) -> list:
        """n calls at once (each started `stagger` seconds after the previous), in start order."""
        out = [None] * n

        def one(i: int) -> None:
            out[i] = self.call(path, body)

        threads = []
        for i in range(n):
            t = threading.Thread(target=one, args=(i,))
            t.start()
            threads.append(t)
            time.sleep(stagger)
        for t in threads:
            t.join()
        return out

    def counts(self) -> dict:
        return self.call("/__counts", None, "GET")[2]

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(5)


failures = 0


def check(what: str, ok: bool, detail: object = "") -> None:
    global failures
    print(f"{'ok  ' if ok else 'FAIL'} {what}" + (f": {detail}" if detail != "" else ""))
    failures += 0 if ok else 1


def test_help() -> None:
    r = subprocess.run([sys.executable, MOCK, "--help"], capture_output=True, text=True, timeout=10)
    check("--help cites TGI's and Ollama's pages and sources", r.returncode == 0
          and "text-generation-inference/reference/launcher" in r.stdout and "router/src/infer/mod.rs" in r.stdout
          and "ollama/ollama" in r.stdout and "docs/faq.mdx" in r.stdout and "server/sched.go" in r.stdout, r.returncode)
    r = subprocess.run([sys.executable, MOCK, "tgi", "1", "slot=3"], capture_output=True, text=True, timeout=10)
    check("an unknown option is refused", r.returncode != 0 and "unknown option slot" in r.stderr, r.stderr.strip())


def test_tgi() -> None:
    m = Mock("tgi", "slots=2", "min_s=0.5", "max_s=0.5")
    try:
        got = m.together(3, stagger=0.05)
        codes = [g[0] for g in got]
        check("tgi slots=2: two of three at once run, the third is refused", codes == [200, 200, 429], codes)
        code, headers, body, took = got[2]
        check("tgi: the refusal is 429 {error: Model is overloaded, error_type: overloaded}, at once, no retry-after",
              body == {"error": "Model is overloaded", "error_type": "overloaded"} and took < 0.2 and "retry-after" not in headers
              and headers.get("content-type") == "application/json", (body, f"{took:.3f} s", headers))
        code, _, body, took = got[0]
        check("tgi: a chat.completion with usage, after min_s..max_s", code == 200 and body["object"] == "chat.completion"
              and body["usage"]["total_tokens"] == body["usage"]["prompt_tokens"] + body["usage"]["completion_tokens"]
              and 0.45 <= took <= 0.7, f"{took:.3f} s")
        c = m.counts()
        check("tgi /__counts: attempts 3, ok 2, refused 1, max_running 2, nothing waits",
              (c["attempts"], c["ok"], c["refused"], c["max_running"], c["max_waiting"]) == (3, 2, 1, 2, 0), c)
        check("tgi /__counts: busy_seconds is two calls of 0.5 s", 0.95 <= c["busy_seconds"] <= 1.15, c["busy_seconds"])
        check("tgi /__counts: busy = busy_seconds / (slots * wall)", abs(c["busy"] - c["busy_seconds"] / (2 * c["wall"])) < 0.01, c["busy"])
    finally:
        m.close()


def test_ollama() -> None:
    m = Mock("ollama", "slots=1", "queue=1", "min_s=0.4", "max_s=0.4")
    try:
        got = m.together(3, stagger=0.05)
        codes = [g[0] for g in got]
        check("ollama slots=1 queue=1: one runs, one waits, the third is refused", codes == [200, 200, 503], codes)
        check("ollama /v1: 503 wrapped as middleware/openai.go writes it, no retry-after",
              got[2][2] == {"error": {"message": OLLAMA_BUSY, "type": "api_error", "param": None, "code": None}}
              and "retry-after" not in got[2][1], got[2][2])
        check("ollama: the waiting call's latency includes its wait", 0.7 <= got[1][3] <= 1.0 and got[0][3] < 0.6,
              [f"{g[3]:.2f}" for g in got])
        got = m.together(3, path="/api/chat", stagger=0.05)
        check("ollama /api/chat: 503 {error: ErrMaxQueue's text}", [g[0] for g in got] == [200, 200, 503]
              and got[2][2] == {"error": OLLAMA_BUSY} and got[0][2].get("done") is True, got[2][2])
        c = m.counts()
        check("ollama /__counts: max_running 1, max_waiting 1, max_in_flight 2, waited about 0.35 s twice",
              (c["max_running"], c["max_waiting"], c["max_in_flight"]) == (1, 1, 2) and 0.6 <= c["wait_seconds"] <= 0.9, c)
    finally:
        m.close()
    m = Mock("ollama", "slots=2", "queue=inf", "min_s=0.3", "max_s=0.3")
    try:
        codes = [g[0] for g in m.together(8)]
        c = m.counts()
        check("ollama queue=inf: nothing refused, 2 run at once", codes == [200] * 8 and c["max_running"] == 2 and c["max_in_flight"] == 8, (codes, c["max_in_flight"]))
    finally:
        m.close()


def test_latency_and_seed() -> None:
    lengths = []
    for _ in range(2):
        m = Mock("tgi", "slots=1", "seed=7", "min_s=0", "max_s=0.02", "tokens=50")
        try:
            lengths.append([m.call()[2]["usage"]["completion_tokens"] for _ in range(12)])
        finally:
            m.close()
    check("seed=: the same output lengths in the same order", lengths[0] == lengths[1] and len(set(lengths[0])) > 3, lengths[0])
    m = Mock("tgi", "slots=1", "min_s=0.1", "max_s=0.3", "tokens=3")
    try:
        took = {}
        for _ in range(12):
            _, _, body, t = m.call()
            took.setdefault(body["usage"]["completion_tokens"], []).append(t)
        means = {n: sum(v) / len(v) for n, v in sorted(took.items())}
        want = {1: 0.1, 2: 0.2, 3: 0.3}
        check("latency is base + per_token * tokens: 0.1, 0.2, 0.3 s for 1, 2, 3 tokens",
              all(abs(means[n] - want[n]) < 0.05 for n in means) and len(means) >= 2, {n: f"{v:.3f}" for n, v in means.items()})
        _, _, body, t = m.call(body=dict(CHAT, max_tokens=1))
        check("max_tokens caps the output (and so the latency)", body["usage"]["completion_tokens"] == 1
              and body["choices"][0]["finish_reason"] in ("length", "stop") and t < 0.18, (body["usage"], f"{t:.3f}"))
    finally:
        m.close()


def test_other() -> None:
    m = Mock("tgi", "slots=3", "other=2", "min_s=0.3", "max_s=0.3")
    try:
        codes = [g[0] for g in m.together(2, stagger=0.05)]
        c = m.counts()
        check("other=2 of 3 slots: one call of ours runs, the next is refused", codes == [200, 429], codes)
        check("other=2: busy_available counts our one free slot", abs(c["busy_available"] - 3 * c["busy"]) < 0.01, (c["busy"], c["busy_available"]))
    finally:
        m.close()


def test_many_connections() -> None:
    m = Mock("tgi", "slots=200", "min_s=0.5", "max_s=0.5")
    try:
        began = time.monotonic()
        got = m.together(150)
        took = time.monotonic() - began
        c = m.counts()
        check("150 connections at once: all answered 200, 150 in flight, within 2 s",
              all(g[0] == 200 for g in got) and c["max_running"] == 150 and took < 2.0, (c["max_running"], f"{took:.2f} s"))
    finally:
        m.close()


def test_keep_alive_and_sdk() -> None:
    m = Mock("tgi", "slots=2", "min_s=0", "max_s=0.01")
    try:
        conn = http.client.HTTPConnection("127.0.0.1", m.port, timeout=5)
        for _ in range(3):
            conn.request("POST", "/v1/chat/completions", body=json.dumps(CHAT), headers={"content-type": "application/json"})
            r = conn.getresponse()
            r.read()
        check("keep-alive: three calls on one HTTP/1.1 connection", r.status == 200 and r.version == 11, r.status)
        conn.close()
        if not os.path.exists(VENV_PYTHON):
            print(f"skip the openai SDK check: no {VENV_PYTHON} (bench/concurrency.sh makes it)")
            return
        code = ("import openai,sys; c=openai.OpenAI(base_url=sys.argv[1], api_key='x');"
                "r=c.chat.completions.create(model='m', messages=[{'role':'user','content':'hi'}]);"
                "print(r.usage.completion_tokens, r.choices[0].message.content.split()[0])")
        r = subprocess.run([VENV_PYTHON, "-c", code, f"http://127.0.0.1:{m.port}/v1"], capture_output=True, text=True, timeout=30)
        check("the openai SDK parses the answer, usage included", r.returncode == 0 and r.stdout.split()[1:] == ["ok"], (r.stdout.strip(), r.stderr[-300:]))
    finally:
        m.close()


began = time.monotonic()
test_help()
test_tgi()
test_ollama()
test_latency_and_seed()
test_other()
test_many_connections()
test_keep_alive_and_sdk()
print(f"{'all passed' if not failures else f'{failures} failed'} in {time.monotonic() - began:.1f} s")
sys.exit(1 if failures else 0)
