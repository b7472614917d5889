"""The recorded measurements in docs/data and the docs that cite them.

Every JSON file there is one recorded run: `meta.commit` names the commit it measured (checked for
its form only: many recorded commits were on branches since deleted, so not in this clone) and each
row carries `of_matmul` (its rate as a fraction of the bf16 matmul timed in the same run; null
only where the run timed no matmul and its `meta.note` says so), except the few files whose rows
are not kernel rates (named below, with why). Every docs/data path that
the README or docs/*.md names, brace groups expanded ("x_{a,b}.json") and placeholders ("<tree>")
matched as globs, must exist.
"""

import glob
import json
import math
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "docs", "data")

# Files whose rows are not a kernel's rate, so no fraction of the matmul applies.
WITHOUT_MATMUL_FRACTION = {
    "host_path_h200_7e01143.json": "host microseconds of the decode's call path",
    "host_path_h200_8d62e5e.json": "host microseconds of the decode's call path",
    "prefill_peer_sustained_h200_8b0fece.json": "burst and sustained times under the power limit "
    "(the fractions of that run are in clock_probe_h200_8b0fece.json)",
}


def recorded_runs():
    return sorted(glob.glob(os.path.join(DATA, "*.json")))


def test_there_are_recorded_runs():
    assert len(recorded_runs()) > 100


def problems_of_run(path):
    """What is wrong with one recorded run ([] when nothing)."""
    with open(path) as f:
        run = json.load(f)
    if not isinstance(run, dict) or not isinstance(run.get("meta"), dict):
        return ["not {meta, rows}"]
    problems = []
    commit = str(run["meta"].get("commit", ""))
    if not re.fullmatch(r"[0-9a-f]{7,40}", commit):
        problems.append(f"meta.commit is not a commit: {commit!r}")
    rows = run.get("rows")
    if not (isinstance(rows, list) and rows and all(isinstance(r, dict) for r in rows)):
        return problems + ["no rows"]
    if os.path.basename(path) in WITHOUT_MATMUL_FRACTION:
        return problems
    for row in rows:
        fraction = row.get("of_matmul", "missing")
        if fraction is None:
            # A run that timed no matmul says so, and why, in its note.
            if not re.search(r"\bno matmul\b", str(run["meta"].get("note", "")), re.IGNORECASE):
                problems.append(f"of_matmul null and no note says 'no matmul': {row}")
        elif isinstance(fraction, bool) or not (
                isinstance(fraction, (int, float)) and math.isfinite(fraction) and fraction > 0):
            problems.append(f"of_matmul {fraction!r}: {row}")
    return problems


def test_every_recorded_run_names_its_commit_and_its_fraction_of_the_matmul():
    problems = {os.path.basename(p): problems_of_run(p) for p in recorded_runs()}
    problems = {name: found for name, found in problems.items() if found}
    assert not problems, "\n".join(f"{name}: {found[0]}" for name, found in sorted(problems.items()))


def test_the_exempt_files_exist():
    for name in WITHOUT_MATMUL_FRACTION:
        assert os.path.exists(os.path.join(DATA, name)), name


def expand_braces(path):
    """'a_{x,y}_{1,2}.json' -> the four names (groups without nesting)."""
    group = re.search(r"\{([^{}]*)\}", path)
    if group is None:
        return [path]
    names = []
    for choice in group.group(1).split(","):
        names += expand_braces(path[:group.start()] + choice + path[group.end():])
    return names


def test_expand_braces():
    assert expand_braces("d/a_{x,y}_{1,2}.json") == ["d/a_x_1.json", "d/a_x_2.json", "d/a_y_1.json", "d/a_y_2.json"]
    assert expand_braces("d/plain.md") == ["d/plain.md"]


def cited_paths():
    """(pattern, doc) for every docs/data path the README and docs/*.md name, brace groups expanded;
    a placeholder ("<tree>", "<commit>") or "*" in a name stands for any text (a glob)."""
    cited = []
    for doc in sorted(glob.glob(os.path.join(ROOT, "docs", "*.md"))) + [os.path.join(ROOT, "README.md")]:
        with open(doc) as f:
            text = f.read()
        for match in re.finditer(r"docs/data/[A-Za-z0-9_.\-{},<>*]+", text):
            path = re.sub(r"<[^<>]*>", "*", match.group(0).rstrip(".,"))
            if path.count("{") != path.count("}") or "<" in path or ">" in path:
                continue
            for name in expand_braces(path):
                if not name.endswith(("_", "-", "/")):
                    cited.append((name, os.path.relpath(doc, ROOT)))
    return cited


def test_docs_cite_only_recorded_files():
    cited = cited_paths()
    assert len(cited) > 100
    assert any("*" in name for name, _ in cited), "the placeholders' patterns are checked too"
    missing = sorted({f"{name} (in {doc})" for name, doc in cited if not glob.glob(os.path.join(ROOT, name))})
    assert not missing, "cited but not in docs/data: " + "; ".join(missing)
