"""The table's per-second series from bench/fleet.sh's samples of the mock, and how
fast it reached capacity. Python's standard library only.

  fleet_series.py SAMPLES CAPACITY SECONDS [T0 LATENCY_FILE...]

SAMPLES has one line per sample (about four a second): seconds since the writers
started, then the mock's accepted and throttled counts so far, and optionally member
1's pacing interval (ms). Prints the accepted/throttled count of each second (and
member 1's interval at its end), when the first throttle came, how long after it the
table reached 0.95 of CAPACITY for good (every later second at or above it), and the
lowest second from 5 s after the first throttle on.

With T0 (when the writers started, seconds since the epoch) and the writers' files
(bench/latency.py's: send time, milliseconds taken, status per request), each second's
accepted count is the writers' 2xx answers that came in it, timed by the writers
themselves: a sample of the mock is timed only once curl has returned, which on a busy
host is tens of milliseconds late, enough to move a few requests between seconds.
"""
import sys


def read(path):
    rows, intervals = [], []
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) in (3, 4):
                rows.append(tuple(float(p) for p in parts[:3]))
                intervals.append(float(parts[3]) if len(parts) == 4 else None)
    return rows, intervals


def at(rows, t, column):
    """The counter in COLUMN at time T, linear between the samples around it."""
    for (t0, *a), (t1, *b) in zip(rows, rows[1:]):
        if t0 <= t <= t1:
            w = (t - t0) / (t1 - t0) if t1 > t0 else 0.0
            return a[column] + w * (b[column] - a[column])
    return rows[-1][column + 1] if t > rows[-1][0] else rows[0][column + 1]


def answered(t0, paths, seconds):
    """The 2xx answers of the writers' files in each second from T0."""
    counts = [0] * seconds
    for path in paths:
        with open(path) as f:
            for line in f:
                parts = line.split()
                if len(parts) != 3 or not 200 <= int(parts[2]) < 300:
                    continue
                s = int(float(parts[0]) + float(parts[1]) / 1000 - t0)
                if 0 <= s < seconds:
                    counts[s] += 1
    return counts


def main():
    rows, intervals = read(sys.argv[1])
    capacity, seconds = float(sys.argv[2]), int(float(sys.argv[3]))
    if len(rows) < 2:
        print("     too few samples of the mock")
        return
    bins = []
    for s in range(seconds):
        ok = at(rows, s + 1, 0) - at(rows, s, 0)
        th = at(rows, s + 1, 1) - at(rows, s, 1)
        bins.append((ok, th))
    if len(sys.argv) > 5:
        counts = answered(float(sys.argv[4]), sys.argv[5:], seconds)
        bins = [(ok, th) for ok, (_, th) in zip(counts, bins)]
    print("     per second (accepted/throttled): " + " ".join(
        f"{s + 1}:{ok:.0f}/{th:.0f}" for s, (ok, th) in enumerate(bins)))
    if all(i is not None for i in intervals):
        timed = list(zip((t for t, *_ in rows), intervals))
        ends = [next((i for t, i in reversed(timed) if t <= s + 1), 0.0) for s in range(seconds)]
        print("     member 1's interval (ms) at each second's end: " + " ".join(
            f"{s + 1}:{i:.2f}" for s, i in enumerate(ends)))
    first = next((t for t, _, th in rows if th > rows[0][2]), None)
    if first is None:
        print("     no throttle")
        return
    # The second that holds the first throttle, then the first second after which every
    # second reaches 0.95 of capacity.
    start = int(first)
    good = [ok >= 0.95 * capacity for ok, _ in bins]
    settled = next((s for s in range(start, seconds) if all(good[s:])), None)
    after = [ok for ok, _ in bins[start + 5:]] if start + 5 < seconds else []
    low = min(after) / capacity if after else float("nan")
    took = "never" if settled is None else f"{max(0, settled - start)} s"
    print(f"     first throttle at {first:.2f} s; >= 0.95 of capacity for good {took} after it; "
          f"lowest second from 5 s after it on: {low:.2f} of capacity")


main()
