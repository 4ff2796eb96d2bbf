#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Proves the installed tree is usable as shipped:
#   1. `cmake --install` puts the public headers (and only them), the library
#      with its SONAME (libtributary.so.MAJOR.MINOR while 0.x), the package
#      files and LICENSE into a scratch prefix;
#   2. a consumer project builds through find_package(Tributary) with the
#      default compiler and again with clang++ at its default flags (no -std:
#      the imported target must bring C++17), and both binaries run;
#   3. a C program builds through pkg-config and runs;
#   4. the installed tributary and tributaryd (and tributary-manager when
#      built) run from the prefix without LD_LIBRARY_PATH, finding
#      libtributary through their RPATH ($ORIGIN/../LIBDIR), also after the
#      whole prefix is moved elsewhere;
#   5. the systemd units written for the prefix name its programs and
#      configuration (not /usr/bin, /etc) and pass `systemd-analyze verify`
#      (which also checks that each ExecStart program is executable).
# Usage: run_install_test.sh BUILD_DIR SOURCE_DIR [CLANGXX]
# CLANGXX is the clang++ CMake found (TRIBUTARY_CLANGXX); without one the
# test fails, since scripts/setup-debian.sh installs clang.
set -euo pipefail
build=$1
src=$2
clangxx=${3:-}
work=$(mktemp -d /tmp/tributary-install-test.XXXXXX)
trap 'rm -rf "$work"' EXIT
unset LD_LIBRARY_PATH

fail() {
  echo "install test FAILED: $*" >&2
  exit 1
}
# Runs a step, keeping its output in a log that is printed if it fails.
step() {
  local log=$1
  shift
  "$@" > "$work/$log" 2>&1 || { cat "$work/$log" >&2; fail "$* (log above)"; }
}

if [[ -z "$clangxx" ]]; then clangxx=$(command -v clang++ || true); fi
if [[ -z "$clangxx" || ! -x "$clangxx" ]]; then
  fail "clang++ not found: the consumer must also build with clang (apt-get install clang;" \
       "scripts/setup-debian.sh installs it), then reconfigure"
fi
clangc=${clangxx/clang++/clang}
[[ -x "$clangc" ]] || fail "clang C compiler not found next to $clangxx"

prefix=$work/prefix
step install.log cmake --install "$build" --prefix "$prefix"
test -f "$prefix/include/tributary/communicator.h" || fail "communicator.h not installed"
test -f "$prefix/include/tributary/tributary.h" || fail "tributary.h not installed"
test -f "$prefix/include/tributary/export.h" || fail "export.h not installed"
find "$prefix/share/doc" -name LICENSE | grep -q . || fail "LICENSE not installed under share/doc"
# Only the public API is installed.
if find "$prefix/include" -name '*.h' | grep -v '/include/tributary/' | grep -q .; then
  find "$prefix/include" -name '*.h' >&2
  fail "non-public headers were installed (above)"
fi

lib=$(find "$prefix" -name 'libtributary.so' | head -1)
[[ -n "$lib" ]] || fail "libtributary.so not installed"
libdir=$(dirname "$lib")
export PKG_CONFIG_PATH="$libdir/pkgconfig"
pkg-config --exists tributary || fail "pkg-config does not find tributary in $PKG_CONFIG_PATH"
version=$(pkg-config --modversion tributary)
# SONAME policy (README.md, "Versioning and ABI"): MAJOR.MINOR while 0.x.
IFS=. read -r major minor _ <<< "$version"
want_soname=libtributary.so.$major
if [[ $major == 0 ]]; then want_soname=libtributary.so.$major.$minor; fi
soname=$(readelf -d "$lib" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
[[ "$soname" == "$want_soname" ]] || fail "SONAME is '$soname', expected $want_soname for $version"
test -e "$libdir/$soname" || fail "$libdir/$soname (the SONAME link) not installed"
targets=$libdir/cmake/Tributary/TributaryTargets.cmake
grep -q 'INTERFACE_COMPILE_FEATURES "cxx_std_17"' "$targets" ||
  fail "the exported target does not carry cxx_std_17"

# find_package consumers: the default compiler, then clang at its defaults.
step consumer-configure.log cmake -S "$src/tests/install/consumer" -B "$work/consumer" \
  -DCMAKE_PREFIX_PATH="$prefix"
step consumer-build.log cmake --build "$work/consumer"
step consumer-run.log "$work/consumer/consumer"
step consumer-c-run.log "$work/consumer/consumer_c"
step clang-configure.log cmake -S "$src/tests/install/consumer" -B "$work/consumer-clang" \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_CXX_COMPILER="$clangxx" -DCMAKE_C_COMPILER="$clangc"
step clang-build.log cmake --build "$work/consumer-clang" --verbose
grep -q "$(basename "$clangxx")" "$work/clang-build.log" ||
  fail "the clang consumer was not built by clang"
step clang-run.log "$work/consumer-clang/consumer"
echo "consumer (clang++ $("$clangxx" -dumpversion), default flags): $(cat "$work/clang-run.log")"

# pkg-config consumer in C.
step pc-build.log cc -std=c11 "$src/tests/install/consumer/main.c" -o "$work/pc_consumer" \
  $(pkg-config --cflags --libs tributary)
LD_LIBRARY_PATH="$libdir" step pc-run.log "$work/pc_consumer"

# Installed programs find libtributary through their RPATH, relative to the
# prefix: run them with no LD_LIBRARY_PATH, then again from a moved prefix.
check_programs() {  # PREFIX
  local p=$1 resolved rpath
  [[ -x "$p/bin/tributary" && -x "$p/bin/tributaryd" ]] ||
    fail "tributary/tributaryd not installed in $p/bin"
  rpath=$(readelf -d "$p/bin/tributary" | grep -E 'R(UN)?PATH' || true)
  grep -qF '$ORIGIN/' <<< "$rpath" || fail "$p/bin/tributary has no \$ORIGIN-relative RPATH: $rpath"
  resolved=$(ldd "$p/bin/tributary" | awk '/libtributary/ {print $3}')
  [[ "$resolved" == "$p"/* ]] ||
    fail "$p/bin/tributary resolves libtributary to '$resolved', not inside $p"
  step version.log "$p/bin/tributary" version
  grep -q "libtributary $version" "$work/version.log" ||
    fail "tributary version: $(cat "$work/version.log")"
  step tributaryd-version.log "$p/bin/tributaryd" --version
  if [[ -e "$p/bin/tributary-manager" ]]; then
    step manager-help.log "$p/bin/tributary-manager" --help
  fi
}
check_programs "$prefix"

# The units, for this prefix.
units=("$prefix/lib/systemd/system/tributaryd.service")
[[ -e "$prefix/bin/tributary-manager" ]] && units+=("$prefix/lib/systemd/system/tributary-manager.service")
for u in "${units[@]}"; do
  [[ -f $u ]] || fail "$u not installed"
  grep -q "^ExecStart=$prefix/bin/" "$u" || fail "$u does not start the program of $prefix: $(grep ^ExecStart "$u")"
  if grep -q "@[A-Z]*@" "$u"; then fail "$u has an unsubstituted placeholder: $(grep "@[A-Z]*@" "$u")"; fi
done
grep -q -- "--config $prefix/etc/tributary/tributaryd.yaml" "${units[0]}" ||
  fail "tributaryd.service does not read $prefix/etc/tributary/tributaryd.yaml"
# A watchdog only where the daemon pings it (Type=notify: built with
# libsystemd); a Type=simple daemon would be killed for never pinging.
if grep -q '^Type=notify$' "${units[0]}"; then
  grep -q '^WatchdogSec=[1-9]' "${units[0]}" || fail "Type=notify tributaryd.service sets no WatchdogSec"
elif grep -q '^WatchdogSec=' "${units[0]}"; then
  fail "tributaryd.service sets WatchdogSec= without Type=notify: $(grep '^Type=' "${units[0]}")"
fi
command -v systemd-analyze > /dev/null || fail "systemd-analyze not found (package systemd)"
step units-verify.log systemd-analyze verify "${units[@]}"
echo "systemd units for $prefix pass systemd-analyze verify: ${units[*]##*/}"
mv "$prefix" "$work/moved"
check_programs "$work/moved"
echo "installed programs run without LD_LIBRARY_PATH (RPATH), also from a moved prefix:" \
     "$(cat "$work/version.log")"
echo "install test: find_package (default compiler and clang), pkg-config, SONAME $soname, RPATH OK"
