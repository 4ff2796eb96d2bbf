#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Every source file carries its SPDX licence line (scripts/spdx_headers.sh),
# and the checker itself notices a file without one and names it.
# Usage: tests/spdx_test.sh SOURCE_ROOT
set -euo pipefail
root=${1:?usage: spdx_test.sh SOURCE_ROOT}
check="$root/scripts/spdx_headers.sh"

bash "$check" "$root"

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
printf '// SPDX-License-Identifier: Apache-2.0\nint a;\n' > "$scratch/good.cc"
printf '#!/bin/sh\n# SPDX-License-Identifier: Apache-2.0\n' > "$scratch/good.sh"
printf 'int b;\n' > "$scratch/bad.cc"
printf '# no licence line\n' > "$scratch/notes.md"
if out=$(bash "$check" "$scratch" 2>&1); then
  echo "FAIL: the checker accepted a .cc file without an SPDX line: $out" >&2
  exit 1
fi
grep -q 'bad.cc' <<< "$out" || { echo "FAIL: the refusal does not name bad.cc: $out" >&2; exit 1; }
if grep -q -e 'good.cc' -e 'good.sh' -e 'notes.md' <<< "$out"; then
  echo "FAIL: the checker named a file that needs no change: $out" >&2
  exit 1
fi
bash "$check" --fix "$scratch" > /dev/null
bash "$check" "$scratch" > /dev/null || { echo "FAIL: --fix did not add the line" >&2; exit 1; }
echo "PASS spdx_test"
