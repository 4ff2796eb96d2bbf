# SPDX-License-Identifier: Apache-2.0
# Cross-compiling Tributary for aarch64 Linux (BlueField-class DPUs, Arm
# servers) on a Debian amd64 machine with Debian's cross compiler and arm64
# development packages (multiarch). dpu/cross-build.sh installs them and
# passes this file:
#   cmake -S . -B build-aarch64 -DCMAKE_TOOLCHAIN_FILE=dpu/toolchain-aarch64.cmake
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
# Debian's multiarch layout: arm64 libraries and their CMake packages live
# under /usr/lib/aarch64-linux-gnu, headers under /usr/include (shared).
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu /usr)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)   # build tools run here (protoc, ...)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)
# pkg-config must see the arm64 .pc files only.
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_PATH} "")
# Test binaries run under qemu-user (ctest's emulator), with the arm64
# runtime libraries of the multiarch install.
find_program(TRIBUTARY_QEMU_AARCH64 NAMES qemu-aarch64-static qemu-aarch64)
if(TRIBUTARY_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR "${TRIBUTARY_QEMU_AARCH64};-L;/usr/aarch64-linux-gnu")
endif()
