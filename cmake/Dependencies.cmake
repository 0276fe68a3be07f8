# Host dependencies: all from Debian 12 packages (tools/install-deps.sh).
find_package(Threads REQUIRED)
find_package(yaml-cpp CONFIG REQUIRED)       # 0.7 exports `yaml-cpp`, 0.8+ `yaml-cpp::yaml-cpp`
if(NOT TARGET yaml-cpp::yaml-cpp)
  add_library(yaml-cpp::yaml-cpp ALIAS yaml-cpp)
endif()
find_package(CLI11 CONFIG REQUIRED)
find_package(fmt CONFIG REQUIRED)
find_package(spdlog CONFIG REQUIRED)
find_package(nlohmann_json CONFIG REQUIRED)
find_package(MPI REQUIRED COMPONENTS C)

# OpenBLAS ships only variables; wrap them. Never link -lblas/-lcblas (netlib).
find_package(OpenBLAS CONFIG REQUIRED)
add_library(dyncp_openblas INTERFACE)
target_include_directories(dyncp_openblas SYSTEM INTERFACE ${OpenBLAS_INCLUDE_DIRS})
target_link_libraries(dyncp_openblas INTERFACE ${OpenBLAS_LIBRARIES})

find_package(PkgConfig REQUIRED)
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
find_path(UTF8PROC_INCLUDE_DIR utf8proc.h REQUIRED)
find_library(UTF8PROC_LIBRARY utf8proc REQUIRED)
add_library(dyncp_utf8proc INTERFACE)
target_include_directories(dyncp_utf8proc SYSTEM INTERFACE ${UTF8PROC_INCLUDE_DIR})
target_link_libraries(dyncp_utf8proc INTERFACE ${UTF8PROC_LIBRARY})

# CUDA (optional). Binaries link the runtime only, never the driver API (-lcuda),
# so every executable starts on a machine without a GPU driver.
set(DYNCP_HAVE_CUDA OFF)
if(NOT DYNCP_CUDA STREQUAL "OFF")
  if(NOT DEFINED CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)   # not always on PATH
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90)                   # H100 / H200
    endif()
    enable_language(CUDA)
    set(CMAKE_CUDA_STANDARD 17)   # CMake 3.25 does not know nvcc's C++20 flag
    find_package(CUDAToolkit REQUIRED)
    find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ENV NCCL_HOME PATH_SUFFIXES include)
    find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} ENV NCCL_HOME PATH_SUFFIXES lib lib64)
    find_path(CUDNN_INCLUDE_DIR cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ENV CUDNN_HOME PATH_SUFFIXES include)
    find_library(CUDNN_LIBRARY cudnn HINTS ${CUDAToolkit_LIBRARY_DIR} ENV CUDNN_HOME PATH_SUFFIXES lib lib64)
    if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
      add_library(dyncp_nccl INTERFACE)
      target_include_directories(dyncp_nccl SYSTEM INTERFACE ${NCCL_INCLUDE_DIR})
      target_link_libraries(dyncp_nccl INTERFACE ${NCCL_LIBRARY})
      set(DYNCP_HAVE_CUDA ON)
    elseif(DYNCP_CUDA STREQUAL "ON")
      message(FATAL_ERROR "DYNCP_CUDA=ON but NCCL was not found (set NCCL_HOME)")
    endif()
  elseif(DYNCP_CUDA STREQUAL "ON")
    message(FATAL_ERROR "DYNCP_CUDA=ON but no CUDA compiler was found (set CMAKE_CUDA_COMPILER)")
  endif()
endif()
message(STATUS "dyncp: CUDA=${DYNCP_HAVE_CUDA} MPI=${MPI_C_FOUND} build=${CMAKE_BUILD_TYPE}")
