"""Run the decodesim CLI from a notebook and hand its JSON / CSV output to Python and pandas.

The notebooks never re-implement the model: every number they plot comes from the CLI, so a
notebook that still runs is a notebook that still agrees with the simulator.

Binary: $DECODESIM_BIN when set; otherwise `cargo build --release --locked` in the repository
(a no-op when the build is fresh, so the notebooks always run the code of the checkout) and
target/release/decodesim ($CARGO_TARGET_DIR honoured). Without cargo, an existing
target/release/decodesim is used as is. The data (models, systems, calibration) is the checkout
the binary was built from, or $DECODESIM_HOME.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
from functools import lru_cache
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parent.parent

# ipykernel sets CLICOLOR_FORCE / FORCE_COLOR for its own output; clap would then colour the
# CLI's help and errors with ANSI codes, so they are dropped from the child's environment.
_ENV = {k: v for k, v in os.environ.items() if k not in ("CLICOLOR_FORCE", "FORCE_COLOR")}
_ENV["NO_COLOR"] = "1"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")

# Long stderr (a bad trace, a build log) is cut so a failing cell stays readable.
_MAX_ERR_CHARS = 4000


class DecodesimError(RuntimeError):
    """The CLI exited non-zero; the message carries the command and its stderr."""


@lru_cache(maxsize=1)
def binary() -> Path:
    """Path of the decodesim executable, built on first use when cargo is available."""
    env = os.environ.get("DECODESIM_BIN")
    if env:
        path = Path(env)
        if not path.is_file():
            raise DecodesimError(f"DECODESIM_BIN={env!r} is not a file")
        return path
    target = Path(os.environ.get("CARGO_TARGET_DIR") or REPO / "target")
    built = (target if target.is_absolute() else REPO / target) / "release" / "decodesim"
    if shutil.which("cargo"):
        done = subprocess.run(
            ["cargo", "build", "--release", "--locked", "--quiet"],
            cwd=REPO, capture_output=True, text=True, stdin=subprocess.DEVNULL, env=_ENV,
        )
        if done.returncode != 0:
            raise DecodesimError("cargo build --release failed:\n" + done.stderr[-_MAX_ERR_CHARS:])
    if not built.is_file():
        raise DecodesimError(f"{built} does not exist and cargo is not on PATH to build it")
    return built


def _flag_args(flags: dict) -> list[str]:
    """`batch=16, nccl_proto="LL"` -> ["--batch", "16", "--nccl-proto", "LL"]; None is skipped,
    True/False become on/off (the CLI's switches take on|off), lists become a comma list."""
    out: list[str] = []
    for key, value in flags.items():
        if value is None:
            continue
        if isinstance(value, bool):
            value = "on" if value else "off"
        elif isinstance(value, (list, tuple)):
            value = ",".join(str(v) for v in value)
        out += ["--" + key.replace("_", "-"), str(value)]
    return out


def run(*args: str, **flags) -> str:
    """Run `decodesim ARGS --FLAG VALUE...` in the repository root and return its stdout."""
    cmd = [str(binary()), *map(str, args), *_flag_args(flags)]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          env=_ENV)
    if done.returncode != 0:
        shown = " ".join(cmd[1:])
        raise DecodesimError(
            f"decodesim {shown} exited {done.returncode}:\n{_ANSI.sub('', done.stderr)[-_MAX_ERR_CHARS:]}"
        )
    return done.stdout


def run_json(*args: str, **flags) -> dict:
    """Run a subcommand with `--format json` and parse its output."""
    return json.loads(run(*args, format="json", **flags))


def run_csv(*args: str, **flags) -> pd.DataFrame:
    """Run a subcommand with `--format csv` and read its output into a DataFrame."""
    return pd.read_csv(io.StringIO(run(*args, format="csv", **flags)))


def simulate(**flags) -> dict:
    """`decodesim simulate --format json` with the given scenario flags."""
    return run_json("simulate", **flags)


def breakdown(result: dict) -> dict:
    """Category -> exclusive time (µs) of one simulate / trace result."""
    return {row["category"]: row["time_us"] for row in result["breakdown"]}


@lru_cache(maxsize=None)
def subcommands(*path: str) -> tuple[str, ...]:
    """Names listed under "Commands:" by `decodesim PATH... --help`."""
    try:
        text = run(*path, "--help")
    except DecodesimError:
        return ()
    names, inside = [], False
    for line in _ANSI.sub("", text).splitlines():
        if line.strip() == "Commands:":
            inside = True
            continue
        if inside:
            # A name at two spaces; its description on the same line or, in clap's next-line
            # layout, on the lines below at a deeper indent. A blank or unindented line ends it.
            match = re.match(r"^ {2}(\S+)", line)
            if match:
                names.append(match.group(1))
            elif not line.startswith("   "):
                break
    return tuple(names)


def has_command(*path: str) -> bool:
    """True when `decodesim PATH...` exists in this build (e.g. has_command("whatif", "spec-decode"))."""
    return all(path[i] in subcommands(*path[:i]) for i in range(len(path)))


def repo_glob(pattern: str) -> list[str]:
    """Files under the repository matching a glob, relative to it, sorted (the CLI runs there)."""
    return sorted(str(p.relative_to(REPO)) for p in REPO.glob(pattern))
