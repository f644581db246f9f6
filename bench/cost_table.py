"""The table of bench/dialects.sh's shift scenarios (openai-shift, anthropic-shift):
medians of the runs, per side (the SDK alone, through EASEOFF_BEFORE, through easeoff).

  python3 cost_table.py WORK SECONDS RUNS SCENARIO...

"Of the limit" is the tokens the mock accepted over what its binding bucket refilled
in the run (it starts empty): TPM for openai, input tokens for anthropic. Refusals
are the mock's 429s, per call the client made (a call's own SDK retries included)."""

import json
import statistics
import sys

work, seconds, runs, scenarios = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
# scenario -> (the mock's counter of the binding tokens, that bucket's size a minute)
limits = {
    "openai-shift": ("tokens", 140000),
    "openai-shift-blind": ("tokens", 140000),
    "anthropic-shift": ("input_tokens", 113000),
}
names = {"sdk": "client alone", "main": "through easeoff before", "easeoff": "through easeoff"}
print(f"\n{seconds} s runs from the first call, medians of {runs}; 16 workers, prompts 6x longer from 20 s")
print("| scenario | side | calls | client errors | refusals | refusals per call | of the token limit | p50 ms | p99 ms |")
print("|---|---|---|---|---|---|---|---|---|")
for scenario in scenarios:
    counter, per_minute = limits[scenario]
    for side in ["sdk", "main", "easeoff"]:
        try:
            rows = [json.loads(line) for line in open(f"{work}/{scenario}-{side}.jsonl")]
        except FileNotFoundError:
            continue
        m = lambda f: statistics.median(f(r) for r in rows)
        calls = lambda r: r["ok"] + r["errors"]
        refused = lambda r: r["mock"]["refused"]
        share = lambda r: r["mock"][counter] / (per_minute / 60 * r["elapsed"])
        print(f"| {scenario} | {names[side]} | {m(calls):.0f} | {m(lambda r: r['errors']):.0f} | {m(refused):.0f} | "
              f"{m(lambda r: refused(r) / max(1, calls(r))):.3f} | {100 * m(share):.0f} % | "
              f"{1000 * m(lambda r: r['p50']):.0f} | {1000 * m(lambda r: r['p99']):.0f} |")
        print(f"|  | (each run: refusals {[refused(r) for r in rows]}, of limit {[round(100 * share(r)) for r in rows]} %) | | | | | | | |")
