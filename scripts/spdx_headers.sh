#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Every source file of the project names its licence in an SPDX line
# (https://spdx.org/licenses/): "SPDX-License-Identifier: Apache-2.0" in the
# comment syntax of its language, first line (after a shebang). The licence
# text is LICENSE at the top of the tree.
#
# Usage: scripts/spdx_headers.sh [--fix] [ROOT]
#   without --fix: lists the files that lack the line and fails if any does
#                  (ctest spdx_headers_test runs it this way);
#   --fix:         adds the line where it is missing.
# The files are git's tracked files when ROOT is a git work tree, else every
# file under ROOT; data, images and Markdown carry no header.
set -euo pipefail
fix=0
if [[ ${1:-} == --fix ]]; then fix=1; shift; fi
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$root"
tag='SPDX-License-Identifier: Apache-2.0'

# The comment that carries the tag in a file, or nothing for files without one.
comment_for() {
  case $1 in
    # C, and the headers a C program includes: a C89 block comment.
    *.c | host/include/tributary/*.h) echo "/* $tag */" ;;
    *.cc | *.h | *.cu | *.cuh | *.proto) echo "// $tag" ;;
    *.sh | *.py | *.cmake | *.cmake.in | */CMakeLists.txt | CMakeLists.txt | *.yaml | *.yml | \
      *.service | *.pc.in | .ci/run | */Dockerfile | .dockerignore) echo "# $tag" ;;
    *) ;;
  esac
}

if git rev-parse --is-inside-work-tree > /dev/null 2>&1; then
  mapfile -t files < <(git ls-files)
else
  mapfile -t files < <(find . -type f -not -path './.git/*' -not -path './build*' | sed 's|^\./||')
fi

missing=()
for f in "${files[@]}"; do
  [[ -f $f ]] || continue
  line=$(comment_for "$f")
  [[ -n $line ]] || continue
  head -n 3 "$f" | grep -q "SPDX-License-Identifier:" && continue
  missing+=("$f")
  if [[ $fix == 1 ]]; then
    if head -n 1 "$f" | grep -q '^#!'; then
      sed -i "1a $line" "$f"
    else
      sed -i "1i $line" "$f"
    fi
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "spdx_headers: every source file carries '$tag'"
  exit 0
fi
if [[ $fix == 1 ]]; then
  echo "spdx_headers: added the SPDX line to ${#missing[@]} file(s)"
  exit 0
fi
printf 'spdx_headers: no SPDX-License-Identifier line in %s\n' "${missing[@]}" >&2
echo "spdx_headers: ${#missing[@]} file(s) lack it; scripts/spdx_headers.sh --fix adds it" >&2
exit 1
