"""One side of bench/dialects.sh: WORKERS threads of a vendor's client offering RATE
calls/s in total for SECONDS, measured from the first call, against BASE_URL.

  python dialects.py VENDOR BASE_URL WORKERS RATE SECONDS [INSTANCE]

openai     the real `openai` SDK, chat.completions.create (a 24-character prompt and
           max_tokens 4: 10 tokens as OpenAI counts them); its own retries on (2).
anthropic  the real `anthropic` SDK, messages.create (the same prompt, max_tokens 4);
           its own retries on (2).
github     a careful GitHub client on httpx, as GitHub's guide asks: GET /user; on a
           403 or 429 with retry-after it waits that long, on one with
           x-ratelimit-remaining 0 until x-ratelimit-reset, and retries, 3 times at
           most. INSTANCE goes out as x-bench-instance (the mock counts primary-limit
           refusals by it).
plain      a careful client of a plain HTTP API on httpx: GET /; on a 429 it waits its
           Retry-After (whole or decimal seconds) when there is one, else 50 ms, and
           retries, 3 times at most.

MODEL names the model (openai). PROMPT=N makes the prompt N characters (24 by default) and MAX_TOKENS=M its max_tokens
(4); SHIFT=S:F makes it F times longer from S seconds after the first call on.

Prints one JSON line: calls that succeeded; client errors (calls that raised after the
client's own retries); p50 and p99 of the successful calls' own latency (one client
call, retries inside it included); and p50 and p99 per work item: a worker whose call
fails calls again for the same item at once, and the item's time runs from its first
call to its success, so that a client which fails fast is charged for its failures.
"""

import json
import sys
import threading
import time

vendor, base_url = sys.argv[1], sys.argv[2]
workers, rate, seconds = int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
instance = sys.argv[6] if len(sys.argv) > 6 else "-"
import os

chars = int(os.environ.get("PROMPT", "24"))
max_tokens = int(os.environ.get("MAX_TOKENS", "4"))
shift_at, shift_by = (float(x) for x in os.environ.get("SHIFT", "0:1").split(":"))
text = ("Say ok. Nothing else, pls" * (1 + chars // 24))[:chars]
prompts = [[{"role": "user", "content": text}], [{"role": "user", "content": (text * int(shift_by))}]]


def prompt_now() -> list:
    return prompts[1 if shift_at and time.monotonic() - start >= shift_at else 0]


if vendor == "openai":
    import openai

    client = openai.OpenAI(base_url=base_url + "/v1", api_key="bench", timeout=60.0)
    Error = openai.OpenAIError

    def call() -> None:
        client.chat.completions.create(model=os.environ.get("MODEL", "gpt-4o-mini"), messages=prompt_now(), max_tokens=max_tokens)

elif vendor == "anthropic":
    import anthropic

    client = anthropic.Anthropic(base_url=base_url, api_key="bench", timeout=60.0)
    Error = anthropic.AnthropicError

    def call() -> None:
        client.messages.create(model="claude-3-5-haiku-latest", messages=prompt_now(), max_tokens=max_tokens)

elif vendor == "plain":
    import httpx

    client = httpx.Client(base_url=base_url, timeout=60.0, headers={"x-bench-instance": instance})

    class Error(Exception):
        pass

    def call() -> None:
        for attempt in range(4):
            r = client.get("/")
            if r.status_code < 400:
                return
            if r.status_code != 429 or attempt == 3:
                raise Error(f"{r.status_code}: {r.text[:80]}")
            time.sleep(float(r.headers["retry-after"]) if "retry-after" in r.headers else 0.05)

else:
    import httpx

    client = httpx.Client(base_url=base_url, timeout=60.0, headers={"x-bench-instance": instance})

    class Error(Exception):
        pass

    def call() -> None:
        for attempt in range(4):
            r = client.get("/user", headers={"accept": "application/vnd.github+json"})
            if r.status_code < 400:
                return
            wait = None
            if r.status_code in (403, 429):
                if "retry-after" in r.headers:
                    wait = float(r.headers["retry-after"])
                elif r.headers.get("x-ratelimit-remaining") == "0":
                    wait = max(0.0, float(r.headers.get("x-ratelimit-reset", 0)) - time.time())
            if wait is None or attempt == 3:
                raise Error(f"{r.status_code}: {r.text[:80]}")
            time.sleep(wait)


lock = threading.Lock()
ok, errors, latencies, items = 0, 0, [], []
start = time.monotonic()
end = start + seconds


def worker(index: int) -> None:
    global ok, errors
    spacing = workers / rate
    due = start + index * spacing / workers
    item_began = None
    while True:
        now = time.monotonic()
        if due > now:
            time.sleep(due - now)
        if time.monotonic() >= end:
            return
        began = time.monotonic()
        item_began = item_began or began
        try:
            call()
            good = True
        except Error:
            good = False
        done = time.monotonic()
        with lock:
            if good:
                ok += 1
                latencies.append(done - began)
                items.append(done - item_began)
                item_began = None
            else:
                errors += 1
        # An open loop: the next call is due on its schedule, or at once if late.
        due = max(due + spacing, done if done - began > spacing else due + spacing)


threads = [threading.Thread(target=worker, args=(i,)) for i in range(workers)]
for t in threads:
    t.start()
for t in threads:
    t.join()
elapsed = time.monotonic() - start


def pct(values: list, p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(p * len(values)))] if values else 0.0


print(json.dumps({
    "ok": ok, "errors": errors, "elapsed": elapsed,
    "p50": pct(latencies, 0.5), "p99": pct(latencies, 0.99),
    "item_p50": pct(items, 0.5), "item_p99": pct(items, 0.99),
}))
