set(FUZZ_DEPENDS dyncp_model)
