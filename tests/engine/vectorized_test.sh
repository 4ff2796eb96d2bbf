#!/usr/bin/env bash
# engine_vectorized_test: the reduction kernels' hot loops are vector code.
#
# Disassembles libtributary_reduce.a (the kernels the engine reduces with)
# and checks, per kernel, that the function holds packed SIMD instructions of
# the right kind:
#   - kernels_avx2.o (x86-64): 256-bit ymm packed ops, e.g. vaddps %ymm for
#     fp32 SUM, vpaddd for int32 SUM, vmaxps for fp32 MAX;
#   - kernels_sse2.o: at least 128-bit packed ops (SSE2 baseline), e.g.
#     addps / paddd on xmm.
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

# body OBJECT TYPE OP: the disassembly of CombineNative<TYPE, OP>.
body() {
  objdump -d --no-show-raw-insn -C "$1" |
    awk -v want="CombineNative<$2, tributary::reduce::internal::(anonymous namespace)::$3>" '
      /^[0-9a-f]+ <.*>:$/ { inside = index($0, want) > 0; next }
      inside { print }'
}

failures=0
expect() {  # OBJECT LABEL TYPE OP REGEX
  local text
  text=$(body "$1" "$3" "$4")
  if [[ -z $text ]]; then
    echo "FAIL $2 CombineNative<$3, $4>: not found" >&2
    failures=$((failures + 1))
  elif ! grep -Eq "$5" <<< "$text"; then
    echo "FAIL $2 CombineNative<$3, $4>: no instruction matching /$5/ (scalar code?)" >&2
    failures=$((failures + 1))
  else
    echo "ok   $2 CombineNative<$3, $4>: $(grep -Eo "$5" <<< "$text" | head -1)"
  fi
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
if ((failures > 0)); then
  echo "vectorized_test: $failures kernel(s) not vectorized" >&2
  exit 1
fi
echo "vectorized_test: every checked kernel is vector code"
