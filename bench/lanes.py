"""Writers and readers on DynamoDB tables through easeoff, with boto3 as applications
use it (standard retry mode), for a fixed time; prints each group's items per second
and the errors its callers saw.

  lanes.py URL --seconds S GROUP [GROUP...]

GROUP is KIND:TABLE:THREADS, KIND one of
  put   PutItem, a new partition key each time
  get   GetItem of one of 100 keys
  hot   PutItem, always the same partition key ("hot")
  mixed PutItem, a new partition key each time; every fifth item 8 KB, the rest small

--retry-mode picks botocore's retry mode (standard by default; adaptive is its own
client-side rate limiter).
"""
import argparse
import collections
import itertools
import json
import threading
import time

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError


def client(url, threads, mode="standard"):
    return boto3.client(
        "dynamodb",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id="k",
        aws_secret_access_key="s",
        config=Config(
            retries={"mode": mode},
            max_pool_connections=threads,
            read_timeout=60,
        ),
    )


# 8,000 bytes of value: with its name and the key, 8 write units (8 KiB rounded up).
BIG = "x" * 8000


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--retry-mode", default="standard")
    ap.add_argument("groups", nargs="+")
    args = ap.parse_args()

    groups = []
    for spec in args.groups:
        kind, table, threads = spec.split(":")
        groups.append((spec, kind, table, int(threads)))
    total = sum(g[3] for g in groups)
    ok = collections.Counter()
    errors = collections.defaultdict(collections.Counter)
    lock = threading.Lock()
    counter = itertools.count()
    barrier = threading.Barrier(total + 1)
    stop = [0.0]

    def work(spec, kind, table, c):
        barrier.wait()
        done = 0
        while time.monotonic() < stop[0]:
            n = next(counter)
            try:
                if kind == "put":
                    c.put_item(TableName=table, Item={"pk": {"S": f"k{n}"}, "v": {"S": "x"}})
                elif kind == "mixed":
                    big = n % 5 == 4
                    c.put_item(TableName=table, Item={"pk": {"S": f"k{n}"}, "v": {"S": BIG if big else "x"}})
                elif kind == "hot":
                    c.put_item(TableName=table, Item={"pk": {"S": "hot"}, "v": {"S": str(n)}})
                else:
                    c.get_item(TableName=table, Key={"pk": {"S": f"k{n % 100}"}})
                if time.monotonic() <= stop[0]:
                    done += 1
            except ClientError as e:
                with lock:
                    errors[spec][e.response["Error"]["Code"]] += 1
            except Exception as e:
                with lock:
                    errors[spec][type(e).__name__] += 1
        with lock:
            ok[spec] += done

    threads = []
    for spec, kind, table, n in groups:
        c = client(args.url, n, args.retry_mode)
        for _ in range(n):
            threads.append(threading.Thread(target=work, args=(spec, kind, table, c)))
    for t in threads:
        t.start()
    stop[0] = time.monotonic() + args.seconds
    barrier.wait()
    stop[0] = time.monotonic() + args.seconds
    for t in threads:
        t.join()
    report = {
        spec: {
            "per_second": round(ok[spec] / args.seconds, 1),
            "errors": dict(errors[spec]),
        }
        for spec, *_ in groups
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
