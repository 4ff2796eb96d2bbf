# SPDX-License-Identifier: Apache-2.0
# tributary_add_test(NAME name SOURCES ... [LIBS ...] [LABELS ...] [TIMEOUT s])
# Builds a GoogleTest binary and registers it with ctest as one test. Labels:
# unit, integration, slow, fuzz, root (needs root: namespaces).
function(tributary_add_test)
  cmake_parse_arguments(T "" "NAME;TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${T_NAME} ${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE ${T_LIBS} GTest::gtest GTest::gtest_main
                        tributary_build_flags Threads::Threads)
  target_include_directories(${T_NAME} PRIVATE ${PROJECT_SOURCE_DIR})
  add_test(NAME ${T_NAME} COMMAND ${T_NAME})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  if(NOT T_LABELS)
    set(T_LABELS unit)
  endif()
  set_tests_properties(${T_NAME} PROPERTIES TIMEOUT ${T_TIMEOUT} LABELS "${T_LABELS}"
    ENVIRONMENT "TRIBUTARYD=$<TARGET_FILE:tributaryd>;TRIBUTARY_CLI=$<TARGET_FILE:tributary_cli>")
endfunction()
