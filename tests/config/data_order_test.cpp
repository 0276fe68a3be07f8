// dataset.shuffle and dataset.num_workers: an accepted key either acts or says it does not.
#include <catch2/catch.hpp>
#include <string>

#include "config_test_helpers.hpp"
#include "core/error.hpp"

using namespace dyncp::config;

TEST_CASE("dataset.num_workers is warned about as having no effect", "[config][inert]") {
  CHECK(config_warnings(test::resolved()).empty());
  const auto warnings = config_warnings(test::resolved({"dataset.num_workers=8"}));
  REQUIRE(warnings.size() == 1);
  CHECK_THAT(warnings.front(), Catch::Contains("dataset.num_workers 8 has no effect"));
}

TEST_CASE("dataset.shuffle=false with the cyclic loader is refused", "[config][shuffle]") {
  REQUIRE_THROWS_WITH(test::resolved({"dataset.shuffle=false", "dataset.dataloader_type=cyclic"}),
                      Catch::Contains("dataset.shuffle: false"));
  CHECK_NOTHROW(test::resolved({"dataset.shuffle=false", "dataset.dataloader_type=single"}));
}
