# The header parser alone, not the model library (which pulls in every op).
set(FUZZ_SOURCES ${PROJECT_SOURCE_DIR}/lib/model/safetensors_header.cpp)
set(FUZZ_DEPENDS dyncp_core nlohmann_json::nlohmann_json)
