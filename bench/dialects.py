"""One side of bench/dialects.sh: WORKERS threads of the real `openai` or `anthropic` SDK
(VENDOR; its own retries on, as users run it) offering RATE requests/s in total for
SECONDS, measured from the first request. Prints one JSON line: calls that succeeded,
client errors (what the SDK raised after its retries), and latency percentiles."""

import json
import sys
import threading
import time

vendor, base_url = sys.argv[1], sys.argv[2]
workers, rate, seconds = int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
if vendor == "openai":
    import openai

    client = openai.OpenAI(base_url=base_url + "/v1", api_key="bench", timeout=60.0)
    Error = openai.OpenAIError
else:
    import anthropic

    client = anthropic.Anthropic(base_url=base_url, api_key="bench", timeout=60.0)
    Error = anthropic.AnthropicError
lock = threading.Lock()
ok, errors, latencies = 0, 0, []
start = time.monotonic()
end = start + seconds


def worker(index: int) -> None:
    global ok, errors
    spacing = workers / rate
    due = start + index * spacing / workers
    while True:
        now = time.monotonic()
        if due > now:
            time.sleep(due - now)
        if time.monotonic() >= end:
            return
        began = time.monotonic()
        try:
            client.models.list()
            good = True
        except Error:
            good = False
        took = time.monotonic() - began
        with lock:
            if good:
                ok += 1
                latencies.append(took)
            else:
                errors += 1
        # An open loop: the next call is due on its schedule, or at once if late.
        due = max(due + spacing, time.monotonic() if took > spacing else due + spacing)


threads = [threading.Thread(target=worker, args=(i,)) for i in range(workers)]
for t in threads:
    t.start()
for t in threads:
    t.join()
elapsed = time.monotonic() - start
latencies.sort()


def pct(p: float) -> float:
    return latencies[min(len(latencies) - 1, int(p * len(latencies)))] if latencies else 0.0


print(json.dumps({"ok": ok, "errors": errors, "elapsed": elapsed, "p50": pct(0.5), "p99": pct(0.99)}))
