"""The tables of bench/concurrency.sh from its JSON lines: medians of the runs, in
markdown.

  python3 concurrency_table.py WORK SECONDS RUNS SCENARIO...

Reads WORK/SCENARIO-SIDE.jsonl (one line per client and run: the client's figures,
with the mock's /__counts under "mock"). Model servers (tgi, ollama): slots busy is the
mock's busy_seconds / (slots x wall); refused is the mock's refusals over its attempts
(every call it saw, the clients' and easeoff's retries included); client errors are
calls that raised after the SDK's own retries; p50 and p99 are the successful calls'
latency as the client saw it. GitHub: calls/min are the successes of all the
scenario's clients; in flight is the mock's count for the token, at most at once and
on average over the run (its integral over the wall time), against the limit. The mock
refuses the call that would go past the limit, so its most in flight never exceeds
it: the refusals say how often the clients (or sidecars, together) tried to."""

import json
import statistics
import sys

work, seconds, runs, scenarios = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
SIDES = ["sdk", "main", "easeoff"]
NAMES = {
    "model": {"sdk": "openai SDK alone", "main": "through easeoff (before)", "easeoff": "through easeoff"},
    "github": {"sdk": "documented retry loop alone", "main": "through easeoff (before)", "easeoff": "through easeoff"},
}


def load(scenario: str, side: str) -> list[list[dict]]:
    """The runs of one side: each a list of its clients' lines."""
    try:
        lines = [json.loads(line) for line in open(f"{work}/{scenario}-{side}.jsonl") if line.strip()]
    except FileNotFoundError:
        return []
    by_run: dict[int, list] = {}
    for r in lines:
        by_run.setdefault(r["run"], []).append(r)
    return [by_run[k] for k in sorted(by_run)]


def med(runs_: list, f) -> float:
    return statistics.median(f(run) for run in runs_)


def model_table(scenario: str) -> None:
    first = next((load(scenario, s)[0][0] for s in SIDES if load(scenario, s)), None)
    if first is None:
        return
    m = first["mock"]
    queue = "" if m["style"] == "tgi" else f", {m['queue'] if m['queue'] is not None else 'unbounded'} waiting at most"
    print(f"\n{scenario}: {m['slots']} slots{queue}, {first['workers']} workers of the openai SDK; "
          f"{seconds} s from the first call, medians of {runs} runs")
    print("| side | calls | calls/s | slots busy | client errors | refused of attempts | p50 ms | p99 ms | most in flight at the server |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for side in SIDES:
        rs = load(scenario, side)
        if not rs:
            continue
        one = lambda f: med(rs, lambda run: f(run[0]))
        print(f"| {NAMES['model'][side]} | {one(lambda r: r['ok']):.0f} | {one(lambda r: r['ok'] / r['elapsed']):.1f} | "
              f"{100 * one(lambda r: r['mock']['busy']):.0f} % | {one(lambda r: r['errors']):.0f} | "
              f"{100 * one(lambda r: r['mock']['refused'] / max(1, r['mock']['attempts'])):.1f} % | "
              f"{1000 * one(lambda r: r['p50']):.0f} | {1000 * one(lambda r: r['p99']):.0f} | "
              f"{one(lambda r: r['mock']['max_in_flight']):.0f} |")


def github_table(scenario: str) -> None:
    present = [(side, load(scenario, side)) for side in SIDES]
    present = [(side, rs) for side, rs in present if rs]
    if not present:
        return
    first = present[0][1][0][0]
    limit, clients = first["limit"], len(present[0][1][0])
    counts = [r["workers"] for r in present[0][1][0]]
    each = f"{first['workers']} workers each" if len(set(counts)) == 1 else f"{', '.join(map(str, counts))} workers"
    who = f"{clients} sidecars (or clients) of {each}" if clients > 1 else f"{first['workers']} workers"
    print(f"\n{scenario}: at most {limit} in flight for one token, {who}; {seconds} s from the first call, medians of {runs} runs")
    print("| side | calls/min | of the client alone | client errors | calls abandoned | refused of attempts | most in flight at the mock | mean in flight / limit |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    per_min = lambda run: sum(60 * r["ok"] / r["elapsed"] for r in run)
    alone = next((med(rs, per_min) for side, rs in present if side == "sdk"), None)
    for side, rs in present:
        rate = med(rs, per_min)
        ratio = f"{rate / alone:.2f}" if alone else "-"
        most = [run[0]["mock"]["in_flight_max_total"] for run in rs]
        most_text = f"{statistics.median(most):.0f}" + (f" (max {max(most)})" if len(most) > 1 else "")
        print(f"| {NAMES['github'][side]} | {rate:.0f} | {ratio} | {med(rs, lambda run: sum(r['errors'] for r in run)):.0f} | "
              f"{med(rs, lambda run: sum(r['abandoned'] for r in run)):.0f} | "
              f"{100 * med(rs, lambda run: run[0]['mock']['refused'] / max(1, run[0]['mock']['seen'])):.1f} % | {most_text} | "
              f"{100 * med(rs, lambda run: sum(run[0]['mock']['mean_in_flight'].values()) / limit):.0f} % |")


for scenario in scenarios:
    (github_table if scenario.startswith("github") else model_table)(scenario)
