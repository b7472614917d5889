"""Summarises Nsight Compute source counters of the Hopper kernels by role: the CSV that
`ncu --section SourceCounters --section WarpStateStats --page source --print-source sass --csv`
prints (gzipped or plain; `device_suite.sh ncu-source` writes one). The 64-head kernel (the
default, `--kernel hopper`): rows before the first `USETMAXREG.DEALLOC` are the consumers' (and the
kernel's entry), the rest the dequant's: the dequant warpgroups give their registers back first
thing. The small-heads kernel (`--kernel small`): rows before the first `USETMAXREG` are the
entry's, then each `USETMAXREG.TRY_ALLOC` starts the converters' rows (they claim registers) and
each `USETMAXREG.DEALLOC` the attend warpgroup's (it gives registers back), up to the next
`USETMAXREG`; code the roles share after their branches counts as the role laid out before it.
With 32-head units (`--kernel small32`) the attend warpgroup claims registers and the converters
give theirs back, so the two markers name the other role.

    python3 benchmarks/ncu_roles.py ncu_source.csv.gz [--top 10] [--kernel small | small32]
    python3 benchmarks/ncu_roles.py skeleton.csv.gz copies.csv.gz main.csv.gz   # side by side

For each role: its SASS rows, warp-stall samples and warp instructions executed; the share of each
stall reason (the `stall_*` columns, the not-issued ones apart); the rows with the most samples with
their top reasons; and the instructions executed by opcode (millions).
Given several files (builds of the same kernel profiled alike), it prints each role's totals, stall
reasons and warp-stall samples by opcode side by side instead, one column a file: which waits grow
from one build to the next. Rows are matched by opcode, not by address, since the builds' SASS
differ; a stall sample is a warp seen waiting, so a column's samples grow with the launch's time
and its warps.
"""
import argparse
import collections
import csv
import gzip
import io
import os
import sys

ROLE_SPLIT = "USETMAXREG.DEALLOC"
SMALL_ROLES = (("USETMAXREG.TRY_ALLOC", "converters"), ("USETMAXREG.DEALLOC", "attend"))
# At 32 heads a unit the attend warpgroup (O^T: 128 registers + 48) claims registers above the
# launch's 168 and the converters give theirs back: the markers' roles swap.
SMALL32_ROLES = (("USETMAXREG.TRY_ALLOC", "attend"), ("USETMAXREG.DEALLOC", "converters"))


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


def columns(header):
    """Indices of the source text, the stall samples, the instructions executed and the stall
    reasons (the not-issued columns left out: they are a subset of the others)."""
    column = {name.strip(): i for i, name in enumerate(header)}
    reasons = [i for i, name in enumerate(header) if name.startswith("stall_") and "(Not Issued)" not in name]
    return column["Source"], column["Warp Stall Sampling (All Samples)"], column["Instructions Executed"], reasons


def roles(rows, source, kernel="hopper"):
    """[(role, index of its first row, its rows)]. The 64-head kernel: the consumers (and the
    kernel's entry) up to the first register release, the dequant after. The small-heads kernel:
    the entry, the converters and the attend warpgroup, each role's rows merged over its regions
    (the module's docstring)."""
    if kernel == "hopper":
        split = next((k for k, row in enumerate(rows) if ROLE_SPLIT in row[source]), len(rows))
        return [("consumers and entry", 0, rows[:split]), ("dequant", split, rows[split:])]
    markers = SMALL32_ROLES if kernel == "small32" else SMALL_ROLES
    owner, current = [], "entry"
    for row in rows:
        current = next((name for marker, name in markers if marker in row[source]), current)
        owner.append(current)
    found = set(owner)
    if not all(name in found for _, name in markers):
        raise ValueError("no USETMAXREG.TRY_ALLOC and USETMAXREG.DEALLOC rows: not the small-heads kernel's source")
    return [(name, owner.index(name), [row for row, who in zip(rows, owner) if who == name])
            for name in ["entry"] + [name for _, name in SMALL_ROLES] if name in found]


RoleTotals = collections.namedtuple("RoleTotals", "samples executed reasons samples_by_opcode executed_by_opcode")


def role_totals(header, part, source, samples, executed, reasons):
    """A role's rows summed: its stall samples, warp instructions executed, samples per stall
    reason ({column name: samples}), and samples and instructions per opcode (Counters)."""
    samples_by_opcode, executed_by_opcode = collections.Counter(), collections.Counter()
    for row in part:
        samples_by_opcode[opcode(row[source])] += number(row[samples])
        executed_by_opcode[opcode(row[source])] += number(row[executed])
    return RoleTotals(sum(number(row[samples]) for row in part), sum(number(row[executed]) for row in part),
                      {header[i]: sum(number(row[i]) for row in part) for i in reasons},
                      samples_by_opcode, executed_by_opcode)


def summarise(header, rows, top, kernel="hopper"):
    source, samples, executed, reasons = columns(header)
    lines = []
    for role, first, part in roles(rows, source, kernel):
        totals = role_totals(header, part, source, samples, executed, reasons)
        lines.append(f"## {role}: {len(part)} SASS rows, {totals.samples:.0f} samples, "
                     f"{totals.executed / 1e6:.1f} M warp instructions")
        all_reasons = sum(totals.reasons.values()) or 1.0
        lines += [f"   {name}: {value:.0f} ({100 * value / all_reasons:.1f}%)"
                  for name, value in sorted(totals.reasons.items(), key=lambda kv: -kv[1]) if value]
        for k in sorted(range(len(part)), key=lambda k: -number(part[k][samples]))[:top]:
            row = part[k]
            if not number(row[samples]):
                break
            causes = sorted(((number(row[i]), header[i][len("stall_"):]) for i in reasons), reverse=True)[:3]
            lines.append(f"   row {first + k}: {number(row[samples]):.0f} samples  {row[source].strip()[:60]}  "
                         + ", ".join(f"{name} {value:.0f}" for value, name in causes if value))
        lines.append("   by opcode (M): " + ", ".join(f"{name} {value / 1e6:.1f}"
                                                    for name, value in totals.executed_by_opcode.most_common(24) if value))
    return lines


def label_of(path):
    """'out/ncu_lh1_source.csv.gz' -> 'lh1'."""
    name = os.path.basename(path)
    for suffix in (".gz", ".csv", "_source"):
        name = name[: -len(suffix)] if name.endswith(suffix) else name
    return name[len("ncu_"):] if name.startswith("ncu_") else name


def compare(paths, top, kernel="hopper"):
    tables = []
    for path in paths:
        header, rows = read_rows(path)
        source, samples, executed, reasons = columns(header)
        tables.append({role: role_totals(header, part, source, samples, executed, reasons)
                       for role, _, part in roles(rows, source, kernel)})
    labels = [label_of(path) for path in paths]
    lines = []
    for role in tables[0]:
        cells = [table[role] for table in tables]
        lines += [f"## {role}", "", "| | " + " | ".join(labels) + " |", "|---|" + "---|" * len(labels)]
        lines.append("| samples | " + " | ".join(f"{c.samples:.0f}" for c in cells) + " |")
        lines.append("| warp instructions (M) | " + " | ".join(f"{c.executed / 1e6:.1f}" for c in cells) + " |")
        for field, prefix in (("reasons", ""), ("samples_by_opcode", "samples at ")):
            maps = [getattr(c, field) for c in cells]
            keys = sorted({k for m in maps for k, v in m.items() if v}, key=lambda k: -max(m.get(k, 0) for m in maps))
            lines += [f"| {prefix}{k} | " + " | ".join(f"{m.get(k, 0):.0f}" for m in maps) + " |" for k in keys[:top]]
        lines.append("")
    return lines


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="+", metavar="path", help="one file: its summary; several: side by side")
    parser.add_argument("--top", type=int, default=10,
                        help="rows with the most samples listed a role (side by side: stall reasons and opcodes)")
    parser.add_argument("--kernel", choices=("hopper", "small", "small32"), default="hopper",
                        help="whose roles: the 64-head kernel's (default), the small-heads kernel's at 16 "
                             "heads a unit (small) or at 32 (small32: the register markers' roles swap)")
    args = parser.parse_args(argv)
    try:
        if len(args.paths) > 1:
            print("\n".join(compare(args.paths, args.top, args.kernel)))
        else:
            header, rows = read_rows(args.paths[0])
            print("\n".join(summarise(header, rows, args.top, args.kernel)))
    except (ValueError, KeyError) as error:
        print(f"ncu_roles.py: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
