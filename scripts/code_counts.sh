#!/usr/bin/env bash
# Code-shape counts of src/ (the renovation's measures): functions over 80 (and 150) lines and
# those of them whose doc comment gives no "Long because" reason,
# files over 800 lines, glob imports outside test modules (`use a::*;`), `pub` items, and error sites that carry only a string (`Error::Other(String)` /
# `Error::Scenario(String)`) among all error sites. Run from anywhere: scripts/code_counts.sh
# [--list] (with --list, the long functions and files are named, those without a reason marked).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 - "$@" <<'PY'
import os, re, sys

listing = "--list" in sys.argv[1:]
files = sorted(
    os.path.join(d, f)
    for d, _, fs in os.walk("src")
    for f in fs
    if f.endswith(".rs")
)
def has_reason(lines, i):
    """Whether the doc comment right above line i (above any attributes) says why it is long."""
    j = i - 1
    while j >= 0 and lines[j].lstrip().startswith("#["):
        j -= 1
    while j >= 0 and lines[j].lstrip().startswith("///"):
        if "Long because" in lines[j]:
            return True
        j -= 1
    return False


fn_re = re.compile(r"^(\s*)(pub(\([^)]*\))?\s+)?(const\s+|async\s+|unsafe\s+|extern\s+\"C\"\s+)*fn\s+(\w+)")
long_fns, long_files = [], []
pub_items = pub_crate = 0
string_only = all_sites = 0
string_only_by_file = {}
glob_re = re.compile(r"^\s*(pub(\([^)]*\))?\s+)?use\s+[\w:]+::\*;")
globs = []
site_re = re.compile(r"\b(Error|TraceError|PlotError)::[A-Z]\w*|\bError::field\(")
string_re = re.compile(r"\bError::(Other|Scenario)\(")
for path in files:
    lines = open(path, encoding="utf-8").read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) > 800:
        long_files.append((len(lines), path))
    # A test module's `use super::*;` is the convention; other glob imports are counted.
    in_tests, depth = False, 0
    for i, line in enumerate(lines):
        if re.match(r"^\s*mod tests\s*\{", line):
            in_tests, depth = True, 0
        if in_tests:
            depth += line.count("{") - line.count("}")
            in_tests = depth > 0
            continue
        if glob_re.match(line):
            globs.append(f"{path}:{i + 1}")
    for i, line in enumerate(lines):
        m = fn_re.match(line)
        if m and not line.rstrip().endswith(";"):
            indent = m.group(1)
            # rustfmt closes a body at the fn's own indentation; a one-line fn ends here
            if line.rstrip().endswith("}"):
                continue
            for j in range(i + 1, len(lines)):
                if lines[j] == indent + "}":
                    n = j - i + 1
                    if n > 80:
                        long_fns.append((n, f"{path}:{i + 1} {m.group(5)}", has_reason(lines, i)))
                    break
        code = line.split("//")[0]
        s = code.lstrip()
        if s.startswith("pub(crate)") or s.startswith("pub(super)") or s.startswith("pub(in"):
            pub_crate += 1
        elif s.startswith("pub "):
            pub_items += 1
        if path == "src/error.rs":
            continue  # the definitions, not sites
        all_sites += len(site_re.findall(code))
        k = len(string_re.findall(code))
        string_only += k
        if k:
            string_only_by_file[path] = string_only_by_file.get(path, 0) + k

print(f"source files:                 {len(files)}")
print(f"lines:                        {sum(len(open(p).read().splitlines()) for p in files)}")
print(f"functions over 80 lines:      {len(long_fns)}")
print(f"functions over 150 lines:     {sum(1 for n, _, _ in long_fns if n > 150)}")
print(f"functions over 80 lines without a reason: {sum(1 for _, _, r in long_fns if not r)}")
print(f"files over 800 lines:         {len(long_files)}")
print(f"glob imports (not in tests):  {len(globs)}")
print(f"pub items (plain `pub`):      {pub_items}")
print(f"pub(crate)/pub(super) items:  {pub_crate}")
print(f"error sites:                  {all_sites}")
print(f"string-only error sites:      {string_only}  (Error::Other / Error::Scenario)")
if listing:
    print("\nfunctions over 80 lines:")
    for n, what, reason in sorted(long_fns, reverse=True):
        print(f"  {n:5} {what}{'' if reason else '  (no reason)'}")
    print("\nfiles over 800 lines:")
    for n, what in sorted(long_files, reverse=True):
        print(f"  {n:5} {what}")
    print("\nglob imports outside test modules:")
    for what in globs:
        print(f"  {what}")
    print("\nstring-only error sites by file:")
    for p, k in sorted(string_only_by_file.items(), key=lambda x: -x[1]):
        print(f"  {k:5} {p}")
PY
