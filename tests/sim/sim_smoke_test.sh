#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The scale study at 64 hosts (bench/sim/run_sim.sh --quick), then checks
# on its figures. The simulation is deterministic, so these are exact
# properties of the model and the code under it, not timings:
#  - every Tributary run verified every element (run_sim.sh fails otherwise)
#    and no rank failed, under 1% loss and a failed aggregator too;
#  - nothing beats physics: Tributary's busbw is at most 2x the link rate
#    (2(n-1)/n of it), a ring's and a tree's at most 1x;
#  - the model still reproduces the emulated cluster's measured 64 MiB
#    figures within 10% (docs/data/cluster-200mbit-sweep.csv);
#  - the same arguments give the same figures (a rerun, compared);
#  - the summary has its tables and gnuplot made the plots.
# Usage: sim_smoke_test.sh BUILD_DIR OUT_DIR
set -euo pipefail
build=$1
out=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
rm -rf "$out"
bash "$root/bench/sim/run_sim.sh" --build "$build" --out "$out" --quick
python3 - "$out" "$root/docs/data/cluster-200mbit-sweep.csv" <<'PY'
import csv, os, sys
out, measured = sys.argv[1], sys.argv[2]
rows = []
for name in ("validation", "scale", "sizes", "scenarios"):
    with open(os.path.join(out, name + ".csv")) as f:
        rows += [dict(r, part=name) for r in csv.DictReader(f)]
assert rows, "no results"
bad = []
for r in rows:
    n = int(r["ranks"])
    bound = 2 * (n - 1) / n if r["system"] == "tributary" else 1.0
    if float(r["busbw_of_link"]) > bound * 1.0001:
        bad.append(f"{r['part']} {r['scenario']} {r['system']} n={n}: busbw {r['busbw_of_link']} of link > {bound:.3f}")
    if r["wrong"] != "0" or r["failed"] != "0":
        bad.append(f"{r['part']} {r['scenario']} {r['system']}: wrong {r['wrong']} failed {r['failed']}")
scen = {r["scenario"] for r in rows if r["part"] == "scenarios"}
for s in ("loss-0.01", "failed-inner-aggregator", "two-jobs", "straggler-100us", "rail"):
    if s not in scen:
        bad.append(f"scenario {s} missing")
meas = {}
with open(measured) as f:
    for r in csv.DictReader(f):
        if int(r["bytes"]) == 64 << 20:
            meas.setdefault((r["system"], r["hosts"]), []).append(float(r["algbw_GBps"]))
for r in rows:
    if r["part"] != "validation":
        continue
    m = meas[({"tributary": "tributary", "ring": "gloo"}[r["system"]], r["hosts"])]
    m = sum(m) / len(m)
    diff = float(r["algbw_GBps"]) / m - 1
    print(f"validation {r['system']} n={r['hosts']}: sim {r['algbw_GBps']} measured {m:.4f} ({diff:+.1%})")
    if abs(diff) > 0.10:
        bad.append(f"validation {r['system']} n={r['hosts']} off by {diff:+.1%}")
if bad:
    print("\n".join(bad))
    sys.exit(1)
PY
grep -q "### Scale" "$out/summary.md"
grep -q "### Scenarios" "$out/summary.md"
if command -v gnuplot > /dev/null; then
  test -s "$out/sim-scale.png"
  test -s "$out/sim-sizes.png"
fi
# Deterministic: one run again, the same line.
first=$(grep "^loss-0.01," "$out/scenarios.csv" | cut -d, -f1-23)
"$build/bench/sim/tributary_sim" --scenario loss-0.01 --loss 0.01 --system tributary --hosts 64 \
  --sizes 16M --csv "$out/again.csv" 2> /dev/null
again=$(cut -d, -f1-23 "$out/again.csv")
if [[ "$first" != "$again" ]]; then
  echo "not deterministic:"
  echo "  $first"
  echo "  $again"
  exit 1
fi
echo "sim_smoke_test: ok"
