"""``make bench`` for two revisions in one process: python tools/bench_versions.py BEFORE [AFTER] [--quick].

Issue 32's bar is "no row more than 2 % slower than before", which only a side-by-side run can check on a
shared machine (a neighbour moves timings taken minutes apart by +-10 %). BEFORE's ``workbench`` package is
taken from git (``git archive``) into a temporary folder as ``workbench_before`` (the package imports itself
relatively, so it runs under that name) with its benchmarks (``bench_at``); AFTER is the working tree's unless a
revision is given. Every row both versions have is timed by ``tools.bench.versions_side_by_side``, alternating
round by round.
"""

from __future__ import annotations

import argparse
import importlib
import io
import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def renamed(source: str, name: str) -> str:
    """``source`` with every ``workbench`` import read as ``name``, those inside functions included (a benchmark that
    imports lazily would otherwise hand the old version's models to the working tree's code)."""
    return re.sub(r"^(\s*)(from|import) workbench\b", rf"\1\2 {name}", source, flags=re.MULTILINE)


def bench_at(revision: str, name: str, into: Path):
    """The benchmarks of ``revision``, bound to that revision's ``workbench`` package imported as ``name``: its
    ``tools/bench.py`` with every ``workbench`` import read as ``name`` (or, from before the benchmarks left the
    package, its ``workbench/bench.py``). Both are extracted under ``into``."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", revision, "workbench", "tools"], check=True,
                             capture_output=True).stdout
    folder = into / revision.replace("/", "_")
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(folder, filter="data")
    (folder / "workbench").rename(folder / name)
    sys.path.insert(0, str(folder))
    bench = folder / "tools" / "bench.py"
    if not bench.is_file():
        return importlib.import_module(f"{name}.bench")
    (folder / f"{name}_bench.py").write_text(renamed(bench.read_text(), name))
    return importlib.import_module(f"{name}_bench")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", help="git revision of the version to compare against")
    parser.add_argument("after", nargs="?", default=None, help="git revision (default: the working tree)")
    parser.add_argument("--quick", action="store_true", help="the test suite's sizes and one round")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--skip", default=None, help="leave out the rows whose names match this regular expression")
    parser.add_argument("--rounds", type=int, default=None,
                        help="time every row this many rounds (default: each group's own count)")
    parser.add_argument("--control", action="store_true",
                        help="also time a second copy of AFTER (A/A): the spread the same code shows in this run")
    parser.add_argument("--csv", type=Path, default=None, help="also write the table here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        before = bench_at(args.before, "workbench_before", Path(tmp))
        if args.after is None:
            sys.path.insert(0, str(ROOT))
            after = importlib.import_module("tools.bench")
        else:
            after = bench_at(args.after, "workbench_after", Path(tmp))
        table = after.versions_side_by_side(before, after, quick=args.quick, threads=args.threads, skip=args.skip,
                                            rounds=args.rounds, control=args.control)
    if args.csv is not None:
        table.to_csv(args.csv, index=False)
    print(table.to_string(index=False, float_format=lambda x: f"{x:.4g}"))
    compared = table.dropna(subset=["after/before"])
    worst = compared.loc[compared["after/before"].idxmax()]
    print(f"\n{len(compared)} rows compared; slowest change: {worst['benchmark']} x{worst['after/before']:.3f}; "
          f"{int(compared['slower'].sum())} rows more than {after.SLOWER - 1:.0%} slower"
          + (f", {int(compared['beyond_spread'].sum())} of them beyond the A/A spread" if args.control else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
