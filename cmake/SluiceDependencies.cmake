# Every dependency comes from a Debian package (scripts/install-deps.sh).
find_package(Threads REQUIRED)
find_package(OpenMP REQUIRED)
find_package(MPI REQUIRED COMPONENTS C)
find_package(fmt REQUIRED)
find_package(nlohmann_json REQUIRED)
find_package(yaml-cpp REQUIRED)
find_package(CLI11 REQUIRED)
find_package(TBB REQUIRED)
find_package(ZLIB REQUIRED)  # the PNG of the loss curve (engine/train/png_writer.cpp)
find_package(PkgConfig REQUIRED)
pkg_check_modules(URING REQUIRED IMPORTED_TARGET liburing)
pkg_check_modules(HWLOC REQUIRED IMPORTED_TARGET hwloc)
pkg_check_modules(XXHASH REQUIRED IMPORTED_TARGET libxxhash)
# OpenBLAS built on OpenMP, so GEMMs and Sluice's own parallel loops share one thread team: the
# default pthread build keeps a second pool that fights OpenMP's spinning workers for the cores
# (2-3x slower training on 2 cores). Linked by full path, which puts its directory in the
# binaries' RUNPATH ahead of the system's alternatives link to the pthread build.
find_library(SLUICE_OPENBLAS_OPENMP NAMES openblas NO_DEFAULT_PATH
             PATHS /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-openmp)
find_path(SLUICE_OPENBLAS_OPENMP_INCLUDE cblas.h NO_DEFAULT_PATH
          PATHS /usr/include/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-openmp)
if(NOT SLUICE_OPENBLAS_OPENMP OR NOT SLUICE_OPENBLAS_OPENMP_INCLUDE)
  message(FATAL_ERROR "OpenBLAS (OpenMP build) not found: run scripts/install-deps.sh "
                      "(Debian package libopenblas-openmp-dev)")
endif()
set(BLAS_LIBRARIES ${SLUICE_OPENBLAS_OPENMP})
set(OPENBLAS_INCLUDE_DIR ${SLUICE_OPENBLAS_OPENMP_INCLUDE})

# oneDNN (Debian libdnnl-dev, OpenMP runtime), optional: the fastest library GEMM measured on
# AVX-512 and AVX2 (benchmarks/results/cpu_gemm_2026-11-27.md), so device.cpu_gemm: blas runs its
# dnnl_sgemm where it is found (kernels/cpu/gemm_dnnl.h); without it, OpenBLAS with its core set
# for the CPU (kernels/cpu/gemm_openblas.h), and `sluice env` names which.
option(SLUICE_WITH_DNNL "Use oneDNN for device.cpu_gemm: blas when configure finds it" ON)
set(SLUICE_HAVE_DNNL OFF)
if(SLUICE_WITH_DNNL)
  find_path(SLUICE_DNNL_INCLUDE_DIR dnnl.h PATH_SUFFIXES oneapi/dnnl)
  find_library(SLUICE_DNNL_LIBRARY NAMES dnnl)
  if(SLUICE_DNNL_INCLUDE_DIR AND SLUICE_DNNL_LIBRARY)
    set(SLUICE_HAVE_DNNL ON)
    message(STATUS "oneDNN found (${SLUICE_DNNL_LIBRARY}): device.cpu_gemm blas runs dnnl_sgemm")
  else()
    message(STATUS "oneDNN not found (Debian package libdnnl-dev, scripts/install-deps.sh): "
                   "device.cpu_gemm blas runs OpenBLAS")
  endif()
else()
  message(STATUS "oneDNN not used (SLUICE_WITH_DNNL=OFF): device.cpu_gemm blas runs OpenBLAS")
endif()

# sluice_glob_library(NAME DIR [LIBS ...] [RECURSE])
# A static library of the .cpp and .cu files of DIR (adding a file needs no CMake edit). A folder with no
# sources yet gives an INTERFACE library so that dependants link the same way.
function(sluice_glob_library name dir)
  cmake_parse_arguments(L "RECURSE;UNITY" "" "LIBS;EXCLUDE" ${ARGN})
  if(L_RECURSE)
    file(GLOB_RECURSE srcs CONFIGURE_DEPENDS ${dir}/*.cpp ${dir}/*.cu)
  else()
    file(GLOB srcs CONFIGURE_DEPENDS ${dir}/*.cpp ${dir}/*.cu)
  endif()
  foreach(pattern IN LISTS L_EXCLUDE)
    list(FILTER srcs EXCLUDE REGEX "${pattern}")
  endforeach()
  if(srcs)
    add_library(${name} STATIC ${srcs})
    if(L_UNITY AND SLUICE_UNITY_BUILD)
      set_target_properties(${name} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE ${SLUICE_UNITY_BATCH_SIZE})
    endif()
    target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR})
    target_link_libraries(${name} PUBLIC ${L_LIBS})
  else()
    add_library(${name} INTERFACE)
    target_include_directories(${name} INTERFACE ${PROJECT_SOURCE_DIR})
    target_link_libraries(${name} INTERFACE ${L_LIBS})
  endif()
endfunction()
