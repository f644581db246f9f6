"""An upstream that rate-limits as OpenAI, Anthropic or GitHub document it, for
bench/dialects.sh. Standard library only; HTTP/1.1 with keep-alive, one thread a
connection.

  python3 bench/vendor_mock.py STYLE PORT [key=value ...]

openai     RPM and TPM token buckets, each holding a minute's worth and refilled
           continuously (rpm=, tpm=). A request costs its prompt's tokens (characters
           / 4) plus its max_tokens, debited from the TPM bucket when it is accepted, as
           OpenAI estimates it. Every answer carries x-ratelimit-{limit,remaining,reset}-
           {requests,tokens}, the resets as Go durations until the bucket is full again;
           a 429 carries retry-after-ms and a rounded-up retry-after, and names the
           bucket that refused.
anthropic  requests, input-tokens and output-tokens buckets (rpm=, itpm=, otpm=),
           continuously refilled; anthropic-ratelimit-{requests,tokens,input-tokens,
           output-tokens}-{limit,remaining,reset} on every answer (RFC 3339 resets;
           tokens- is the tighter of the two token buckets);
           429 rate_limit_error with retry-after; one 529 overloaded_error in
           overload_every= requests (0: none), which takes no capacity.
github     a primary quota of limit= requests per window= seconds (5000 per 3600 by
           default), the window starting at the first request; x-ratelimit-{limit,
           remaining,used,reset,resource} on every answer (reset in epoch seconds). A
           spent window answers 403 "API rate limit exceeded" with remaining 0. A
           secondary limit of points= requests per minute (0: none), a bucket refilled
           continuously, answers 403 "You have exceeded a secondary rate limit" with
           retry-after. GET /forbidden answers a permission 403.

fill= is how full the buckets start (1: an idle account; 0: one at its limit).
models=NAME:TPM,... (openai) gives each named model buckets of its own (that TPM,
rpm= requests), as OpenAI limits each model apart; other models share the default.
quota_headers=0 (openai) leaves the x-ratelimit-* headers out: an API that only says
retry-after when it refuses.
GET /__counts answers the counts so far as JSON: ok, refused (429 and primary or
secondary 403), overloaded (529), primary refusals by x-bench-instance and window, and
the tokens accepted (openai: as its TPM counts them; anthropic: input and output).
"""

import json
import math
import sys
import threading
import time
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

style, port = sys.argv[1], int(sys.argv[2])
raw = dict(a.split("=", 1) for a in sys.argv[3:])
models_opt = raw.pop("models", "")
opts = {k: float(v) for k, v in raw.items()}
lock = threading.Lock()
counts = {"ok": 0, "refused": 0, "overloaded": 0, "primary": {}, "seen": 0, "tokens": 0, "input_tokens": 0, "output_tokens": 0}


class Bucket:
    """Holds `size`, refilled at size per `period` seconds, continuously."""

    def __init__(self, size: float, period: float = 60.0):
        self.size, self.rate, self.at = size, size / period, time.monotonic()
        self.level = size * opts.get("fill", 1.0)

    def advance(self) -> None:
        now = time.monotonic()
        self.level = min(self.size, self.level + (now - self.at) * self.rate)
        self.at = now

    def take(self, cost: float) -> float:
        """0 when `cost` was taken; else the seconds until it could be."""
        self.advance()
        if self.level >= cost:
            self.level -= cost
            return 0.0
        return (cost - self.level) / self.rate

    def full_in(self) -> float:
        return (self.size - self.level) / self.rate


def go_duration(s: float) -> str:
    """As Go prints a time.Duration: 12ms, 1.5s, 6m0s."""
    if s < 1:
        return f"{max(1, round(s * 1000))}ms"
    if s < 60:
        return f"{s:.3f}".rstrip("0").rstrip(".") + "s"
    return f"{int(s // 60)}m{s % 60:.3f}".rstrip("0").rstrip(".") + "s"


def rfc3339(s: float) -> str:
    return datetime.fromtimestamp(time.time() + s, timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


if style == "openai":
    buckets = {"requests": Bucket(opts.get("rpm", 6000)), "tokens": Bucket(opts.get("tpm", 12000))}
elif style == "anthropic":
    buckets = {
        "requests": Bucket(opts.get("rpm", 1200)),
        "input-tokens": Bucket(opts.get("itpm", 400000)),
        "output-tokens": Bucket(opts.get("otpm", 80000)),
    }
else:
    buckets = {"secondary": Bucket(opts["points"])} if opts.get("points", 900) else {}
window = {"limit": int(opts.get("limit", 5000)), "length": opts.get("window", 3600), "start": None, "used": 0}


per_model = {
    name: {"requests": Bucket(opts.get("rpm", 6000)), "tokens": Bucket(float(tpm))}
    for name, tpm in (m.split(":") for m in models_opt.split(",") if m)
}


def openai(body: dict) -> tuple[int, dict, dict]:
    buckets = per_model.get(body.get("model"), globals()["buckets"])
    prompt = sum(len(str(m.get("content", ""))) for m in body.get("messages", []))
    cost = {"requests": 1, "tokens": math.ceil(prompt / 4) + int(body.get("max_tokens") or 16)}
    wait, refused = 0.0, None
    for name in ("requests", "tokens"):
        buckets[name].advance()
        need = (cost[name] - buckets[name].level) / buckets[name].rate
        if need > wait:
            wait, refused = need, name
    if refused is None:
        for name, b in buckets.items():
            b.take(cost[name])
        counts["tokens"] += cost["tokens"]
    headers = {}
    for name, b in buckets.items():
        headers[f"x-ratelimit-limit-{name}"] = str(int(b.size))
        headers[f"x-ratelimit-remaining-{name}"] = str(int(b.level))
        headers[f"x-ratelimit-reset-{name}"] = go_duration(b.full_in())
    if not opts.get("quota_headers", 1):
        headers = {}
    if refused:
        headers["retry-after-ms"] = str(math.ceil(wait * 1000))
        headers["retry-after"] = str(math.ceil(wait))
        per = "requests per min (RPM)" if refused == "requests" else "tokens per min (TPM)"
        message = f"Rate limit reached for gpt-4o-mini on {per}: Limit {int(buckets[refused].size)}. Please try again in {wait:.3f}s."
        return 429, headers, {"error": {"message": message, "type": refused, "param": None, "code": "rate_limit_exceeded"}}
    answer = {
        "id": "chatcmpl-bench", "object": "chat.completion", "created": int(time.time()), "model": "gpt-4o-mini",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": cost["tokens"] - int(body.get("max_tokens") or 16), "completion_tokens": 1, "total_tokens": cost["tokens"]},
    }
    return 200, headers, answer


def anthropic(body: dict) -> tuple[int, dict, dict]:
    every = int(opts.get("overload_every", 40))
    if every and counts["seen"] % every == 0:
        return 529, {}, {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    prompt = sum(len(str(m.get("content", ""))) for m in body.get("messages", []))
    cost = {"requests": 1, "input-tokens": math.ceil(prompt / 4), "output-tokens": int(body.get("max_tokens") or 0)}
    wait = 0.0
    for name, b in buckets.items():
        b.advance()
        wait = max(wait, (cost[name] - b.level) / b.rate)
    if wait <= 0:
        for name, b in buckets.items():
            b.take(cost[name])
        counts["input_tokens"] += cost["input-tokens"]
        counts["output_tokens"] += cost["output-tokens"]
    headers = {}
    for name, b in buckets.items():
        headers[f"anthropic-ratelimit-{name}-limit"] = str(int(b.size))
        headers[f"anthropic-ratelimit-{name}-remaining"] = str(int(b.level))
        headers[f"anthropic-ratelimit-{name}-reset"] = rfc3339(b.full_in())
    tokens = [buckets["input-tokens"], buckets["output-tokens"]]
    tight = min(tokens, key=lambda b: b.level / b.size)
    headers["anthropic-ratelimit-tokens-limit"] = str(int(tight.size))
    headers["anthropic-ratelimit-tokens-remaining"] = str(int(tight.level))
    headers["anthropic-ratelimit-tokens-reset"] = rfc3339(tight.full_in())
    if wait > 0:
        headers["retry-after"] = str(math.ceil(wait))
        return 429, headers, {"type": "error", "error": {"type": "rate_limit_error", "message": "Number of request tokens has exceeded your per-minute rate limit"}}
    answer = {
        "id": "msg_bench", "type": "message", "role": "assistant", "model": "claude-3-5-haiku-latest",
        "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn", "stop_sequence": None,
        "usage": {"input_tokens": cost["input-tokens"], "output_tokens": 1},
    }
    return 200, headers, answer


def github(path: str, instance: str) -> tuple[int, dict, dict]:
    now = time.time()
    if path.startswith("/forbidden"):
        return 403, {}, {"message": "Resource not accessible by integration", "documentation_url": "https://docs.github.com/rest"}
    if window["start"] is None or now >= window["start"] + window["length"]:
        window["start"], window["used"] = now, 0
    reset = math.ceil(window["start"] + window["length"])
    headers = lambda: {
        "x-ratelimit-limit": str(window["limit"]),
        "x-ratelimit-remaining": str(window["limit"] - window["used"]),
        "x-ratelimit-used": str(window["used"]),
        "x-ratelimit-reset": str(reset),
        "x-ratelimit-resource": "core",
    }
    if window["used"] >= window["limit"]:
        key = f"{instance}@{reset}"
        counts["primary"][key] = counts["primary"].get(key, 0) + 1
        return 403, headers(), {"message": "API rate limit exceeded for user ID 1.", "documentation_url": "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api"}
    if "secondary" in buckets:
        wait = buckets["secondary"].take(1)
        if wait > 0:
            h = headers()
            h["retry-after"] = str(math.ceil(wait))
            return 403, h, {"message": "You have exceeded a secondary rate limit. Please wait a few minutes before you try again.", "documentation_url": "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits"}
    window["used"] += 1
    return 200, headers(), {"login": "octocat", "id": 1}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        if self.path == "/__counts":
            with lock:
                self.send(200, {}, counts)
            return
        self.handle_call({})

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            body = {}
        self.handle_call(body)

    def handle_call(self, body: dict) -> None:
        with lock:
            counts["seen"] += 1
            if style == "openai":
                code, headers, answer = openai(body)
            elif style == "anthropic":
                code, headers, answer = anthropic(body)
            else:
                code, headers, answer = github(self.path, self.headers.get("x-bench-instance", "-"))
            first_at = counts.setdefault("first_at", time.monotonic())
            key = "ok" if code == 200 else "overloaded" if code == 529 else "refused" if code == 429 or "retry-after" in headers or headers.get("x-ratelimit-remaining") == "0" else "ok"
            counts[key] += 1
            if key == "refused":
                counts.setdefault("refused_at", []).append(round(time.monotonic() - first_at, 2))
        self.send(code, headers, answer)

    def send(self, code: int, headers: dict, answer: dict) -> None:
        data = json.dumps(answer).encode()
        self.send_response(code)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)


server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
server.daemon_threads = True
server.serve_forever()
