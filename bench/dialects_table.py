"""The tables of bench/dialects.sh from its JSON lines: medians of the runs.

  python3 dialects_table.py WORK SECONDS RUNS SCENARIO...

Refusals are the mock's 429s and rate-limit 403s; 529s (overloaded, planned one in
40 requests in the anthropic scenarios) are counted apart. "Of the limit" is of what the binding bucket allows over the run: what it holds at the
start plus its refill over the elapsed time (the vendor mock's sizes, in calls)."""

import json
import math
import statistics
import sys

work, seconds, runs, scenarios = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
# scenario -> (binding calls/s, calls the binding bucket holds at the start, window s).
# shared: 600 per 30 s window, counted as 20/s over the run (a window that starts as
# the run ends is barely used). openai-other: the 18/s left to us when other traffic
# takes a tenth of the refill. A scenario not listed: the binding calls/s of
# dialects.sh's setup() (each JSON line's `binding`), its buckets empty at the start.
limits = {
    "openai": (20, 1200, None),
    "openai-dry": (20, 0, None),
    "openai-other": (18, 0, None),
    "anthropic": (20, 1200, None),
    "anthropic-dry": (20, 0, None),
    "github": (15, 900, None),
    "shared": (20, 0, None),
    "plain": (20, 0, None),
    "plain-exact": (20, 0, None),
    "plain-blind": (20, 0, None),
}
names = {"sdk": "client alone", "main": "through easeoff (before)", "easeoff": "through easeoff"}
print(f"\n{seconds} s runs from the first call, medians of {runs}; 16 workers a client offering 3x the binding limit")
print("| scenario | side | calls/s | of the limit | client errors | refusals | refusals per call | 529s | p50 ms | p99 ms | p50 ms per item | p99 ms per item |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")


def allowed(scenario: str, r: dict) -> float:
    rate, held, window = limits.get(scenario) or (r["binding"], 0, None)
    elapsed = r["elapsed"]
    if window:
        return rate * window * math.ceil(elapsed / window)
    return held + rate * elapsed


for scenario in scenarios:
    for side in ["sdk", "main", "easeoff"]:
        try:
            rows = [json.loads(line) for line in open(f"{work}/{scenario}-{side}.jsonl")]
        except FileNotFoundError:
            continue
        if scenario == "shared":
            # One line per instance: the pair's totals per run.
            runs_ = {}
            for r in rows:
                runs_.setdefault(r["run"], []).append(r)
            rows = []
            for pair in runs_.values():
                merged = dict(pair[0])
                merged["ok"] = sum(r["ok"] for r in pair)
                merged["errors"] = sum(r["errors"] for r in pair)
                # A caller still waiting for the window's reset at the end of the
                # run stretches its client's elapsed time: the shorter one counts.
                merged["elapsed"] = min(r["elapsed"] for r in pair)
                rows.append(merged)
        m = lambda f: statistics.median(f(r) for r in rows)
        refused = lambda r: r["mock"]["refused"]
        calls = lambda r: r["ok"] + r["errors"]
        print(f"| {scenario} | {names[side]} | {m(lambda r: r['ok'] / r['elapsed']):.1f} | "
              f"{100 * m(lambda r: r['ok'] / allowed(scenario, r)):.0f} % | {m(lambda r: r['errors']):.0f} | "
              f"{m(refused):.0f} | {m(lambda r: refused(r) / max(1, calls(r))):.3f} | {m(lambda r: r['mock']['overloaded']):.0f} | "
              f"{1000 * m(lambda r: r['p50']):.0f} | {1000 * m(lambda r: r['p99']):.0f} | "
              f"{1000 * m(lambda r: r['item_p50']):.0f} | {1000 * m(lambda r: r['item_p99']):.0f} |")
        if scenario == "shared":
            worst = m(lambda r: max(r["mock"]["primary"].values(), default=0))
            print(f"\nshared: most primary-limit refusals of one instance in one window, median of runs: {worst:.0f}; "
                  f"each run's: {[r['mock']['primary'] for r in rows]}")
