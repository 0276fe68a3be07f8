#include "train/lr_schedule.hpp"

#include <catch2/catch.hpp>

using namespace dyncp::train;

TEST_CASE("warmup rises linearly from zero to max_lr", "[train][lr]") {
  LrSchedule schedule{.max_lr = 1e-3,
                      .min_lr = 1e-5,
                      .warmup_iters = 10,
                      .decay_iters = 110,
                      .style = LrDecayStyle::cosine};
  CHECK(schedule.lr_at(0) == 0.0);
  CHECK(schedule.lr_at(5) == Approx(5e-4));
  CHECK(schedule.lr_at(10) == Approx(1e-3));
}

TEST_CASE("cosine and linear decay reach min_lr at decay_iters and stay there", "[train][lr]") {
  for (auto style : {LrDecayStyle::cosine, LrDecayStyle::linear}) {
    LrSchedule schedule{
        .max_lr = 1e-3, .min_lr = 1e-5, .warmup_iters = 10, .decay_iters = 110, .style = style};
    CHECK(schedule.lr_at(60) == Approx(0.5 * (1e-3 + 1e-5)));
    CHECK(schedule.lr_at(110) == Approx(1e-5));
    CHECK(schedule.lr_at(500) == 1e-5);
    for (int i = 11; i < 110; ++i) CHECK(schedule.lr_at(i + 1) <= schedule.lr_at(i));
  }
}

TEST_CASE("constant holds max_lr after warmup", "[train][lr]") {
  LrSchedule schedule{.max_lr = 2e-4, .warmup_iters = 2, .decay_iters = 10};
  CHECK(schedule.lr_at(1) == Approx(1e-4));
  CHECK(schedule.lr_at(3) == 2e-4);
  CHECK(schedule.lr_at(1000) == 2e-4);
}
