"""Turns the timing runs of one benchmarks/ab_trees.sh call into recorded data files: one JSON a
tree, every round's rows with the round, that round's bf16 matmul and the row's fraction of it,
and a meta block that says what was run (device, commit, date, the tree's variant and build
flags, the exact command, the matmul of each round).

    python3 benchmarks/record_ab.py AB_DIR --kind prefill --prefix hopper_ab14 \\
        --date 2026-12-02 --command "the exact call" \\
        main=2140931 "vf=32667d6=hopper-vote-flags: ..." "fma=bda4f51=...@-DCAKE_HOPPER_FMA_EXP2"

AB_DIR is the call's ab/ folder (LABEL/<kind>_r<round>.json, as ab_trees.sh leaves them; unpack
ab.tar.gz first). Each tree is LABEL=COMMIT[=VARIANT][@NVCC_EXTRA]: the label of the call, the
commit its tree was exported from, what the tree is (default: the label; no '@' in it) and its
build flags.
Files go to docs/data/<prefix>_<device>_<label>_<commit>.json (--out for another folder; device
as `h200` from the runs' "NVIDIA H200"); an existing file is kept unless --force. A label without
runs is an error: a tree whose tests failed was not timed, and recording it would record nothing.
Where the call wrote <label>/tree.txt (ab_trees.sh does), the flags given after @ must be among the
tree's build flags, and the file's lines (source, file hash, flags) go into meta.tree; the runs'
own meta (command as run, environment, repeats, the matmul at the run's end, ...) into meta.run.
"""
import argparse
import json
import pathlib
import sys

from ab_summary import rounds

ROOT = pathlib.Path(__file__).resolve().parents[1]


def parse_tree(spec):
    """LABEL=COMMIT[=VARIANT][@NVCC_EXTRA] -> (label, commit, variant, nvcc_extra)."""
    spec, _, extra = spec.partition("@")
    parts = spec.split("=", 2)
    if len(parts) < 2 or not parts[0] or not parts[1]:
        raise ValueError(f"tree {spec!r}: expected LABEL=COMMIT[=VARIANT][@NVCC_EXTRA]")
    label, commit = parts[0], parts[1]
    variant = parts[2] if len(parts) == 3 and parts[2] else label
    return label, commit, variant, extra


def device_tag(name):
    """'NVIDIA H200' -> 'h200', 'NVIDIA H100 80GB HBM3' -> 'h100' (the first word that names a
    chip: a letter and digits; else the last word), lower case: the data files' device part."""
    if not name:
        return "gpu"
    words = name.split()
    for word in words:
        if len(word) > 1 and word[0].isalpha() and word[1:].isdigit():
            return word.lower()
    return words[-1].lower()


def tree_record(ab_dir, label):
    """What ab_trees.sh wrote of the tree in <label>/tree.txt ({} for calls before it did)."""
    path = pathlib.Path(ab_dir, label, "tree.txt")
    if not path.exists():
        return {}
    return dict(line.split(": ", 1) for line in path.read_text().splitlines() if ": " in line)


def check_flags(label, extra, tree):
    """The @NVCC_EXTRA given here must be the tree's own build flags (tree.txt's "tree flags"; the
    call's common AB_NVCC_EXTRA apart), so that a flagged build is not recorded as a plain one."""
    if "tree flags" in tree:
        if set(extra.split()) != set(tree["tree flags"].split()):
            raise ValueError(f"tree {label!r}: built with {tree['tree flags'].strip()!r}, not {extra!r}")
    elif tree and not set(extra.split()) <= set(tree.get("nvcc flags", "").split()):
        raise ValueError(f"tree {label!r}: built with {tree.get('nvcc flags', '').strip()!r}, not with {extra!r}")


# The runs' own meta kept beside what the call says (bench_prefill.run_meta): how they ran.
RUN_META_KEYS = ("command", "environment", "repeats", "warmup", "matmul_tflops_end", "launch_floor_us", "max_splits",
                 "splits", "head_tiles", "kernel_override", "torch_ops_file")


def collect(ab_dir, label, kind):
    """(rows of every round with round / matmul / of_matmul, [[round, matmul]], the runs' meta)."""
    runs = rounds(ab_dir, label, kind)
    if not runs:
        raise ValueError(f"no {kind} runs of tree {label!r} in {ab_dir}")
    rows, matmuls, meta = [], [], {}
    for round_, run in runs:
        matmul = run["meta"].get("matmul_tflops")
        meta = meta or run["meta"]
        matmuls.append([round_, matmul])
        for row in run["rows"]:
            row = dict(row, round=round_, matmul_tflops=matmul)
            if "of_matmul" not in row and matmul and "tflops" in row:
                row["of_matmul"] = row["tflops"] / matmul
            rows.append(row)
    return rows, matmuls, meta


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("ab_dir")
    parser.add_argument("trees", nargs="+", help="LABEL=COMMIT[=VARIANT][@NVCC_EXTRA]")
    parser.add_argument("--kind", choices=("prefill", "decode"), default="prefill")
    parser.add_argument("--prefix", required=True, help="the data files' name start, e.g. hopper_ab14")
    parser.add_argument("--date", required=True)
    parser.add_argument("--command", required=True, help="the exact device call")
    parser.add_argument("--out", default=str(ROOT / "docs" / "data"))
    parser.add_argument("--force", action="store_true", help="overwrite data files that exist")
    args = parser.parse_args(argv)
    try:
        trees = [parse_tree(spec) for spec in args.trees]
        collected = {label: collect(args.ab_dir, label, args.kind) for label, *_ in trees}
        records = {label: tree_record(args.ab_dir, label) for label, *_ in trees}
        for label, _, _, extra in trees:
            check_flags(label, extra, records[label])
        paths = {label: pathlib.Path(args.out) / f"{args.prefix}_{device_tag(collected[label][2].get('device'))}_"
                                                 f"{label}_{commit}.json" for label, commit, *_ in trees}
        existing = [str(path) for path in paths.values() if path.exists() and not args.force]
        if existing:
            raise ValueError(f"would overwrite {', '.join(existing)} (another --prefix, or --force)")
    except ValueError as error:
        print(f"record_ab.py: {error}", file=sys.stderr)
        return 2
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for label, commit, variant, extra in trees:
        rows, matmuls, run_meta = collected[label]
        meta = {"device": run_meta.get("device"), "commit": commit, "torch": run_meta.get("torch"), "date": args.date,
                "label": label, "variant": variant, "nvcc_extra": extra, "command": args.command,
                "matmul_tflops_by_round": matmuls,
                "run": {key: run_meta[key] for key in RUN_META_KEYS if key in run_meta}}
        if records[label]:
            meta["tree"] = records[label]
        path = paths[label]
        path.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
        print(f"{path}: {len(rows)} rows over {len(matmuls)} rounds")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
