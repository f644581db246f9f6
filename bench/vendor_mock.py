"""An upstream that rate-limits as OpenAI, Anthropic, GitHub or a plain HTTP API
document it, for bench/dialects.sh. Written from the vendors' published pages (cited
below and beside the code), never from easeoff's own code. Standard library only;
HTTP/1.1 with keep-alive, one thread a connection.

  python3 bench/vendor_mock.py STYLE PORT [key=value ...]
  python3 bench/vendor_mock.py --help

openai     https://platform.openai.com/docs/guides/rate-limits
           RPM and TPM token buckets, each holding a minute's worth and refilled
           continuously (rpm=, tpm=). A request is admitted when both hold its cost: 1
           request, and its prompt's tokens plus its max_tokens (or
           max_completion_tokens; 16 when neither is given), debited from the TPM
           bucket at admission, as OpenAI estimates it. Every answer carries
           x-ratelimit-{limit,remaining,reset}-{requests,tokens}, the resets as Go
           durations until the bucket is back at its full limit; a 429 carries
           retry-after-ms and a rounded-up retry-after, and names the bucket that
           refused. usage.prompt_tokens is the prompt as counted below;
           usage.completion_tokens a deterministic count from 1 to max_tokens.
anthropic  https://docs.anthropic.com/en/api/rate-limits
           https://docs.anthropic.com/en/api/errors
           requests, input-tokens and output-tokens buckets (rpm=, itpm=, otpm=),
           replenished continuously (a token bucket, not fixed windows);
           anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{limit,
           remaining,reset} on every answer: the resets are the RFC 3339 time at which
           the bucket is fully replenished, token remainings are rounded to the
           nearest thousand (requests exact), and tokens- is the most restrictive of
           the token limits in effect. Output tokens are estimated from max_tokens at
           admission (max_tokens debited) and adjusted after the answer (max_tokens
           minus the actual output credited back). 429 rate_limit_error with
           retry-after in whole seconds; one 529 overloaded_error in overload_every=
           requests (0: none): an overload, not a rate limit, so it takes no capacity
           and carries neither retry-after nor rate-limit headers.
github     https://docs.github.com/en/rest/using-the-rest-api/rate-limits-for-the-rest-api
           a primary quota of limit= requests per window= seconds (5000 per 3600 by
           default), the window starting at the first request; x-ratelimit-{limit,
           remaining,used,reset,resource} on every answer (reset in epoch seconds). A
           spent window answers 403 "API rate limit exceeded" with remaining 0.
           Secondary limits, each a bucket refilled continuously, answer 403 "You have
           exceeded a secondary rate limit" with retry-after: points= points a minute
           (900 by default, 0: none), GET, HEAD and OPTIONS costing 1 point and POST,
           PATCH, PUT and DELETE 5, as the page prices REST requests; and
           create_per_min= / create_per_hour= content-creating (POST, PATCH, PUT,
           DELETE) requests a minute / an hour (0, the default: off; the page's
           figures are 80 and 500). GET /forbidden answers a permission 403.
           Concurrency ("No more than 100 concurrent requests are allowed"), with
           concurrent=N (0, the default: off; the page's figure is 100): a call that
           finds N calls of its identity in flight is refused at once with the
           secondary-limit message, 403 (concurrent_status=429 for the page's other
           status), and no retry-after unless concurrent_retry_after=S (seconds; the
           page says to honour retry-after "if present", and otherwise, with
           x-ratelimit-remaining above 0, to "wait for at least one minute"). The
           identity is the authorization header (concurrent_key=authorization, the
           default: GitHub limits a user or app, so sidecars sharing one token share
           one limit), x-bench-instance (concurrent_key=instance) or everyone
           (concurrent_key=all). latency=S makes every admitted call take S seconds
           (0 by default), so that N in flight bound the rate at N / S a second.
           Refusals of the primary or points limits answer at once.
plain      https://www.rfc-editor.org/rfc/rfc9110#section-10.2.3 (Retry-After)
           a plain HTTP API: a bucket of burst= requests (rate*tick by default, at
           least 1) refilled with rate*tick requests every tick= seconds, in discrete
           ticks (rate= 20/s, tick= 0.05 s by default). Any method and path answers 200
           {"ok":true} when admitted, else 429 with, by retry_after=: whole (default)
           Retry-After in whole seconds rounded up (RFC 9110: delay-seconds is a
           non-negative integer, so an API refilling every 50 ms says 1); exact a
           decimal such as 0.05 (not standard, what some APIs send); none no header.

Prompt tokens (openai input and anthropic input): an approximation of the cl100k /
o200k tokenizers, NOT characters / 4. The text is pre-split as GPT tokenizers do it
(contractions, letter runs, numbers of up to 3 digits and punctuation runs, each with
its leading space, and whitespace runs; any other character a piece of its own):
    's|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]{1,3}| ?[^\\s\\w]+|\\s+(?!\\S)|\\s+|.
and each piece counts 1 token per started 6 characters, its leading space not counted,
at least 1 (a whitespace run: 1). On English prose that lands near the rule of thumb of
https://help.openai.com/en/articles/4936856-what-are-tokens-and-how-to-count-them
(100 tokens ~ 75 words). openai adds what OpenAI's cookbook "How to count tokens with
tiktoken" (https://cookbook.openai.com/examples/how_to_count_tokens_with_tiktoken)
adds for chat: 3 tokens a message plus its role's (and name's, plus 1) tokens, and 3
for the reply's priming. anthropic counts the messages' and system prompt's text alone
(Anthropic publishes no per-message overhead).

Options common to the bucket styles:
fill= how full the buckets start (1: an idle account; 0: one at its limit).
other=F traffic this client does not see (other callers on the same key or
  organisation) takes F (0 <= F < 1) of every bucket's refill: the buckets refill at
  (1 - F) of their rate for us. Default 0.
models=NAME:TPM,... (openai) gives each named model buckets of its own (that TPM, rpm=
  requests), as OpenAI limits each model apart; other models share the default.
quota_headers=0 (openai) leaves the x-ratelimit-* headers out: an API that only says
  retry-after when it refuses.

GET /__counts answers the counts so far as JSON: style; seen; ok, refused (429 and
primary or secondary 403, concurrency refusals included), overloaded (529); github:
concurrent_refused, and per identity (concurrent_key=, authorization by default)
in_flight_max, in_flight_seconds (the integral over time of its calls in flight) and
mean_in_flight (that over wall, the seconds from the first call until now), and
in_flight_max_total (all identities at once); primary refusals by x-bench-instance and
window; tokens (openai: as its TPM bucket counts them, prompt + max_tokens);
input_tokens and output_tokens (anthropic: as its buckets finally count them, the
actual output); charged_tokens (openai: prompt + max_tokens; anthropic: input + actual
output; summed over admitted calls); first_at and refused_at (seconds from the first
call of each refusal).
"""

import json
import math
import re
import sys
import threading
import time
import zlib
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

if len(sys.argv) > 1 and sys.argv[1] in ("-h", "--help", "help"):
    print(__doc__)
    sys.exit(0)
if len(sys.argv) < 3 or sys.argv[1] not in ("openai", "anthropic", "github", "plain"):
    print("usage: vendor_mock.py {openai|anthropic|github|plain} PORT [key=value ...] (--help)", file=sys.stderr)
    sys.exit(2)

style, port = sys.argv[1], int(sys.argv[2])
raw = dict(a.split("=", 1) for a in sys.argv[3:])
models_opt = raw.pop("models", "")
retry_after_opt = raw.pop("retry_after", "whole")
concurrent_key = raw.pop("concurrent_key", "authorization")
if concurrent_key not in ("authorization", "instance", "all"):
    sys.exit("concurrent_key= is authorization, instance or all")
concurrent_retry_after = raw.pop("concurrent_retry_after", "none")
if concurrent_retry_after != "none" and not concurrent_retry_after.isdigit():
    sys.exit("concurrent_retry_after= is whole seconds or none")
if retry_after_opt not in ("whole", "exact", "none"):
    sys.exit("retry_after= is whole, exact or none")
opts = {k: float(v) for k, v in raw.items()}
FILL = opts.get("fill", 1.0)
OTHER = opts.get("other", 0.0)
CONCURRENT = int(opts.get("concurrent", 0))
CONCURRENT_STATUS = int(opts.get("concurrent_status", 403))
LATENCY = opts.get("latency", 0.0)
if CONCURRENT_STATUS not in (403, 429):
    sys.exit("concurrent_status= is 403 or 429, as the page says")
if not 0 <= OTHER < 1:
    sys.exit("other= is a share of the refill, 0 <= F < 1")
lock = threading.Lock()
counts = {
    "style": style, "ok": 0, "refused": 0, "overloaded": 0, "primary": {}, "seen": 0,
    "tokens": 0, "input_tokens": 0, "output_tokens": 0, "charged_tokens": 0,
}
if style == "github":
    counts.update(concurrent_refused=0, in_flight_max={}, in_flight_seconds={}, in_flight_max_total=0)
# github: calls of each identity in flight now, and when that last changed.
flights: dict[str, list] = {}


class Bucket:
    """Holds `size`, refilled continuously at size per `period` seconds, of which the
    share other= goes to traffic we do not see: (1 - other) of it refills for us."""

    def __init__(self, size: float, period: float = 60.0):
        self.size, self.at = size, time.monotonic()
        self.rate = size / period * (1 - OTHER)
        self.level = size * FILL

    def advance(self) -> None:
        now = time.monotonic()
        self.level = min(self.size, self.level + (now - self.at) * self.rate)
        self.at = now

    def wait_for(self, cost: float) -> float:
        """0 when `cost` could be taken now; else the seconds until it could be."""
        self.advance()
        return max(0.0, (cost - self.level) / self.rate)

    def take(self, cost: float) -> None:
        self.advance()
        self.level -= cost

    def give(self, amount: float) -> None:
        self.advance()
        self.level = min(self.size, self.level + amount)

    def full_in(self) -> float:
        """Seconds until the bucket is back at its full limit."""
        return max(0.0, self.size - self.level) / self.rate


class TickBucket:
    """A bucket of `size` refilled with `per_tick` (times 1 - other) every `tick`
    seconds, in discrete steps counted from the start."""

    def __init__(self, rate: float, tick: float, size: float):
        self.tick, self.size, self.start, self.ticks = tick, size, time.monotonic(), 0
        self.per_tick = rate * tick * (1 - OTHER)
        self.level = size * FILL

    def advance(self) -> None:
        n = int((time.monotonic() - self.start) // self.tick)
        if n > self.ticks:
            self.level = min(self.size, self.level + (n - self.ticks) * self.per_tick)
            self.ticks = n

    def take(self, cost: float = 1.0) -> float:
        """0 when `cost` was taken; else the seconds until the tick that holds it."""
        self.advance()
        if self.level >= cost - 1e-9:
            self.level -= cost
            return 0.0
        ticks = max(1, math.ceil((cost - self.level) / self.per_tick - 1e-9))
        return self.start + (self.ticks + ticks) * self.tick - time.monotonic()


# ---- prompt tokens: an approximation of cl100k / o200k, NOT characters / 4 ----
# The pre-split of GPT tokenizers (https://help.openai.com/en/articles/4936856-what-are-
# tokens-and-how-to-count-them: tokens are pieces of words, common words one each,
# 100 tokens ~ 75 words); `.` catches what the letter and digit classes leave (accented
# and non-Latin letters, `_`), one piece a character.
PIECES = re.compile(r"'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]{1,3}| ?[^\s\w]+|\s+(?!\S)|\s+|.", re.S)


def text_tokens(text: str) -> int:
    """Each piece: 1 token per started 6 characters, its leading space not counted, at
    least 1 (so a whitespace run is 1)."""
    return sum(max(1, math.ceil(len(p.lstrip(" ")) / 6)) for p in PIECES.findall(text))


def content_text(content) -> str:
    """A message's content: a string, or a list of parts whose `text` counts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) if isinstance(p, dict) else str(p) for p in content)
    return "" if content is None else str(content)


def openai_prompt_tokens(body: dict) -> int:
    # https://cookbook.openai.com/examples/how_to_count_tokens_with_tiktoken: every
    # message adds 3 tokens, then its values' tokens (role, content; a name 1 more);
    # every reply is primed with 3 (<|start|>assistant<|message|>).
    total = 3
    for m in body.get("messages", []) or []:
        total += 3 + text_tokens(str(m.get("role", ""))) + text_tokens(content_text(m.get("content")))
        if m.get("name"):
            total += text_tokens(str(m["name"])) + 1
    return total


def anthropic_input_tokens(body: dict) -> int:
    # The same word-piece rule over the system prompt and the messages' text; Anthropic
    # documents no per-message overhead to add.
    text = content_text(body.get("system"))
    return text_tokens(text) + sum(text_tokens(content_text(m.get("content"))) for m in body.get("messages", []) or [])


def output_tokens(body: dict, max_tokens: int) -> int:
    """What the model 'wrote': from 1 to max_tokens, the same for the same request."""
    if max_tokens <= 0:
        return 0
    seed = zlib.crc32(json.dumps(body.get("messages", []), sort_keys=True).encode())
    return 1 + seed % max_tokens


def go_duration(s: float) -> str:
    """As Go prints a time.Duration: 12ms, 1.5s, 6m0s."""
    if s < 1:
        return f"{max(1, round(s * 1000))}ms"
    if s < 60:
        return f"{s:.3f}".rstrip("0").rstrip(".") + "s"
    return f"{int(s // 60)}m{s % 60:.3f}".rstrip("0").rstrip(".") + "s"


def rfc3339(s: float) -> str:
    return datetime.fromtimestamp(time.time() + s, timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


if style == "openai":
    buckets = {"requests": Bucket(opts.get("rpm", 6000)), "tokens": Bucket(opts.get("tpm", 12000))}
elif style == "anthropic":
    buckets = {
        "requests": Bucket(opts.get("rpm", 1200)),
        "input-tokens": Bucket(opts.get("itpm", 400000)),
        "output-tokens": Bucket(opts.get("otpm", 80000)),
    }
elif style == "github":
    buckets = {"secondary": Bucket(opts.get("points", 900))} if opts.get("points", 900) else {}
    if opts.get("create_per_min", 0):
        buckets["create-minute"] = Bucket(opts["create_per_min"], 60.0)
    if opts.get("create_per_hour", 0):
        buckets["create-hour"] = Bucket(opts["create_per_hour"], 3600.0)
else:
    rate, tick = opts.get("rate", 20.0), opts.get("tick", 0.05)
    buckets = {"plain": TickBucket(rate, tick, opts.get("burst", max(1.0, rate * tick)))}
window = {"limit": int(opts.get("limit", 5000)), "length": opts.get("window", 3600), "start": None, "used": 0}


per_model = {
    name: {"requests": Bucket(opts.get("rpm", 6000)), "tokens": Bucket(float(tpm))}
    for name, tpm in (m.split(":") for m in models_opt.split(",") if m)
}


def openai(body: dict) -> tuple[int, dict, dict]:
    # https://platform.openai.com/docs/guides/rate-limits: RPM and TPM, whichever is hit
    # first; the TPM counts the prompt plus max_tokens (the page words its estimate as
    # from the request's characters and max_tokens; this mock counts the prompt by the
    # word-piece rule above and adds max_tokens in full, the stricter reading).
    buckets = per_model.get(body.get("model"), globals()["buckets"])
    model = str(body.get("model") or "gpt-4o-mini")
    max_tokens = body.get("max_tokens")
    if max_tokens is None:
        max_tokens = body.get("max_completion_tokens")
    max_tokens = int(max_tokens if max_tokens is not None else 16)
    prompt = openai_prompt_tokens(body)
    cost = {"requests": 1, "tokens": prompt + max_tokens}
    wait, refused = 0.0, None
    for name in ("requests", "tokens"):
        need = buckets[name].wait_for(cost[name])
        if need > wait:
            wait, refused = need, name
    if refused is None:
        for name, b in buckets.items():
            b.take(cost[name])
        counts["tokens"] += cost["tokens"]
        counts["charged_tokens"] += cost["tokens"]
    headers = {}
    # The page's headers: x-ratelimit-reset-* is "the time until the rate limit resets
    # to its initial state", as a duration (6m0s, 1s, 12ms).
    for name, b in buckets.items():
        headers[f"x-ratelimit-limit-{name}"] = str(int(b.size))
        headers[f"x-ratelimit-remaining-{name}"] = str(max(0, int(b.level)))
        headers[f"x-ratelimit-reset-{name}"] = go_duration(b.full_in())
    if not opts.get("quota_headers", 1):
        headers = {}
    if refused:
        headers["retry-after-ms"] = str(math.ceil(wait * 1000))
        headers["retry-after"] = str(math.ceil(wait))
        per = "requests per min (RPM)" if refused == "requests" else "tokens per min (TPM)"
        message = f"Rate limit reached for {model} on {per}: Limit {int(buckets[refused].size)}. Please try again in {wait:.3f}s."
        return 429, headers, {"error": {"message": message, "type": refused, "param": None, "code": "rate_limit_exceeded"}}
    completion = output_tokens(body, max_tokens)
    answer = {
        "id": "chatcmpl-bench", "object": "chat.completion", "created": int(time.time()), "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
    }
    return 200, headers, answer


def thousands(level: float) -> str:
    # https://docs.anthropic.com/en/api/rate-limits (response headers): the tokens
    # remaining "rounded to the nearest thousand".
    return str(max(0, int(math.floor(level / 1000 + 0.5)) * 1000))


def anthropic(body: dict) -> tuple[int, dict, dict]:
    every = int(opts.get("overload_every", 40))
    if every and counts["seen"] % every == 0:
        # https://docs.anthropic.com/en/api/errors: 529 overloaded_error, "the API is
        # temporarily overloaded": not a rate limit; nothing taken, no retry-after.
        return 529, {}, {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    # https://docs.anthropic.com/en/api/rate-limits: RPM, ITPM and OTPM, each a token
    # bucket replenished continuously up to its maximum; OTPM is estimated from
    # max_tokens at the start of a request and adjusted to the actual output at its end.
    max_tokens = int(body.get("max_tokens") or 0)
    input_tokens = anthropic_input_tokens(body)
    cost = {"requests": 1, "input-tokens": input_tokens, "output-tokens": max_tokens}
    wait = max(b.wait_for(cost[name]) for name, b in buckets.items())
    if wait <= 0:
        for name, b in buckets.items():
            b.take(cost[name])
    headers = {}
    for name, b in buckets.items():
        headers[f"anthropic-ratelimit-{name}-limit"] = str(int(b.size))
        headers[f"anthropic-ratelimit-{name}-remaining"] = str(max(0, int(b.level))) if name == "requests" else thousands(b.level)
        # "The time when the rate limit will be fully replenished, in RFC 3339 format."
        headers[f"anthropic-ratelimit-{name}-reset"] = rfc3339(b.full_in())
    # tokens-*: "the most restrictive rate limit currently in effect" of the token limits.
    tight = min((buckets["input-tokens"], buckets["output-tokens"]), key=lambda b: b.level / b.size)
    headers["anthropic-ratelimit-tokens-limit"] = str(int(tight.size))
    headers["anthropic-ratelimit-tokens-remaining"] = thousands(tight.level)
    headers["anthropic-ratelimit-tokens-reset"] = rfc3339(tight.full_in())
    if wait > 0:
        # "retry-after: the number of seconds to wait until you can retry the request."
        headers["retry-after"] = str(math.ceil(wait))
        return 429, headers, {"type": "error", "error": {"type": "rate_limit_error", "message": "Number of request tokens has exceeded your per-minute rate limit"}}
    actual = output_tokens(body, max_tokens)
    # The answer is written: the OTPM estimate is adjusted to the actual output.
    buckets["output-tokens"].give(max_tokens - actual)
    counts["input_tokens"] += input_tokens
    counts["output_tokens"] += actual
    counts["charged_tokens"] += input_tokens + actual
    answer = {
        "id": "msg_bench", "type": "message", "role": "assistant", "model": str(body.get("model") or "claude-3-5-haiku-latest"),
        "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn", "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": actual},
    }
    return 200, headers, answer


GITHUB_LIMITS = "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api"


SECONDARY = "You have exceeded a secondary rate limit. Please wait a few minutes before you try again."


def fly(identity: str, step: int) -> None:
    """A call of `identity` enters (+1) or leaves (-1) flight; keeps its integral (lock held)."""
    now = time.monotonic()
    n, since = flights.setdefault(identity, [0, now])
    seconds = counts["in_flight_seconds"]
    seconds[identity] = seconds.get(identity, 0.0) + n * (now - since)
    flights[identity] = [n + step, now]
    counts["in_flight_max"][identity] = max(counts["in_flight_max"].get(identity, 0), n + step)
    counts["in_flight_max_total"] = max(counts["in_flight_max_total"], sum(f[0] for f in flights.values()))


def github(method: str, path: str, instance: str, crowded: bool = False) -> tuple[int, dict, dict]:
    # https://docs.github.com/en/rest/using-the-rest-api/rate-limits-for-the-rest-api
    now = time.time()
    if path.startswith("/forbidden"):
        return 403, {}, {"message": "Resource not accessible by integration", "documentation_url": "https://docs.github.com/rest"}
    if window["start"] is None or now >= window["start"] + window["length"]:
        window["start"], window["used"] = now, 0
    reset = math.ceil(window["start"] + window["length"])
    headers = lambda: {
        "x-ratelimit-limit": str(window["limit"]),
        "x-ratelimit-remaining": str(window["limit"] - window["used"]),
        "x-ratelimit-used": str(window["used"]),
        "x-ratelimit-reset": str(reset),
        "x-ratelimit-resource": "core",
    }
    if window["used"] >= window["limit"]:
        key = f"{instance}@{reset}"
        counts["primary"][key] = counts["primary"].get(key, 0) + 1
        return 403, headers(), {"message": "API rate limit exceeded for user ID 1.", "documentation_url": GITHUB_LIMITS}
    if crowded:
        # "Make too many concurrent requests. No more than 100 concurrent requests are
        # allowed." and, past a secondary limit, "a 403 or 429 response and an error
        # message that indicates that you exceeded a secondary rate limit"; retry-after
        # only "if present" (https://github.com/octokit/plugin-throttling.js notes it
        # "can sometimes be blank"). Nothing is charged: the call never ran.
        counts["concurrent_refused"] += 1
        h = headers()
        if concurrent_retry_after != "none":
            h["retry-after"] = concurrent_retry_after
        return CONCURRENT_STATUS, h, {"message": SECONDARY, "documentation_url": GITHUB_LIMITS + "#about-secondary-rate-limits"}
    # Secondary limits ("Calculating points for the secondary rate limit"): GET, HEAD
    # and OPTIONS 1 point, POST, PATCH, PUT and DELETE 5; "no more than 80
    # content-generating requests per minute and no more than 500 per hour".
    writes = method in ("POST", "PATCH", "PUT", "DELETE")
    cost = {"secondary": 5 if writes else 1, "create-minute": 1 if writes else 0, "create-hour": 1 if writes else 0}
    wait = max((b.wait_for(cost[name]) for name, b in buckets.items()), default=0.0)
    if wait > 0:
        h = headers()
        h["retry-after"] = str(math.ceil(wait))
        return 403, h, {"message": SECONDARY, "documentation_url": GITHUB_LIMITS + "#about-secondary-rate-limits"}
    for name, b in buckets.items():
        b.take(cost[name])
    window["used"] += 1
    return 200, headers(), {"login": "octocat", "id": 1}


def plain() -> tuple[int, dict, dict]:
    wait = buckets["plain"].take(1)
    if wait <= 0:
        return 200, {}, {"ok": True}
    headers = {}
    if retry_after_opt == "whole":
        # https://www.rfc-editor.org/rfc/rfc9110#section-10.2.3: Retry-After is an
        # HTTP-date or delay-seconds, "a non-negative decimal integer": rounded up.
        headers["retry-after"] = str(max(1, math.ceil(wait)))
    elif retry_after_opt == "exact":
        # Not standard: a decimal number of seconds, to the millisecond, rounded up.
        headers["retry-after"] = f"{math.ceil(wait * 1000) / 1000:.3f}".rstrip("0").rstrip(".")
    return 429, headers, {"error": "rate limited"}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # The head and the body go out in two writes: without TCP_NODELAY, Nagle's
    # algorithm holds the body until the client's delayed ACK, 40 ms on Linux.
    disable_nagle_algorithm = True

    def log_message(self, *args) -> None:
        pass

    def read_body(self) -> dict:
        length = int(self.headers.get("content-length") or 0)
        data = self.rfile.read(length) if length else b""
        try:
            body = json.loads(data or b"{}")
        except ValueError:
            body = {}
        return body if isinstance(body, dict) else {}

    def do_GET(self) -> None:
        if self.path == "/__counts":
            with lock:
                c = counts
                if style == "github":
                    for identity in flights:
                        fly(identity, 0)
                    c = json.loads(json.dumps(counts))
                    wall = time.monotonic() - counts["first_at"] if "first_at" in counts else 0.0
                    c["wall"] = wall
                    c["mean_in_flight"] = {k: v / wall for k, v in c["in_flight_seconds"].items()} if wall else {}
                self.send(200, {}, c)
            return
        self.handle_call(self.read_body())

    def do_HEAD(self) -> None:
        self.handle_call(self.read_body(), head=True)

    def do_POST(self) -> None:
        self.handle_call(self.read_body())

    do_PUT = do_PATCH = do_DELETE = do_OPTIONS = do_POST

    def handle_call(self, body: dict, head: bool = False) -> None:
        identity = None
        with lock:
            counts["seen"] += 1
            if style == "openai":
                code, headers, answer = openai(body)
            elif style == "anthropic":
                code, headers, answer = anthropic(body)
            elif style == "github":
                instance = self.headers.get("x-bench-instance", "-")
                who = {"authorization": self.headers.get("authorization", "-"), "instance": instance, "all": "*"}[concurrent_key]
                crowded = CONCURRENT > 0 and flights.get(who, [0])[0] >= CONCURRENT
                code, headers, answer = github(self.command, self.path, instance, crowded)
                if not crowded:
                    # In flight until its answer is ready to be written (below); a call
                    # refused for concurrency never was.
                    identity = who
                    fly(identity, +1)
            else:
                code, headers, answer = plain()
            first_at = counts.setdefault("first_at", time.monotonic())
            secondary = SECONDARY in str(answer.get("message", "")) if style == "github" else False
            key = "ok" if code == 200 else "overloaded" if code == 529 else "refused" if code == 429 or secondary or "retry-after" in headers or headers.get("x-ratelimit-remaining") == "0" else "ok"
            counts[key] += 1
            if key == "refused":
                counts.setdefault("refused_at", []).append(round(time.monotonic() - first_at, 2))
        try:
            if code == 200 and LATENCY > 0:
                time.sleep(LATENCY)
        finally:
            # Out of flight before the answer goes out: a client that has read it must
            # not find the call still counted. Between two hosts the network sees to
            # that; on loopback a client that sends its next call at once (a proxy with
            # a queue) beat this thread to the lock and was refused for a call already
            # answered, about 1 in 60 of its calls at the limit.
            if identity is not None:
                with lock:
                    fly(identity, -1)
        self.send(code, headers, answer, head)

    def send(self, code: int, headers: dict, answer: dict, head: bool = False) -> None:
        data = json.dumps(answer).encode()
        self.send_response(code)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        if not head:
            self.wfile.write(data)


if CONCURRENT or LATENCY:
    # The default listen backlog of 5 drops SYNs when a hundred clients connect at
    # once, and a dropped SYN is retried a second later; kept where these options are
    # absent, so the scenarios measured before are unchanged.
    ThreadingHTTPServer.request_queue_size = 1024
server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
server.daemon_threads = True
server.serve_forever()
