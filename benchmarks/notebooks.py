"""Wall time of each executed notebook (the "under two minutes on 2 CPU
cores"). Prints one JSON line per notebook. A timing claim, so a benchmark: the
tests execute the notebooks and check what they print, never how long they take.

    python -P benchmarks/notebooks.py [--limit-s 120]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import nbclient
import nbformat

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit-s", type=float, default=120.0)
    args = parser.parse_args()
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        start = time.perf_counter()
        nbclient.NotebookClient(nb, timeout=3600, kernel_name="python3",
                                resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()
        wall_s = time.perf_counter() - start
        print(json.dumps({"notebook": path.name, "wall_s": round(wall_s, 1),
                          "limit_s": args.limit_s, "within": wall_s < args.limit_s}),
              flush=True)


if __name__ == "__main__":
    main()
