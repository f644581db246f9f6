"""Self-test of bench/vendor_mock.py: starts the mock on free loopback ports and checks
the behaviours it takes from the vendors' pages. Standard library only, a few seconds.

  python3 bench/vendor_mock_test.py

Exits non-zero on the first failure."""

import http.client
import json
import math
import os
import socket
import subprocess
import sys
import threading
import time

MOCK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "vendor_mock.py")
# "I", "'m", " here", ":", " 1", ",", " 2", ",", " 3", "!": 10 word pieces, 18 characters
# (characters / 4 would say 5). As OpenAI counts a chat: 3 + 1 ("user") + 10 + 3 = 17.
PROMPT = "I'm here: 1, 2, 3!"
PIECES, OPENAI_PROMPT = 10, 17


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
        self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)

    def call(self, method: str = "GET", path: str = "/", body: dict | None = None) -> tuple[int, dict, dict]:
        data = json.dumps(body).encode() if body is not None else None
        self.conn.request(method, path, body=data, headers={"content-type": "application/json"} if data else {})
        r = self.conn.getresponse()
        raw = r.read()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, json.loads(raw) if raw else {}

    def counts(self) -> dict:
        return self.call("GET", "/__counts")[2]

    def close(self) -> None:
        self.conn.close()
        self.proc.terminate()
        self.proc.wait(5)


failures = 0


def check(what: str, ok: bool, detail: object = "") -> None:
    global failures
    print(f"{'ok  ' if ok else 'FAIL'} {what}" + (f": {detail}" if detail != "" else ""))
    failures += 0 if ok else 1


def chat(max_tokens: int = 4, key: str = "max_tokens", model: str = "gpt-4o-mini") -> dict:
    return {"model": model, "messages": [{"role": "user", "content": PROMPT}], key: max_tokens}


def test_help() -> None:
    r = subprocess.run([sys.executable, MOCK, "--help"], capture_output=True, text=True, timeout=10)
    check("--help prints the docstring and exits 0", r.returncode == 0 and "platform.openai.com/docs/guides/rate-limits" in r.stdout
          and "docs.anthropic.com/en/api/rate-limits" in r.stdout and "rfc9110#section-10.2.3" in r.stdout, r.returncode)


def test_openai() -> None:
    m = Mock("openai", "rpm=6000", "tpm=22800", "fill=0")
    try:
        code, h, body = m.call("POST", "/v1/chat/completions", chat())
        check("openai fill=0: the first call is refused", code == 429 and body["error"]["code"] == "rate_limit_exceeded", code)
        wait_ms = int(h.get("retry-after-ms", "0"))
        check("openai 429: retry-after-ms, and retry-after in whole seconds rounded up",
              wait_ms > 0 and h.get("retry-after") == str(math.ceil(wait_ms / 1000)), (wait_ms, h.get("retry-after")))
        time.sleep(wait_ms / 1000)
        code, h, body = m.call("POST", "/v1/chat/completions", chat())
        check("openai: admitted after retry-after-ms", code == 200, code)
        usage = body.get("usage", {})
        check("openai: usage.prompt_tokens is the word-piece count, not characters / 4",
              usage.get("prompt_tokens") == OPENAI_PROMPT and usage["prompt_tokens"] not in (math.ceil(len(PROMPT) / 4), math.ceil(len(PROMPT) / 4) + 7), usage)
        check("openai: 1 <= completion_tokens <= max_tokens", 1 <= usage.get("completion_tokens", 0) <= 4, usage)
        c = m.counts()
        check("openai /__counts: style, charged_tokens = prompt + max_tokens, every old field",
              c.get("style") == "openai" and c.get("charged_tokens") == OPENAI_PROMPT + 4 and c.get("tokens") == OPENAI_PROMPT + 4
              and all(k in c for k in ("ok", "refused", "overloaded", "primary", "seen", "input_tokens", "output_tokens")), c)
    finally:
        m.close()
    m = Mock("openai", "tpm=6000", "other=0.5")
    try:
        code, h, body = m.call("POST", "/v1/chat/completions", chat(50, "max_completion_tokens"))
        left = int(h.get("x-ratelimit-remaining-tokens", "-1"))
        check("openai: max_completion_tokens counts as max_tokens", code == 200 and 6000 - OPENAI_PROMPT - 50 <= left <= 6000 - OPENAI_PROMPT - 50 + 2, left)
        # other=0.5: the bucket refills at 50/s for us, so 67 tokens are back in 1.34 s.
        reset = h.get("x-ratelimit-reset-tokens", "")
        check("openai other=0.5: the reset is at half the refill rate", reset.endswith("s") and not reset.endswith("ms") and 1.2 <= float(reset[:-1]) <= 1.4, reset)
    finally:
        m.close()


def test_anthropic() -> None:
    m = Mock("anthropic", "rpm=1200", "itpm=400000", "otpm=80000", "overload_every=3")
    try:
        code, h, body = m.call("POST", "/v1/messages", chat(40))
        check("anthropic: admitted", code == 200, code)
        check("anthropic: usage.input_tokens is the word-piece count, not characters / 4",
              body["usage"]["input_tokens"] == PIECES != math.ceil(len(PROMPT) / 4), body["usage"])
        out = body["usage"]["output_tokens"]
        check("anthropic: 1 <= output_tokens <= max_tokens", 1 <= out <= 40, out)
        tokens = {k: v for k, v in h.items() if k.startswith("anthropic-ratelimit-") and "token" in k and k.endswith("-remaining")}
        check("anthropic: token remainings are multiples of 1000", len(tokens) == 3 and all(int(v) % 1000 == 0 for v in tokens.values()), tokens)
        check("anthropic: requests remaining exact", h.get("anthropic-ratelimit-requests-remaining") == "1199", h.get("anthropic-ratelimit-requests-remaining"))
        check("anthropic: resets in RFC 3339", h.get("anthropic-ratelimit-input-tokens-reset", "").endswith("Z"), h.get("anthropic-ratelimit-input-tokens-reset"))
        m.call("POST", "/v1/messages", chat(40))
        code, h, body = m.call("POST", "/v1/messages", chat(40))
        check("anthropic: the 3rd call is a 529 overloaded_error without retry-after",
              code == 529 and body["error"]["type"] == "overloaded_error" and "retry-after" not in h, (code, h))
        c = m.counts()
        check("anthropic /__counts: charged_tokens = input + actual output, output credited back",
              c["style"] == "anthropic" and c["charged_tokens"] == 2 * (PIECES + out) and c["output_tokens"] == 2 * out and c["overloaded"] == 1, c)
    finally:
        m.close()
    m = Mock("anthropic", "fill=0")
    try:
        code, h, body = m.call("POST", "/v1/messages", chat(4))
        check("anthropic fill=0: 429 rate_limit_error with whole-second retry-after",
              code == 429 and body["error"]["type"] == "rate_limit_error" and h.get("retry-after", "").isdigit(), (code, h.get("retry-after")))
    finally:
        m.close()


def test_plain() -> None:
    m = Mock("plain", "rate=20", "tick=0.05", "retry_after=whole", "fill=0")
    try:
        code, h, _ = m.call()
        check("plain whole: 429 with Retry-After: 1 when empty", code == 429 and h.get("retry-after") == "1", (code, h.get("retry-after")))
        began = time.monotonic()
        while time.monotonic() - began < 0.2:
            code, _, body = m.call("DELETE", "/any/path")
            if code == 200:
                break
            time.sleep(0.01)
        took = time.monotonic() - began
        check("plain: admitted again within 0.1 s, any method and path", code == 200 and body == {"ok": True} and took < 0.1, f"{took * 1000:.0f} ms")
    finally:
        m.close()
    for mode, want in (("exact", lambda v: v is not None and 0 < float(v) <= 0.05 and "." in v), ("none", lambda v: v is None)):
        m = Mock("plain", f"retry_after={mode}", "fill=0")
        try:
            code, h, _ = m.call()
            check(f"plain {mode}: Retry-After {h.get('retry-after')}", code == 429 and want(h.get("retry-after")), h.get("retry-after"))
            c = m.counts()
            check(f"plain {mode}: counted as refused", c["refused"] == 1 and c["style"] == "plain", c)
        finally:
            m.close()


def test_github() -> None:
    m = Mock("github", "points=10")
    try:
        code, h, _ = m.call("POST", "/repos/o/r/issues", {"title": "t"})
        check("github: POST admitted, primary used 1", code == 200 and h.get("x-ratelimit-used") == "1", code)
        got = [m.call("GET", "/user")[0] for _ in range(6)]
        check("github: a POST costs 5 points (5 GETs fit in the 10, the 6th does not)", got[:5] == [200] * 5 and got[5] == 403, got)
        code, h, body = m.call("GET", "/user")
        check("github: secondary 403 with retry-after", code == 403 and "secondary" in body["message"] and "retry-after" in h, h.get("retry-after"))
    finally:
        m.close()
    m = Mock("github", "points=0", "create_per_min=1")
    try:
        got = [m.call(*c)[0] for c in (("POST", "/gists", {}), ("GET", "/user", None), ("PATCH", "/gists/1", {}))]
        check("github create_per_min=1: one content-creating request a minute, reads free", got == [200, 200, 403], got)
    finally:
        m.close()


def github_together(port: int, calls: list[dict], stagger: float = 0.03) -> list[tuple[int, dict, dict]]:
    """GET /user once per entry of `calls` (its headers), each on a connection of its
    own, started `stagger` seconds apart, all in flight together; in start order."""
    out = [None] * len(calls)

    def one(i: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", "/user", headers=calls[i])
        r = conn.getresponse()
        raw = r.read()
        out[i] = (r.status, {k.lower(): v for k, v in r.getheaders()}, json.loads(raw) if raw else {})
        conn.close()

    threads = []
    for i in range(len(calls)):
        threads.append(threading.Thread(target=one, args=(i,)))
        threads[-1].start()
        time.sleep(stagger)
    for t in threads:
        t.join()
    return out


def test_github_concurrent() -> None:
    m = Mock("github", "points=0", "concurrent=3", "latency=0.4")
    try:
        token = {"authorization": "token a"}
        got = github_together(m.port, [token] * 5)
        codes = [g[0] for g in got]
        check("github concurrent=3 latency=0.4: three in flight, the 4th and 5th refused", codes == [200, 200, 200, 403, 403], codes)
        code, h, body = got[3]
        check("github concurrency refusal: the secondary-limit message, no retry-after by default, x-ratelimit-remaining above 0",
              "secondary rate limit" in body["message"] and body["documentation_url"].endswith("#about-secondary-rate-limits")
              and "retry-after" not in h and int(h.get("x-ratelimit-remaining", "0")) > 0, (body, h.get("retry-after")))
        began = time.monotonic()
        code, _, _ = m.call("GET", "/user")
        took = time.monotonic() - began
        check("github latency=0.4: an admitted call takes 0.4 s", code == 200 and 0.38 <= took <= 0.6, f"{took:.3f} s")
        c = m.counts()
        check("github /__counts: 2 concurrency refusals counted as refused, in_flight_max 3 for the token",
              c["concurrent_refused"] == 2 and c["refused"] == 2 and c["ok"] == 4 and c["in_flight_max"].get("token a") == 3
              and c["in_flight_max_total"] == 3, c)
        # The token's three calls of 0.4 s: 1.2 call-seconds; the call without a token
        # is another identity ("-").
        check("github /__counts: in_flight_seconds integrates the calls in flight", 1.18 <= c["in_flight_seconds"]["token a"] <= 1.35
              and 0.39 <= c["in_flight_seconds"]["-"] <= 0.5
              and abs(c["mean_in_flight"]["token a"] - c["in_flight_seconds"]["token a"] / c["wall"]) < 0.05, c["in_flight_seconds"])
        got = github_together(m.port, [{"authorization": "token a"}] * 3 + [{"authorization": "token b"}] * 3)
        check("github concurrent_key=authorization: each token has its own 3", [g[0] for g in got] == [200] * 6, [g[0] for g in got])
        check("github /__counts: in_flight_max_total sums the identities", m.counts()["in_flight_max_total"] == 6, m.counts()["in_flight_max_total"])
    finally:
        m.close()
    m = Mock("github", "points=0", "concurrent=2", "latency=0.4", "concurrent_key=instance", "concurrent_status=429", "concurrent_retry_after=7")
    try:
        got = github_together(m.port, [{"authorization": "token a", "x-bench-instance": "x"}] * 2 + [{"authorization": "token a", "x-bench-instance": "y"}] * 2
                              + [{"authorization": "token b", "x-bench-instance": "x"}])
        codes = [g[0] for g in got]
        check("github concurrent_key=instance: x-bench-instance is the identity, whatever the token", codes == [200, 200, 200, 200, 429], codes)
        check("github concurrent_status=429 concurrent_retry_after=7: 429 with retry-after: 7", got[4][1].get("retry-after") == "7", got[4][1].get("retry-after"))
    finally:
        m.close()
    m = Mock("github", "points=10")
    try:
        c = m.counts()
        check("github without concurrent=: nothing refused for concurrency, counters present",
              c["concurrent_refused"] == 0 and c["in_flight_max_total"] == 0, c)
        got = github_together(m.port, [{}] * 12, stagger=0)
        check("github without concurrent=: 12 at once all pass the concurrency check, the points limit still refuses",
              sorted(g[0] for g in got) == [200] * 10 + [403] * 2, [g[0] for g in got])
    finally:
        m.close()


began = time.monotonic()
test_help()
test_openai()
test_anthropic()
test_plain()
test_github()
test_github_concurrent()
print(f"{'all passed' if not failures else f'{failures} failed'} in {time.monotonic() - began:.1f} s")
sys.exit(1 if failures else 0)
