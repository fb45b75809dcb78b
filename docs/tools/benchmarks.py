"""The benchmark tables and their speed-up plots, from the measurement records.

    python docs/tools/benchmarks.py OUTDIR

Each file of docs/benchmarks/data/ is one measured table: what ran it (``command``), when
(``date``, ``measured``), where (``machine``), its ``headers`` and ``rows`` as measured (ranges
kept), and optionally ``plot``: which columns name the workload, the peer and the ratio
(peer time / our time; > 1: nitorch_jit is faster), and the goal (a row whose goal reads
'≤ …' is a ratio where lower is better, and is not plotted). For each record this writes
OUTDIR/<name>.md (the dated table, and the plot when there is one) and OUTDIR/<name>.png; the
benchmark pages include the .md files. The plot takes the ratios from the table's own cells
(``9.5–11.3×`` is a range, drawn as a bar to its low end and a line to its high end), so a
number lives in one place.
"""
import json
import re
import sys
from pathlib import Path

from nitorch_jit.bench.report import RECORD_FIELDS  # what `--record` of the scripts writes

DATA = Path(__file__).resolve().parent.parent / "benchmarks" / "data"
# 'a×' or 'a–b×' ('x' as the scripts print it, but not the x of 256x256)
RATIO = re.compile(r"(\d+(?:\.\d+)?)(?:\s*[–-]\s*(\d+(?:\.\d+)?))?\s*[×x](?![A-Za-z0-9_.])")
GOAL = re.compile(r"(?:≥|>=)\s*(\d+(?:\.\d+)?)")
LOWER_IS_BETTER = re.compile(r"^\s*(?:≤|<=)")  # a goal such as '≤ 3×': not a speed-up


def load(path):
    """One record (as ``nitorch_jit.bench.report.write_record`` writes it), checked: every field
    present, every row as long as the headers."""
    rec = json.loads(Path(path).read_text(encoding="utf-8"))
    missing = [f for f in RECORD_FIELDS if f not in rec]
    if missing:
        raise ValueError(f"{path}: missing field(s) {missing}")
    for i, row in enumerate(rec["rows"]):
        if len(row) != len(rec["headers"]):
            raise ValueError(f"{path}: row {i} has {len(row)} cells, the headers "
                             f"{len(rec['headers'])}")
    return rec


def parse_ratio(cell):
    """(low, high) of the first 'a×' or 'a–b×' in a cell ('x' as the scripts print it), else
    None.

    >>> parse_ratio("9.5–11.3× (was 4×)"), parse_ratio("12.6x"), parse_ratio("0.14 of copy")
    ((9.5, 11.3), (12.6, 12.6), None)
    """
    m = RATIO.search(cell)
    if not m:
        return None
    lo = float(m.group(1))
    return lo, float(m.group(2)) if m.group(2) else lo


def plain(cell, width=60):
    """A cell as a plot label: markdown marks dropped, cut to `width`."""
    text = re.sub(r"[`*]", "", cell).strip()
    return text if len(text) <= width else text[:width - 1] + "…"


def speedups(rec):
    """[(label, (low, high), goal or None)] of a record's plot, in table order."""
    spec = rec.get("plot")
    if not spec:
        return []
    series = spec.get("series") or [[spec["ratio"], spec.get("peer_name")]]
    out = []
    for row in rec["rows"]:
        workload = " ".join(plain(row[c], 55) for c in spec["workload"])
        goal = None
        if "goal" in spec:
            if LOWER_IS_BETTER.match(row[spec["goal"]]):
                continue
            m = GOAL.search(row[spec["goal"]])
            goal = float(m.group(1)) if m else None
        for column, peer_name in series:
            r = parse_ratio(row[column])
            if r is None:
                continue
            peer = peer_name if peer_name else plain(row[spec["peer"]], 45)
            out.append((f"{workload} — vs {peer}" if workload else f"vs {peer}", r, goal))
    return out


def plot(rec, path):
    """Horizontal bars of the speed-ups (log scale; the dashed line is 1×, a black tick the
    goal)."""
    bars = speedups(rec)
    if not bars:
        return False
    import matplotlib  # here: the records are read (and tested) without matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(9, 0.32 * len(bars) + 1.1))
    y = list(range(len(bars)))[::-1]
    lows = [b[1][0] for b in bars]
    highs = [b[1][1] for b in bars]
    colours = ["tab:green" if lo >= 1 else "tab:red" for lo in lows]
    ax.barh(y, lows, color=colours, alpha=0.75, height=0.6)
    for yy, lo, hi in zip(y, lows, highs):
        if hi > lo:
            ax.plot([lo, hi], [yy, yy], color="k", lw=1.2)
        ax.text(hi * 1.05, yy, f"{lo:g}×" if hi == lo else f"{lo:g}–{hi:g}×", va="center",
                fontsize=7)
    for yy, (_, _, goal) in zip(y, bars):
        if goal:
            ax.plot([goal, goal], [yy - 0.35, yy + 0.35], color="k", lw=2)
    ax.axvline(1, color="grey", ls="--", lw=0.8)
    ax.set_xscale("log")
    ax.set_xlim(min(0.5, min(lows) / 1.5), max(highs) * 3)
    ax.set_yticks(y)
    ax.set_yticklabels([b[0] for b in bars], fontsize=7)
    ax.set_xlabel("speed-up: peer time / nitorch_jit time (log scale; black tick: goal)",
                  fontsize=8)
    ax.set_title(f"{rec['title']} ({rec['date']})", fontsize=9)
    ax.tick_params(axis="x", labelsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90, bbox_inches="tight")
    plt.close(fig)
    return True


def markdown(rec, name, has_plot):
    """The record as markdown: a dated line saying how it was measured, the table, the plot."""
    cell = lambda c: str(c).replace("|", "\\|")  # noqa: E731
    lines = [f"*Measured {rec['date']} ({rec['measured']}) on {rec['machine']}, by "
             f"`{rec['command']}`.*", "",
             "| " + " | ".join(cell(h) for h in rec["headers"]) + " |",
             "|" + "---|" * len(rec["headers"])]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rec["rows"]]
    if has_plot:
        lines += ["", f"![speed-ups: {rec['title']}](/_generated/bench/{name}.png)"]
    return "\n".join(lines) + "\n"


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        sys.exit("usage: python docs/tools/benchmarks.py OUTDIR")
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    paths = sorted(DATA.glob("*.json"))
    if not paths:
        sys.exit(f"no records in {DATA}")
    for path in paths:
        rec = load(path)
        has_plot = plot(rec, out / f"{path.stem}.png")
        (out / f"{path.stem}.md").write_text(markdown(rec, path.stem, has_plot),
                                            encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
