"""Extract the public nccl-tests tables of measured-nccl-tests.md into one nccl-tests log per measured sweep.

    python calibration/extract.py /path/to/measured-nccl-tests.md

Writes calibration/nccl-tests/<id>.log for every entry of SWEEPS below: the rows exactly as the source printed
them (nccl-tests' columns), or, for sources that publish only busbw (Azure's guide, a PyTorch sweep), rows whose
time is derived from busbw (t = S x factor / busbw, marked as derived in the log). systems.yaml says which preset,
nodes, ranks and algorithm each log is compared with. The .md file is the data source; nothing is interpolated.
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
}
# busbw-only sources: id -> (section, column index in the markdown table, collective, ranks)
BUSBW = {"s3-azure-h100-ar": (3, 1, "all_reduce", 8), "s3-azure-h200-ar": (3, 2, "all_reduce", 8),
         "s3-azure-a100-ar": (3, 3, "all_reduce", 8)}
LABEL = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def sections(text: str) -> dict[int, str]:
    parts = re.split(r"^## (\d+)\. ", text, flags=re.M)
    return {int(parts[i]): parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def blocks(section: str) -> list[list[str]]:
    return [b.strip("\n").splitlines() for b in re.findall(r"```\n(.*?)```", section, flags=re.S)]


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
    """The guide prints 2^k bytes rounded: 4K and 256K are binary, 65K (65536), 33M (2^25) and 134M are decimal."""
    m = re.match(r"(\d+)([KMG])", label.strip())
    x, u = int(m.group(1)), "KMG".index(m.group(2)) + 1
    if x & (x - 1) == 0:
        return x * 1024 ** u
    return 1 << round(math.log2(x * 1000 ** u))


def busbw_rows(section: str, column: int, collective: str, ranks: int) -> list[str]:
    factor = 2 * (ranks - 1) / ranks if collective == "all_reduce" else (ranks - 1) / ranks
    out = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 4 or not re.match(r"\d+[KMG]$", cells[0]):
            continue
        size, busbw = label_size(cells[0]), float(cells[column])
        if size < 64 << 10:  # two-decimal busbw of tiny sizes carries too little precision
            continue
        t = size * factor / (busbw * 1e9) * 1e6
        algbw = busbw / factor
        out.append(f"{size:12d}  {size // 4:12d}     float     sum      -1  {t:7.2f}  {algbw:6.2f}  {busbw:6.2f}  "
                   f"   N/A  {t:7.2f}  {algbw:6.2f}  {busbw:6.2f}     N/A")
    return out


def main(md: str) -> None:
    text = Path(md).read_text()
    secs = sections(text)
    out = HERE / "nccl-tests"
    out.mkdir(exist_ok=True)
    for name, (num, title) in SWEEPS.items():
        rows = [r for b in blocks(secs[num]) for r in rows_under(b, title)]
        (out / f"{name}.log").write_text(f"# {name}: measured-nccl-tests.md section {num}"
                                         + (f", table '{title.strip('# ')}'" if title else "") + "\n"
                                         + HEADER + "\n" + UNITS + "\n" + "\n".join(rows) + "\n")
    for name, (num, col, kind, ranks) in BUSBW.items():
        rows = busbw_rows(secs[num], col, kind, ranks)
        (out / f"{name}.log").write_text(f"# {name}: measured-nccl-tests.md section {num}; in-place busbw only, "
                                         f"time derived as S x 2(n-1)/n / busbw\n" + HEADER + "\n" + UNITS + "\n"
                                         + "\n".join(rows) + "\n")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python calibration/extract.py /path/to/measured-nccl-tests.md")
    main(sys.argv[1])
