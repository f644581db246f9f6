"""Closed-loop writers that time every request, and the percentiles of those times.

  latency.py run URL --seconds S [--threads N] --out FILE
  latency.py summary --window NAME:FROM:TO [--window ...] FILE [FILE...]

`run`: N threads, each with its own keep-alive HTTP/1.1 connection, send GET URL, wait
for the answer and send the next, for S seconds (as `h2load --h1 -c N -m 1` does); every
request is one line of FILE: when it was sent (seconds since the epoch), how long its
answer took (ms), and its status (0: no answer: a refused or broken connection, or
nothing within 60 s). Prints `ok N errors N` at the end (errors: any answer other
than 2xx, or none).

`summary`: for each window (FROM and TO in seconds since the epoch) the requests of
every FILE sent within it: how many, p50 and p99 of their times (ms), and errors.
"""
import argparse
import http.client
import threading
import time
import urllib.parse


def run(args):
    url = urllib.parse.urlsplit(args.url)
    path = url.path or "/"
    stop = time.monotonic() + args.seconds
    lock = threading.Lock()
    out = open(args.out, "w", buffering=1)

    def writer():
        conn = None
        lines = []
        while time.monotonic() < stop:
            if conn is None:
                conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
            sent = time.time()
            began = time.monotonic()
            try:
                conn.request("GET", path)
                response = conn.getresponse()
                response.read()
                status = response.status
                if response.will_close:
                    conn.close()
                    conn = None
            except (OSError, http.client.HTTPException):
                status = 0
                conn.close()
                conn = None
            took = (time.monotonic() - began) * 1000
            lines.append(f"{sent:.6f} {took:.3f} {status}\n")
            if len(lines) >= 64:
                with lock:
                    out.writelines(lines)
                lines = []
        with lock:
            out.writelines(lines)
        if conn is not None:
            conn.close()

    run_threads(writer, args.threads)
    out.close()
    report(args.out)


def run_threads(writer, n):
    """Runs `writer` on N threads and waits for them."""
    threads = [threading.Thread(target=writer) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def report(path):
    """Prints `ok N errors N` for the requests timed in PATH."""
    ok = errors = 0
    with open(path) as f:
        for line in f:
            if 200 <= int(line.split()[2]) < 300:
                ok += 1
            else:
                errors += 1
    print(f"ok {ok} errors {errors}")


def percentile(sorted_values, p):
    """Nearest rank: the smallest value with at least p % of the values at or below it."""
    if not sorted_values:
        return float("nan")
    rank = max(1, -(-len(sorted_values) * p // 100))
    return sorted_values[int(rank) - 1]


def summary(args):
    records = []
    for name in args.files:
        with open(name) as f:
            for line in f:
                sent, took, status = line.split()
                records.append((float(sent), float(took), int(status)))
    for window in args.window:
        name, start, end = window.split(":")
        start, end = float(start), float(end)
        inside = [r for r in records if start <= r[0] < end]
        times = sorted(r[1] for r in inside)
        errors = sum(1 for r in inside if not 200 <= r[2] < 300)
        print(
            f"{name} n {len(inside)} p50 {percentile(times, 50):.1f} "
            f"p99 {percentile(times, 99):.1f} errors {errors}"
        )


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    r.add_argument("url")
    r.add_argument("--seconds", type=float, required=True)
    r.add_argument("--threads", type=int, default=4)
    r.add_argument("--out", required=True)
    s = sub.add_parser("summary")
    s.add_argument("--window", action="append", required=True)
    s.add_argument("files", nargs="+")
    args = ap.parse_args()
    run(args) if args.command == "run" else summary(args)


if __name__ == "__main__":
    main()
