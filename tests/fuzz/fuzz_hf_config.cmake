set(FUZZ_DEPENDS dyncp_config)
