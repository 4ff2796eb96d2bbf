# SPDX-License-Identifier: Apache-2.0
# libFuzzer targets, built with clang even when the main build uses g++.
#
# tributary_add_fuzzer(NAME name
#                      [SOURCES src...]          fuzz entry point and extra sources
#                      [FROM_TARGETS target...]  also compile these libraries' sources
#                      [CORPUS dir]              seed corpus (read only)
#                      [SMOKE_RUNS n]            inputs the ctest smoke runs (default 100000)
#                      [DEPENDS file...]         extra files that trigger a rebuild
#                      [LINK_LIBS flag...])      extra link flags (-lsodium -lcrypto)
#
# Why a custom command rather than add_executable: CMake allows one C++
# compiler per build, and the fuzzing runtime (-fsanitize=fuzzer) is clang's.
# This only works for dependency-free code (proto/, reduce/, the engine, common/log),
# which is exactly what the decoders and the engine are. Sources compile one
# object each (per-source ISA flags such as kernels_avx2.cc's -mavx2 -mf16c
# are honoured, see below), then one clang call links them. The binary is
# <build>/fuzz/<name>; ctest gets `<name>_smoke` (LABELS fuzz) running it
# over the seed corpus, writing new inputs into a scratch corpus in the build
# tree so the source tree is never modified. The smoke is deterministic: seed
# 1, a fixed number of inputs (SMOKE_RUNS, sized for ~10 s here) and a fresh
# scratch corpus each run, so every run tries the same inputs however loaded
# the machine is; TRIBUTARY_FUZZ_SECONDS only caps its time (a capped run
# tries fewer inputs, it never fails for it). Long exploratory runs:
# tests/fuzz/run_fuzzers.sh.
#
# Enabled when TRIBUTARY_BUILD_FUZZ is ON (configure fails without a working
# clang), or when it is AUTO and TRIBUTARY_CLANGXX can link a
# -fsanitize=fuzzer program (Debian: libclang-rt-<ver>-dev).

set(TRIBUTARY_FUZZ_SECONDS 120 CACHE STRING "Cap on the seconds each <fuzzer>_smoke ctest runs")
if(NOT TRIBUTARY_CLANGXX)
  find_program(TRIBUTARY_CLANGXX NAMES clang++ clang++-14)
endif()

# What the user asked for. TributaryFeatures turns AUTO into OFF in a normal
# variable for g++ builds, so read the cache entry. Declared with option()
# (a BOOL), "AUTO" is stored as OFF and OFF cannot be told from the default:
# then only ON is meaningful and OFF means AUTO. Declared as a STRING cache
# variable (AUTO/ON/OFF), an explicit OFF disables the fuzzers.
set(_fuzz_request "$CACHE{TRIBUTARY_BUILD_FUZZ}")
get_property(_fuzz_type CACHE TRIBUTARY_BUILD_FUZZ PROPERTY TYPE)
if(_fuzz_request STREQUAL "" OR (_fuzz_type STREQUAL "BOOL" AND NOT _fuzz_request))
  set(_fuzz_request AUTO)
endif()

set(TRIBUTARY_FUZZ_ENABLED OFF)
if(NOT _fuzz_request STREQUAL "OFF" AND TRIBUTARY_CLANGXX)
  # Probe once per compiler path (re-probed if TRIBUTARY_CLANGXX changes).
  if(NOT TRIBUTARY_CLANG_FUZZ_PROBED STREQUAL TRIBUTARY_CLANGXX)
    set(_probe_dir ${CMAKE_BINARY_DIR}/CMakeFiles/tributary_fuzz_probe)
    file(MAKE_DIRECTORY ${_probe_dir})
    file(WRITE ${_probe_dir}/probe.cc
      "#include <cstddef>\n#include <cstdint>\n"
      "extern \"C\" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }\n")
    execute_process(
      COMMAND ${TRIBUTARY_CLANGXX} -std=c++20 -fsanitize=fuzzer,address,undefined
              ${_probe_dir}/probe.cc -o ${_probe_dir}/probe
      RESULT_VARIABLE _probe_rc OUTPUT_QUIET ERROR_VARIABLE _probe_err)
    if(_probe_rc EQUAL 0)
      set(TRIBUTARY_CLANG_FUZZ_WORKS ON CACHE INTERNAL "clang++ links -fsanitize=fuzzer")
    else()
      set(TRIBUTARY_CLANG_FUZZ_WORKS OFF CACHE INTERNAL "clang++ links -fsanitize=fuzzer")
      message(STATUS "Fuzzers: ${TRIBUTARY_CLANGXX} cannot link -fsanitize=fuzzer "
                     "(install libclang-rt-dev): ${_probe_err}")
    endif()
    set(TRIBUTARY_CLANG_FUZZ_PROBED "${TRIBUTARY_CLANGXX}" CACHE INTERNAL "compiler probed")
  endif()
  if(TRIBUTARY_CLANG_FUZZ_WORKS)
    set(TRIBUTARY_FUZZ_ENABLED ON)
  endif()
endif()
if(_fuzz_request STREQUAL "ON" AND NOT TRIBUTARY_FUZZ_ENABLED)
  message(FATAL_ERROR "TRIBUTARY_BUILD_FUZZ=ON but no clang++ that links -fsanitize=fuzzer "
                      "was found (set TRIBUTARY_CLANGXX, install clang and libclang-rt-dev)")
endif()

# ISA flags a library gives single sources (e.g. kernels_avx2.cc: -mavx2
# -mf16c) are carried over to the fuzzer's compile of that file; other
# per-source options are GCC tuning (-O3, -mmemset-strategy) that clang may
# not accept, so only these patterns pass.
set(TRIBUTARY_FUZZ_ISA_FLAG_REGEX
    "^-m(avx|f16c|fma|sse|ssse|bmi|popcnt|pclmul|crc|arch=|tune=|cpu=|fpu=)"
    CACHE STRING "Per-source compile options copied into fuzzer builds")
mark_as_advanced(TRIBUTARY_FUZZ_ISA_FLAG_REGEX)

function(tributary_add_fuzzer)
  cmake_parse_arguments(F "" "NAME;CORPUS;SMOKE_RUNS" "SOURCES;FROM_TARGETS;DEPENDS;LINK_LIBS" ${ARGN})
  if(NOT F_SMOKE_RUNS)
    set(F_SMOKE_RUNS 100000)
  endif()
  if(NOT TRIBUTARY_FUZZ_ENABLED)
    return()
  endif()

  # Each source is compiled to its own object (clang -MD: exact header
  # dependencies, and objects compile in parallel), then one clang call
  # links them with the fuzzing runtime. A source gets the ISA options of
  # its COMPILE_OPTIONS property and every source the non-generator-
  # expression COMPILE_DEFINITIONS of the targets in FROM_TARGETS (e.g.
  # TRIBUTARY_REDUCE_HAVE_AVX2, which must agree with the objects present).
  set(srcs "")
  set(src_dirs "")   # directory whose source properties apply, per source
  foreach(s IN LISTS F_SOURCES)
    get_filename_component(abs ${s} ABSOLUTE BASE_DIR ${CMAKE_CURRENT_SOURCE_DIR})
    list(APPEND srcs ${abs})
    list(APPEND src_dirs ${CMAKE_CURRENT_SOURCE_DIR})
  endforeach()
  set(defs "")
  foreach(t IN LISTS F_FROM_TARGETS)
    get_target_property(tsrcs ${t} SOURCES)
    get_target_property(tdir ${t} SOURCE_DIR)
    foreach(s IN LISTS tsrcs)
      if(s MATCHES "\\.(cc|cpp|cxx|c)$")
        get_filename_component(abs ${s} ABSOLUTE BASE_DIR ${tdir})
        list(APPEND srcs ${abs})
        list(APPEND src_dirs ${tdir})
      endif()
    endforeach()
    get_target_property(tdefs ${t} COMPILE_DEFINITIONS)
    if(tdefs)
      foreach(d IN LISTS tdefs)
        if(NOT d MATCHES "\\$<")
          list(APPEND defs -D${d})
        endif()
      endforeach()
    endif()
  endforeach()
  list(REMOVE_DUPLICATES defs)

  set(common_flags -std=c++20 -O1 -g -fno-omit-frame-pointer
                   -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined)
  set(obj_dir ${CMAKE_BINARY_DIR}/fuzz/obj/${F_NAME})
  set(objs "")
  list(LENGTH srcs n)
  math(EXPR last "${n} - 1")
  foreach(i RANGE ${last})
    list(GET srcs ${i} src)
    list(GET src_dirs ${i} sdir)
    file(RELATIVE_PATH rel ${PROJECT_SOURCE_DIR} ${src})
    string(REGEX REPLACE "[/.]" "_" stem "${rel}")
    set(obj ${obj_dir}/${stem}.o)
    get_source_file_property(sopts ${src} DIRECTORY ${sdir} COMPILE_OPTIONS)
    set(isa "")
    if(sopts)
      foreach(o IN LISTS sopts)
        if(o MATCHES "${TRIBUTARY_FUZZ_ISA_FLAG_REGEX}")
          list(APPEND isa ${o})
        endif()
      endforeach()
    endif()
    add_custom_command(
      OUTPUT ${obj}
      COMMAND ${CMAKE_COMMAND} -E make_directory ${obj_dir}
      COMMAND ${TRIBUTARY_CLANGXX} ${common_flags} ${defs} ${isa} -I${PROJECT_SOURCE_DIR}
              -MD -MF ${obj}.d -c ${src} -o ${obj}
      DEPENDS ${src} ${F_DEPENDS}
      DEPFILE ${obj}.d
      COMMENT "Fuzzer ${F_NAME}: compiling ${rel} with ${TRIBUTARY_CLANGXX}"
      VERBATIM)
    list(APPEND objs ${obj})
  endforeach()

  # All fuzzers land in <build>/fuzz/ (run_fuzzers.sh looks there); the
  # target has the fuzzer's name, so the file cannot sit next to it.
  set(bin ${CMAKE_BINARY_DIR}/fuzz/${F_NAME})
  file(MAKE_DIRECTORY ${CMAKE_BINARY_DIR}/fuzz)
  add_custom_command(
    OUTPUT ${bin}
    COMMAND ${TRIBUTARY_CLANGXX} ${common_flags} ${objs} ${F_LINK_LIBS} -o ${bin}
    DEPENDS ${objs}
    COMMENT "Linking libFuzzer target ${F_NAME} with ${TRIBUTARY_CLANGXX}"
    VERBATIM)
  add_custom_target(${F_NAME} ALL DEPENDS ${bin})

  set(scratch ${CMAKE_BINARY_DIR}/fuzz/${F_NAME}_corpus)
  # libFuzzer writes new inputs into the first directory only and reads
  # seeds from all of them: the checked-in corpus stays untouched. The
  # scratch directory starts empty each run (what an earlier run found would
  # change which inputs this one tries).
  add_test(NAME ${F_NAME}_smoke
           COMMAND sh -c "rm -rf \"$1\" && mkdir -p \"$1\" && shift && exec \"$@\""
                   sh ${scratch} ${bin} -seed=1 -runs=${F_SMOKE_RUNS}
                   -max_total_time=${TRIBUTARY_FUZZ_SECONDS} -timeout=10 -print_final_stats=1
                   -artifact_prefix=${CMAKE_BINARY_DIR}/fuzz/${F_NAME}-
                   ${scratch} ${F_CORPUS})
  math(EXPR limit "${TRIBUTARY_FUZZ_SECONDS} + 120")
  set_tests_properties(${F_NAME}_smoke PROPERTIES LABELS fuzz TIMEOUT ${limit})
endfunction()
