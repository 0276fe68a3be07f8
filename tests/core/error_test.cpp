#include "core/error.hpp"

#include <catch2/catch.hpp>

using namespace dyncp::core;

TEST_CASE("Error maps user-fixable kinds to exit code 2 and runtime to 1", "[core][error]") {
  CHECK(Error(ErrorKind::config, "model.seq_length", "must be positive").exit_code() == 2);
  CHECK(Error(ErrorKind::data, "a.jsonl:3", "bad json").exit_code() == 2);
  CHECK(Error(ErrorKind::usage, "", "no --config").exit_code() == 2);
  CHECK(Error(ErrorKind::runtime, "", "rank 3 failed").exit_code() == 1);
}

TEST_CASE("Error message leads with where the problem is", "[core][error]") {
  const Error error(ErrorKind::config, "train.global_batch_size", "must be divisible by dp");
  CHECK(std::string(error.what()) == "train.global_batch_size: must be divisible by dp");
  CHECK(error.where() == "train.global_batch_size");
  const auto failing_check = [] { DYNCP_CHECK(1 + 1 == 3, "arithmetic"); };
  REQUIRE_THROWS_WITH(failing_check(),
                      Catch::Contains("internal check failed") && Catch::Contains("arithmetic"));
}
