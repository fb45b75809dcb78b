"""The benchmark harness (nitorch_jit.bench): its examples run, and measure keeps its contract
(milliseconds, ours timed before and after its peers, threads restored)."""
import doctest
import sys

import pytest
import torch

import nitorch_jit.bench as bench
from nitorch_jit.bench import data, measure, measure_process, report


@pytest.mark.parametrize("module", [bench, data, report], ids=lambda m: m.__name__)
def test_examples_run(module):
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0


def test_measure_order_units_and_threads():
    calls = []
    fns = {name: (lambda n=name: calls.append(n)) for name in ("peer1", "ours", "peer2")}
    threads = torch.get_num_threads()
    t = measure(fns, repeat={"ours": 3, "peer1": 2, "peer2": 1}, warmup=1, ours="ours",
                threads=1)
    assert list(t) == ["peer1", "ours", "peer2"]  # the dict's order, whatever the timing order
    # ours (1 warm-up + 3), then its peers, then ours again
    assert calls == ["ours"] * 4 + ["peer1"] * 3 + ["peer2"] * 2 + ["ours"] * 4
    assert [len(t[k].times_ms) for k in ("ours", "peer1", "peer2")] == [3, 2, 1]
    assert all(v.best_ms == min(v.times_ms) and v.cpu_ms is not None for v in t.values())
    assert torch.get_num_threads() == threads


def test_measure_keeps_the_last_result_and_the_first_call():
    n = []
    t = measure(lambda: n.append(1) or len(n), repeat=2, warmup=1, keep_result=True,
                interleave=False)
    assert t.result == 3 and t.first_ms is not None and t.first_ms >= 0


def test_measure_process_reports_failure_and_timeout():
    r = measure_process([sys.executable, "-c", "import sys; sys.exit(3)"])
    assert r.returncode == 3 and r.wall_ms > 0
    r = measure_process([sys.executable, "-c", "import time; time.sleep(30)"], timeout=0.5)
    assert r.returncode is None and r.wall_ms < 20e3
