# CUDA targets are built whenever nvcc is found, so CI compiles them even without a GPU.
# Only the GPUs we run on are built, to keep CI fast: sm_90a machine code for H100/H200 (wgmma and
# TMA need the "a" variant) plus compute_90 PTX, which the driver can JIT for a later GPU.
set(SLUICE_HAVE_CUDA OFF)
if(SLUICE_ENABLE_CUDA)
  include(CheckLanguage)
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES "90a-real;90-virtual")
    endif()
    enable_language(CUDA)
    # CMake 3.25 predates nvcc's C++20 dialect flag; targets that carry cxx_std_20 into CUDA
    # sources need it spelled out.
    if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
      set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
      set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    endif()
    find_package(CUDAToolkit REQUIRED)
    find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/include)
    find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/lib)
    if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
      set(SLUICE_HAVE_CUDA ON)
      add_library(sluice_nccl_lib INTERFACE)
      target_include_directories(sluice_nccl_lib INTERFACE ${NCCL_INCLUDE_DIR})
      target_link_libraries(sluice_nccl_lib INTERFACE ${NCCL_LIBRARY})
    else()
      message(WARNING "nvcc found but NCCL is missing: CUDA backends are off")
    endif()
  endif()
endif()
message(STATUS "Sluice CUDA backends: ${SLUICE_HAVE_CUDA}")

# cuDNN's fused attention (kernels/cuda/attention_cudnn.cpp) needs libcudnn 9 and the header-only
# cuDNN frontend, which scripts/install-deps.sh installs from PyPI (nvidia-cudnn-frontend) into
# Python's site-packages/include. Without either the attention launchers run our own kernels only.
# The library is looked for here but loaded at run time (kernels/cuda/CMakeLists.txt).
set(SLUICE_HAVE_CUDNN OFF)
if(SLUICE_HAVE_CUDA)
  find_package(Python3 COMPONENTS Interpreter QUIET)
  set(sluice_cudnn_frontend_hint "")
  if(Python3_Interpreter_FOUND)
    execute_process(
      COMMAND ${Python3_EXECUTABLE} -c
              "import os, sysconfig; print(os.path.join(sysconfig.get_paths()['platlib'], 'include'))"
      OUTPUT_VARIABLE sluice_cudnn_frontend_hint OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  endif()
  find_path(CUDNN_FRONTEND_INCLUDE_DIR cudnn_frontend.h HINTS ${sluice_cudnn_frontend_hint})
  find_path(CUDNN_INCLUDE_DIR cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/include /usr/local/include)
  find_library(CUDNN_LIBRARY cudnn HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/lib/x86_64-linux-gnu)
  if(CUDNN_FRONTEND_INCLUDE_DIR AND CUDNN_INCLUDE_DIR AND CUDNN_LIBRARY)
    set(SLUICE_HAVE_CUDNN ON)
  endif()
endif()
message(STATUS "Sluice cuDNN attention: ${SLUICE_HAVE_CUDNN}")
