set(FUZZ_DEPENDS dyncp_data)
