"""One client of bench/concurrency.sh: WORKERS threads, each calling in a loop (the next
call as soon as the last one returns), for SECONDS from the first call.

  python concurrency_client.py KIND BASE_URL WORKERS SECONDS [INSTANCE]

openai  the real `openai` SDK, one client shared by the threads as an application
        shares it: chat.completions.create on BASE_URL/v1, no max_tokens (the model
        server draws the output length), its own retries on (2 by default: it retries
        a 429 or 5xx after 0.5 s, then 1 s, each less up to a quarter of jitter, or
        after a retry-after of up to 60 s).
github  GitHub's documented retry loop on the standard library's http.client (httpx
        took a core of CPU for 200 calls/s, and the client's CPU is not what is
        measured), a keep-alive connection per thread: GET /user with authorization:
        token GITHUB_TOKEN (bench by default; the identity GitHub limits) and
        x-bench-instance INSTANCE. On a 403 or 429 it waits, as
        https://docs.github.com/en/rest/using-the-rest-api/rate-limits-for-the-rest-api
        ("Exceeding the rate limit") says: retry-after seconds when the header is
        there; else, with x-ratelimit-remaining 0, until x-ratelimit-reset; else, for
        a secondary-limit message, "at least one minute" (60 s). A secondary-limit
        refusal again doubles the wait ("wait for an exponentially increasing amount
        of time between retries"), and the call raises after GH_RETRIES (3) retries
        ("throw an error after a specific number of retries"). A 403 or 429 of no
        limit raises at once. A call whose next wait would end after SECONDS is
        abandoned: counted apart, neither a success nor an error, and its thread
        calls no more (it would still be waiting), so the run ends on time.

Prints one JSON line: ok (calls that succeeded), errors (calls that raised after the
client's own retries), abandoned, elapsed (seconds from the first call to the last
answer), p50 and p99 (seconds, successful calls, the client's retries inside), and
errors_by (each kind of error with its count); github adds waits (retry waits begun)
and waited (their seconds).
"""

import json
import os
import sys
import threading
import time

kind, base_url = sys.argv[1], sys.argv[2]
workers, seconds = int(sys.argv[3]), float(sys.argv[4])
instance = sys.argv[5] if len(sys.argv) > 5 else "-"
if kind not in ("openai", "github"):
    sys.exit("KIND is openai or github")


class Abandoned(Exception):
    pass


stop = threading.Event()
waits = {"n": 0, "seconds": 0.0}

if kind == "openai":
    import openai

    client = openai.OpenAI(base_url=base_url + "/v1", api_key="bench", timeout=60.0)
    Error = openai.OpenAIError

    def call() -> None:
        client.chat.completions.create(model=os.environ.get("MODEL", "bench"), messages=[{"role": "user", "content": "Say ok."}])

else:
    import http.client
    from urllib.parse import urlsplit

    retries = int(os.environ.get("GH_RETRIES", "3"))
    where = urlsplit(base_url)
    headers = {
        "authorization": f"token {os.environ.get('GITHUB_TOKEN', 'bench')}",
        "accept": "application/vnd.github+json",
        "x-bench-instance": instance,
    }
    local = threading.local()

    class Error(Exception):
        pass

    def get() -> tuple[int, dict, bytes]:
        """GET /user on this thread's connection, opened again once if it was closed."""
        for attempt in (1, 2):
            if getattr(local, "conn", None) is None:
                local.conn = http.client.HTTPConnection(where.hostname, where.port or 80, timeout=60)
            try:
                local.conn.request("GET", "/user", headers=headers)
                r = local.conn.getresponse()
                body = r.read()
                if r.getheader("connection", "").lower() == "close":
                    local.conn.close()
                    local.conn = None
                return r.status, {k.lower(): v for k, v in r.getheaders()}, body
            except (http.client.HTTPException, OSError) as e:
                local.conn.close()
                local.conn = None
                if attempt == 2:
                    raise Error(f"connection: {type(e).__name__}") from e
        raise AssertionError("unreachable")

    def call() -> None:
        secondary_refusals = 0
        while True:
            status, rh, body = get()
            if status < 400:
                return
            if status not in (403, 429):
                raise Error(f"{status}")
            try:
                message = str(json.loads(body).get("message", ""))
            except ValueError:
                message = ""
            secondary = "secondary rate limit" in message.lower()
            if "retry-after" in rh:
                wait = float(rh["retry-after"])
            elif rh.get("x-ratelimit-remaining") == "0":
                wait = max(0.0, float(rh.get("x-ratelimit-reset", "0")) - time.time())
            elif secondary:
                wait = 60.0
            else:
                raise Error(f"{status} {message[:60]}")
            if secondary:
                wait *= 2 ** secondary_refusals
                secondary_refusals += 1
                if secondary_refusals > retries:
                    raise Error(f"{status} secondary rate limit, {retries} retries spent")
            if time.monotonic() + wait >= end:
                raise Abandoned()
            with lock:
                waits["n"] += 1
                waits["seconds"] += wait
            if stop.wait(wait):
                raise Abandoned()


lock = threading.Lock()
ok, errors, abandoned, latencies, errors_by = 0, 0, 0, [], {}
start = time.monotonic()
end = start + seconds
last_answer = start


def worker() -> None:
    global ok, errors, abandoned, last_answer
    while time.monotonic() < end:
        began = time.monotonic()
        outcome, what = "ok", ""
        try:
            call()
        except Abandoned:
            outcome = "abandoned"
        except Error as e:
            outcome = "error"
            status = getattr(e, "status_code", None)
            what = f"{type(e).__name__}{f' {status}' if status else ''}" if kind == "openai" else str(e)
        done = time.monotonic()
        with lock:
            last_answer = max(last_answer, done)
            if outcome == "ok":
                ok += 1
                latencies.append(done - began)
            elif outcome == "error":
                errors += 1
                errors_by[what] = errors_by.get(what, 0) + 1
            else:
                abandoned += 1
        if outcome == "abandoned":
            return


threads = [threading.Thread(target=worker) for _ in range(workers)]
for t in threads:
    t.start()
time.sleep(max(0.0, end - time.monotonic()))
stop.set()
for t in threads:
    t.join()


def pct(values: list, p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(p * len(values)))] if values else 0.0


out = {
    "ok": ok, "errors": errors, "abandoned": abandoned, "elapsed": last_answer - start,
    "p50": pct(latencies, 0.5), "p99": pct(latencies, 0.99), "errors_by": errors_by,
}
if kind == "github":
    out.update(waits=waits["n"], waited=waits["seconds"])
print(json.dumps(out))
