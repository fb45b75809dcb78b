"""The documentation's benchmark records (docs/benchmarks/data) are whole and their plots read
a ratio from every row they plot; the docs build (.ci/run) renders them, these catch a broken
record in the test run already."""
import doctest
import importlib.util
from pathlib import Path

import pytest

TOOLS = Path(__file__).resolve().parent.parent / "docs" / "tools"


def _benchmarks():
    spec = importlib.util.spec_from_file_location("docs_benchmarks", TOOLS / "benchmarks.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


BENCH = _benchmarks()
RECORDS = sorted(BENCH.DATA.glob("*.json"))


def test_records_found():
    assert len(RECORDS) >= 15, RECORDS


@pytest.mark.parametrize("path", RECORDS, ids=[p.stem for p in RECORDS])
def test_record(path):
    rec = BENCH.load(path)                      # every field, rows as long as the headers
    assert rec["rows"], f"{path.name}: no rows"
    assert rec["date"][:4].isdigit(), f"{path.name}: undated"
    spec = rec.get("plot")
    if spec is None:
        return
    bars = BENCH.speedups(rec)
    plotted = [i for i, row in enumerate(rec["rows"])
               if "goal" not in spec or not BENCH.LOWER_IS_BETTER.match(row[spec["goal"]])]
    assert bars, f"{path.name}: a plot with no ratio"
    # each plotted row gives a ratio for at least one series, unless its cell says no ratio
    # was measured (no digits followed by ×)
    columns = [c for c, _ in spec.get("series") or [[spec["ratio"], None]]]
    for i in plotted:
        cells = [rec["rows"][i][c] for c in columns]
        if any("×" in c for c in cells):
            assert any(BENCH.parse_ratio(c) for c in cells), (path.name, i, cells)


def test_parse_ratio_examples():
    tests = doctest.DocTestFinder().find(BENCH.parse_ratio, "parse_ratio", globs=vars(BENCH))
    runner = doctest.DocTestRunner()
    for t in tests:
        runner.run(t)
    assert runner.summarize(verbose=False).failed == 0


ROOT = TOOLS.parent.parent
PAGES = [ROOT / "README.md", ROOT / "docs" / "getting-started.md",
         *sorted((ROOT / "docs" / "guide").glob("*.md"))]


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_page_examples_run(page):
    """The Python blocks of the README and the guides run, in order, as a reader would paste
    them (each page in one namespace), so a guide's example cannot go stale either."""
    import re
    blocks = re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), re.S)
    namespace = {}
    for block in blocks:
        exec(compile(block, str(page), "exec"), namespace)
