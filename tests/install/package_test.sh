#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# package_test: the Debian packages (cpack -G DEB, cmake/TributaryPackaging.cmake)
# are complete and work once installed:
#   1. cpack builds libtributary0, libtributary-dev, tributaryd,
#      tributary-manager, tributary-tools (and libnccl-net-tributary when the
#      plugin is built, python3-tributary when the bindings are) from
#      BUILD_DIR;
#   2. each names its architecture, the programs depend on libtributary0 of
#      the same version, /etc/tributary/tributaryd.yaml is a conffile, and no
#      file lands outside its package's component (the daemon's unit in
#      tributaryd, the manager's in tributary-manager);
#   3. `dpkg -i` installs them all on this machine (dependencies from
#      dpkg-shlibdeps must be satisfied by what setup-debian.sh installs);
#   4. the installed programs run: tributary-manager --version, the units
#      pass `systemd-analyze verify`, and `tributary demo` (the installed CLI
#      starting the installed tributaryd) all-reduces 4 ranks, exact; the
#      system's python3 imports the installed tributary package;
#   5. `dpkg --purge` removes them again (also when a step fails).
# Needs root and dpkg; exits 77 (ctest SKIP) without. Refuses to run when
# one of these packages is already installed (it would not remove what it
# did not install).
# Usage: package_test.sh BUILD_DIR
set -euo pipefail
build=$1
if [[ $(id -u) -ne 0 ]] || ! command -v dpkg > /dev/null; then
  echo "package_test: needs root and dpkg" >&2
  exit 77
fi
work=$(mktemp -d /tmp/tributary-package-test.XXXXXX)
installed=()
cleanup() {
  if ((${#installed[@]})); then dpkg --purge "${installed[@]}" > "$work/purge.log" 2>&1 || cat "$work/purge.log" >&2; fi
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "package test FAILED: $*" >&2
  exit 1
}

names=(libtributary0 libtributary-dev tributaryd tributary-manager tributary-tools)
[[ -e $build/host/nccl ]] && names+=(libnccl-net-tributary)
[[ -e $build/python/tributary ]] && names+=(python3-tributary)
for n in "${names[@]}"; do
  if dpkg-query -W -f='${Status}' "$n" 2> /dev/null | grep -q "ok installed"; then
    fail "package $n is already installed here; remove it first (this test installs and purges its own)"
  fi
done

(cd "$build" && cpack -G DEB -B "$work/out") > "$work/cpack.log" 2>&1 || { cat "$work/cpack.log" >&2; fail "cpack"; }
arch=$(dpkg --print-architecture)
version=$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$build/CMakeCache.txt")
debs=()
for n in "${names[@]}"; do
  deb=$work/out/${n}_${version}_${arch}.deb
  [[ -f $deb ]] || fail "no $deb (cpack made: $(ls "$work/out"))"
  [[ $(dpkg-deb -f "$deb" Architecture) == "$arch" ]] || fail "$n: architecture is not $arch"
  if [[ $n != libtributary0 ]]; then
    dpkg-deb -f "$deb" Depends | grep -q "libtributary0 (= $version)" ||
      fail "$n does not depend on libtributary0 (= $version): $(dpkg-deb -f "$deb" Depends)"
  fi
  dpkg-deb -c "$deb" | awk '{print $6}' > "$work/$n.files"
  debs+=("$deb")
done
dpkg-deb -e "$work/out/tributaryd_${version}_${arch}.deb" "$work/ctl"
grep -qx /etc/tributary/tributaryd.yaml "$work/ctl/conffiles" || fail "tributaryd.yaml is not a conffile"
grep -q '^./usr/lib/systemd/system/tributaryd.service$' "$work/tributaryd.files" || fail "no unit in tributaryd"
grep -q '^./usr/lib/systemd/system/tributary-manager.service$' "$work/tributary-manager.files" ||
  fail "no unit in tributary-manager"
grep -q '^./usr/bin/tributary$' "$work/tributary-tools.files" || fail "no CLI in tributary-tools"
grep -q '^./usr/include/tributary/tributary.h$' "$work/libtributary-dev.files" || fail "no headers in -dev"
if grep -q include "$work/libtributary0.files"; then fail "headers in libtributary0"; fi

installed=("${names[@]}")
dpkg -i "${debs[@]}" > "$work/dpkg.log" 2>&1 || { cat "$work/dpkg.log" >&2; fail "dpkg -i"; }
/usr/bin/tributary-manager --version | grep -q "tributary-manager $version" || fail "tributary-manager --version"
if command -v systemd-analyze > /dev/null; then
  systemd-analyze verify /usr/lib/systemd/system/tributaryd.service \
    /usr/lib/systemd/system/tributary-manager.service > "$work/verify.log" 2>&1 ||
    { cat "$work/verify.log" >&2; fail "systemd-analyze verify of the installed units"; }
fi
env -u TRIBUTARYD /usr/bin/tributary demo > "$work/demo.log" 2>&1 || { cat "$work/demo.log" >&2; fail "tributary demo"; }
grep -q "^VERDICT: PASS" "$work/demo.log" || { cat "$work/demo.log" >&2; fail "tributary demo: no PASS"; }
grep "^VERDICT" "$work/demo.log"
if [[ " ${names[*]} " == *" python3-tributary "* ]]; then
  # The installed package from the system's python3, not the build tree.
  (cd / && env -u PYTHONPATH /usr/bin/python3 -c \
    "import tributary, sys; assert tributary.version() == '$version', tributary.version();
assert tributary.__file__.startswith('/usr/lib/python3/dist-packages/'), tributary.__file__") \
    > "$work/python.log" 2>&1 || { cat "$work/python.log" >&2; fail "import tributary (installed)"; }
fi
echo "package test: ${#names[@]} packages built, installed, run and purged"
