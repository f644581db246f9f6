#!/usr/bin/env python3
"""Fair queueing between the tenants of one lane, measured from the first request.

Each scenario starts a mock upstream (below), easeoff in front of it (a release
binary, `run --config`), and tenants of workers calling through it for SECONDS; RUNS
rounds; prints medians. Standard library only.

  python3 bench/fairness.py [--seconds 30] [--runs 3] [--bin target/release/easeoff]
                            [--before OLD_BINARY] [--scenarios priority,weights,...]

The mock grants what a continuously refilled token bucket allows (RATE units a
second, at most one second of them banked: the shape OpenAI's and Anthropic's rate
limit pages describe, "replenished continuously"), and past it answers 429 with
`Retry-After` in decimal seconds, the time until the request would fit. It charges
each request its own way, never easeoff's: 1 a call, or in `tokens` mode the prompt's
characters / 4 rounded up plus `max_tokens` (OpenAI's rate-limits guide counts the
prompt and max_tokens against TPM), and answers a chat completion whose `usage`
states that charge. It counts what it granted and refused per `x-tenant`.

Scenarios (the goals are issue 52's acceptance):
  priority  20/s; batch: 15 workers flat out; web: a call every 0.5 s with
            `x-priority: 1`. Goal: web p99 <= 0.3 s, the lane >= 0.9 of 20/s, 0 errors.
  weights   20/s; heavy (weight 3) and light (weight 1), 8 workers each flat out.
            Goal: heavy's share 0.75 +- 0.05, 0 errors.
  maxmin    20/s; 8 tenants of weight 1: t1 a call a second, t2 two a second, t3..t8
            4 workers each flat out. Max-min fair: t1 1/s, t2 2/s, the rest 17/6 each.
            Goal: every share within 0.05 of the fair one.
  cost      tokens: 20,000 a second; two tenants flat out (6 workers each), `big`'s
            prompts 6x `small`'s (1,200 against 200 tokens a call). Goal: equal token
            shares (0.5 +- 0.05), not equal calls.
  overload  20/s, `[upstream.queue] max_wait = "1s"`; heavy offers 55 calls a second
            (one thread a call), light 5 (under its 10/s share). Goal: easeoff's sheds
            (answers with x-easeoff-reason) fall on heavy; light sees none.

Sides: `easeoff` (--bin, with `[upstream.fairness]`) and, with --before, `before`: an
older binary with the same config less the fairness table (one FIFO queue).
"""

import argparse
import http.client
import json
import math
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Bucket:
    """A token bucket refilled continuously at `rate` a second, holding at most
    `burst`; starts full."""

    def __init__(self, rate, burst, now=time.monotonic):
        self.rate, self.burst, self.now = rate, burst, now
        self.level, self.at = burst, now()
        self.lock = threading.Lock()

    def take(self, cost):
        """Takes `cost` and returns 0, or returns the seconds until it would fit."""
        with self.lock:
            t = self.now()
            self.level = min(self.burst, self.level + (t - self.at) * self.rate)
            self.at = t
            if self.level >= cost:
                self.level -= cost
                return 0.0
            return (cost - self.level) / self.rate


def charge(body, mode):
    """What the mock charges a request: 1, or its prompt's characters / 4 rounded up
    plus max_tokens."""
    if mode != "tokens":
        return 1
    try:
        request = json.loads(body or b"{}")
    except ValueError:
        return 1
    chars = sum(len(str(m.get("content", ""))) for m in request.get("messages", []))
    return math.ceil(chars / 4) + int(request.get("max_tokens", 0))


def mock(rate, mode):
    """Starts the mock on a free loopback port; returns (server, port, counts)."""
    bucket = Bucket(rate, rate)
    counts = {}
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_GET(self):
            with lock:
                body = json.dumps(counts).encode()
            self.answer(200, body, {})

        def do_POST(self):
            length = int(self.headers.get("content-length", 0))
            body = self.rfile.read(length) if length else b""
            tenant = self.headers.get("x-tenant", "")
            cost = charge(body, mode)
            wait = bucket.take(cost)
            with lock:
                c = counts.setdefault(tenant, {"granted": 0, "refused": 0, "units": 0})
                if wait > 0:
                    c["refused"] += 1
                else:
                    c["granted"] += 1
                    c["units"] += cost
            if wait > 0:
                error = {"error": {"message": "Rate limit reached", "type": "rate_limit"}}
                self.answer(429, json.dumps(error).encode(), {"retry-after": f"{wait:.3f}"})
                return
            usage = {"prompt_tokens": cost, "completion_tokens": 0, "total_tokens": cost}
            answer = {
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                             "finish_reason": "stop"}],
                "usage": usage,
            }
            self.answer(200, json.dumps(answer).encode(), {})

        def answer(self, status, body, headers):
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            for k, v in headers.items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, server.server_address[1], counts


def max_min(capacity, demands):
    """Water-filling: each demand gets what it asks, up to an equal split of what
    the smaller ones left (None asks for everything)."""
    fair = {}
    left, open_ = capacity, dict(demands)
    while open_:
        share = left / len(open_)
        small = {k: d for k, d in open_.items() if d is not None and d <= share}
        if not small:
            for k in open_:
                fair[k] = share
            break
        for k, d in small.items():
            fair[k] = d
            left -= d
            del open_[k]
    return fair


class Tenant:
    """`workers` threads calling flat out, or (with `every`) one call each `every`
    seconds on a schedule; `open_loop`: a thread a call, never waiting for answers."""

    def __init__(self, name, workers=1, every=None, priority=None, prompt=400,
                 open_loop=False):
        self.name, self.workers, self.every = name, workers, every
        self.priority, self.prompt, self.open_loop = priority, prompt, open_loop
        self.calls = []  # (latency, status, shed)
        self.lock = threading.Lock()

    def body(self):
        return json.dumps({"model": "m", "max_tokens": 100,
                           "messages": [{"role": "user", "content": "x" * self.prompt}]})

    def call(self, port):
        headers = {"content-type": "application/json", "x-tenant": self.name}
        if self.priority is not None:
            headers["x-priority"] = str(self.priority)
        start = time.monotonic()
        status, shed = 0, False
        for _ in range(4):
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                conn.request("POST", "/v1/chat/completions", self.body(), headers)
                r = conn.getresponse()
                r.read()
                status, shed = r.status, r.getheader("x-easeoff-reason") is not None
                conn.close()
            except OSError:
                status = 0
            # A plain client's retry: honour Retry-After, a few times.
            if status != 429 or shed:
                break
            time.sleep(min(float(r.getheader("retry-after") or 1), 5))
        with self.lock:
            self.calls.append((time.monotonic() - start, status, shed))

    def run(self, port, until):
        threads = []
        if self.open_loop:
            def drive():
                calls, t = [], time.monotonic()
                while t < until:
                    th = threading.Thread(target=self.call, args=(port,), daemon=True)
                    th.start()
                    calls.append(th)
                    t += self.every
                    time.sleep(max(0.0, t - time.monotonic()))
                for th in calls:
                    th.join()

            th = threading.Thread(target=drive, daemon=True)
            th.start()
            return [th]

        def loop():
            due = time.monotonic()
            while time.monotonic() < until:
                self.call(port)
                if self.every:
                    due += self.every
                    time.sleep(max(0.0, due - time.monotonic()))

        for _ in range(self.workers):
            th = threading.Thread(target=loop, daemon=True)
            th.start()
            threads.append(th)
        return threads


SCENARIOS = {
    "priority": dict(rate=20, mode="requests", tenants=lambda: [
        Tenant("batch", workers=15), Tenant("web", every=0.5, priority=1)]),
    "weights": dict(rate=20, mode="requests", weights={"heavy": 3}, tenants=lambda: [
        Tenant("heavy", workers=8), Tenant("light", workers=8)]),
    "maxmin": dict(rate=20, mode="requests", tenants=lambda: [
        Tenant("t1", every=1.0), Tenant("t2", every=0.5)]
        + [Tenant(f"t{i}", workers=4) for i in range(3, 9)],
        demands={"t1": 1.0, "t2": 2.0, **{f"t{i}": None for i in range(3, 9)}}),
    "cost": dict(rate=20000, mode="tokens", tenants=lambda: [
        Tenant("small", workers=6, prompt=400), Tenant("big", workers=6, prompt=4400)]),
    "overload": dict(rate=20, mode="requests", queue='max_wait = "1s"', tenants=lambda: [
        Tenant("heavy", every=1 / 55, open_loop=True),
        Tenant("light", every=1 / 5, open_loop=True)]),
}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def config(scenario, mock_port, port, admin, fair):
    s = SCENARIOS[scenario]
    lines = ["[server]", f'admin_listen = "127.0.0.1:{admin}"', "", "[[upstream]]",
             'name = "api"', f'listen = "127.0.0.1:{port}"', f'url = "http://127.0.0.1:{mock_port}"']
    if s["mode"] == "tokens":
        lines += ["", "[upstream.lanes]", 'cost = "tokens"']
    if "queue" in s:
        lines += ["", "[upstream.queue]", s["queue"]]
    if fair:
        weights = ", ".join(f"{k} = {v}" for k, v in s.get("weights", {}).items())
        lines += ["", "[upstream.fairness]", 'by = "header:x-tenant"',
                  f"weights = {{ {weights} }}", 'priority = "header:x-priority"']
    return "\n".join(lines) + "\n"


def wait_port(port, proc, seconds=10):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if proc.poll() is not None:
            return False
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


def one_run(scenario, binary, fair, seconds, work):
    s = SCENARIOS[scenario]
    server, mock_port, counts = mock(s["rate"], s["mode"])
    port, admin = free_port(), free_port()
    path = os.path.join(work, f"{scenario}.toml")
    with open(path, "w") as f:
        f.write(config(scenario, mock_port, port, admin, fair))
    log = open(os.path.join(work, f"{scenario}.log"), "w")
    proc = subprocess.Popen([binary, "run", "--config", path], stdout=log, stderr=log)
    try:
        if not wait_port(port, proc):
            sys.exit(f"easeoff did not start: see {path} and its log")
        tenants = s["tenants"]()
        until = time.monotonic() + seconds
        threads = [t for tenant in tenants for t in tenant.run(port, until)]
        for t in threads:
            t.join()
    finally:
        proc.terminate()
        proc.wait()
        server.shutdown()
    return summarize(scenario, tenants, counts, seconds)


def pct(values, q):
    values = sorted(values)
    if not values:
        return float("nan")
    return values[min(len(values) - 1, math.ceil(q * len(values)) - 1)]


def summarize(scenario, tenants, counts, seconds):
    s = SCENARIOS[scenario]
    granted = {t.name: counts.get(t.name, {}).get("granted", 0) for t in tenants}
    units = {t.name: counts.get(t.name, {}).get("units", 0) for t in tenants}
    total, total_units = sum(granted.values()) or 1, sum(units.values()) or 1
    out = {"lane": sum(units.values()) / seconds / s["rate"],
           "refused": sum(c.get("refused", 0) for c in counts.values())}
    for t in tenants:
        calls = t.calls
        out[t.name] = {
            "calls": len(calls),
            "errors": sum(1 for _, st, shed in calls if st != 200 and not shed),
            "sheds": sum(1 for _, _, shed in calls if shed),
            "p50": pct([l for l, st, _ in calls if st == 200], 0.5),
            "p99": pct([l for l, st, _ in calls if st == 200], 0.99),
            "share_calls": granted[t.name] / total,
            "share_units": units[t.name] / total_units,
        }
    if "demands" in s:
        fair = max_min(s["rate"], s["demands"])
        out["maxmin_worst"] = max(abs(out[k]["share_calls"] - v / s["rate"])
                                  for k, v in fair.items())
    return out


def med(runs, *path):
    values = []
    for r in runs:
        v = r
        for p in path:
            v = v[p]
        values.append(v)
    return statistics.median(values)


def table(scenario, side, runs):
    names = [t.name for t in SCENARIOS[scenario]["tenants"]()]
    print(f"\n{scenario}, {side}: lane {med(runs, 'lane'):.3f} of its rate, "
          f"{med(runs, 'refused'):.0f} refused at the upstream"
          + (f", max-min worst {med(runs, 'maxmin_worst'):.3f}" if "maxmin_worst" in runs[0] else ""))
    print("| tenant | calls | errors | sheds | p50 s | p99 s | share of calls | share of units |")
    print("|---|---|---|---|---|---|---|---|")
    for n in names:
        print(f"| {n} | {med(runs, n, 'calls'):.0f} | {med(runs, n, 'errors'):.0f} | "
              f"{med(runs, n, 'sheds'):.0f} | {med(runs, n, 'p50'):.3f} | {med(runs, n, 'p99'):.3f} | "
              f"{med(runs, n, 'share_calls'):.3f} | {med(runs, n, 'share_units'):.3f} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--bin", default="target/release/easeoff")
    ap.add_argument("--before")
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    a = ap.parse_args()
    sides = [("easeoff", a.bin, True)] + ([("before", a.before, False)] if a.before else [])
    work = tempfile.mkdtemp(prefix="easeoff-fairness.")
    results = {}
    for scenario in a.scenarios.split(","):
        for run in range(a.runs):
            for side, binary, fair in sides:
                r = one_run(scenario, binary, fair, a.seconds, work)
                print(json.dumps({"scenario": scenario, "side": side, "run": run, **r}),
                      flush=True)
                results.setdefault((scenario, side), []).append(r)
    for (scenario, side), runs in results.items():
        table(scenario, side, runs)


if __name__ == "__main__":
    main()
