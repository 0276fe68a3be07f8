# The tokenizer target reads the committed demo tokenizer; the path is baked in at build time.
if(NOT TARGET dyncp_fuzz_tokenizer_paths)
  add_library(dyncp_fuzz_tokenizer_paths INTERFACE)
  target_compile_definitions(dyncp_fuzz_tokenizer_paths INTERFACE
    DYNCP_FUZZ_TOKENIZER_DIR="${PROJECT_SOURCE_DIR}/tests/fixtures/data/demo/tokenizer")
endif()
set(FUZZ_DEPENDS dyncp_data dyncp_fuzz_tokenizer_paths)
