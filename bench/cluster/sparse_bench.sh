#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# sparse_bench.sh: block-sparse all-reduce (Options::block_sparse) against
# the dense path and Gloo's ring on the emulated cluster, at input
# densities from 0 to 100%, and where the lines cross.
#
# For each density, run_cluster_bench.sh builds the cluster (--hosts hosts
# behind --rate links) and runs Tributary dense, Tributary block-sparse
# and Gloo interleaved for --rounds rounds on the same inputs: each rank
# keeps each --density-block block of the fp32 pattern with probability
# density/100, independently of the other ranks, and zeroes the rest.
# Every result is checked element by element. The fragment that a rank
# declares zero is a block of the library's payload size, so --payload
# (passed to the ranks) and --density-block should agree.
#
# Prints, and writes to OUT/sparse.md: per density the median time of
# each system, the fraction of blocks non-zero on some rank (what the
# results carry back), the speed-ups, and the crossover densities: the
# highest density at which block-sparse still beats the dense path by 5%
# and the one at which it stops beating Gloo (interpolated between the
# measured densities; "above all" when it never stops).
#
# Needs root (exit 77 otherwise). Exit: 0 all runs exact, 1 otherwise, 2 usage.
set -u -o pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BUILD="$HERE/../../build"
HOSTS=8; SIZE=16M; DENSITIES="0 1 5 10 25 50 100"; ROUNDS=3; ITERS=3; RATE=200mbit
PAYLOAD=8192; OUT="$PWD/sparse-bench-$(date +%Y%m%d-%H%M%S)"; SYSTEMS="tributary tributary-sparse gloo"
usage() {
  cat << EOF
Usage: $0 [options]
  --build DIR        build directory (default: $HERE/../../build)
  --hosts N          hosts (default $HOSTS)
  --size SIZE        all-reduce size (default $SIZE)
  --densities "..."  percent per rank (default "$DENSITIES")
  --rounds N         interleaved rounds (default $ROUNDS)   --iters N  (default $ITERS)
  --rate RATE        link rate (default $RATE)
  --payload BYTES    payload per packet = the zero block (default $PAYLOAD)
  --systems "..."    (default "$SYSTEMS")
  --out DIR          results (default ./sparse-bench-<date>)
EOF
}
while (($#)); do
  case $1 in
    --build) BUILD=$2; shift ;;
    --hosts) HOSTS=$2; shift ;;
    --size) SIZE=$2; shift ;;
    --densities) DENSITIES=$2; shift ;;
    --rounds) ROUNDS=$2; shift ;;
    --iters) ITERS=$2; shift ;;
    --rate) RATE=$2; shift ;;
    --payload) PAYLOAD=$2; shift ;;
    --systems) SYSTEMS=$2; shift ;;
    --out) OUT=$2; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "sparse_bench: unknown option $1" >&2; usage >&2; exit 2 ;;
  esac
  shift
done
[[ $(id -u) -eq 0 ]] || { echo "sparse_bench: needs root (network namespaces)" >&2; exit 77; }
mkdir -p "$OUT" || exit 2

failures=0
for d in $DENSITIES; do
  echo "# density $d%" >&2
  bash "$HERE/run_cluster_bench.sh" --build "$BUILD" --hosts "$HOSTS" --min "$SIZE" --max "$SIZE" \
    --rounds "$ROUNDS" --iters "$ITERS" --warmup 1 --rate "$RATE" --systems "$SYSTEMS" \
    --density "$d" --density-block "$PAYLOAD" --trib-args "--payload $PAYLOAD" \
    --out "$OUT/d$d" > "$OUT/d$d.log" 2>&1
  rc=$?
  if ((rc == 77)); then cat "$OUT/d$d.log" >&2; exit 77; fi
  ((rc == 0)) || { failures=$((failures + 1)); tail -20 "$OUT/d$d.log" >&2; }
done

python3 - "$OUT" "$HOSTS" "$SIZE" "$RATE" "$PAYLOAD" "$ROUNDS" "$ITERS" $DENSITIES << 'EOF' ||
import os, statistics, sys
out, hosts, size, rate, payload, rounds, iters = sys.argv[1:8]
densities = [float(d) for d in sys.argv[8:]]
n = int(hosts)
rows = []
for d in densities:
    raw = os.path.join(out, f"d{sys.argv[8 + densities.index(d)]}", "raw.txt")
    times = {}
    if os.path.exists(raw):
        for line in open(raw):
            s, t = line.split()[0], line.split()[4]
            times.setdefault(s, []).append(float(t))
    med = {s: statistics.median(v) for s, v in times.items()}
    rows.append((d, med))
lines = [f"Block-sparse all-reduce, {n} hosts, links {rate}, {size} fp32 sum, zero block = "
         f"payload {payload} B; each rank keeps each block with probability density/100 "
         f"(independently); median of {rounds} interleaved rounds of {iters} iterations; "
         f"{os.cpu_count()} CPUs.", "",
         "| density per rank | blocks non-zero on some rank | dense (ms) | block-sparse (ms) | "
         "Gloo ring (ms) | dense / sparse | Gloo / sparse |",
         "|---:|---:|---:|---:|---:|---:|---:|"]
def ms(x):
    return f"{x / 1000:.1f}" if x else "-"
for d, med in rows:
    union = 100 * (1 - (1 - d / 100) ** n)
    dn, sp, gl = med.get("tributary"), med.get("tributary-sparse"), med.get("gloo")
    lines.append(f"| {d:g}% | {union:.1f}% | {ms(dn)} | {ms(sp)} | {ms(gl)} | "
                 f"{dn / sp if dn and sp else float('nan'):.2f} | "
                 f"{gl / sp if gl and sp else float('nan'):.2f} |")
def crossover(key, threshold):
    # The density where (other / sparse) falls through `threshold`,
    # interpolated between neighbouring measured densities.
    pts = [(d, m[key] / m["tributary-sparse"]) for d, m in rows
           if m.get(key) and m.get("tributary-sparse")]
    for (d0, r0), (d1, r1) in zip(pts, pts[1:]):
        if r0 >= threshold > r1:
            return f"{d0 + (d1 - d0) * (r0 - threshold) / (r0 - r1):.1f}% per rank"
    if pts and all(r >= threshold for _, r in pts):
        return f"above all measured densities (up to {pts[-1][0]:g}%)"
    if pts and all(r < threshold for _, r in pts):
        return f"below all measured densities (from {pts[0][0]:g}%)"
    return "not measured"
lines += ["", f"Crossover against the dense path (block-sparse at least 5% faster up to): "
          f"{crossover('tributary', 1.05)}.",
          f"Crossover against Gloo (block-sparse faster up to): {crossover('gloo', 1.0)}.", ""]
text = "\n".join(lines)
open(os.path.join(out, "sparse.md"), "w").write(text + "\n")
print(text)
EOF
  failures=$((failures + 1))
echo "# results: $OUT/sparse.md; per density: $OUT/d*/summary.md, logs in $OUT/d*/logs" >&2
((failures == 0)) || { echo "sparse_bench: $failures failure(s)" >&2; exit 1; }
