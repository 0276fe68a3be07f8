# DYNCP_GPU_TESTS_ONLY: the CUDA kernels, tests/gpu and the few libraries they need, for a GPU
# machine that has CUDA and NCCL but not the trainer's other host dependencies
# (tools/gpu-check.sh). Needs fmt, spdlog and OpenBLAS (carried by tools/gpu-prefix.sh; point
# CMAKE_PREFIX_PATH at it); no yaml-cpp, CLI11, MPI, Catch2, PCRE2 or utf8proc.
include(Warnings)
find_package(Threads REQUIRED)
find_package(fmt CONFIG REQUIRED)
find_package(spdlog CONFIG REQUIRED)
# OpenBLAS by its header and library (its CMake file holds absolute Debian paths).
find_path(DYNCP_CBLAS_INCLUDE_DIR cblas.h PATH_SUFFIXES x86_64-linux-gnu/openblas-pthread openblas REQUIRED)
find_library(DYNCP_OPENBLAS_LIBRARY NAMES openblas PATH_SUFFIXES x86_64-linux-gnu/openblas-pthread REQUIRED)
add_library(dyncp_openblas INTERFACE)
target_include_directories(dyncp_openblas SYSTEM INTERFACE ${DYNCP_CBLAS_INCLUDE_DIR})
target_link_libraries(dyncp_openblas INTERFACE ${DYNCP_OPENBLAS_LIBRARY})

set(DYNCP_CUDA ON)
include(Cuda)
message(STATUS "dyncp: GPU tests only; CUDA=${DYNCP_HAVE_CUDA} cblas=${DYNCP_CBLAS_INCLUDE_DIR} "
               "openblas=${DYNCP_OPENBLAS_LIBRARY} nccl=${NCCL_LIBRARY}")

add_subdirectory(lib/core)
add_subdirectory(lib/ops)
# The MPI-free part of lib/dist: enough for NcclComm bootstrapped by the self communicator.
set(dist_dir ${PROJECT_SOURCE_DIR}/lib/dist)
add_library(dyncp_dist STATIC ${dist_dir}/launch_env.cpp ${dist_dir}/comm.cpp ${dist_dir}/abort.cpp
                              ${dist_dir}/watchdog.cpp ${dist_dir}/self_comm.cpp)
target_include_directories(dyncp_dist PUBLIC ${PROJECT_SOURCE_DIR}/lib)
target_link_libraries(dyncp_dist PUBLIC dyncp_core Threads::Threads PRIVATE dyncp_warnings)
add_library(dyncp_dist_nccl STATIC ${dist_dir}/nccl_comm.cpp)
target_link_libraries(dyncp_dist_nccl PUBLIC dyncp_dist dyncp_nccl CUDA::cudart PRIVATE dyncp_warnings)
add_subdirectory(kernels)
enable_testing()
add_subdirectory(tests/gpu)
