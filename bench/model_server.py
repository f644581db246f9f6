"""A self-hosted model server that limits how many requests it runs at once, as
Hugging Face's text-generation-inference (TGI) and Ollama do, for bench/concurrency.sh.
Written from the vendors' documentation and server source (cited below and beside the
code), never from easeoff's own code. Standard library only; HTTP/1.1 with keep-alive,
one thread a connection.

  python3 bench/model_server.py STYLE PORT [key=value ...]
  python3 bench/model_server.py --help

POST /v1/chat/completions answers an OpenAI chat.completion (with usage), so the
`openai` SDK works against it; ollama also answers its native POST /api/chat.

tgi     https://huggingface.co/docs/text-generation-inference/reference/launcher#maxconcurrentrequests
        https://github.com/huggingface/text-generation-inference/blob/db931fcf42da018a3657580c64bf2720f167f9ab/router/src/infer/mod.rs
        https://github.com/huggingface/text-generation-inference/blob/db931fcf42da018a3657580c64bf2720f167f9ab/router/src/server.rs
        slots= is --max-concurrent-requests (the launcher's default is 128: "Having a
        low limit will refuse clients requests instead of having them wait"). The
        router takes a permit with a semaphore's try_acquire before anything else and
        holds it until the generation ends; without a free permit it answers at once
        429 {"error":"Model is overloaded","error_type":"overloaded"} (InferError::
        Overloaded -> StatusCode::TOO_MANY_REQUESTS), no Retry-After, nothing queued.
ollama  https://github.com/ollama/ollama/blob/948f69330acf96a2310f1b53fdfc211731a386d8/docs/faq.mdx
        (https://docs.ollama.com/faq: "How does Ollama handle concurrent requests?",
        "How do I manage the maximum number of requests the Ollama server can queue?")
        https://github.com/ollama/ollama/blob/fb30760996871fa9460115c753afd2c60d4ab0f7/server/sched.go
        https://github.com/ollama/ollama/blob/fb30760996871fa9460115c753afd2c60d4ab0f7/server/routes.go
        https://github.com/ollama/ollama/blob/fb30760996871fa9460115c753afd2c60d4ab0f7/middleware/openai.go
        https://github.com/ollama/ollama/blob/fb30760996871fa9460115c753afd2c60d4ab0f7/openai/openai.go
        slots= is OLLAMA_NUM_PARALLEL ("the maximum number of parallel requests each
        model will process at the same time"), queue= OLLAMA_MAX_QUEUE ("the maximum
        number of requests Ollama will queue when busy before rejecting additional
        requests", default 512). A request past slots waits, first come first served
        (a semaphore of NUM_PARALLEL), so its latency grows with the queue; past
        slots + queue it is refused at once with 503 and ErrMaxQueue's text: on
        /api/chat {"error":"server busy, please try again.  maximum pending requests
        exceeded"}, on /v1/chat/completions the OpenAI-style wrapping of
        middleware/openai.go {"error":{"message":"server busy, please try again.
        maximum pending requests exceeded","type":"api_error","param":null,
        "code":null}}; no Retry-After. queue=inf never refuses.
        What the source does is narrower than the FAQ: the bound of OLLAMA_MAX_QUEUE
        is the scheduler's pending channel, which a request for a model already
        loaded skips (sched.go, getRunner: useLoadedRunner); such a request waits on
        the runner's semaphore with no bound (llm/llama_server.go). So a warm Ollama
        answers overload with latency, not 503s (queue=inf); the 503 comes while the
        scheduler is busy, e.g. loading or swapping a model. queue=N models the FAQ.

Options (key=value):
slots=8     requests run at once.
queue=512   ollama: requests that may wait for a slot (an integer or inf); tgi: none.
min_s=0.25 max_s=1.65 tokens=64  each admitted call draws an output length n, uniform
            from 1 to tokens (capped by the request's max_tokens or
            max_completion_tokens, as a model stops there), and runs base + per_token
            * n seconds, per_token = (max_s - min_s) / (tokens - 1) and base = min_s -
            per_token: 0.25 s for 1 token to 1.65 s for 64, 0.95 s on average.
seed=1      the draws come from one seeded generator, in admission order.
other=0     K slots held by traffic this client does not see (other applications on
            the same server), from the start: K of the slots are never free for us.

GET /__counts answers JSON: style, slots, queue, other; attempts (chat calls), ok
(answered 200), refused (429 or 503); busy_seconds (the integral over time of our
calls holding a slot) and wall (seconds from the first call until now), busy =
busy_seconds / (slots * wall) and busy_available = busy_seconds / ((slots - other) *
wall); max_running (ours in slots at once), max_in_flight (ours in the server at once,
running and waiting), max_waiting, mean_in_flight (its integral / wall),
wait_seconds (summed time admitted calls waited for a slot), tokens (completion
tokens summed). GET /health answers 200.
"""

import json
import math
import random
import sys
import threading
import time
from collections import deque
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

if len(sys.argv) > 1 and sys.argv[1] in ("-h", "--help", "help"):
    print(__doc__)
    sys.exit(0)
if len(sys.argv) < 3 or sys.argv[1] not in ("tgi", "ollama"):
    print("usage: model_server.py {tgi|ollama} PORT [key=value ...] (--help)", file=sys.stderr)
    sys.exit(2)

style, port = sys.argv[1], int(sys.argv[2])
raw = dict(a.split("=", 1) for a in sys.argv[3:])
known = {"slots", "queue", "min_s", "max_s", "tokens", "seed", "other"}
if set(raw) - known:
    sys.exit(f"unknown option {sorted(set(raw) - known)[0]} (known: {', '.join(sorted(known))})")
SLOTS = int(raw.get("slots", 8))
QUEUE = math.inf if raw.get("queue", "512") == "inf" else int(raw.get("queue", 512))
MIN_S, MAX_S = float(raw.get("min_s", 0.25)), float(raw.get("max_s", 1.65))
TOKENS = int(raw.get("tokens", 64))
OTHER = int(raw.get("other", 0))
if not 0 <= OTHER < SLOTS:
    sys.exit("other= is a number of slots, 0 <= K < slots")
if TOKENS < 1 or MIN_S < 0 or MAX_S < MIN_S:
    sys.exit("tokens= is at least 1 and 0 <= min_s <= max_s")
PER_TOKEN = (MAX_S - MIN_S) / (TOKENS - 1) if TOKENS > 1 else 0.0
BASE = MIN_S - PER_TOKEN
rng = random.Random(int(raw.get("seed", 1)))

# TGI: ErrorResponse { error: "Model is overloaded", error_type: "overloaded" }, 429.
TGI_OVERLOADED = {"error": "Model is overloaded", "error_type": "overloaded"}
# Ollama: ErrMaxQueue (server/sched.go, two spaces after the full stop), 503.
OLLAMA_BUSY = "server busy, please try again.  maximum pending requests exceeded"

lock = threading.Lock()
counts = {
    # queue: null when unbounded; tgi queues nothing past its slots.
    "style": style, "slots": SLOTS, "queue": 0 if style == "tgi" else None if QUEUE == math.inf else QUEUE, "other": OTHER,
    "attempts": 0, "ok": 0, "refused": 0, "busy_seconds": 0.0, "in_flight_seconds": 0.0,
    "max_running": 0, "max_in_flight": 0, "max_waiting": 0, "wait_seconds": 0.0, "tokens": 0,
}
# Our calls: holding a slot, and waiting for one (a FIFO of events, as Go's
# semaphore.Weighted serves waiters in order).
state = {"running": 0, "waiting": deque(), "since": None, "first_at": None}


def account(now: float) -> None:
    """Adds the time since the last change at the current occupancy (lock held)."""
    if state["since"] is not None:
        dt = now - state["since"]
        counts["busy_seconds"] += state["running"] * dt
        counts["in_flight_seconds"] += (state["running"] + len(state["waiting"])) * dt
    state["since"] = now


def note_peaks() -> None:
    counts["max_running"] = max(counts["max_running"], state["running"])
    counts["max_waiting"] = max(counts["max_waiting"], len(state["waiting"]))
    counts["max_in_flight"] = max(counts["max_in_flight"], state["running"] + len(state["waiting"]))


def admit() -> str | threading.Event:
    """'run' when a slot is ours now, 'refuse' when refused, else an event set when a
    slot passes to us (ollama's queue). Lock held."""
    free = SLOTS - OTHER - state["running"]
    if free > 0 and not state["waiting"]:
        state["running"] += 1
        return "run"
    if style == "tgi" or len(state["waiting"]) >= QUEUE:
        return "refuse"
    turn = threading.Event()
    state["waiting"].append(turn)
    return turn


def release() -> None:
    """Frees our slot, or hands it to the first waiter (lock held)."""
    account(time.monotonic())
    if state["waiting"]:
        state["waiting"].popleft().set()
    else:
        state["running"] -= 1


def prompt_tokens(body: dict) -> int:
    # Whitespace-separated words: the count only feeds usage, nothing here depends on it.
    text = " ".join(str(m.get("content", "")) for m in body.get("messages", []) or [] if isinstance(m, dict))
    return max(1, len(text.split()))


def cap_of(body: dict) -> int:
    for key in ("max_tokens", "max_completion_tokens"):
        v = body.get(key)
        if isinstance(v, int) and v > 0:
            return v
    opts = body.get("options")
    if isinstance(opts, dict) and isinstance(opts.get("num_predict"), int) and opts["num_predict"] > 0:
        return opts["num_predict"]
    return TOKENS


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # The head and the body go out in two writes: without TCP_NODELAY, Nagle's
    # algorithm holds the body until the client's delayed ACK, 40 ms on Linux.
    disable_nagle_algorithm = True

    def log_message(self, *args) -> None:
        pass

    def read_body(self) -> dict:
        length = int(self.headers.get("content-length") or 0)
        data = self.rfile.read(length) if length else b""
        try:
            body = json.loads(data or b"{}")
        except ValueError:
            body = {}
        return body if isinstance(body, dict) else {}

    def do_GET(self) -> None:
        self.read_body()
        if self.path == "/__counts":
            with lock:
                now = time.monotonic()
                account(now)
                c = dict(counts)
                wall = now - state["first_at"] if state["first_at"] is not None else 0.0
                c["wall"] = wall
                c["busy"] = c["busy_seconds"] / (SLOTS * wall) if wall else 0.0
                c["busy_available"] = c["busy_seconds"] / ((SLOTS - OTHER) * wall) if wall else 0.0
                c["mean_in_flight"] = c["in_flight_seconds"] / wall if wall else 0.0
            self.send(200, c)
        elif self.path in ("/health", "/"):
            self.send(200, {"ok": True})
        else:
            self.send(404, {"error": "not found"})

    def do_POST(self) -> None:
        body = self.read_body()
        native = style == "ollama" and self.path.startswith("/api/chat")
        if not (native or self.path.startswith("/v1/chat/completions")):
            self.send(404, {"error": "not found"})
            return
        with lock:
            now = time.monotonic()
            if state["first_at"] is None:
                state["first_at"] = now
            counts["attempts"] += 1
            account(now)
            got = admit()
            note_peaks()
            if got == "refuse":
                counts["refused"] += 1
        if got == "refuse":
            if style == "tgi":
                self.send(429, TGI_OVERLOADED)
            elif native:
                self.send(503, {"error": OLLAMA_BUSY})
            else:
                # middleware/openai.go writeError: openai.NewError(503, ...): not 400 or
                # 404, so type "api_error"; param and code null.
                self.send(503, {"error": {"message": OLLAMA_BUSY, "type": "api_error", "param": None, "code": None}})
            return
        began = time.monotonic()
        if got != "run":
            got.wait()
        with lock:
            counts["wait_seconds"] += time.monotonic() - began
            n = min(rng.randint(1, TOKENS), cap_of(body))
        time.sleep(max(0.0, BASE + PER_TOKEN * n))
        with lock:
            release()
            counts["ok"] += 1
            counts["tokens"] += n
        model = str(body.get("model") or ("tgi" if style == "tgi" else "llama3.2"))
        prompt = prompt_tokens(body)
        text = " ".join(["ok"] * n)
        capped = n == cap_of(body) and n < TOKENS
        if native:
            self.send(200, {
                "model": model, "created_at": datetime.now(timezone.utc).isoformat().replace("+00:00", "Z"),
                "message": {"role": "assistant", "content": text}, "done": True,
                "done_reason": "length" if capped else "stop",
                "total_duration": int((time.monotonic() - began) * 1e9), "prompt_eval_count": prompt, "eval_count": n,
            })
            return
        self.send(200, {
            "id": f"chatcmpl-{counts['attempts']}", "object": "chat.completion", "created": int(time.time()),
            "model": model, "system_fingerprint": f"bench-{style}",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None,
                         "finish_reason": "length" if capped else "stop"}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": n, "total_tokens": prompt + n},
        })

    def send(self, code: int, answer: dict) -> None:
        data = json.dumps(answer).encode()
        self.send_response(code)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class Server(ThreadingHTTPServer):
    # The default listen backlog of 5 drops SYNs when a hundred clients connect at
    # once, and a dropped SYN is retried a second later: that second is no latency
    # of the model's.
    request_queue_size = 1024
    daemon_threads = True


Server(("127.0.0.1", port), Handler).serve_forever()
