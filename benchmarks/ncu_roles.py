"""Summarises Nsight Compute source counters of the 64-head Hopper kernel by role: the CSV that
`ncu --section SourceCounters --section WarpStateStats --page source --print-source sass --csv`
prints (gzipped or plain; `device_suite.sh ncu-source` writes one). Rows before the first
`USETMAXREG.DEALLOC` are the consumers' (and the kernel's entry), the rest the dequant's: the
dequant warpgroups give their registers back first thing.

    python3 benchmarks/ncu_roles.py ncu_source.csv.gz [--top 10]

For each role: its SASS rows, warp-stall samples and warp instructions executed; the share of each
stall reason (the `stall_*` columns, the not-issued ones apart); the rows with the most samples with
their top reasons; and the instructions executed by opcode (millions).
"""
import argparse
import collections
import csv
import gzip
import io
import sys

ROLE_SPLIT = "USETMAXREG.DEALLOC"


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def read_rows(path):
    """(header, rows) of the source table: ncu's own lines (==PROF== ...) and the program's output
    before the table skipped."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", errors="replace") as handle:
        lines = [line for line in handle if line.strip() and not line.startswith("==")]
    start = next((i for i, line in enumerate(lines) if line.startswith('"Address","Source"')), None)
    if start is None:
        raise ValueError(f"{path}: no source table (a header starting \"Address\",\"Source\")")
    table = list(csv.reader(io.StringIO("".join(lines[start:]))))
    header = table[0]
    return header, [row for row in table[1:] if len(row) == len(header)]


def opcode(source):
    """'@!P0 FMUL.FTZ R1, ...' -> 'FMUL'."""
    words = source.split()
    if words and words[0].startswith("@"):
        words = words[1:]
    return words[0].split(".")[0] if words else "?"


def summarise(header, rows, top):
    column = {name.strip(): i for i, name in enumerate(header)}
    source, samples, executed = column["Source"], column["Warp Stall Sampling (All Samples)"], column["Instructions Executed"]
    reasons = [i for i, name in enumerate(header) if name.startswith("stall_") and "(Not Issued)" not in name]
    split = next((k for k, row in enumerate(rows) if ROLE_SPLIT in row[source]), len(rows))
    lines = []
    for role, first, part in (("consumers and entry", 0, rows[:split]), ("dequant", split, rows[split:])):
        role_samples = sum(number(row[samples]) for row in part)
        lines.append(f"## {role}: {len(part)} SASS rows, {role_samples:.0f} samples, "
                     f"{sum(number(row[executed]) for row in part) / 1e6:.1f} M warp instructions")
        totals = {header[i]: sum(number(row[i]) for row in part) for i in reasons}
        all_reasons = sum(totals.values()) or 1.0
        lines += [f"   {name}: {value:.0f} ({100 * value / all_reasons:.1f}%)"
                  for name, value in sorted(totals.items(), key=lambda kv: -kv[1]) if value]
        for k in sorted(range(len(part)), key=lambda k: -number(part[k][samples]))[:top]:
            row = part[k]
            if not number(row[samples]):
                break
            causes = sorted(((number(row[i]), header[i][len("stall_"):]) for i in reasons), reverse=True)[:3]
            lines.append(f"   row {first + k}: {number(row[samples]):.0f} samples  {row[source].strip()[:60]}  "
                         + ", ".join(f"{name} {value:.0f}" for value, name in causes if value))
        by_opcode = collections.Counter()
        for row in part:
            by_opcode[opcode(row[source])] += number(row[executed])
        lines.append("   by opcode (M): " + ", ".join(f"{name} {value / 1e6:.1f}"
                                                    for name, value in by_opcode.most_common(24) if value))
    return lines


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("path")
    parser.add_argument("--top", type=int, default=10, help="rows with the most samples listed a role")
    args = parser.parse_args(argv)
    try:
        header, rows = read_rows(args.path)
        print("\n".join(summarise(header, rows, args.top)))
    except (ValueError, KeyError) as error:
        print(f"ncu_roles.py: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
