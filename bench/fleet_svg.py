"""Per-member goodput over time from bench/fleet.sh's fault run, as an SVG: one line
per member (successes per second between two samples), the members' total, and the
Redis outage shaded. Python's standard library only.

  fleet_svg.py SERIES KILL_AT RESTART_AT CAPACITY OUT.svg

SERIES has one line per sample: seconds since the measured window began, then each
member's count of successful requests so far.
"""
import sys

WIDTH, HEIGHT = 900, 420
LEFT, RIGHT, TOP, BOTTOM = 60, 20, 40, 50
COLORS = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
    "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#637939", "#8c6d31", "#843c39",
    "#7b4173", "#3182bd",
]


def read(path):
    rows = []
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 2:
                rows.append([float(p) for p in parts])
    return rows


def rates(rows):
    """(time, [rate per member]) at the middle of each pair of samples."""
    out = []
    for a, b in zip(rows, rows[1:]):
        dt = b[0] - a[0]
        if dt > 0:
            out.append(((a[0] + b[0]) / 2, [(y - x) / dt for x, y in zip(a[1:], b[1:])]))
    return out


def main():
    series, kill_at, restart_at, capacity, out = sys.argv[1:6]
    kill_at, restart_at, capacity = float(kill_at), float(restart_at), float(capacity)
    points = rates(read(series))
    if not points:
        sys.exit("fleet_svg.py: fewer than two samples in " + series)
    members = len(points[0][1])
    t_max = max(t for t, _ in points) + 0.5
    y_max = max(max(max(r) for _, r in points), 2 * capacity / members) * 1.15
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(t):
        return LEFT + plot_w * t / t_max

    def y(v):
        return TOP + plot_h * (1 - v / y_max)

    svg = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'font-family="sans-serif" font-size="12">',
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
        f'<text x="{LEFT}" y="20" font-size="14">bench/fleet.sh: {members} sidecars, one '
        f"{capacity:g}/s bucket; Redis killed at {kill_at:g} s, restarted empty at "
        f"{restart_at:g} s</text>",
        f'<rect x="{x(kill_at):.1f}" y="{TOP}" width="{x(restart_at) - x(kill_at):.1f}" '
        f'height="{plot_h}" fill="#f4cccc"/>',
        f'<text x="{x(kill_at) + 4:.1f}" y="{TOP + 14}" fill="#990000">Redis down</text>',
    ]
    for i in range(6):
        v = y_max * i / 5
        svg.append(
            f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y(v):.1f}" y2="{y(v):.1f}" '
            f'stroke="#e0e0e0"/><text x="{LEFT - 6}" y="{y(v) + 4:.1f}" '
            f'text-anchor="end">{v:.1f}</text>'
        )
    step = 10 if t_max > 30 else 5
    t = 0
    while t <= t_max:
        svg.append(
            f'<text x="{x(t):.1f}" y="{HEIGHT - BOTTOM + 16}" text-anchor="middle">{t:g}</text>'
        )
        t += step
    svg.append(
        f'<text x="{LEFT + plot_w / 2}" y="{HEIGHT - 12}" text-anchor="middle">'
        f"seconds</text>"
    )
    svg.append(
        f'<text x="14" y="{TOP + plot_h / 2}" transform="rotate(-90 14 {TOP + plot_h / 2})" '
        f'text-anchor="middle">successes per second, per member</text>'
    )
    fair = capacity / members
    svg.append(
        f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y(fair):.1f}" y2="{y(fair):.1f}" '
        f'stroke="black" stroke-dasharray="4 4"/><text x="{WIDTH - RIGHT - 4}" '
        f'y="{y(fair) - 4:.1f}" text-anchor="end">fair share {fair:.2f}/s</text>'
    )
    for m in range(members):
        line = " ".join(f"{x(t):.1f},{y(r[m]):.1f}" for t, r in points)
        svg.append(
            f'<polyline points="{line}" fill="none" stroke="{COLORS[m % len(COLORS)]}" '
            f'stroke-width="1.2"/>'
        )
    svg.append(
        f'<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="none" '
        f'stroke="black"/>'
    )
    svg.append("</svg>")
    with open(out, "w") as f:
        f.write("\n".join(svg) + "\n")


if __name__ == "__main__":
    main()
