// dataset.shuffle and dataset.num_workers: an accepted key acts (or is refused).
#include <catch2/catch.hpp>
#include <string>

#include "config_test_helpers.hpp"
#include "core/error.hpp"

using namespace dyncp::config;

TEST_CASE("dataset.num_workers is a thread count, not warned about as inert", "[config]") {
  // It sets the preparation threads (tests/data: record_workers and the prepared cache).
  CHECK(config_warnings(test::resolved({"dataset.num_workers=8"})).empty());
  CHECK(test::resolved({"dataset.num_workers=0"}).dataset.num_workers == 0);
  REQUIRE_THROWS_WITH(test::load({"dataset.num_workers=257"}),
                      Catch::Contains("dataset.num_workers") && Catch::Contains("at most 256"));
}

TEST_CASE("dataset.shuffle=false with the cyclic loader is refused", "[config][shuffle]") {
  REQUIRE_THROWS_WITH(test::resolved({"dataset.shuffle=false", "dataset.dataloader_type=cyclic"}),
                      Catch::Contains("dataset.shuffle: false"));
  CHECK_NOTHROW(test::resolved({"dataset.shuffle=false", "dataset.dataloader_type=single"}));
}
