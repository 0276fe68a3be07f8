# The state and manifest parsers alone (not the whole training library): their sources, with
# the layers they need.
set(FUZZ_SOURCES ${PROJECT_SOURCE_DIR}/lib/train/loop_state.cpp
                 ${PROJECT_SOURCE_DIR}/lib/train/lr_schedule.cpp
                 ${PROJECT_SOURCE_DIR}/lib/train/checkpoint_manifest.cpp)
set(FUZZ_DEPENDS dyncp_config dyncp_xxhash nlohmann_json::nlohmann_json)
