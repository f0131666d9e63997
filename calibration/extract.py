"""Extract the public nccl-tests tables of measured-nccl-tests.md into one nccl-tests log per measured sweep.

    python calibration/extract.py /path/to/measured-nccl-tests.md

Writes calibration/nccl-tests/<id>.log for every entry of SWEEPS below: the rows exactly as the source printed
them under the source's own column header (nccl-tests' columns, or the trimmed size/time/algbw/busbw of section 6);
for sources that publish only busbw (Azure's guide, a PyTorch sweep: BUSBW) or single points (POINTS, STATED), rows whose
time is derived from busbw (t = S x factor / busbw, marked as derived in the log) or, for a latency point, is the
stated time. systems.yaml says which preset, nodes, ranks and algorithm each log is compared with. The .md file is
the data source; nothing is interpolated.

Left out (not in SWEEPS/BUSBW/POINTS): sections 9 and 14 (IB SHARP / CollNet, which simcomm does not model),
12 (GCP GPUDirect-TCPX/TCPXO: a TCP offload stack, not an RDMA NIC), 15 (4 GPUs with 4x 200G per node: no preset
has that layout; section 8's p4de has one, aws-p4de), 16 (two PCIe A100s on different sockets: no preset has that layout), and the peak-only tables 4, 5(a)
(4-8 of a node's GPUs) and 5(d) (4 EFA nodes, NCCL's algorithm chosen by AWS's tuner plugin).
"""
from __future__ import annotations

import math
import re
import sys
from pathlib import Path

HERE = Path(__file__).parent
HEADER = ("#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   "
          "busbw #wrong")
UNITS = ("#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  "
         "(GB/s)")

# id -> (section number, title substring in the code block or None for the whole block)
SWEEPS = {
    "s1-h100-ar-nvls": (1, "all_reduce, NVLS enabled"),
    "s1-h100-ar-ring": (1, "all_reduce, forced Ring"),
    "s1-h100-ag-ring": (1, "all_gather, Ring"),
    "s1-h100-rs-ring": (1, "reduce_scatter, Ring"),
    "s2-h100-ar": (2, "# all_reduce"),
    "s2-h100-ag": (2, "# all_gather"),
    "s2-h100-rs": (2, "# reduce_scatter"),
    "s2-h100-a2a": (2, "# alltoall"),
    "s8-p4de-ar": (8, None),
    "s10-p5-ar": (10, None),
    "s11-nebius-ar": (11, None),
    "s13-h100x10-ar": (13, "# all_reduce, 80 ranks"),
    "s13-h100x10-ag": (13, "# all_gather, 80 ranks"),
    "s13-h100x10-a2a": (13, "# alltoall, 80 ranks"),
    "s13-h100x2-a2a": (13, "# alltoall, 2 nodes"),
    "s6-a100-ar": (6, None),
}
# busbw-only sources: id -> (section, column index in the markdown table, collective, ranks)
BUSBW = {"s3-azure-h100-ar": (3, 1, "all_reduce", 8), "s3-azure-h200-ar": (3, 2, "all_reduce", 8),
         "s3-azure-a100-ar": (3, 3, "all_reduce", 8), "s5-h200-torch-ar": (5, 1, "all_reduce", 8)}
# point sources: id -> (section, the config cell, column index, collective, ranks)
POINTS = {f"s7-ndmv4-{tag}-{short}": (7, config, col, kind, ranks)
          for tag, config, ranks in (("1n", "1 node x 8 GPU", 8), ("2n1", "2 nodes x 1 GPU", 2),
                                     ("2n8", "2 nodes x 8 GPU", 16))
          for short, col, kind in (("ag", 3, "all_gather"), ("ar", 4, "all_reduce"), ("a2a", 5, "all_to_all"))}
# stated points: id -> (section, the row's first cell, collective, ranks, size); the row's third cell is busbw
STATED = {"s5-h200-16g-ar-nvls": (5, "all-reduce, `NCCL_NVLS_ENABLE=1`", "all_reduce", 8, 16 << 30),
          "s5-h200-16g-ar-ring": (5, "all-reduce, `NCCL_NVLS_ENABLE=0`", "all_reduce", 8, 16 << 30),
          "s5-h200-16g-ag": (5, "all-gather", "all_gather", 8, 16 << 30),
          "s5-h200-16g-rs": (5, "reduce-scatter", "reduce_scatter", 8, 16 << 30)}
LABEL = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def sections(text: str) -> dict[int, str]:
    parts = re.split(r"^## (\d+)\. ", text, flags=re.M)
    return {int(parts[i]): parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def blocks(section: str) -> list[list[str]]:
    return [b.strip("\n").splitlines() for b in re.findall(r"```\n(.*?)```", section, flags=re.S)]


def column_header(lines: list[str]) -> list[str]:
    """The block's own column header lines ("# size ..." and "# (B) ..."), or nccl-tests' full header."""
    own = [line for line in lines if line.startswith("#") and line.lstrip("#").split()[:1] in (["size"], ["(B)"])]
    return own[:2] if own else [HEADER, UNITS]


def rows_under(lines: list[str], title: str | None) -> list[str]:
    """Data rows of the block, from the title line to the next title (every row when title is None)."""
    out, inside = [], title is None
    for line in lines:
        if line.startswith("#"):
            words = line.lstrip("#").split()
            column_header = bool(words) and (words[0] in ("size", "(B)"))
            if title is not None and not column_header:
                inside = title in line
            continue
        if inside and line.strip():
            out.append(line)
    return out


def label_size(label: str) -> int:
    """The guide prints 2^k bytes rounded: 4K and 256K are binary, 65K (65536), 33M (2^25) and 134M are decimal;
    32KiB, 2MiB, 8GiB (section 5) are binary."""
    m = re.match(r"(\d+)([KMG])(i?)B?$", label.strip())
    x, u = int(m.group(1)), "KMG".index(m.group(2)) + 1
    if x & (x - 1) == 0 or m.group(3):
        return x * 1024 ** u
    return 1 << round(math.log2(x * 1000 ** u))


def factor(collective: str, ranks: int) -> float:
    """nccl-tests' busbw / algbw."""
    return 2 * (ranks - 1) / ranks if collective == "all_reduce" else (ranks - 1) / ranks


def derived_row(size: int, collective: str, ranks: int, busbw: float | None = None, t: float | None = None) -> str:
    """An nccl-tests row (out-of-place and in-place alike) from busbw (GB/s) or a time (us)."""
    f = factor(collective, ranks)
    t = size * f / (busbw * 1e9) * 1e6 if t is None else t
    algbw = size / (t * 1e-6) / 1e9
    busbw = algbw * f
    count = size // 4 // (ranks if collective in ("all_gather", "all_to_all") else 1)
    op = "sum" if collective == "all_reduce" else "none"
    figures = f"{t:7.2f}  {algbw:6.2f}  {busbw:6.2f}     N/A"
    return f"{size:12d}  {count:12d}     float  {op:>6}      -1  {figures}  {figures}"


def busbw_rows(section: str, column: int, collective: str, ranks: int) -> list[str]:
    out = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not re.match(r"\d+[KMG](iB)?$", cells[0]):
            continue
        size, busbw = label_size(cells[0]), float(cells[column].removesuffix("GBps"))
        if size < 64 << 10:  # two-decimal busbw of tiny sizes carries too little precision
            continue
        out.append(derived_row(size, collective, ranks, busbw=busbw))
    return out


def point_rows(section: str, config: str, column: int, collective: str, ranks: int) -> list[str]:
    """Rows of a point table: `| config | latency (us) or busbw (GB/s) | size | values... |`."""
    out = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) <= column or cells[0] != config:
            continue
        size, value = label_size(cells[2]), float(cells[column])
        out.append(derived_row(size, collective, ranks, t=value) if cells[1].startswith("latency")
                   else derived_row(size, collective, ranks, busbw=value))
    return out


def stated_rows(section: str, first: str, collective: str, ranks: int, size: int) -> list[str]:
    """The row of a `| what | algo | busbw | ... |` table whose first cell is `first`, as an nccl-tests row."""
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and cells[0] == first:
            return [derived_row(size, collective, ranks, busbw=float(cells[2].removesuffix("GBps")))]
    raise ValueError(f"no row {first!r}")


def main(md: str) -> None:
    text = Path(md).read_text()
    secs = sections(text)
    out = HERE / "nccl-tests"
    out.mkdir(exist_ok=True)
    for name, (num, title) in SWEEPS.items():
        found = [(b, rows_under(b, title)) for b in blocks(secs[num])]
        found = [(b, rows) for b, rows in found if rows]
        rows = [r for _, rows in found for r in rows]
        (out / f"{name}.log").write_text(f"# {name}: measured-nccl-tests.md section {num}"
                                         + (f", table '{title.strip('# ')}'" if title else "") + "\n"
                                         + "\n".join(column_header(found[0][0])) + "\n" + "\n".join(rows) + "\n")
    for name, (num, col, kind, ranks) in BUSBW.items():
        rows = busbw_rows(secs[num], col, kind, ranks)
        (out / f"{name}.log").write_text(f"# {name}: measured-nccl-tests.md section {num}; busbw only, time "
                                         f"derived as S x {'2(n-1)/n' if kind == 'all_reduce' else '(n-1)/n'} / "
                                         f"busbw\n" + HEADER + "\n" + UNITS + "\n" + "\n".join(rows) + "\n")
    for name, (num, first, kind, ranks, size) in STATED.items():
        (out / f"{name}.log").write_text(f"# {name}: measured-nccl-tests.md section {num}, '{first}' ({kind}, "
                                         f"{ranks} ranks, 16 GiB); time derived as S x busbw factor / busbw\n"
                                         + HEADER + "\n" + UNITS + "\n"
                                         + "\n".join(stated_rows(secs[num], first, kind, ranks, size)) + "\n")
    for name, (num, config, col, kind, ranks) in POINTS.items():
        rows = point_rows(secs[num], config, col, kind, ranks)
        (out / f"{name}.log").write_text(f"# {name}: measured-nccl-tests.md section {num}, '{config}' {kind} "
                                         f"points; latency rows give the time, busbw rows a time derived as S x "
                                         f"busbw factor / busbw\n" + HEADER + "\n" + UNITS + "\n"
                                         + "\n".join(rows) + "\n")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python calibration/extract.py /path/to/measured-nccl-tests.md")
    main(sys.argv[1])
