set(FUZZ_SOURCES ${PROJECT_SOURCE_DIR}/apps/dyncp-plan/lengths_file.cpp)
set(FUZZ_DEPENDS dyncp_core nlohmann_json::nlohmann_json)
