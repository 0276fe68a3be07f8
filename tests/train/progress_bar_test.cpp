#include "train/progress_bar.hpp"

#include <catch2/catch.hpp>

using dyncp::train::ProgressBar;

TEST_CASE("progress bar shows the fraction done and the remaining time", "[train][progress]") {
  CHECK(ProgressBar::render(75, 150, 0.5, 10) == "[#####-----]  75/150   50%  ETA 38s");
  CHECK(ProgressBar::render(0, 4, 90.0, 4) == "[----] 0/4    0%  ETA 6m00s");
  CHECK(ProgressBar::render(4, 4, 90.0, 4) == "[####] 4/4  100%  ETA 0s");
  CHECK(ProgressBar::render(1, 101, 3600.0, 4).find("ETA 100h00m") != std::string::npos);
}

TEST_CASE("progress bar stays off outside a terminal and on ranks other than 0",
          "[train][progress]") {
  // ctest captures stdout, so it is never a terminal here.
  CHECK_FALSE(ProgressBar(true, 10).enabled());
  CHECK_FALSE(ProgressBar(false, 10).enabled());
}
