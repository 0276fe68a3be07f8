add_library(dyncp_warnings INTERFACE)
# Shadowing is checked for locals only: GCC spells it -Wshadow=local; clang (the fuzz build)
# has no such option and warns that it is unknown on every file, so it gets its nearest
# equivalent, -Wshadow (a local shadowing a local or a parameter).
target_compile_options(dyncp_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic>
  $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU>>:-Wshadow=local>
  $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:Clang>>:-Wshadow>
  $<$<COMPILE_LANGUAGE:CXX>:-Wno-missing-field-initializers>)
if(DYNCP_WERROR)
  target_compile_options(dyncp_warnings INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
endif()

# dyncp_add_layer(NAME SOURCES... DEPENDS targets...): one static library per layer.
function(dyncp_add_layer name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPENDS" ${ARGN})
  add_library(dyncp_${name} STATIC ${ARG_SOURCES})
  target_include_directories(dyncp_${name} PUBLIC ${PROJECT_SOURCE_DIR}/lib)
  target_link_libraries(dyncp_${name} PUBLIC ${ARG_DEPENDS} PRIVATE dyncp_warnings)
  set_target_properties(dyncp_${name} PROPERTIES POSITION_INDEPENDENT_CODE ON)
endfunction()

# dyncp_add_test(NAME SOURCES... DEPENDS targets...): a Catch2 binary registered test by test.
function(dyncp_add_test name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPENDS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPENDS} Catch2::Catch2WithMain dyncp_warnings)
  target_compile_definitions(${name} PRIVATE
    DYNCP_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  catch_discover_tests(${name} TEST_PREFIX "${name}:" PROPERTIES LABELS "${ARG_LABELS}"
    ENVIRONMENT "OPENBLAS_NUM_THREADS=1")
endfunction()
