"""CPU per governed save and search of one source tree, for comparing two trees run by run.

Runs ``profile_governed.run`` without its stage timers (they cost tens of microseconds per stage
on a VM where the thread-CPU clock is a system call) and prints one line: the process's CPU
microseconds per save and per search (gateway, client and canned kagent in one process).
Alternate two trees, B A B A …, and compare medians; this script may come from either tree, the
code measured is the one PYTHONPATH names:

    PYTHONPATH=/path/to/before .venv/bin/python benchmarks/cpu_per_call.py
    PYTHONPATH=/path/to/after  .venv/bin/python benchmarks/cpu_per_call.py
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import profile_governed

from sidecar import evloop
from sidecar.logs import configure_logging


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--state", default="sqlite", help="sqlite, or a postgresql:// URL")
    args = parser.parse_args()
    configure_logging("warning")
    results = evloop.run(profile_governed.run(args.state, args.requests, None))
    print(" ".join(f"{name}={us:.0f}" for name, us in results.items() if " " not in name), "µs CPU per request")


if __name__ == "__main__":
    main()
