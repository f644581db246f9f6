#!/usr/bin/env python3
"""Instructions per request by the crate whose source they came from, inlining resolved.

Reads callgrind output files (with line numbers, callgrind's default; run by
bench/instructions.sh --by-crate) and attributes every instruction to the source file
it was compiled from, the inlined one when there is one, so hyper's code inlined into
easeoff's counts as hyper's. Files are grouped by crate (a registry crate with its
version, std's crates as std:NAME, glibc's by file as libc:FILE); easeoff's own files
are listed one by one.

Usage: by_crate.py REQUESTS FILE...
The binary needs line tables: CARGO_PROFILE_RELEASE_DEBUG=line-tables-only.
"""

import re
import sys
from collections import Counter

NAME = re.compile(r"\((\d+)\)(?: (.*))?")
REGISTRY = re.compile(r"/registry/src/[^/]+/([^/]+)/")
STD = re.compile(r"/library/([^/]+)/")


def group(path):
    """The crate (or easeoff file) a source path belongs to."""
    if m := REGISTRY.search(path):
        return m.group(1)
    if m := STD.search(path):
        return "std:" + m.group(1)
    if "/src/" in path and "/registry/" not in path and "/rustc/" not in path:
        return "easeoff:" + path.rsplit("/src/", 1)[1]
    if path.startswith("./") or "sysdeps" in path:
        return "libc:" + path.rsplit("/", 1)[-1]
    return path


def costs(path, into):
    """Adds the exclusive cost of each source file in one callgrind file to `into`."""
    files = {}
    current = inlined = None
    skip_next = False

    def resolve(value):
        m = NAME.match(value)
        if not m:
            return value
        if m.group(2):
            files[m.group(1)] = m.group(2)
        return files.get(m.group(1), value)

    with open(path, encoding="utf-8", errors="replace") as lines:
        for line in lines:
            key, _, value = line.rstrip("\n").partition("=")
            if key == "fl":
                current, inlined = resolve(value), None
            elif key in ("fi", "fe"):
                name = resolve(value)
                inlined = None if name == current else name
            elif key == "fn":
                inlined = None
            elif key in ("cfi", "cfl"):
                resolve(value)
            elif key == "calls":
                # The next cost line is the call's inclusive cost: not this file's own.
                skip_next = True
            elif line[:1].isdigit() or line[:1] in "+-*":
                fields = line.split()
                if len(fields) < 2:
                    continue
                if skip_next:
                    skip_next = False
                    continue
                into[group(inlined or current or "???")] += int(fields[1])


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    requests = int(sys.argv[1])
    total = Counter()
    for path in sys.argv[2:]:
        costs(path, total)
    overall = sum(total.values())
    if total["???"] > overall / 2:
        print("by_crate.py: most instructions have no source file: build with "
              "CARGO_PROFILE_RELEASE_DEBUG=line-tables-only", file=sys.stderr)
    own = sum(c for g, c in total.items() if g.startswith("easeoff:"))
    print(f"{overall / requests:9.0f}  all")
    print(f"{own / requests:9.0f}  easeoff's own source files, together")
    for name, cost in total.most_common():
        if cost / requests < 10:
            break
        print(f"{cost / requests:9.0f}  {name}")


if __name__ == "__main__":
    main()
