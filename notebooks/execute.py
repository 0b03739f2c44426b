"""Execute notebooks headless; exit non-zero when any cell fails (what .ci/run calls).

    python notebooks/execute.py                  # every notebooks/*.ipynb; outputs discarded
    python notebooks/execute.py --inplace A.ipynb  # write the outputs back (before committing)

Each notebook runs in its own folder (so `import decodesim` finds notebooks/decodesim.py) on the
kernel of the Python running this script (ipykernel's native "python3" spec), so the virtualenv
that runs this script is the one the notebooks import from.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

HERE = Path(__file__).resolve().parent
# Per-cell limit: a cell that runs longer is a hang (the notebooks take seconds in total).
CELL_TIMEOUT_S = 300


def _shown(path: Path) -> str:
    try:
        return str(path.relative_to(HERE.parent))
    except ValueError:
        return str(path)


def execute(path: Path, inplace: bool) -> bool:
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb, timeout=CELL_TIMEOUT_S, kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
        # The kernel is local and short-lived; its warning about TCP without encryption is noise.
        extra_arguments=["--IPKernelApp.log_level=ERROR"],
        # No per-cell timestamps in the committed notebooks: re-running must not churn the diff.
        record_timing=False,
    )
    start = time.monotonic()
    try:
        client.execute()
    except CellExecutionError as err:
        # nbclient's message already holds the failing cell's source and traceback.
        print(f"FAILED {_shown(path)} after {time.monotonic() - start:.1f} s\n{err}",
              file=sys.stderr)
        return False
    print(f"ok     {_shown(path)} in {time.monotonic() - start:.1f} s")
    if inplace:
        nbformat.write(nb, path)
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path,
                        help="notebooks to run (default: every notebooks/*.ipynb)")
    parser.add_argument("--inplace", action="store_true",
                        help="write the executed notebooks (with their outputs) back")
    args = parser.parse_args()
    paths = [p.resolve() for p in args.notebooks] or sorted(HERE.glob("*.ipynb"))
    if not paths:
        print(f"no notebooks under {HERE}", file=sys.stderr)
        return 1
    results = [execute(p, args.inplace) for p in paths]
    passed = sum(results)
    # The plain closing line test harnesses read: how many notebooks ran clean.
    print(f"notebooks: {passed} passed, {len(results) - passed} failed")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
