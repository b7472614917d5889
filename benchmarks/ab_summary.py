"""Side-by-side table of the runs benchmarks/ab_trees.sh made: one row per shape, one column per
tree (the median over rounds of its time in us), then each tree's time over the first tree's.

    python3 benchmarks/ab_summary.py DIR LABEL [LABEL ...]

DIR holds LABEL/prefill_r<round>.json and LABEL/decode_r<round>.json as bench_prefill.py and
bench_decode.py write them. The bf16 matmul of each tree's runs is printed under the table, since
a time means little without the ceiling measured beside it, and so are the rows whose rounds
differ by more than 3% (a disturbed round) and trees with fewer rounds than the others. Decode
rows with a forced plan are keyed by it too.

Under the table, each tree's fastest round over the first tree's fastest, per shape: the runs of
one build can fall in two modes a few percent apart (the 64-head prefill at T = 4096 on an H100,
docs/benchmarks.md), and a median over three or four rounds then depends on how many rounds fell
in each; when the medians' ratio and the fastest rounds' disagree, the difference is the modes'.
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


# A round whose time for a row differs from another round's by more than this share of their
# median is listed under the table: with two rounds the median is their mean, and one disturbed
# round moves it.
SPREAD_FLAG = 0.03


def row_key(row, kind):
    """A row's shape, and for a decode row with a forced plan (bench_decode.py --splits /
    --head-tiles) that plan, so that forced rows are not pooled with the planned row."""
    key = tuple(row[k] for k in KINDS[kind])
    if row.get("forced"):
        key += (f"s{row.get('num_splits')} ht{row.get('head_tiles')}",)
    return key


def load_runs(directory, label, kind):
    """(times by row key: list of us over rounds, matmul TFLOP/s of each round)."""
    times, matmuls = {}, []
    for round_, run in rounds(directory, label, kind):
        matmuls.append(run["meta"].get("matmul_tflops"))
        seen = set()
        for row in run["rows"]:
            if "us" not in row:
                continue
            key = row_key(row, kind)
            if key in seen:
                raise ValueError(f"{label}/{kind}_r{round_}.json has two rows for {key}")
            seen.add(key)
            times.setdefault(key, []).append(row["us"])
    return times, matmuls


def spread(values):
    """(max - min) / median of a row's times over rounds (0 for one round)."""
    return (max(values) - min(values)) / statistics.median(values) if len(values) > 1 else 0.0


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
    if any(len(values) > 1 for times, _ in runs.values() for values in times.values()):
        for label in labels[1:]:
            pairs = [(shape, min(runs[label][0][shape]) / min(runs[labels[0]][0][shape]))
                     for shape in shapes if runs[label][0].get(shape) and runs[labels[0]][0].get(shape)]
            if pairs:
                lines.append(f"- fastest rounds, {label} / {labels[0]}: " +
                             ", ".join(f"{'/'.join(str(v) for v in shape)} {ratio:.3f}" for shape, ratio in pairs))
    for label in labels:
        matmuls = [m for m in runs[label][1] if m]
        if matmuls:
            lines.append(f"- {label}: {len(runs[label][1])} rounds, bf16 matmul "
                         f"{', '.join(f'{m:.0f}' for m in matmuls)} TFLOP/s")
    counts = {label: len(runs[label][1]) for label in labels}
    if len(set(counts.values())) > 1:
        lines.append(f"- unequal rounds (a tree failed or ran out of time): {counts}")
    for label in labels:
        for shape in shapes:
            values = runs[label][0].get(shape, [])
            if spread(values) > SPREAD_FLAG:
                lines.append(f"- spread {spread(values):.1%} over rounds: {label} {'/'.join(str(v) for v in shape)}: "
                             f"{', '.join(f'{v:.1f}' for v in values)} us")
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
