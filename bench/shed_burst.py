"""A shed burst seen from boto3: N concurrent DynamoDB PutItem calls through easeoff in
botocore's standard retry mode (3 attempts), every attempt's send time recorded.

  shed_burst.py URL [--calls N] [--hint server|none|fixed-1s]

--hint server    botocore as shipped: it honours x-amz-retry-after (ms), capped at its
                 own backoff + 5 s
--hint none      botocore ignoring any hint (what easeoff without x-amz-retry-after gave
                 it: only Retry-After, which botocore does not read)
--hint fixed-1s  every hint read as 1000 ms (a client honouring a fixed Retry-After: 1,
                 as the JS SDK does), whatever easeoff sent

Prints successes, errors by code, and when the retries arrived (seconds after the
burst started): per-500 ms counts, the most in any 100 ms, and how many retries share
one delay to the millisecond.
"""
import argparse
import collections
import threading
import time

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError
from botocore.retries import standard


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("--calls", type=int, default=100)
    ap.add_argument("--hint", choices=["server", "none", "fixed-1s"], default="server")
    args = ap.parse_args()

    if args.hint == "none":
        standard.ExponentialBackoff._get_retry_after_delay = lambda self, ctx: None
    elif args.hint == "fixed-1s":
        standard.ExponentialBackoff._get_retry_after_delay = lambda self, ctx: 1.0

    sends = []  # (call, attempt, seconds since start)
    hints = []  # x-amz-retry-after values seen, ms
    lock = threading.Lock()
    local = threading.local()
    start = [0.0]

    def client():
        c = boto3.client(
            "dynamodb",
            endpoint_url=args.url,
            region_name="us-east-1",
            aws_access_key_id="k",
            aws_secret_access_key="s",
            config=Config(
                retries={"mode": "standard", "total_max_attempts": 3},
                max_pool_connections=args.calls,
                read_timeout=60,
            ),
        )

        def before_send(request, **_):
            local.attempt += 1
            with lock:
                sends.append((local.call, local.attempt, time.monotonic() - start[0]))

        def before_parse(response_dict, **_):
            h = response_dict["headers"].get("x-amz-retry-after")
            if h is not None:
                with lock:
                    hints.append(int(h))

        c.meta.events.register("before-send.dynamodb", before_send)
        c.meta.events.register("before-parse.dynamodb", before_parse)
        return c

    results = [None] * args.calls
    barrier = threading.Barrier(args.calls + 1)

    # One client for every call, as an application has: one retry quota (500 tokens,
    # 5 per throttle retry) for the whole burst.
    shared = client()

    def call(i):
        c = shared
        local.call, local.attempt = i, 0
        barrier.wait()
        try:
            c.put_item(TableName="t", Item={"id": {"S": str(i)}})
            results[i] = "ok"
        except ClientError as e:
            results[i] = e.response["Error"]["Code"]
        except Exception as e:  # connection errors and the like
            results[i] = type(e).__name__

    threads = [threading.Thread(target=call, args=(i,)) for i in range(args.calls)]
    for t in threads:
        t.start()
    start[0] = time.monotonic()
    barrier.wait()
    start[0] = time.monotonic()
    for t in threads:
        t.join()
    took = time.monotonic() - start[0]

    outcome = collections.Counter(results)
    print(f"hint={args.hint}: {outcome['ok']}/{args.calls} succeeded in {took:.1f} s; "
          f"failed: {dict((k, v) for k, v in outcome.items() if k != 'ok')}")
    retries = sorted(t for (_, a, t) in sends if a > 1)
    first = {c: t for (c, a, t) in sends if a == 1}
    delays = collections.Counter()
    prev = {}
    for c, a, t in sorted(sends, key=lambda s: (s[0], s[1])):
        if a > 1:
            delays[round((t - prev[c]) * 1000)] += 1
        prev[c] = t
    per_call = collections.Counter(collections.Counter(c for (c, _, _) in sends).values())
    print(f"attempts: {len(sends)} ({len(first)} first, {len(retries)} retries); "
          f"calls by attempts: {dict(sorted(per_call.items()))}")
    if retries:
        buckets = collections.Counter(int(t / 0.5) for t in retries)
        top = max(buckets) + 1
        print("retry arrivals per 500 ms from the start:")
        print("  " + " ".join(f"{buckets.get(b, 0)}" for b in range(top)))
        most = max(sum(1 for u in retries if t <= u < t + 0.1) for t in retries)
        span = retries[-1] - retries[0]
        print(f"retries in the busiest 100 ms: {most}; first to last retry: {span:.2f} s")
        same, count = delays.most_common(1)[0]
        print(f"most common retry delay: {count} of {len(retries)} retries waited {same} ms")
    if hints:
        hints.sort()
        print(f"x-amz-retry-after seen: {len(hints)}, {len(set(hints))} distinct, "
              f"min {hints[0]} ms, median {hints[len(hints) // 2]} ms, max {hints[-1]} ms")


if __name__ == "__main__":
    main()
