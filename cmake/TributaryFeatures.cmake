# SPDX-License-Identifier: Apache-2.0
# Detects optional features at configure time. Each TRIBUTARY_WITH_<X> is AUTO
# by default: ON when the dependency is found. Forcing ON when it is missing
# fails the configure with a clear message.
include(CheckCXXSourceCompiles)
find_package(PkgConfig)
find_package(Threads REQUIRED)

set(TRIBUTARY_FEATURES_ON "")
set(TRIBUTARY_FEATURES_OFF "")

macro(tributary_feature NAME FOUND WHY)
  set(TRIBUTARY_WITH_${NAME} AUTO CACHE STRING "Build the ${NAME} parts (AUTO, ON, OFF)")
  if(TRIBUTARY_WITH_${NAME} STREQUAL "OFF")
    set(TRIBUTARY_HAVE_${NAME} OFF)
    list(APPEND TRIBUTARY_FEATURES_OFF "${NAME} (disabled)")
  elseif(${FOUND})
    set(TRIBUTARY_HAVE_${NAME} ON)
    list(APPEND TRIBUTARY_FEATURES_ON "${NAME}")
  elseif(TRIBUTARY_WITH_${NAME} STREQUAL "ON")
    message(FATAL_ERROR "TRIBUTARY_WITH_${NAME}=ON but ${WHY}")
  else()
    set(TRIBUTARY_HAVE_${NAME} OFF)
    list(APPEND TRIBUTARY_FEATURES_OFF "${NAME} (${WHY})")
  endif()
endmacro()

# Required third-party libraries of the default build.
find_package(yaml-cpp REQUIRED)
find_path(CLI11_INCLUDE_DIR CLI/CLI.hpp REQUIRED)
# libsodium: packet MACs, sealed job keys and JOIN cookies (proto/auth.h).
if(NOT PkgConfig_FOUND)
  message(FATAL_ERROR "pkg-config is required (apt-get install pkg-config)")
endif()
pkg_check_modules(SODIUM REQUIRED IMPORTED_TARGET libsodium)
# OpenSSL libcrypto: the Poly1305 payload digest of packet MACs (its SIMD
# implementations, x86-64 and ARMv8, are what makes payload MACs affordable).
find_package(OpenSSL 3.0 REQUIRED COMPONENTS Crypto)

if(PkgConfig_FOUND)
  pkg_check_modules(DPDK IMPORTED_TARGET libdpdk)
  pkg_check_modules(LIBFABRIC IMPORTED_TARGET libfabric)
  pkg_check_modules(IBVERBS IMPORTED_TARGET libibverbs)
endif()
tributary_feature(DPDK DPDK_FOUND "libdpdk not found (apt-get install libdpdk-dev)")
tributary_feature(OFI LIBFABRIC_FOUND "libfabric not found (apt-get install libfabric-dev)")
tributary_feature(VERBS IBVERBS_FOUND "libibverbs not found (apt-get install libibverbs-dev)")
# tributaryd's Prometheus endpoint (metrics_address) is served by cpp-httplib.
if(PkgConfig_FOUND)
  pkg_check_modules(HTTPLIB IMPORTED_TARGET cpp-httplib)
endif()
tributary_feature(METRICS HTTPLIB_FOUND "cpp-httplib not found (apt-get install libcpp-httplib-dev)")
# tributaryd tells systemd when it serves (Type=notify units) through libsystemd.
if(PkgConfig_FOUND)
  pkg_check_modules(SYSTEMD IMPORTED_TARGET libsystemd)
endif()
tributary_feature(SYSTEMD SYSTEMD_FOUND "libsystemd not found (apt-get install libsystemd-dev)")
# The Python bindings (host/python: the `tributary` package, its PyTorch DDP
# hook) through pybind11 and the Python 3 headers.
if(NOT TRIBUTARY_WITH_PYTHON STREQUAL "OFF")
  # The system's interpreter (where Debian's python3-numpy and python3-torch
  # live), not one that comes first on PATH (pyenv), unless one is named.
  if(NOT DEFINED Python3_EXECUTABLE AND EXISTS /usr/bin/python3)
    set(Python3_EXECUTABLE /usr/bin/python3)
  endif()
  find_package(Python3 COMPONENTS Interpreter Development.Module QUIET)
  find_package(pybind11 CONFIG QUIET)
endif()
if(Python3_FOUND AND pybind11_FOUND)
  set(TRIBUTARY_PYTHON_DEPS_FOUND ON)
else()
  set(TRIBUTARY_PYTHON_DEPS_FOUND OFF)
endif()
tributary_feature(PYTHON TRIBUTARY_PYTHON_DEPS_FOUND
  "pybind11 or the Python headers not found (apt-get install pybind11-dev python3-dev)")

# libfabric and libibverbs are opened at run time (common/ofi/ofi_api.h,
# common/verbs/verbs_api.h), so that a udp-only user needs neither: the ofi
# and verbs parts compile against their headers and link nothing of them.
# These targets carry the headers' flags only; no Tributary binary lists the
# libraries as NEEDED (tests/nolib checks it).
function(tributary_headers_only TARGET PREFIX)
  add_library(${TARGET} INTERFACE IMPORTED)
  set_target_properties(${TARGET} PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${${PREFIX}_INCLUDE_DIRS}"
    INTERFACE_COMPILE_OPTIONS "${${PREFIX}_CFLAGS_OTHER}")
endfunction()
if(TRIBUTARY_HAVE_OFI)
  tributary_headers_only(tributary_libfabric_headers LIBFABRIC)
endif()
if(TRIBUTARY_HAVE_VERBS)
  tributary_headers_only(tributary_libibverbs_headers IBVERBS)
endif()

# The control plane (tributary-manager, the daemons' manager client, the CLI's
# job commands) speaks gRPC; its code is generated from proto/manager.proto.
find_package(Protobuf QUIET)
find_package(gRPC CONFIG QUIET)
find_program(GRPC_CPP_PLUGIN grpc_cpp_plugin)
set(_grpc_found OFF)
if(Protobuf_FOUND AND gRPC_FOUND AND GRPC_CPP_PLUGIN AND Protobuf_PROTOC_EXECUTABLE)
  set(_grpc_found ON)
endif()
tributary_feature(MANAGER _grpc_found
  "gRPC/protobuf not found (apt-get install libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler)")

# The scale simulation (bench/sim): SimGrid, and the manager's placement.
if(PkgConfig_FOUND)
  pkg_check_modules(SIMGRID IMPORTED_TARGET simgrid)
endif()
set(_sim_found OFF)
if(SIMGRID_FOUND AND TRIBUTARY_HAVE_MANAGER AND TRIBUTARY_BUILD_BENCH)
  set(_sim_found ON)
endif()
tributary_feature(SIM _sim_found
  "SimGrid not found (apt-get install libsimgrid-dev), or the manager or the benchmarks are off")

include(CheckLanguage)
if(NOT DEFINED CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
  set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
endif()
check_language(CUDA)
set(_cuda_found OFF)
if(CMAKE_CUDA_COMPILER)
  set(_cuda_found ON)
endif()
tributary_feature(CUDA _cuda_found "no CUDA compiler found")

find_package(GTest)
find_package(benchmark QUIET)
find_package(MPI QUIET COMPONENTS CXX)
find_path(GLOO_INCLUDE_DIR gloo/allreduce_ring.h)
find_library(GLOO_LIBRARY gloo)
set(_gloo_found OFF)
if(GLOO_INCLUDE_DIR AND GLOO_LIBRARY)
  set(_gloo_found ON)
endif()

find_program(TRIBUTARY_CLANGXX NAMES clang++ clang++-14)

function(tributary_print_summary)
  message(STATUS "")
  message(STATUS "Tributary ${PROJECT_VERSION} configure summary")
  message(STATUS "  build type        : ${CMAKE_BUILD_TYPE}")
  message(STATUS "  compiler          : ${CMAKE_CXX_COMPILER_ID} ${CMAKE_CXX_COMPILER_VERSION}")
  message(STATUS "  sanitizers        : ${TRIBUTARY_SANITIZE}")
  string(JOIN " " _on kernel-udp ${TRIBUTARY_FEATURES_ON})
  message(STATUS "  features on       : ${_on}")
  foreach(f IN LISTS TRIBUTARY_FEATURES_OFF)
    message(STATUS "  feature off       : ${f}")
  endforeach()
  message(STATUS "  tests             : ${TRIBUTARY_BUILD_TESTS} (GTest ${GTest_FOUND})")
  message(STATUS "  benchmarks        : ${TRIBUTARY_BUILD_BENCH} (Gloo ${_gloo_found}, MPI ${MPI_CXX_FOUND}, google-benchmark ${benchmark_FOUND})")
  message(STATUS "  fuzz targets      : ${TRIBUTARY_BUILD_FUZZ} (clang++: ${TRIBUTARY_CLANGXX})")
  message(STATUS "")
endfunction()
