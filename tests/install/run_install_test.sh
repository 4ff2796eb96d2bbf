#!/usr/bin/env bash
# Installs the build tree into a scratch prefix, then builds and runs a
# consumer through find_package(Tributary) and a C program through
# pkg-config. Usage: run_install_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1
src=$2
work=$(mktemp -d /tmp/tributary-install-test.XXXXXX)
trap 'rm -rf "$work"' EXIT

cmake --install "$build" --prefix "$work/prefix" > "$work/install.log"
test -f "$work/prefix/include/tributary/communicator.h"
test -f "$work/prefix/include/tributary/tributary.h"
# Only the public API is installed.
if find "$work/prefix/include" -name '*.h' | grep -v '/include/tributary/' | grep -q .; then
  echo "non-public headers were installed:" >&2
  find "$work/prefix/include" -name '*.h' >&2
  exit 1
fi

cmake -S "$src/tests/install/consumer" -B "$work/consumer" \
  -DCMAKE_PREFIX_PATH="$work/prefix" > "$work/consumer-configure.log"
cmake --build "$work/consumer" > "$work/consumer-build.log"
libdir=$(dirname "$(find "$work/prefix" -name 'libtributary.so' | head -1)")
LD_LIBRARY_PATH="$libdir" "$work/consumer/consumer"
LD_LIBRARY_PATH="$libdir" "$work/consumer/consumer_c"

export PKG_CONFIG_PATH="$libdir/pkgconfig"
pkg-config --exists tributary
cc -std=c11 "$src/tests/install/consumer/main.c" -o "$work/pc_consumer" \
  $(pkg-config --cflags --libs tributary)
LD_LIBRARY_PATH="$libdir" "$work/pc_consumer"
echo "install test: find_package and pkg-config consumers OK"
