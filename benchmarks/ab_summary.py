"""Side-by-side table of the runs benchmarks/ab_trees.sh made: one row per shape, one column per
tree (the median over rounds of its time in us), then each tree's time over the first tree's.

    python3 benchmarks/ab_summary.py DIR LABEL [LABEL ...]

DIR holds LABEL/prefill_r<round>.json and LABEL/decode_r<round>.json as bench_prefill.py and
bench_decode.py write them. The bf16 matmul of each tree's runs is printed under the table, since
a time means little without the ceiling measured beside it.
"""
import json
import pathlib
import statistics
import sys

KINDS = {
    "prefill": ("T", "H", "topk"),
    "decode": ("T", "H", "candidates"),
}


def rounds(directory, label, kind):
    """[(round, run)] of a tree's <kind>_r<round>.json files, in round order."""
    paths = pathlib.Path(directory, label).glob(f"{kind}_r*.json")
    runs = [(int(path.stem.split("_r")[-1]), path) for path in paths]
    return [(round_, json.loads(path.read_text())) for round_, path in sorted(runs)]


def load_runs(directory, label, kind):
    """(times by shape: list of us over rounds, matmul TFLOP/s of each round)."""
    times, matmuls = {}, []
    for _, run in rounds(directory, label, kind):
        matmuls.append(run["meta"].get("matmul_tflops"))
        for row in run["rows"]:
            if "us" not in row:
                continue
            shape = tuple(row[k] for k in KINDS[kind])
            times.setdefault(shape, []).append(row["us"])
    return times, matmuls


def table(directory, labels, kind):
    runs = {label: load_runs(directory, label, kind) for label in labels}
    shapes = sorted({shape for times, _ in runs.values() for shape in times})
    if not shapes:
        return []
    names = "/".join(KINDS[kind])
    lines = [f"### {kind} (us, median over rounds; ratio to {labels[0]})", "",
             "| " + " | ".join([names] + labels + [f"{label} / {labels[0]}" for label in labels[1:]]) + " |",
             "|" + "---|" * (1 + 2 * len(labels) - 1)]
    for shape in shapes:
        medians = [statistics.median(runs[label][0][shape]) if shape in runs[label][0] else None for label in labels]
        cells = [f"{m:.1f}" if m is not None else "-" for m in medians]
        base = medians[0]
        ratios = [f"{m / base:.3f}" if m is not None and base else "-" for m in medians[1:]]
        lines.append(f"| {'/'.join(str(v) for v in shape)} | " + " | ".join(cells + ratios) + " |")
    lines.append("")
    for label in labels:
        matmuls = [m for m in runs[label][1] if m]
        if matmuls:
            lines.append(f"- {label}: bf16 matmul {', '.join(f'{m:.0f}' for m in matmuls)} TFLOP/s")
    lines.append("")
    return lines


def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 2
    directory, labels = argv[0], argv[1:]
    lines = []
    for kind in KINDS:
        lines += table(directory, labels, kind)
    print("\n".join(lines) if lines else "no benchmark runs found")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
