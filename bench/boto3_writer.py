"""Closed-loop boto3 writers, the DynamoDB application a sidecar fronts: N threads,
each with its own boto3 client on URL (endpoint_url), PutItem after PutItem on one
table for S seconds, every call timed. Writes the lines `latency.py run` writes (when
the call was made, seconds since the epoch; how long it took in ms, boto3's own
retries included; its status: 200, the HTTP status of the error boto3 gave up on, or
0 for no answer) and prints `ok N errors N` at the end.

  boto3_writer.py URL --seconds S [--threads N] [--retry-mode standard]
                  [--start-at EPOCH] --out FILE

--start-at: the threads make their clients, then wait for this time (seconds since
the epoch) to send their first requests, so that writers in many processes, each
taking a second or more to import boto3, start together. S counts from the launch.

Needs boto3 (the e2e virtualenv has it: EASEOFF_E2E_VENV/bin/python).
"""
import argparse
import threading
import time
import uuid

import boto3
import botocore.config
import botocore.exceptions

import latency  # bench/latency.py: the same threads and the same report


def run(args):
    stop = time.monotonic() + args.seconds
    lock = threading.Lock()
    out = open(args.out, "w", buffering=1)
    config = botocore.config.Config(
        retries={"mode": args.retry_mode}, connect_timeout=5, read_timeout=60
    )

    def writer():
        # A client per thread, as the boto3 docs advise for threads.
        client = boto3.session.Session().client(
            "dynamodb",
            endpoint_url=args.url,
            region_name="us-east-1",
            aws_access_key_id="bench",
            aws_secret_access_key="bench",
            config=config,
        )
        if args.start_at:
            time.sleep(max(0.0, args.start_at - time.time()))
        while time.monotonic() < stop:
            sent = time.time()
            began = time.monotonic()
            try:
                client.put_item(
                    TableName=args.table,
                    Item={"pk": {"S": uuid.uuid4().hex}, "v": {"N": "1"}},
                )
                status = 200
            except botocore.exceptions.ClientError as error:
                status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
            except botocore.exceptions.BotoCoreError:
                status = 0
            took = (time.monotonic() - began) * 1000
            # Line by line: a writer still in a call when the run ends is killed, and
            # what it timed so far must be in FILE.
            with lock:
                out.write(f"{sent:.6f} {took:.3f} {status}\n")

    latency.run_threads(writer, args.threads)
    out.close()
    latency.report(args.out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("--seconds", type=float, required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--table", default="bench")
    ap.add_argument("--retry-mode", default="standard", choices=["legacy", "standard", "adaptive"])
    ap.add_argument("--start-at", type=float, default=0.0)
    ap.add_argument("--out", required=True)
    run(ap.parse_args())


if __name__ == "__main__":
    main()
