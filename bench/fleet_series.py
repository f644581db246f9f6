"""The table's per-second series from bench/fleet.sh's samples of the mock, and how
fast it reached capacity. Python's standard library only.

  fleet_series.py SAMPLES CAPACITY SECONDS

SAMPLES has one line per sample (about four a second): seconds since the writers
started, then the mock's accepted and throttled counts so far. Prints the accepted/
throttled count of each second, when the first throttle came, how long after it the
table reached 0.95 of CAPACITY for good (every later second at or above it), and the
lowest second from 5 s after the first throttle on.
"""
import sys


def read(path):
    rows = []
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) == 3:
                rows.append(tuple(float(p) for p in parts))
    return rows


def at(rows, t, column):
    """The counter in COLUMN at time T, linear between the samples around it."""
    for (t0, *a), (t1, *b) in zip(rows, rows[1:]):
        if t0 <= t <= t1:
            w = (t - t0) / (t1 - t0) if t1 > t0 else 0.0
            return a[column] + w * (b[column] - a[column])
    return rows[-1][column + 1] if t > rows[-1][0] else rows[0][column + 1]


def main():
    rows = read(sys.argv[1])
    capacity, seconds = float(sys.argv[2]), int(float(sys.argv[3]))
    if len(rows) < 2:
        print("     too few samples of the mock")
        return
    bins = []
    for s in range(seconds):
        ok = at(rows, s + 1, 0) - at(rows, s, 0)
        th = at(rows, s + 1, 1) - at(rows, s, 1)
        bins.append((ok, th))
    print("     per second (accepted/throttled): " + " ".join(
        f"{s + 1}:{ok:.0f}/{th:.0f}" for s, (ok, th) in enumerate(bins)))
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
