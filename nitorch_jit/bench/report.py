"""How the benchmarks print and save what they measured: an aligned text table, a markdown
table (the README's), and one JSON writer (``--json``)."""
import argparse
import json
from pathlib import Path


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
