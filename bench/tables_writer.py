"""DynamoDB PutItems through easeoff on many tables at once, and on one ordinary table
timed request by request: what a sidecar in front of an application with thousands of
tables sees.

  tables_writer.py URL --tables N --rate R --seconds S --measure-from T --out FILE
                   [--connections C] [--ordinary NAME] [--ordinary-connections K]

Random tables: C keep-alive HTTP/1.1 connections send R PutItems a second in all, each
to a table of N (`t0` ... `t{N-1}`): first every table once, in a shuffled order, then
tables at random. Ordinary table: K connections, each sending the next PutItem on NAME
as soon as the last is answered. After S seconds, prints one JSON line: the random
tables' requests and errors, and the ordinary table's requests, errors, p50 and p99
(ms) over the requests sent T seconds or more after the start. FILE gets the ordinary
table's times, one a line.
"""
import argparse
import asyncio
import json
import random
import time

TARGET = "DynamoDB_20120810.PutItem"


def request(host, table, key):
    body = json.dumps({"TableName": table, "Item": {"pk": {"S": key}}}).encode()
    head = (
        f"POST / HTTP/1.1\r\nHost: {host}\r\nX-Amz-Target: {TARGET}\r\n"
        "Content-Type: application/x-amz-json-1.0\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    return head + body


async def answer(reader):
    """The status of one answer, its body read; raises on a broken connection."""
    status = int((await reader.readline()).split()[1])
    length = 0
    while True:
        line = await reader.readline()
        if line in (b"\r\n", b""):
            break
        name, _, value = line.decode().partition(":")
        if name.strip().lower() == "content-length":
            length = int(value)
    await reader.readexactly(length)
    return status


class Conn:
    def __init__(self, host, port):
        self.host, self.port = host, port
        self.reader = self.writer = None

    async def send(self, table, key):
        """The answer's status, or 0 when there was none (the connection is redone)."""
        try:
            if self.writer is None:
                self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
            self.writer.write(request(self.host, table, key))
            return await asyncio.wait_for(answer(self.reader), 60)
        except (OSError, ValueError, IndexError, asyncio.IncompleteReadError, asyncio.TimeoutError):
            if self.writer is not None:
                self.writer.close()
            self.writer = None
            return 0


async def random_tables(args, host, port, stop, counts):
    names = [f"t{i}" for i in range(args.tables)]
    random.shuffle(names)
    queue = asyncio.Queue(maxsize=args.connections * 4)

    async def feed():
        start, sent = time.monotonic(), 0
        while time.monotonic() < stop:
            table = names[sent] if sent < len(names) else random.choice(names)
            await queue.put(table)
            sent += 1
            ahead = start + sent / args.rate - time.monotonic()
            if ahead > 0:
                await asyncio.sleep(ahead)
        for _ in range(args.connections):
            await queue.put(None)

    async def send():
        conn = Conn(host, port)
        while (table := await queue.get()) is not None:
            status = await conn.send(table, str(random.randrange(1 << 30)))
            counts["tables"] += 1
            counts["table_errors"] += not 200 <= status < 300

    await asyncio.gather(feed(), *(send() for _ in range(args.connections)))


async def ordinary(args, host, port, stop, measured_from, times, counts):
    conn = Conn(host, port)
    n = 0
    while time.monotonic() < stop:
        sent = time.monotonic()
        status = await conn.send(args.ordinary, str(n))
        n += 1
        if sent >= measured_from:
            times.append(1000 * (time.monotonic() - sent))
            counts["ordinary"] += 1
            counts["ordinary_errors"] += not 200 <= status < 300


def percentile(xs, p):
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(p * len(xs)))], 2) if xs else None


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("--tables", type=int, required=True)
    ap.add_argument("--rate", type=float, required=True)
    ap.add_argument("--seconds", type=float, required=True)
    ap.add_argument("--measure-from", type=float, default=0)
    ap.add_argument("--connections", type=int, default=16)
    ap.add_argument("--ordinary", default="orders")
    ap.add_argument("--ordinary-connections", type=int, default=2)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    hostport = args.url.split("//", 1)[-1].rstrip("/")
    host, port = hostport.rsplit(":", 1)
    start = time.monotonic()
    stop, measured_from = start + args.seconds, start + args.measure_from
    counts = dict(tables=0, table_errors=0, ordinary=0, ordinary_errors=0)
    times = []
    await asyncio.gather(
        random_tables(args, host, int(port), stop, counts),
        *(
            ordinary(args, host, int(port), stop, measured_from, times, counts)
            for _ in range(args.ordinary_connections)
        ),
    )
    with open(args.out, "w") as f:
        f.writelines(f"{t:.3f}\n" for t in times)
    counts.update(p50_ms=percentile(times, 0.5), p99_ms=percentile(times, 0.99))
    print(json.dumps(counts))


if __name__ == "__main__":
    asyncio.run(main())
