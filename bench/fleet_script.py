"""What the fleet's sync script alone costs Redis, without any sidecar: the script of
src/fleet/store.rs at each git revision given (the working tree for "."), loaded into a
fresh redis-server whose lanes already hold MEMBERS entries each, then called CALLS
times with LANES lanes a call (the first five busy), one call in flight on each of
CONNS connections. Prints Redis's CPU per call and per lane (INFO used_cpu_sys +
used_cpu_user) and what it spent per command (INFO commandstats), the revisions
alternated run by run.

  fleet_script.py [--revs "main ."] [--members 1000] [--lanes 10] [--calls 20000]
                  [--conns 50] [--runs 3] [--redis-prefix "nice -n -10 taskset -c 0"]

Needs redis-server on PATH; talks to it over a socket of its own (RESP), no client
library.
"""

import argparse
import random
import re
import shlex
import socket
import subprocess
import sys
import time


def encode(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


class Conn:
    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.file = self.sock.makefile("rb")

    def read(self):
        line = self.file.readline()
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            return RuntimeError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self.file.read(n + 2)[:-2].decode()
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self.read() for _ in range(n)]
        raise RuntimeError("unexpected reply %r" % line)

    def send(self, *args):
        self.sock.sendall(encode(*args))

    def cmd(self, *args):
        self.send(*args)
        reply = self.read()
        if isinstance(reply, RuntimeError):
            raise reply
        return reply


def script_at(rev):
    if rev == ".":
        text = open("src/fleet/store.rs").read()
    else:
        text = subprocess.run(["git", "show", rev + ":src/fleet/store.rs"],
                              check=True, capture_output=True, text=True).stdout
    return re.search(r'const SYNC: &str = r"\n(.*?)\n";', text, re.S).group(1)


def info(conn, section):
    out = {}
    for line in conn.cmd("INFO", section).split("\r\n"):
        if ":" in line:
            k, v = line.split(":", 1)
            out[k] = v
    return out


def commandstats(conn):
    stats = {}
    for k, v in info(conn, "commandstats").items():
        if k.startswith("cmdstat_"):
            f = dict(x.split("=") for x in v.split(","))
            stats[k[8:]] = (int(f["calls"]), int(f["usec"]))
    return stats


def run(port, script, args):
    key = lambda lane: "easeoff:{cost:up:t%d}:state" % lane
    admin = Conn(port)
    admin.cmd("FLUSHALL")
    sha = admin.cmd("SCRIPT", "LOAD", script)
    hour = 3_600_000

    def call(member, lanes):
        argv = ["EVALSHA", sha, len(lanes)] + [key(l) for l in lanes]
        # A member TTL of an hour: no entry expires, so no call rewrites a summary
        # but the first of each lane; what is measured is the sync of a lane.
        argv += ["m%d" % member, hour, 12 * hour, 500, 250]
        for lane in lanes:
            argv += ["1 0" if lane < 5 else "0 0", "0", "10000", "1", ""]
        return argv

    for member in range(args.members):
        admin.send(*call(member, list(range(0, 25))))
        admin.send(*call(member, list(range(25, 50))))
        admin.read()
        admin.read()
    conns = [Conn(port) for _ in range(args.conns)]
    rng = random.Random(1)
    stats0, cpu0 = commandstats(admin), info(admin, "cpu")
    sent = 0
    while sent < args.calls:
        for c in conns:
            idle = rng.sample(range(5, 50), max(0, args.lanes - 5))
            c.send(*call(rng.randrange(args.members), list(range(min(5, args.lanes))) + idle))
        for c in conns:
            reply = c.read()
            if isinstance(reply, RuntimeError):
                raise reply
        sent += len(conns)
    stats1, cpu1 = commandstats(admin), info(admin, "cpu")
    used = lambda c: float(c["used_cpu_sys"]) + float(c["used_cpu_user"])
    cpu = used(cpu1) - used(cpu0)
    parts = []
    for name, (calls, usec) in stats1.items():
        calls0, usec0 = stats0.get(name, (0, 0))
        if calls > calls0 and name != "info":
            parts.append("%s %.2f a call %.2f us" % (name, (calls - calls0) / sent,
                                                     (usec - usec0) / (calls - calls0)))
    return "%.1f us redis cpu per call, %.2f us per lane; %s" % (
        1e6 * cpu / sent, 1e6 * cpu / sent / args.lanes, ", ".join(parts))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--revs", default="main .")
    p.add_argument("--members", type=int, default=1000)
    p.add_argument("--lanes", type=int, default=10)
    p.add_argument("--calls", type=int, default=20000)
    p.add_argument("--conns", type=int, default=50)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--redis-prefix", default="nice -n -10")
    args = p.parse_args()
    scripts = [(rev, script_at(rev)) for rev in args.revs.split()]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    redis = subprocess.Popen(shlex.split(args.redis_prefix) + [
        "redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
        "--appendonly", "no"], stdout=subprocess.DEVNULL)
    try:
        deadline = time.time() + 10
        while True:
            try:
                Conn(port).cmd("PING")
                break
            except OSError:
                if time.time() > deadline:
                    sys.exit("redis-server did not start")
                time.sleep(0.05)
        for _ in range(args.runs):
            for rev, script in scripts:
                print("%s: members %d, lanes %d a call: %s" % (
                    rev, args.members, args.lanes, run(port, script, args)), flush=True)
    finally:
        redis.terminate()
        redis.wait()


if __name__ == "__main__":
    main()
