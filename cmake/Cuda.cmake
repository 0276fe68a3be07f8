# CUDA toolkit, cuBLASLt and NCCL (optional unless DYNCP_CUDA=ON); sets DYNCP_HAVE_CUDA and
# the dyncp_nccl target. Used by Dependencies.cmake and by the GPU-tests-only build.
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
    find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 HINTS ${CUDAToolkit_LIBRARY_DIR} ENV NCCL_HOME PATH_SUFFIXES lib lib64)
    find_path(CUDNN_INCLUDE_DIR cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ENV CUDNN_HOME PATH_SUFFIXES include)
    find_library(CUDNN_LIBRARY NAMES cudnn libcudnn.so.9 HINTS ${CUDAToolkit_LIBRARY_DIR} ENV CUDNN_HOME PATH_SUFFIXES lib lib64)
    # cuDNN's fused attention needs cudnn-frontend's headers too (the pinned wheel that
    # tools/install-deps.sh unpacks into build/third_party; never in the tree). Without either,
    # the build goes on and model.attention_backend=fused is refused with the reason.
    find_path(CUDNN_FRONTEND_INCLUDE_DIR cudnn_frontend.h
              HINTS ${PROJECT_BINARY_DIR}/third_party/cudnn-frontend/include
                    ${PROJECT_SOURCE_DIR}/build/third_party/cudnn-frontend/include
                    ENV CUDNN_FRONTEND_HOME
              PATH_SUFFIXES include)
    set(DYNCP_HAVE_CUDNN OFF)
    # (cudnn-frontend compiles some engines at run time: it links NVRTC too.)
    if(CUDNN_INCLUDE_DIR AND CUDNN_LIBRARY AND CUDNN_FRONTEND_INCLUDE_DIR AND TARGET CUDA::nvrtc)
      set(DYNCP_HAVE_CUDNN ON)
      set(DYNCP_CUDNN_STATUS "cuDNN ${CUDNN_LIBRARY}, cudnn-frontend ${CUDNN_FRONTEND_INCLUDE_DIR}")
    elseif(NOT CUDNN_FRONTEND_INCLUDE_DIR)
      set(DYNCP_CUDNN_STATUS "off: no cudnn-frontend headers (tools/install-deps.sh unpacks them)")
    elseif(NOT TARGET CUDA::nvrtc)
      set(DYNCP_CUDNN_STATUS "off: the CUDA toolkit has no NVRTC, which cudnn-frontend links")
    else()
      set(DYNCP_CUDNN_STATUS "off: cuDNN not found (set CUDNN_HOME)")
    endif()
    message(STATUS "dyncp: fused attention: ${DYNCP_CUDNN_STATUS}")
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
