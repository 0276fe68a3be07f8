# The chat half renders with the committed demo tokenizer's template (path baked in at build
# time by the tokenizer target's definitions, which sort before this file).
if(NOT TARGET dyncp_fuzz_tokenizer_paths)
  add_library(dyncp_fuzz_tokenizer_paths INTERFACE)
  target_compile_definitions(dyncp_fuzz_tokenizer_paths INTERFACE
    DYNCP_FUZZ_TOKENIZER_DIR="${PROJECT_SOURCE_DIR}/tests/fixtures/data/demo/tokenizer")
endif()
set(FUZZ_DEPENDS dyncp_data dyncp_fuzz_tokenizer_paths)
