"""The peer benchmark's platform: N hosts, each with a private link (bandwidth, latency) to one switch.

Writes SimGrid's platform XML and hostfile for smpirun; allreduce.py builds the same star for simcomm (one switch
dimension, the latency of a host -> switch -> host route). Usage: python star_platform.py N OUTDIR [BW_GBps LAT_us].
"""
from __future__ import annotations

import sys
from pathlib import Path

BANDWIDTH_GBPS = 50.0  # per host link, GB/s
LATENCY_US = 1.0  # per host link, so a host -> switch -> host route has twice this


def write_platform(n: int, outdir, bandwidth_gbps: float = BANDWIDTH_GBPS, latency_us: float = LATENCY_US):
    """(platform.xml, hostfile) paths for n hosts."""
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    xml = out / f"star{n}.xml"
    xml.write_text(
        '<?xml version="1.0"?>\n<!DOCTYPE platform SYSTEM "https://simgrid.org/simgrid.dtd">\n'
        '<platform version="4.1">\n'
        f'  <cluster id="star" prefix="h" suffix="" radical="0-{n - 1}" speed="1Gf" '
        f'bw="{bandwidth_gbps:g}GBps" lat="{latency_us:g}us"/>\n'
        '</platform>\n')
    hosts = out / f"hosts{n}"
    hosts.write_text("".join(f"h{i}\n" for i in range(n)))
    return xml, hosts


if __name__ == "__main__":
    args = sys.argv[1:]
    if len(args) not in (2, 4):
        sys.exit(__doc__)
    extra = [float(a) for a in args[2:]]
    print(*write_platform(int(args[0]), args[1], *extra))
