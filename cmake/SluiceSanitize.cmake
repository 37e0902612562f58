# Sanitizer builds (README "Fuzzing and sanitizers").
#
# SLUICE_SANITIZE builds everything with GCC's sanitizers: "address;undefined" (make test-asan)
# or "thread" (make test-tsan). Every report aborts the process (-fno-sanitize-recover), so a
# test with one fails. The ASan tests run in the environment of tests/sanitizer/asan-env.sh,
# whose one suppression, of Open MPI's own leaks, comes with tests that prove it.
#
# sluice_add_config_asan_test() links the config tests once more in a normal build, with the
# config system (engine/config) compiled under ASan and UBSan, as the ctest test
# config_asan_test (label cpu, so `make test` runs it): a dangling reference or an overflow in a
# parser fails it even where no assertion notices.
set(SLUICE_SANITIZE "" CACHE STRING
    "Sanitizers for the whole build: address;undefined or thread (empty: none)")

set(SLUICE_SANITIZER_COMPILE_OPTIONS -fno-omit-frame-pointer -fno-sanitize-recover=all -g1)
# Debian's GCC links with --as-needed unless -fsanitize is given; without it a sanitized test
# would need every library on its link line, libcuda.so.1 (the driver) included in a CUDA build
# on a machine without a GPU.
set(SLUICE_SANITIZER_LINK_OPTIONS -Wl,--as-needed)

# The test executables of a sanitized build (tests/CMakeLists.txt): -O1 compiles them in 60% of
# the time of -O3 under the sanitizers; the product's libraries keep the build type's flags.
set(SLUICE_SANITIZER_TEST_OPTIONS)
if(SLUICE_SANITIZE)
  set(SLUICE_SANITIZER_TEST_OPTIONS -O1)
  list(JOIN SLUICE_SANITIZE "," sluice_sanitizers)
  if(sluice_sanitizers MATCHES "thread" AND sluice_sanitizers MATCHES "address")
    message(FATAL_ERROR "SLUICE_SANITIZE: thread cannot be combined with address")
  endif()
  message(STATUS "Sanitizers: ${sluice_sanitizers} (SLUICE_SANITIZE)")
  # C and C++ only: nvcc takes none of these, and the CUDA kernels are not run under them.
  add_compile_options(
    "$<$<COMPILE_LANGUAGE:C,CXX>:-fsanitize=${sluice_sanitizers};${SLUICE_SANITIZER_COMPILE_OPTIONS}>")
  add_link_options(
    "$<$<LINK_LANGUAGE:C,CXX>:-fsanitize=${sluice_sanitizers};${SLUICE_SANITIZER_LINK_OPTIONS}>")
endif()

function(sluice_add_config_asan_test)
  # The test code is linked from the config test executables' own objects: only the config
  # system needs the instrumentation, and compiling the tests a second time under ASan was the
  # largest single cost of a fresh build.
  get_property(config_tests DIRECTORY ${PROJECT_SOURCE_DIR}/tests/config
               PROPERTY BUILDSYSTEM_TARGETS)
  # config_cli_test runs the `sluice` binary, which is not sanitized here.
  list(REMOVE_ITEM config_tests config_cli_test)
  set(test_objects)
  foreach(t IN LISTS config_tests)
    list(APPEND test_objects $<TARGET_OBJECTS:${t}>)
  endforeach()
  file(GLOB config_sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/engine/config/*.cpp)
  # The config objects come first, so sluice_engine's own copies of them are never linked: the
  # rest of the engine links as it is, uninstrumented.
  add_executable(config_asan_test ${config_sources} ${test_objects})
  target_link_libraries(config_asan_test PRIVATE sluice_engine GTest::gtest GTest::gtest_main)
  # -O1: a third of the compile time of -O3 under the sanitizers, and as good at finding.
  target_compile_options(config_asan_test PRIVATE -O1 -fsanitize=address,undefined
                         ${SLUICE_SANITIZER_COMPILE_OPTIONS})
  target_link_options(config_asan_test PRIVATE -fsanitize=address,undefined
                      ${SLUICE_SANITIZER_LINK_OPTIONS})
  set_target_properties(config_asan_test PROPERTIES RUNTIME_OUTPUT_DIRECTORY
                        ${CMAKE_BINARY_DIR}/tests)
  # Its config sources in unity batches too (the test objects are the config tests' own).
  if(SLUICE_UNITY_BUILD)
    set_target_properties(config_asan_test PROPERTIES UNITY_BUILD ON
                          UNITY_BUILD_BATCH_SIZE ${SLUICE_UNITY_BATCH_SIZE})
  endif()
  # One process for all cases: ASan's start-up per case would cost more than the cases.
  add_test(NAME config_asan_test COMMAND config_asan_test --gtest_brief=1)
  set_tests_properties(config_asan_test PROPERTIES LABELS cpu TIMEOUT 600
                       ENVIRONMENT "UBSAN_OPTIONS=print_stacktrace=1;OMP_WAIT_POLICY=PASSIVE")
endfunction()
