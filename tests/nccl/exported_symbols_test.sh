#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Proves that libnccl-net-tributary.so exports the tables NCCL looks up and
# nothing else: the host core, libsodium's wrappers, the standard library's
# instantiations all stay local (plugin.map), so the plugin cannot clash
# with a libtributary or another plugin loaded in the same process.
# Usage: exported_symbols_test.sh path/to/libnccl-net-tributary.so
set -euo pipefail
lib=${1:?usage: exported_symbols_test.sh LIBNCCL_NET_TRIBUTARY_SO}
command -v nm > /dev/null || { echo "nm (binutils) not found" >&2; exit 1; }
want=$(printf '%s\n' ncclCollNetPlugin_v8 ncclCollNetPlugin_v9 ncclCollNetPlugin_v10 \
  ncclCollNetPlugin_v11 ncclCollNetPlugin_v12 ncclNetPlugin_v10 \
  ncclNetPlugin_v11 ncclNetPlugin_v12 ncclNetPlugin_v8 ncclNetPlugin_v9 | sort)
have=$(nm -D --defined-only "$lib" | awk '{ print $3 }' | sed 's/@.*//' | sort -u)
if [[ "$have" != "$want" ]]; then
  echo "exported symbols differ from the plugin tables:" >&2
  diff <(echo "$want") <(echo "$have") >&2 || true
  exit 1
fi
echo "exports exactly the $(echo "$want" | wc -l) plugin tables"
