"""Where the test suite's time goes: a pytest JUnit XML file (``--junitxml``) grouped into the
kinds of work that issue 43 names, slowest files first.

usage: python scripts/suite_durations.py JUNIT.xml [--top N]

A test's time is its setup, call and teardown (pytest's default junit_duration_report); under
pytest-xdist the sum over tests is CPU-side work, more than the wall time of the run.
"""
import argparse
import re
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict

# (kind, test-id pattern), the first that matches wins
KINDS = [
    ("client suites and client builds", r"tests/compat/|tests/backends/test_monai\.py"),
    ("compiling (first use, cold caches, faults, builds)",
     r"tests/jit/|test_first_use|tests/cuda/test_build\.py|test_prebuild|cold|"
     r"test_cli_info_build|_clang\b|test_c_clang"),
    ("gradchecks", r"gradcheck"),
    ("the TORCH twin's slow paths", r"test_torch\.py|torch_backend|relax|TORCH"),
    ("everything else", r""),
]


def kind_of(test_id):
    for kind, pattern in KINDS:
        if re.search(pattern, test_id):
            return kind
    return KINDS[-1][0]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("junit")
    ap.add_argument("--top", type=int, default=15, help="slowest tests to list (default 15)")
    args = ap.parse_args(argv)
    tests = []
    for case in ET.parse(args.junit).getroot().iter("testcase"):
        path = case.get("file") or case.get("classname", "").replace(".", "/") + ".py"
        test_id = f"{path}::{case.get('name')}"
        tests.append((float(case.get("time") or 0), test_id))
    by_kind, by_file = defaultdict(lambda: [0.0, 0]), defaultdict(float)
    for seconds, test_id in tests:
        by_kind[kind_of(test_id)][0] += seconds
        by_kind[kind_of(test_id)][1] += 1
        by_file[test_id.split("::")[0]] += seconds
    total = sum(s for s, _ in tests)
    print(f"| kind | tests | seconds | share |\n|---|---|---|---|")
    for kind, _ in KINDS:
        s, n = by_kind.get(kind, (0.0, 0))
        print(f"| {kind} | {n} | {s:.0f} | {100 * s / max(total, 1e-9):.0f}% |")
    print(f"| all | {len(tests)} | {total:.0f} | |\n")
    print("slowest files: " + ", ".join(f"{f} {s:.0f} s" for f, s in
                                         sorted(by_file.items(), key=lambda x: -x[1])[:10]))
    print("slowest tests:")
    for seconds, test_id in sorted(tests, reverse=True)[:args.top]:
        print(f"  {seconds:7.1f} s  {test_id}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
