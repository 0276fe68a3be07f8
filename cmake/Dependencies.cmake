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
# xxHash (libxxhash-dev): the checkpoint manifest's per-file checksums.
find_path(XXHASH_INCLUDE_DIR xxhash.h REQUIRED)
find_library(XXHASH_LIBRARY xxhash REQUIRED)
add_library(dyncp_xxhash INTERFACE)
target_include_directories(dyncp_xxhash SYSTEM INTERFACE ${XXHASH_INCLUDE_DIR})
target_link_libraries(dyncp_xxhash INTERFACE ${XXHASH_LIBRARY})

include(Cuda)
message(STATUS "dyncp: CUDA=${DYNCP_HAVE_CUDA} MPI=${MPI_C_FOUND} build=${CMAKE_BUILD_TYPE}")
