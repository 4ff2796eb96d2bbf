#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Tables, CSV and gnuplot scripts from run_cluster_bench.sh's raw results.

Input lines (raw.txt): "system hosts round bytes time_us wrong cpu_busy_pct
cpu_s_per_gb", one per size per run; time_us is the slowest rank's mean
iteration time; cpu_busy_pct the machine's over the whole run; cpu_s_per_gb
the machine's busy CPU seconds over that size's timed iterations per GB
(1e9 bytes) of vector all-reduced ("nan" where the run did not report it;
older raw files lack the column).
Per (system, hosts, size) the median time over rounds is reported (the
rounds were interleaved, so noise hits all systems alike). Bounds, with R
the link rate in bytes/s and S the size: in-network aggregation needs S/R
(each host sends S and receives S, full duplex); any host-based algorithm
(ring, and OpenMPI's choices) needs 2(n-1)/n * S/R. Standard library only.
"""
import argparse
import collections
import math
import os
import statistics

NAMES = {"tributary": "Tributary", "tributary-sparse": "Tributary block-sparse",
         "tributary-tree": "Tributary tree of daemons",
         "gloo": "Gloo ring (TCP)", "mpi": "OpenMPI (TCP BTL)"}


def human(size):
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift} {unit}iB"
    return f"{size} B"


def main():
    ap = argparse.ArgumentParser()
    for flag in ("raw", "out", "rate", "systems"):
        ap.add_argument("--" + flag, required=True)
    for flag in ("rate-bps", "mtu", "loss", "rounds", "iters", "warmup"):
        ap.add_argument("--" + flag, type=int, required=True)
    # Ranks per host: a ring of n*K ranks crosses each host link with
    # 2(nK-1)/(nK) of S, in-network aggregation with the node level with S.
    ap.add_argument("--ranks-per-host", type=int, default=1)
    a = ap.parse_args()
    k = a.ranks_per_host
    systems = a.systems.split()
    rate = a.rate_bps / 8.0  # bytes/s

    rows = []
    with open(a.raw) as f:
        for line in f:
            f = line.split()
            s, n, r, size, t, wrong, cpu = f[:7]
            per_gb = float(f[7]) if len(f) > 7 else math.nan
            rows.append((s, int(n), int(r), int(size), float(t), int(wrong), float(cpu), per_gb))
    if not rows:
        print("summarize: no results")
        return 1

    with open(os.path.join(a.out, "results.csv"), "w") as f:
        f.write("system,hosts,round,bytes,time_us,algbw_GBps,busbw_GBps,wrong,"
                "run_cpu_busy_pct,cpu_s_per_gb,link_rate_bps,loss_permille\n")
        for s, n, r, size, t, wrong, cpu, per_gb in rows:
            algbw = size / (t * 1e3)
            f.write(f"{s},{n},{r},{size},{t:.2f},{algbw:.4f},{algbw * 2 * (n * k - 1) / (n * k):.4f},"
                    f"{wrong},{cpu:.0f},{'' if math.isnan(per_gb) else f'{per_gb:.3f}'},"
                    f"{a.rate_bps},{a.loss}\n")

    times = collections.defaultdict(list)
    cpus = collections.defaultdict(dict)
    cpu_per_gb = collections.defaultdict(list)
    for s, n, r, size, t, wrong, cpu, per_gb in rows:
        times[(s, n, size)].append(t)
        cpus[(s, n)][r] = cpu
        if not math.isnan(per_gb):
            cpu_per_gb[(s, n, size)].append(per_gb)
    med = {k: statistics.median(v) for k, v in times.items()}
    hosts = sorted({n for _, n, *_ in rows})
    sizes = sorted({x[3] for x in rows})

    out = []
    p = out.append
    p(f"Links {a.rate} ({rate / 1e9:.4f} GB/s) each direction, MTU {a.mtu}, loss "
      f"{a.loss}/1000; fp32 sum; {a.iters} iterations after {a.warmup} warm-up per size; "
      f"median of {a.rounds} interleaved rounds; {os.cpu_count()} CPUs.\n")
    for n in hosts:
        p(f"### n = {n}\n")
        for s in systems:
            if not any((s, n, size) in med for size in sizes):
                continue
            p(f"{NAMES.get(s, s)}, {n} hosts" + (f" x {k} ranks" if k > 1 else "") + ":\n")
            p("```")
            p(f"# {'size':>10}  {'count':>12}  {'type':>6}  {'redop':>5}  {'time':>10}  "
              f"{'algbw':>6}  {'busbw':>6}  {'#wrong':>6}")
            p(f"# {'(B)':>10}  {'(elements)':>12}  {'':>6}  {'':>5}  {'(us)':>10}  "
              f"{'(GB/s)':>6}  {'(GB/s)':>6}  {'':>6}")
            bus = []
            for size in sizes:
                t = med.get((s, n, size))
                if t is None:
                    continue
                algbw = size / (t * 1e3)
                bus.append(algbw * 2 * (n * k - 1) / (n * k))
                p(f"  {size:>10}  {size // 4:>12}  {'float':>6}  {'sum':>5}  {t:>10.1f}  "
                  f"{algbw:>6.3f}  {bus[-1]:>6.3f}  {0:>6}")
            p(f"# Avg bus bandwidth    : {statistics.mean(bus) if bus else 0:.4f}")
            p("```\n")
        # Comparison against the peers and the link-bound limits.
        ring_bound = 2 * (n * k - 1) / (n * k)
        head = "| size | Tributary algbw | % of S/R |"
        rule = "|---:|---:|---:|"
        for s in systems:
            if s == "tributary":
                continue
            bound_name = "S/R" if s.startswith("tributary") else "ring bound"
            head += f" {NAMES[s]} algbw | % of {bound_name} | t_{s} / t_tributary |"
            rule += "---:|---:|---:|"
        p(f"Comparison, n = {n} (algbw GB/s; link-bound limit: S/R = {rate / 1e9:.4f} GB/s "
          f"algbw in-network, {rate / ring_bound / 1e9:.4f} GB/s for a ring):\n")
        p(head)
        p(rule)
        for size in sizes:
            tt = med.get(("tributary", n, size))
            line = f"| {human(size)} | "
            if tt:
                line += f"{size / (tt * 1e3):.4f} | {100 * size / rate / (tt * 1e-6):.0f}% |"
            else:
                line += "- | - |"
            for s in systems:
                if s == "tributary":
                    continue
                tp = med.get((s, n, size))
                if tp:
                    bound = 1 if s.startswith("tributary") else ring_bound
                    line += (f" {size / (tp * 1e3):.4f} | "
                             f"{100 * bound * size / rate / (tp * 1e-6):.0f}% | "
                             f"{tp / tt:.2f} |" if tt else f" {size / (tp * 1e3):.4f} | - | - |")
                else:
                    line += " - | - | - |"
            p(line)
        p("")
        cpu_line = ", ".join(
            f"{NAMES.get(s, s)} {statistics.median(cpus[(s, n)].values()):.0f}%"
            for s in systems if (s, n) in cpus)
        p(f"Machine CPU busy during the runs (median over rounds, all CPUs, whole sweep): "
          f"{cpu_line}.\n")
        shown = [s for s in systems if any((s, n, size) in cpu_per_gb for size in sizes)]
        if shown:
            # Same window for every system: the timed iterations of one size,
            # every process and the kernel's network work on the machine.
            p(f"Machine CPU seconds per GB all-reduced, n = {n} (busy time of all CPUs over "
              f"each size's timed iterations, per 1e9 bytes of vector x iterations; median "
              f"over rounds; lower is better; '-' where the timed iterations lasted under "
              f"0.5 s, too short for /proc/stat's 10 ms ticks):\n")
            p("| size | " + " | ".join(NAMES.get(s, s) for s in shown) + " |")
            p("|---:|" + "---:|" * len(shown))
            for size in sizes:
                cells = [f"{statistics.median(cpu_per_gb[(s, n, size)]):.2f}"
                         if (s, n, size) in cpu_per_gb else "-" for s in shown]
                p(f"| {human(size)} | " + " | ".join(cells) + " |")
            p("")

        # gnuplot: algbw vs size per system, with both link-bound lines.
        dat = f"plot-n{n}.dat"
        with open(os.path.join(a.out, dat), "w") as f:
            f.write("# bytes " + " ".join(systems) + "\n")
            for size in sizes:
                vals = []
                for s in systems:
                    t = med.get((s, n, size))
                    vals.append(f"{size / (t * 1e3):.5f}" if t else "NaN")
                f.write(f"{size} " + " ".join(vals) + "\n")
        plots = [f"'{dat}' using 1:{i + 2} with linespoints lw 2 title '{NAMES.get(s, s)}'"
                 for i, s in enumerate(systems)]
        plots.append(f"{rate / 1e9} with lines dt 2 lc rgb 'black' title 'in-network bound S/R'")
        plots.append(f"{rate / ring_bound / 1e9} with lines dt 3 lc rgb 'gray40' "
                     f"title 'ring bound 2(n-1)/n S/R'")
        with open(os.path.join(a.out, f"plot-n{n}.gp"), "w") as f:
            f.write(f"set terminal pngcairo size 900,560 noenhanced\n"
                    f"set output 'cluster-n{n}.png'\n"
                    f"set title 'All-reduce fp32 sum, {n} hosts, links {a.rate}, MTU {a.mtu}, "
                    f"loss {a.loss}/1000'\n"
                    f"set logscale x 2\nset format x '%.0b%B'\nset xlabel 'size (bytes)'\n"
                    f"set ylabel 'algbw (GB/s)'\nset key below\nset grid\nset yrange [0:*]\n"
                    f"set datafile missing 'NaN'\n"
                    f"plot " + ", \\\n     ".join(plots) + "\n")
    text = "\n".join(out) + "\n"
    with open(os.path.join(a.out, "summary.md"), "w") as f:
        f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
