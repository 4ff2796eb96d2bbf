# SPDX-License-Identifier: Apache-2.0
# Install rules shared by the whole project: CMake package config and pkg-config.
include(CMakePackageConfigHelpers)

install(EXPORT TributaryTargets NAMESPACE Tributary::
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Tributary COMPONENT dev)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/TributaryConfig.cmake.in
  ${PROJECT_BINARY_DIR}/TributaryConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Tributary)
# Compatibility follows the SONAME (README.md, "Versioning and ABI"): while
# 0.x, each minor version may break the ABI, so find_package(Tributary 0.1)
# accepts 0.1.z only; from 1.0 on, the same major version.
if(PROJECT_VERSION_MAJOR EQUAL 0)
  set(_tributary_compat SameMinorVersion)
else()
  set(_tributary_compat SameMajorVersion)
endif()
write_basic_package_version_file(${PROJECT_BINARY_DIR}/TributaryConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY ${_tributary_compat})
install(FILES ${PROJECT_BINARY_DIR}/TributaryConfig.cmake
              ${PROJECT_BINARY_DIR}/TributaryConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Tributary COMPONENT dev)

# The .pc file locates the prefix relative to itself, so the tree can be
# installed anywhere (cmake --install --prefix DIR) and still be found.
file(RELATIVE_PATH TRIBUTARY_PC_PREFIX_REL "${CMAKE_INSTALL_FULL_LIBDIR}/pkgconfig"
     "${CMAKE_INSTALL_PREFIX}")
configure_file(${PROJECT_SOURCE_DIR}/cmake/tributary.pc.in ${PROJECT_BINARY_DIR}/tributary.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/tributary.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig
        COMPONENT dev)

install(FILES ${PROJECT_SOURCE_DIR}/LICENSE ${PROJECT_SOURCE_DIR}/README.md
        DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT lib)

# Debian packages (cpack -G DEB in a build directory; docs/PACKAGING in
# deploy/README.md): one per install component.
#   libtributary0           lib      the shared library, LICENSE, README
#   libtributary-dev        dev      headers, CMake and pkg-config files
#   tributaryd              daemon   the daemon, its configuration (a conffile), its unit
#   tributary-manager       manager  the manager and its unit
#   tributary-tools         tools    the `tributary` CLI
#   libnccl-net-tributary   nccl     the NCCL net plugin (when built)
# Not packaged: the `cuda` component (libtributary-kernels.so, the node
# level's reduce kernel) needs the CUDA runtime, which no Debian package
# provides; `cmake --install` installs it beside libtributary.so.
# Shared-library dependencies come from dpkg-shlibdeps; a cross build
# (dpu/cross-build.sh) states them by hand, as dpkg-shlibdeps would need the
# target's libraries installed.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME tributary)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "Tributary developers <tributary-dev@lists.invalid>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "in-network all-reduce aggregation for GPU training clusters")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_ENABLE_COMPONENT_DEPENDS ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_HOMEPAGE "https://example.invalid/tributary")
if(CMAKE_CROSSCOMPILING)
  if(CMAKE_SYSTEM_PROCESSOR MATCHES "aarch64|arm64")
    set(CPACK_DEBIAN_PACKAGE_ARCHITECTURE arm64)
  endif()
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS OFF)
  set(CPACK_DEBIAN_PACKAGE_DEPENDS "libc6, libstdc++6, libgcc-s1, libsodium23, libssl3")
  set(CPACK_DEBIAN_DAEMON_PACKAGE_DEPENDS "libc6, libstdc++6, libgcc-s1, libsodium23, libssl3, libyaml-cpp0.7")
else()
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
  # Our own libtributary is found by the RPATH, not in the system's paths.
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS ${PROJECT_BINARY_DIR}/host)
endif()
set(CPACK_COMPONENTS_ALL lib dev daemon tools)
if(TARGET tributary_manager)
  list(APPEND CPACK_COMPONENTS_ALL manager)
endif()
if(TARGET nccl_net_tributary)
  list(APPEND CPACK_COMPONENTS_ALL nccl)
endif()
if(TARGET tributary_python)
  list(APPEND CPACK_COMPONENTS_ALL python)
endif()
set(CPACK_DEBIAN_LIB_PACKAGE_NAME libtributary0)
set(CPACK_DEBIAN_DEV_PACKAGE_NAME libtributary-dev)
set(CPACK_DEBIAN_DAEMON_PACKAGE_NAME tributaryd)
set(CPACK_DEBIAN_MANAGER_PACKAGE_NAME tributary-manager)
set(CPACK_DEBIAN_TOOLS_PACKAGE_NAME tributary-tools)
set(CPACK_DEBIAN_NCCL_PACKAGE_NAME libnccl-net-tributary)
set(CPACK_DEBIAN_PYTHON_PACKAGE_NAME python3-tributary)
# The extension is built for this Python 3 minor version; NumPy for arrays.
if(TARGET tributary_python)
  set(CPACK_DEBIAN_PYTHON_PACKAGE_DEPENDS
      "python3 (>= ${Python3_VERSION_MAJOR}.${Python3_VERSION_MINOR}), python3 (<< ${Python3_VERSION_MAJOR}.${Python3_VERSION_MINOR}.99), python3-numpy")
endif()
set(CPACK_COMPONENT_DEV_DEPENDS lib)
set(CPACK_COMPONENT_DAEMON_DEPENDS lib)
set(CPACK_COMPONENT_MANAGER_DEPENDS lib)
set(CPACK_COMPONENT_TOOLS_DEPENDS lib)
set(CPACK_COMPONENT_NCCL_DEPENDS lib)
set(CPACK_COMPONENT_PYTHON_DEPENDS lib)
set(CPACK_COMPONENT_LIB_DESCRIPTION "Tributary host library: persistent buffers, all-reduce through aggregation daemons")
set(CPACK_COMPONENT_DEV_DESCRIPTION "Tributary host library: headers, CMake and pkg-config files")
set(CPACK_COMPONENT_DAEMON_DESCRIPTION "Tributary aggregation daemon (tributaryd) and its systemd unit")
set(CPACK_COMPONENT_MANAGER_DESCRIPTION "Tributary aggregation manager (tributary-manager) and its systemd unit")
set(CPACK_COMPONENT_TOOLS_DESCRIPTION "Tributary command-line tool: bench, jobs, trees, keepalive")
set(CPACK_COMPONENT_NCCL_DESCRIPTION "Tributary NCCL net plugin (libnccl-net-tributary.so)")
set(CPACK_COMPONENT_PYTHON_DESCRIPTION "Tributary for Python: the tributary package and its PyTorch DDP hook")
# /etc/tributary/tributaryd.yaml is the operator's: dpkg keeps their edits.
file(WRITE ${PROJECT_BINARY_DIR}/cpack/daemon/conffiles "/etc/tributary/tributaryd.yaml\n")
set(CPACK_DEBIAN_DAEMON_PACKAGE_CONTROL_EXTRA ${PROJECT_BINARY_DIR}/cpack/daemon/conffiles)
include(CPack)
