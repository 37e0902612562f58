# The fuzzers (tests/fuzz, README "Fuzzing and sanitizers"): a clang + libFuzzer tree of their
# own, built by this build as an external project into <build>/fuzz, and their runs registered
# with ctest by sluice_add_fuzz_tests():
#   fuzz.<target>       SLUICE_FUZZ_SECONDS each (label fuzz: `make test` runs them)
#   fuzz_long.<target>  SLUICE_FUZZ_LONG_SECONDS each (labels fuzz, slow: `make test-slow`,
#                       `make fuzz`)
# Without a clang that links -fsanitize=fuzzer (Debian: clang, libclang-rt-dev) the fuzzers are
# left out, with a warning.
option(SLUICE_FUZZ "Build the fuzzers (clang, libFuzzer) and run each briefly in the tests" ON)
set(SLUICE_FUZZ_SECONDS 5 CACHE STRING "Seconds of each fuzzer's run in the tests")
set(SLUICE_FUZZ_LONG_SECONDS 300 CACHE STRING "Seconds of each fuzzer's long run (label slow)")
# The fuzzers' build runs beside the main build's jobs: one job by default, so a 2-core machine
# is not oversubscribed (it finishes long before the main build does).
set(SLUICE_FUZZ_BUILD_JOBS 1 CACHE STRING "Parallel jobs of the fuzzers' build")

set(SLUICE_HAVE_FUZZ OFF)
if(SLUICE_FUZZ)
  find_program(SLUICE_FUZZ_CXX NAMES clang++ clang++-16 clang++-15 clang++-14)
  find_program(SLUICE_FUZZ_CC NAMES clang clang-16 clang-15 clang-14)
  if(SLUICE_FUZZ_CXX AND SLUICE_FUZZ_CC AND NOT DEFINED CACHE{SLUICE_FUZZ_LINKS})
    set(probe_dir ${CMAKE_BINARY_DIR}/CMakeFiles/sluice_fuzz_probe)
    file(WRITE ${probe_dir}/probe.cpp
         "#include <cstddef>\n#include <cstdint>\n"
         "extern \"C\" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }\n")
    execute_process(
      COMMAND ${SLUICE_FUZZ_CXX} -fsanitize=fuzzer,address,undefined probe.cpp -o probe
      WORKING_DIRECTORY ${probe_dir} RESULT_VARIABLE probe_result OUTPUT_QUIET ERROR_QUIET)
    if(probe_result EQUAL 0)
      set(SLUICE_FUZZ_LINKS ON CACHE INTERNAL "")
    else()
      set(SLUICE_FUZZ_LINKS OFF CACHE INTERNAL "")
    endif()
  endif()
  if(SLUICE_FUZZ_LINKS)
    set(SLUICE_HAVE_FUZZ ON)
    message(STATUS "Fuzzers: ${SLUICE_FUZZ_CXX} (libFuzzer), built into ${CMAKE_BINARY_DIR}/fuzz")
  else()
    message(WARNING "Fuzzers not built: no clang that links -fsanitize=fuzzer,address,undefined "
                    "(scripts/install-deps.sh installs clang and libclang-rt-dev; "
                    "-DSLUICE_FUZZ=OFF silences this)")
  endif()
endif()

if(SLUICE_HAVE_FUZZ)
  include(ExternalProject)
  ExternalProject_Add(sluice_fuzzers
    SOURCE_DIR ${PROJECT_SOURCE_DIR}/tests/fuzz
    BINARY_DIR ${CMAKE_BINARY_DIR}/fuzz
    CMAKE_GENERATOR ${CMAKE_GENERATOR}
    CMAKE_ARGS -DCMAKE_C_COMPILER=${SLUICE_FUZZ_CC} -DCMAKE_CXX_COMPILER=${SLUICE_FUZZ_CXX}
               -DSLUICE_UNITY_BUILD=${SLUICE_UNITY_BUILD}
               -DSLUICE_UNITY_BATCH_SIZE=${SLUICE_UNITY_BATCH_SIZE}
    BUILD_COMMAND ${CMAKE_COMMAND} --build <BINARY_DIR> -j ${SLUICE_FUZZ_BUILD_JOBS}
    BUILD_ALWAYS ON
    INSTALL_COMMAND ""
    LOG_CONFIGURE ON LOG_BUILD ON LOG_OUTPUT_ON_FAILURE ON)
endif()

function(sluice_add_fuzz_tests)
  if(NOT SLUICE_HAVE_FUZZ)
    return()
  endif()
  include(${PROJECT_SOURCE_DIR}/tests/fuzz/fuzz_targets.cmake)
  set(bin ${CMAKE_BINARY_DIR}/fuzz)
  set(run ${PROJECT_SOURCE_DIR}/tests/fuzz/run-fuzzer.sh)
  foreach(target IN LISTS SLUICE_FUZZ_TARGETS)
    set(seeds ${bin}/seeds/${target} ${PROJECT_SOURCE_DIR}/tests/fuzz/corpus/${target})
    foreach(dir IN LISTS SLUICE_FUZZ_${target}_SEEDS)
      list(APPEND seeds ${PROJECT_SOURCE_DIR}/${dir})
    endforeach()
    set(options)
    if(SLUICE_FUZZ_${target}_DICT)
      set(options -- -dict=${bin}/seeds/${SLUICE_FUZZ_${target}_DICT})
    endif()
    # Both runs add to the same corpus (fuzz/runs/<target>/corpus), so a short run starts from
    # what the long ones found.
    add_test(NAME fuzz.${target}
             COMMAND ${run} ${bin}/${target} ${SLUICE_FUZZ_SECONDS} ${bin}/runs/${target}
                     ${seeds} ${options})
    math(EXPR timeout "${SLUICE_FUZZ_SECONDS} + 120")
    set_tests_properties(fuzz.${target} PROPERTIES LABELS fuzz TIMEOUT ${timeout})
    add_test(NAME fuzz_long.${target}
             COMMAND ${run} ${bin}/${target} ${SLUICE_FUZZ_LONG_SECONDS} ${bin}/runs/${target}
                     ${seeds} ${options})
    math(EXPR timeout "${SLUICE_FUZZ_LONG_SECONDS} + 300")
    set_tests_properties(fuzz_long.${target} PROPERTIES LABELS "fuzz;slow" TIMEOUT ${timeout})
  endforeach()
endfunction()
