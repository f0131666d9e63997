"""The SM-sharing model (src/simcomm/engine/sharing.py) beside the measurements it is checked against: a GEMM (or
flash attention) slowed by a stand-in for a collective's kernel holding k CTAs, on an H200 and an H100
(src/simcomm/hardware/overlap_table.py). Prints docs/model.md's tables.

    python examples/engine/interference_vs_measured.py

Each cell: measured copy / spin slowdown -> the model's (percent of the time alone).
"""
from simcomm.engine.sharing import PERSISTENT_WAVES, attention_kernel, gemm_kernel, slowdown
from simcomm.hardware import overlap_table as table


def gemm_rows(rows, hbm: float) -> list[str]:
    out = ["| M | N | K | tiles (grid) | " + " | ".join(f"{k} CTAs" for k in table.CTAS) + " |",
           "| --- | --- | --- | --- | " + " | ".join("---" for _ in table.CTAS) + " |"]
    for m, n, k, us, copy, spin, *_ in rows:
        kernel = gemm_kernel(m, n, k, us * 1e-6, hbm)
        grid = "persistent" if kernel.tiles < PERSISTENT_WAVES * table.SMS else f"{kernel.tiles / table.SMS:.1f} waves"
        cells = [f"{c}/{s} -> {100 * (slowdown(kernel, ctas, 0, table.SMS, hbm) - 1):.0f}"
                 for ctas, c, s in zip(table.CTAS, copy, spin)]
        out.append(f"| {m} | {n} | {k} | {kernel.tiles} ({grid}) | " + " | ".join(cells) + " |")
    return out


def attention_rows(rows, hbm: float) -> list[str]:
    out = ["| batch | heads | seq | CTAs | " + " | ".join(f"{k} CTAs" for k in table.ATTENTION_CTAS) + " |",
           "| --- | --- | --- | --- | " + " | ".join("---" for _ in table.ATTENTION_CTAS) + " |"]
    for b, heads, _kv, seq, _us, copy, spin in rows:
        kernel = attention_kernel(b * heads, seq)
        cells = [f"{c}/{s} -> {100 * (slowdown(kernel, ctas, 0, table.SMS, hbm) - 1):.0f}"
                 for ctas, c, s in zip(table.ATTENTION_CTAS, copy, spin)]
        out.append(f"| {b} | {heads} | {seq} | {kernel.tiles} | " + " | ".join(cells) + " |")
    return out


def main() -> None:
    print("H200, GEMMs:\n")
    print("\n".join(gemm_rows(table.GEMM_ROWS, table.HBM_COPY_RATE)))
    print("\nH200, flash attention forward + backward:\n")
    print("\n".join(attention_rows(table.ATTENTION_ROWS, table.HBM_COPY_RATE)))
    print("\nH100, GEMMs:\n")
    print("\n".join(gemm_rows(table.H100_GEMM_ROWS, table.H100_HBM_COPY_RATE)))
    print("\nH100, flash attention forward + backward:\n")
    print("\n".join(attention_rows(table.H100_ATTENTION_ROWS, table.H100_HBM_COPY_RATE)))


if __name__ == "__main__":
    main()
