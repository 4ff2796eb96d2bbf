#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# engine_vectorized_test: the reduction kernels' hot loops are vector code.
#
# Disassembles libtributary_reduce.a (the kernels the engine reduces with)
# and checks, per kernel, that the function holds packed SIMD instructions of
# the right kind:
#   - kernels_avx2.o (x86-64): 256-bit ymm packed ops, e.g. vaddps %ymm for
#     fp32 SUM, vpaddd for int32 SUM, vmaxps for fp32 MAX;
#   - kernels_sse2.o: at least 128-bit packed ops (SSE2 baseline), e.g.
#     addps / paddd on xmm;
#   - the fp8 and bf16 combines (CombineNarrow) in both: packed fp32 ops.
# A compiler or flag change that silently turns a kernel back into scalar
# code fails here instead of only in a benchmark.
#
# Usage: vectorized_test.sh LIBTRIBUTARY_REDUCE.a   (ctest passes it)
set -u -o pipefail
lib=${1:?usage: $0 libtributary_reduce.a}
if [[ $(uname -m) != x86_64 ]]; then
  echo "vectorized_test: checks x86-64 code only; skipping on $(uname -m)" >&2
  exit 77
fi
if ! command -v objdump > /dev/null; then
  echo "FAIL: objdump not found (apt-get install binutils)" >&2
  exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && ar x "$lib") || exit 1
avx2=$(ls "$work"/kernels_avx2*.o 2> /dev/null | head -1)
sse2=$(ls "$work"/kernels_sse2*.o 2> /dev/null | head -1)
if [[ -z $avx2 || -z $sse2 ]]; then
  echo "FAIL: kernels_avx2.o / kernels_sse2.o not in $lib" >&2
  exit 1
fi

ns='tributary::reduce::internal::(anonymous namespace)::'

# body OBJECT FUNCTION: the disassembly of FUNCTION (its demangled name up
# to the argument list, namespaces of the kernels' own types left out).
body() {
  objdump -d --no-show-raw-insn -C "$1" |
    awk -v want="$2(" '
      /^[0-9a-f]+ <.*>:$/ { inside = index($0, want) > 0; next }
      inside { print }'
}

failures=0
check() {  # OBJECT LABEL FUNCTION-AS-SHOWN FUNCTION-DEMANGLED REGEX
  local text
  text=$(body "$1" "$4")
  if [[ -z $text ]]; then
    echo "FAIL $2 $3: not found" >&2
    failures=$((failures + 1))
  elif ! grep -Eq "$5" <<< "$text"; then
    echo "FAIL $2 $3: no instruction matching /$5/ (scalar code?)" >&2
    failures=$((failures + 1))
  else
    echo "ok   $2 $3: $(grep -Eo "$5" <<< "$text" | head -1)"
  fi
}
expect() {  # OBJECT LABEL TYPE OP REGEX: CombineNative<TYPE, OP>
  check "$1" "$2" "CombineNative<$3, $4>" "CombineNative<$3, ${ns}$4>" "$5"
}
expect_narrow() {  # OBJECT LABEL CONV OP REGEX: CombineNarrow<CONV, OP> (fp8, bf16)
  check "$1" "$2" "CombineNarrow<$3, $4>" "CombineNarrow<${ns}$3, ${ns}$4>" "$5"
}

expect "$avx2" avx2 float SumOp 'vaddps[^#]*%ymm'
expect "$avx2" avx2 double SumOp 'vaddpd[^#]*%ymm'
expect "$avx2" avx2 int SumOp 'vpaddd[^#]*%ymm'
expect "$avx2" avx2 long SumOp 'vpaddq[^#]*%ymm'
expect "$avx2" avx2 'signed char' SumOp 'vpaddb[^#]*%ymm'
expect "$avx2" avx2 float MaxOp 'vmaxps[^#]*%ymm'
expect "$avx2" avx2 float ProdOp 'vmulps[^#]*%ymm'
expect "$sse2" sse2 float SumOp '(^|[[:space:]])addps[^#]*%xmm'
expect "$sse2" sse2 int SumOp '(^|[[:space:]])paddd[^#]*%xmm'
expect "$sse2" sse2 double SumOp '(^|[[:space:]])addpd[^#]*%xmm'
expect_narrow "$avx2" avx2 E4m3Conv SumOp 'vaddps[^#]*%ymm'
expect_narrow "$avx2" avx2 E5m2Conv MaxOp 'vmaxps[^#]*%ymm'
expect_narrow "$sse2" sse2 E4m3Conv SumOp '(^|[[:space:]])addps[^#]*%xmm'
expect_narrow "$sse2" sse2 Bf16Conv SumOp '(^|[[:space:]])addps[^#]*%xmm'
if ((failures > 0)); then
  echo "vectorized_test: $failures kernel(s) not vectorized" >&2
  exit 1
fi
echo "vectorized_test: every checked kernel is vector code"
