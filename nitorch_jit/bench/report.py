"""How the benchmarks print and save what they measured: an aligned text table, a markdown
table, one JSON writer (``--json``), and the dated record of a table that the documentation's
benchmark pages render (``--record``, docs/benchmarks/data/)."""
import argparse
import datetime
import json
import os
import platform
import sys
from pathlib import Path

# the fields of a benchmark record (docs/tools/benchmarks.py reads them)
RECORD_FIELDS = ("title", "command", "date", "measured", "machine", "headers", "rows")


def print_table(rows, headers, file=None):
    """Print rows as a text table with aligned columns and a rule under the headers.

    Parameters
    ----------
    rows : list[sequence]
        One sequence of cells (anything ``str`` takes) per row.
    headers : list[str]
    file : file-like, optional
        Default: stdout.

    Returns
    -------
    None
        The table is printed.

    Examples
    --------
    >>> from nitorch_jit.bench.report import print_table
    >>> print_table([("pull", "1.5")], ["op", "ms"])
    op    ms
    ---------
    pull  1.5
    """
    rows = [list(r) for r in rows]
    widths = [max(len(str(r[i])) for r in rows + [headers]) for i in range(len(headers))]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths))
    print(line.rstrip(), file=file)
    print("-" * len(line), file=file)
    for r in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip(), file=file)


def markdown_row(cells):
    """One row of a markdown table: ``| a | b |``."""
    return "| " + " | ".join(str(c) for c in cells) + " |"


def print_markdown(rows, headers, file=None, flush=False):
    """Print a markdown table (headers, rule, rows); with no rows, only its head.

    Parameters
    ----------
    rows, headers, file
        As for :func:`print_table`.
    flush : bool
        Flush after each line (rows printed as they are measured).

    Returns
    -------
    None
        The table is printed to `file`, in markdown.

    Examples
    --------
    >>> from nitorch_jit.bench.report import print_markdown
    >>> print_markdown([("1", "2")], ["a", "b"])
    | a | b |
    |---|---|
    | 1 | 2 |
    """
    print(markdown_row(headers), file=file)
    print("|" + "---|" * len(headers), file=file, flush=flush)
    for r in rows:
        print(markdown_row(r), file=file, flush=flush)


def _plain(obj):
    if hasattr(obj, "as_dict"):
        return obj.as_dict()
    return str(obj)


def write_json(path, obj):
    """Write what a benchmark measured as JSON (indent 1; a Timing as its ``as_dict()``,
    anything else JSON cannot hold as its ``str``).

    Parameters
    ----------
    path : str or pathlib.Path
        None or '': nothing is written.
    obj : object

    Returns
    -------
    None
        The file is written (nothing is, without a path).

    Examples
    --------
    >>> import json, tempfile, os
    >>> from nitorch_jit.bench import Timing
    >>> from nitorch_jit.bench.report import write_json
    >>> path = os.path.join(tempfile.mkdtemp(), "out.json")
    >>> write_json(path, {"pull": Timing(1.5, times_ms=[1.5, 2.0])})
    >>> json.load(open(path))["pull"]["best_ms"]
    1.5
    """
    if path:
        Path(path).write_text(json.dumps(obj, indent=1, default=_plain))


def gpu_parser(doc, size, repeat):
    """The command line of a GPU benchmark: --size, --repeat, --json FILE and --device (cuda,
    or cpu for a smoke run of the script itself).

    Parameters
    ----------
    doc : str
        The script's docstring (its first line is the description).
    size, repeat : int
        Their defaults.

    Returns
    -------
    argparse.ArgumentParser
        More arguments may be added before parsing.

    Examples
    --------
    >>> from nitorch_jit.bench.report import gpu_parser
    >>> args = gpu_parser("A benchmark.", 128, 20).parse_args(["--device", "cpu"])
    >>> args.size, args.repeat, args.json, args.device
    (128, 20, None, 'cpu')
    """
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--size", type=int, default=size)
    ap.add_argument("--repeat", type=int, default=repeat)
    ap.add_argument("--json", help="also write the results to this file")
    ap.add_argument("--device", default="cuda", help="cuda (default) or cpu (a smoke run)")
    return ap


def machine():
    """One line naming where a benchmark ran: CPU model and count, torch and its threads.

    Returns
    -------
    str
        For example ``'AMD EPYC 7B13, 16 cores, torch 2.13.0, 8 threads'``.

    Examples
    --------
    >>> from nitorch_jit.bench.report import machine
    >>> "torch" in machine()
    True
    """
    import torch
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            model = next(ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return (f"{model}, {os.cpu_count()} cores, torch {torch.__version__}, "
            f"{torch.get_num_threads()} threads")


def write_record(path, title, headers, rows, measured=None, plot=None):
    """Write one measured table as a record of the documentation's benchmark pages: the
    command, the date (UTC), the conditions and the machine with the table, so that the pages
    render it as measured (copy it to docs/benchmarks/data/<name>.json).

    Parameters
    ----------
    path : str or pathlib.Path
        None or '': nothing is written.
    title : str
    headers : list[str]
    rows : list[sequence]
        Cells as printed (``str`` of each). A ratio cell reads ``12.3×`` so the plot finds it.
    measured : str, optional
        The conditions (default: the UTC time and the 1-minute load average).
    plot : dict, optional
        Which columns the plot reads: ``workload`` (list), ``peer`` or ``peer_name``,
        ``ratio``, ``goal``, ``skip`` (see docs/tools/benchmarks.py).

    Returns
    -------
    None
        The record is written to `path` as UTF-8 JSON, one key per field.

    Examples
    --------
    >>> import json, tempfile, os
    >>> from nitorch_jit.bench.report import write_record, RECORD_FIELDS
    >>> path = os.path.join(tempfile.mkdtemp(), "rec.json")
    >>> write_record(path, "pull", ["op", "ratio"], [("pull", "2.0×")])
    >>> rec = json.load(open(path))
    >>> all(k in rec for k in RECORD_FIELDS), rec["rows"]
    (True, [['pull', '2.0×']])
    """
    if not path:
        return
    now = datetime.datetime.now(datetime.timezone.utc)
    if measured is None:
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
        measured = f"one run at {now:%H:%M} UTC, load {load:.1f}"
    rec = {"title": title, "command": "python " + " ".join(sys.argv), "date": f"{now:%Y-%m-%d}",
           "measured": measured, "machine": machine(), "headers": list(headers),
           "rows": [[str(c) for c in r] for r in rows]}
    if plot:
        rec["plot"] = plot
    Path(path).write_text(json.dumps(rec, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
