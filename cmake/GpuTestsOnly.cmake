# DYNCP_GPU_TESTS_ONLY: what tools/gpu-check.sh needs on a GPU machine that has CUDA and NCCL but
# none of the trainer's other host libraries: the trainer (dyncp-train with the CUDA backend),
# the CUDA kernels, tests/gpu (every kernel against its CPU op and the whole model step against
# the CPU step) and the GEMM anchor of tools/bench/gpu_step.sh. No Catch2, Boost, pkg-config or
# emulated backend. The host libraries come from the Debian packages tools/gpu-prefix.sh
# unpacks (point CMAKE_PREFIX_PATH at its usr/): fmt, spdlog, OpenBLAS, yaml-cpp, CLI11,
# nlohmann-json, PCRE2, utf8proc, xxHash and Open MPI.
include(Warnings)
find_package(Threads REQUIRED)
find_package(fmt CONFIG REQUIRED)
find_package(spdlog CONFIG REQUIRED)
find_package(yaml-cpp CONFIG REQUIRED)
if(NOT TARGET yaml-cpp::yaml-cpp)
  add_library(yaml-cpp::yaml-cpp ALIAS yaml-cpp)
endif()
find_package(CLI11 CONFIG REQUIRED)
find_package(nlohmann_json CONFIG REQUIRED)

# Libraries found by header and library file (their CMake or pkg-config files hold absolute
# Debian paths, or there is no pkg-config on the machine), each wrapped in the target name the
# layers link.
function(dyncp_gpu_check_library target header library)
  string(MAKE_C_IDENTIFIER ${target} id)
  find_path(${id}_INCLUDE_DIR ${header} PATH_SUFFIXES ${ARGN} REQUIRED)
  find_library(${id}_LIBRARY NAMES ${library} PATH_SUFFIXES ${ARGN} REQUIRED)
  add_library(${target} INTERFACE IMPORTED GLOBAL)
  target_include_directories(${target} SYSTEM INTERFACE ${${id}_INCLUDE_DIR})
  target_link_libraries(${target} INTERFACE ${${id}_LIBRARY})
  message(STATUS "dyncp: ${target}: ${${id}_LIBRARY}")
endfunction()
dyncp_gpu_check_library(dyncp_openblas cblas.h openblas x86_64-linux-gnu/openblas-pthread openblas)
dyncp_gpu_check_library(PkgConfig::PCRE2 pcre2.h pcre2-8)
dyncp_gpu_check_library(dyncp_utf8proc utf8proc.h utf8proc)
dyncp_gpu_check_library(dyncp_xxhash xxhash.h xxhash)
# Open MPI: one rank runs as a singleton (no mpirun; tools/gpu-check.sh sets the environment).
dyncp_gpu_check_library(MPI::MPI_C mpi.h mpi ../lib/x86_64-linux-gnu/openmpi/include
                        x86_64-linux-gnu/openmpi/lib)

set(DYNCP_CUDA ON)
include(Cuda)
message(STATUS "dyncp: GPU check build; CUDA=${DYNCP_HAVE_CUDA} nccl=${NCCL_LIBRARY}")

add_subdirectory(lib)
add_subdirectory(kernels)
add_subdirectory(lib/ops/cuda)
add_subdirectory(apps)
add_subdirectory(tools/bench/gpu)
add_subdirectory(tools/bench/model)   # bench_model writes the HF anchor's config and bin
# The emulated halves of these folders need the emulated backend, which this build leaves out.
set_target_properties(dyncp_ops_cuda_emulated dyncp_dist_nccl_emulated dyncp-train-emulated
                      PROPERTIES EXCLUDE_FROM_ALL ON)
enable_testing()
add_subdirectory(tests/gpu)
