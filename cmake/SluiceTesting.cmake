include(GoogleTest)
find_package(GTest REQUIRED)

# sluice_add_test(NAME SOURCES src... LIBS lib... LABELS label... [RANKS n...] [TIMEOUT s])
# One executable. Without RANKS it is registered once per test case via gtest discovery; with
# RANKS it runs as a whole under `mpirun -np N` for each N (label mpi added).
function(sluice_add_test name)
  cmake_parse_arguments(T "" "TIMEOUT" "SOURCES;LIBS;LABELS;RANKS" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  add_executable(${name} ${T_SOURCES})
  # Test code is mostly gtest's templates and calls into the libraries (built -O3); -Og compiles
  # it in 40% of -O3's time, which is most of a fresh build on a 2-core CI machine.
  target_compile_options(${name} PRIVATE $<$<NOT:$<CONFIG:Debug>>:-Og>)
  target_link_libraries(${name} PRIVATE ${T_LIBS} GTest::gtest GTest::gtest_main)
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
