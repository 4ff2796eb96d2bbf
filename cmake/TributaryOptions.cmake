# SPDX-License-Identifier: Apache-2.0
# Build options and shared compiler settings.
option(TRIBUTARY_BUILD_TESTS "Build the GoogleTest suites" ON)
option(TRIBUTARY_BUILD_BENCH "Build benchmarks and peer comparison tools" ON)
set(TRIBUTARY_BUILD_FUZZ AUTO CACHE STRING "Build libFuzzer targets with clang (AUTO, ON, OFF)")
set(TRIBUTARY_SANITIZE "" CACHE STRING "Sanitizers: '', 'address,undefined' or 'thread'")
option(TRIBUTARY_NATIVE "Tune for the build machine (-march=native)" OFF)

# Interface target every Tributary target links: warnings and sanitizers.
add_library(tributary_build_flags INTERFACE)
target_compile_options(tributary_build_flags INTERFACE
  -Wall -Wextra -Wno-unused-parameter $<$<COMPILE_LANGUAGE:CXX>:-Wnon-virtual-dtor>)
if(TRIBUTARY_NATIVE)
  target_compile_options(tributary_build_flags INTERFACE -march=native)
endif()
if(TRIBUTARY_SANITIZE)
  target_compile_options(tributary_build_flags INTERFACE
    -fsanitize=${TRIBUTARY_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  target_link_options(tributary_build_flags INTERFACE -fsanitize=${TRIBUTARY_SANITIZE})
  if(CMAKE_C_COMPILER_ID MATCHES "Clang" AND TRIBUTARY_SANITIZE MATCHES "undefined")
    # clang links a C program with UBSan's C runtime; libtributary's C++
    # objects need the C++ one (vptr checks), and that one libstdc++.
    target_link_options(tributary_build_flags INTERFACE
      $<$<LINK_LANGUAGE:C>:-fsanitize-link-c++-runtime> $<$<LINK_LANGUAGE:C>:-lstdc++>)
  endif()
endif()
