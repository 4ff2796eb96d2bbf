#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# netns_loss_bench_smoke_test: bench/run_loss.sh on a tiny configuration, so
# that the script behind docs/RELIABILITY.md's loss tables cannot rot.
#
# What it proves: two rounds of 1-2 KiB all-reduces, 4 ranks, without loss
# and with 5% of the packets dropped on the input hook, exit 0 (every bench
# run checked its results: run_loss.sh fails on any wrong element); the
# table has a ratio for each size, the spread table the lowest and highest
# of the two per-round ratios with lowest <= highest, and the counters
# table a row for each setting, whose drops are counted (the 5% row shows
# packets dropped: each run sends at least 2 sizes x 42 iterations x 4
# ranks = 336 contributions, so none dropped has a chance of 0.95^336, about
# 3e-8). Figures are not judged: this is a smoke test.
#
# run_loss.sh makes its own network namespace and nftables table and
# removes them; it exits 77 (ctest SKIP) without root, ip or nft.
#
# Usage: loss_bench_smoke_test.sh BUILD_DIR
set -u -o pipefail
BUILD=${1:?usage: loss_bench_smoke_test.sh BUILD_DIR}
root=$(cd "$(dirname "$0")/../.." && pwd)
out=$(bash "$root/bench/run_loss.sh" --build "$BUILD" --rounds 2 --min 1K --max 2K --losses 5 \
  --hooks input --iters 40 --warmup 2 --timeout-s 120)
rc=$?
[[ $rc -eq 77 ]] && exit 77
echo "$out"
fail() { echo "loss_bench_smoke_test: $*" >&2; exit 1; }
[[ $rc -eq 0 ]] || fail "run_loss.sh exited $rc"
num='[0-9]+\.[0-9]+'
for size in "1 KiB" "2 KiB"; do
  grep -Eq "^\| $size \| $num \| ${num}x \|$" <<< "$out" || fail "no ratio row for $size"
  row=$(grep -E "^\| $size \| 2 \| $num-$num \|$" <<< "$out") || fail "no spread row for $size"
  awk -F'[|-]' '{ if ($4 + 0 > $5 + 0) exit 1 }' <<< "$row" || fail "spread lowest > highest: $row"
done
grep -Eq '^\| none 0% \|' <<< "$out" || fail "no counters row without loss"
drops=$(awk -F'|' '/^\| input 5% \|/ { gsub(/ /, "", $15); print $15 }' <<< "$out")
[[ -n $drops && $drops -gt 0 ]] || fail "the 5% row shows no drops to the daemon ('$drops')"
# The redundant copies (FORMAT.md §8.4) and gap resends (§3.6.1) columns
# hold a count in both rows.
for row in "none 0%" "input 5%"; do
  copies=$(awk -F'|' -v r="$row" '$2 == " " r " " { gsub(/ /, "", $10); print $10 }' <<< "$out")
  [[ $copies =~ ^[0-9]+$ ]] || fail "no redundant copies count in the $row row ('$copies')"
  gaps=$(awk -F'|' -v r="$row" '$2 == " " r " " { gsub(/ /, "", $11); print $11 }' <<< "$out")
  [[ $gaps =~ ^[0-9]+$ ]] || fail "no gap resends count in the $row row ('$gaps')"
done
echo "loss_bench_smoke_test: PASS"
