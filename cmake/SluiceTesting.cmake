include(GoogleTest)
find_package(GTest REQUIRED)

# The compile flags of all test code, and its precompiled header (tests/common/test_pch.h:
# GoogleTest, gmock, fmt, nlohmann/json and the standard headers most tests include), built once
# by sluice_test_pch and reused by every test target: parsing those headers was about a third of
# a test file's compile time. GCC uses a precompiled header only where the flags that define
# macros match, so every test target compiles with the flags of OpenMP and fmt (-pthread,
# FMT_SHARED), as most already did through the engine. ccache caches through it with the
# sloppiness set in the root CMakeLists.txt.
function(sluice_test_flags target)
  # Test code is mostly gtest's templates and calls into the libraries (built -O3); -Og compiles
  # it in 40% of -O3's time, which is most of a fresh build on a 2-core CI machine.
  target_compile_options(${target} PRIVATE $<$<NOT:$<CONFIG:Debug>>:-Og>)
  target_link_libraries(${target} PRIVATE GTest::gtest GTest::gmock OpenMP::OpenMP_CXX fmt::fmt)
  if(TARGET sluice_test_pch AND NOT target STREQUAL "sluice_test_pch")
    target_precompile_headers(${target} REUSE_FROM sluice_test_pch)
  endif()
endfunction()

# The precompiled header's owner: an executable (tests are executables: -fPIE, not -fPIC) with
# the test flags. Created in tests/CMakeLists.txt, after that directory's compile options.
function(sluice_add_test_pch)
  set(main ${CMAKE_CURRENT_BINARY_DIR}/sluice_test_pch_main.cpp)
  file(CONFIGURE OUTPUT ${main} CONTENT "int main() { return 0; }\n")
  add_executable(sluice_test_pch ${main})
  set_target_properties(sluice_test_pch PROPERTIES RUNTIME_OUTPUT_DIRECTORY
                        ${CMAKE_BINARY_DIR}/tests)
  sluice_test_flags(sluice_test_pch)
  target_precompile_headers(sluice_test_pch PRIVATE ${PROJECT_SOURCE_DIR}/tests/common/test_pch.h)
endfunction()

# A test target of several sources compiles them as one translation unit with SLUICE_UNITY_BUILD
# (CMakeLists.txt): the engine headers they share are parsed once.
function(sluice_test_unity name)
  if(SLUICE_UNITY_BUILD)
    set_target_properties(${name} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE ${SLUICE_UNITY_BATCH_SIZE})
  endif()
endfunction()

# sluice_add_test_library(NAME SOURCES src... LIBS lib...)
# Helper code shared by several test executables, compiled once with the test flags.
function(sluice_add_test_library name)
  cmake_parse_arguments(T "" "" "SOURCES;LIBS" ${ARGN})
  add_library(${name} STATIC ${T_SOURCES})
  sluice_test_unity(${name})
  # Compiled as the executables that link it (-fPIE, not -fPIC), so the precompiled header fits.
  set_target_properties(${name} PROPERTIES POSITION_INDEPENDENT_CODE OFF)
  target_compile_options(${name} PRIVATE ${CMAKE_CXX_COMPILE_OPTIONS_PIE})
  sluice_test_flags(${name})
  target_link_libraries(${name} PUBLIC ${T_LIBS})
endfunction()

# sluice_add_test(NAME SOURCES src... LIBS lib... LABELS label... [RANKS n...] [TIMEOUT s])
# One executable. Without RANKS it is registered once per test case via gtest discovery; with
# RANKS it runs as a whole under `mpirun -np N` for each N (label mpi added).
function(sluice_add_test name)
  cmake_parse_arguments(T "" "TIMEOUT" "SOURCES;LIBS;LABELS;RANKS" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  add_executable(${name} ${T_SOURCES})
  sluice_test_unity(${name})
  sluice_test_flags(${name})
  target_link_libraries(${name} PRIVATE ${T_LIBS} GTest::gtest_main)
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  if(T_RANKS)
    foreach(n IN LISTS T_RANKS)
      add_test(NAME ${name}.np${n}
               COMMAND ${MPIEXEC_EXECUTABLE} --allow-run-as-root --oversubscribe
                       --mca btl self,vader -np ${n} $<TARGET_FILE:${name}>)
      set_tests_properties(${name}.np${n} PROPERTIES LABELS "mpi;${T_LABELS}"
                           TIMEOUT ${T_TIMEOUT} PROCESSORS ${n}
                           ENVIRONMENT "OMPI_MCA_rmaps_base_oversubscribe=1;OMP_WAIT_POLICY=PASSIVE")
    endforeach()
  else()
    # Spinning OpenMP workers starve everything else on a 2-core CI machine.
    gtest_discover_tests(${name} PROPERTIES TIMEOUT ${T_TIMEOUT} ENVIRONMENT OMP_WAIT_POLICY=PASSIVE
                         DISCOVERY_TIMEOUT 60)
    # gtest_discover_tests splits a list-valued property ("cpu;slow" would become LABELS cpu
    # plus a bogus property "slow"), so labels go on after discovery, over the ${name}_TESTS
    # list its generated file defines.
    set(labels_file ${CMAKE_CURRENT_BINARY_DIR}/${name}_labels.cmake)
    file(WRITE ${labels_file}
         "if(${name}_TESTS)\n  set_tests_properties(\${${name}_TESTS} PROPERTIES LABELS \"${T_LABELS}\")\nendif()\n")
    set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${labels_file})
  endif()
endfunction()
