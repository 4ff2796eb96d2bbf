#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Tables (summary.md) and gnuplot scripts from bench/sim/run_sim.sh's CSVs.

Reads OUT/{validation,scale,sizes,scenarios}.csv (whichever exist) and the
emulated cluster's measured sweep; writes OUT/summary.md and OUT/*.gp (PNG).
The ring is simulated up to the largest n run_sim.sh gives it; past that
its time comes from the ring's cost model 2(n-1)(a + S/(n b)), with a and b
fitted to the two largest simulated rings, marked "(model)".
"""
import argparse
import csv
import os
from collections import defaultdict


def read(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return list(csv.DictReader(f))


def human(b):
    b = int(b)
    for unit, m in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= m and b % m == 0:
            return f"{b // m} {unit}"
    return f"{b} B"


def validation(out, rows, measured):
    meas = defaultdict(list)
    for r in measured:
        if int(r["bytes"]) == 64 << 20:
            meas[(r["system"], int(r["hosts"]))].append(float(r["algbw_GBps"]))
    sim = {(r["system"], int(r["hosts"])): float(r["algbw_GBps"]) for r in rows}
    lines = ["| n | Tributary sim | measured | diff | ring sim | Gloo ring measured | diff |",
             "|--:|--:|--:|--:|--:|--:|--:|"]
    for n in sorted({k[1] for k in sim}):
        cells = [str(n)]
        for s, m in (("tributary", "tributary"), ("ring", "gloo")):
            v = sim.get((s, n))
            mv = sum(meas[(m, n)]) / len(meas[(m, n)]) if meas[(m, n)] else None
            cells += [f"{v:.4f}" if v else "-", f"{mv:.4f}" if mv else "-",
                      f"{(v / mv - 1) * 100:+.1f}%" if v and mv else "-"]
        lines.append("| " + " | ".join(cells) + " |")
    return ("### Validation: the emulated cluster's star, 200 Mbit/s, 64 MiB (algbw GB/s)\n\n" +
            "\n".join(lines) + "\n")


def ring_model(points):
    """a, b of t = 2(n-1)(a + S/(n b)) from the two largest (n, S, t)."""
    (n1, s1, t1), (n2, s2, t2) = sorted(points)[-2:]
    # per-step time p = a + c / b, c = S / n
    p1, p2 = t1 / (2 * (n1 - 1)), t2 / (2 * (n2 - 1))
    c1, c2 = s1 / n1, s2 / n2
    if c1 == c2:
        return None
    inv_b = (p1 - p2) / (c1 - c2)
    return p1 - c1 * inv_b, inv_b


def scale(out, rows):
    by = defaultdict(dict)
    for r in rows:
        by[(int(r["hosts"]), int(r["bytes"]))][r["system"]] = r
    hosts = sorted({k[0] for k in by})
    ring_pts = [(n, b, float(d["ring"]["time_us"]) * 1e-6) for (n, b), d in by.items()
                if "ring" in d and b == 64 << 20]
    model = ring_model(ring_pts) if len(ring_pts) >= 2 else None
    lines = ["| n | levels | Tributary busbw | DBT busbw | ring busbw | Tributary / ring | "
             "Tributary / DBT | 8 B: Tributary | DBT | ring | sim wall (s) |",
             "|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"]
    dat = []
    for n in hosts:
        big = by.get((n, 64 << 20), {})
        small = by.get((n, 8), {})
        t = big.get("tributary")
        if not t:
            continue
        tb = float(t["busbw_GBps"])
        db = float(big["tree"]["busbw_GBps"]) if "tree" in big else None
        if "ring" in big:
            rb, rtag = float(big["ring"]["busbw_GBps"]), ""
        elif model:
            a, inv_b = model
            s = 64 << 20
            tt = 2 * (n - 1) * (a + s / n * inv_b)
            rb, rtag = s / tt / 1e9 * 2 * (n - 1) / n, " (model)"
        else:
            rb, rtag = None, ""
        lat = {k: float(v["time_us"]) for k, v in small.items()}
        rlat = f"{lat['ring']:.1f}" if "ring" in lat else "-"
        if "ring" not in lat and model:
            rlat = f"{2 * (n - 1) * (model[0] + 8 / n * model[1]) * 1e6:.1f} (model)"
        lines.append(
            f"| {n} | {t['tree_levels']} | {tb:.1f} | {db:.1f} | "
            f"{rb:.1f}{rtag} | {tb / rb:.2f} | {tb / db:.2f} | {lat.get('tributary', 0):.1f} us | "
            f"{lat.get('tree', 0):.1f} us | {rlat} us | {t['wall_s']} |" if db and rb else
            f"| {n} | {t['tree_levels']} | {tb:.1f} | - | - | - | - | - | - | - | {t['wall_s']} |")
        dat.append((n, tb, db or 0, rb or 0, lat.get("tributary", 0), lat.get("tree", 0),
                    lat.get("ring", 0)))
    with open(os.path.join(out, "scale.dat"), "w") as f:
        for row in dat:
            f.write(" ".join(str(x) for x in row) + "\n")
    with open(os.path.join(out, "scale.gp"), "w") as f:
        f.write("""set terminal png size 900,420
set output 'sim-scale.png'
set multiplot layout 1,2
set logscale x 2
set xtics (64, 256, 1024, 4096, 16384)
set xlabel 'hosts (one rank each)'
set key bottom right
set title 'busbw at 64 MiB (GB/s), 400 Gb/s links'
plot 'scale.dat' u 1:2 w lp t 'Tributary', '' u 1:3 w lp t 'double binary tree', \\
     '' u 1:($4>0?$4:1/0) w lp t 'ring'
set logscale y
set title '8-byte all-reduce latency (us)'
plot 'scale.dat' u 1:5 w lp t 'Tributary', '' u 1:6 w lp t 'double binary tree', \\
     '' u 1:($7>0?$7:1/0) w lp t 'ring'
unset multiplot
""")
    return ("### Scale: fat tree, 400 Gb/s links, 64 MiB busbw (GB/s) and 8-byte latency\n\n" +
            "\n".join(lines) + "\n")


def sizes(out, rows):
    by = defaultdict(dict)
    n = None
    for r in rows:
        by[int(r["bytes"])][r["system"]] = r
        n = r["hosts"]
    lines = ["| size | Tributary busbw | DBT busbw | ring busbw | Tributary / DBT | "
             "Tributary / ring | Tributary time | DBT time | ring time |",
             "|--:|--:|--:|--:|--:|--:|--:|--:|--:|"]
    dat = []
    for b in sorted(by):
        d = by[b]
        if not all(k in d for k in ("tributary", "tree", "ring")):
            continue
        v = {k: max(float(d[k]["busbw_GBps"]), 1e-12) for k in ("tributary", "tree", "ring")}
        t = {k: float(d[k]["time_us"]) for k in ("tributary", "tree", "ring")}
        lines.append(f"| {human(b)} | {v['tributary']:.4g} | {v['tree']:.4g} | {v['ring']:.4g} | "
                     f"{v['tributary'] / v['tree']:.2f} | {v['tributary'] / v['ring']:.2f} | "
                     f"{t['tributary']:.1f} us | {t['tree']:.1f} us | {t['ring']:.1f} us |")
        dat.append((b, v["tributary"], v["tree"], v["ring"]))
    with open(os.path.join(out, "sizes.dat"), "w") as f:
        for row in dat:
            f.write(" ".join(str(x) for x in row) + "\n")
    with open(os.path.join(out, "sizes.gp"), "w") as f:
        f.write(f"""set terminal png size 640,420
set output 'sim-sizes.png'
set logscale x 2
set logscale y
set xlabel 'all-reduce size (bytes)'
set ylabel 'busbw (GB/s)'
set key top left
set title 'busbw vs size, {n} hosts, fat tree, 400 Gb/s'
plot 'sizes.dat' u 1:2 w lp t 'Tributary', '' u 1:3 w lp t 'double binary tree', '' u 1:4 w lp t 'ring'
""")
    return (f"### Sizes: {n} hosts, fat tree, 400 Gb/s links\n\n" + "\n".join(lines) + "\n")


def scenarios(out, rows):
    base = {}
    for r in rows:
        if r["scenario"] == "base" and r["system"] == "tributary":
            base = r
    lines = ["| scenario | system | fabric | job | time | busbw (GB/s) | vs base | retransmissions "
             "| drops | wrong |", "|---|---|---|--:|--:|--:|--:|--:|--:|--:|"]
    for r in rows:
        rel = (f"{float(r['busbw_GBps']) / float(base['busbw_GBps']):.2f}" if base else "-")
        lines.append(f"| {r['scenario']} | {r['system']} | {r['fabric']} ({r['levels']} levels) | "
                     f"{r['job']} | {float(r['time_us']):.1f} us | {float(r['busbw_GBps']):.2f} | "
                     f"{rel} | {r['retransmissions']} | {r['drops']} | {r['wrong']} |")
    n = rows[0]["hosts"] if rows else "?"
    return (f"### Scenarios: {n} hosts, 400 Gb/s links\n\n" + "\n".join(lines) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--measured", required=True)
    a = ap.parse_args()
    parts = []
    v = read(os.path.join(a.out, "validation.csv"))
    if v:
        parts.append(validation(a.out, v, read(a.measured)))
    for name, fn in (("scale", scale), ("sizes", sizes), ("scenarios", scenarios)):
        rows = read(os.path.join(a.out, name + ".csv"))
        if rows:
            parts.append(fn(a.out, rows))
    with open(os.path.join(a.out, "summary.md"), "w") as f:
        f.write("\n".join(parts))
    print("\n".join(parts))


if __name__ == "__main__":
    main()
