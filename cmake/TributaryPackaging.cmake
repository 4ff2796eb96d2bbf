# SPDX-License-Identifier: Apache-2.0
# Install rules shared by the whole project: CMake package config and pkg-config.
include(CMakePackageConfigHelpers)

install(EXPORT TributaryTargets NAMESPACE Tributary::
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Tributary)
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
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Tributary)

# The .pc file locates the prefix relative to itself, so the tree can be
# installed anywhere (cmake --install --prefix DIR) and still be found.
file(RELATIVE_PATH TRIBUTARY_PC_PREFIX_REL "${CMAKE_INSTALL_FULL_LIBDIR}/pkgconfig"
     "${CMAKE_INSTALL_PREFIX}")
configure_file(${PROJECT_SOURCE_DIR}/cmake/tributary.pc.in ${PROJECT_BINARY_DIR}/tributary.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/tributary.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

install(FILES ${PROJECT_SOURCE_DIR}/LICENSE ${PROJECT_SOURCE_DIR}/README.md
        DESTINATION ${CMAKE_INSTALL_DOCDIR})
