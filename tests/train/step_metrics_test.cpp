#include "train/step_metrics.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

using namespace dyncp::train;

TEST_CASE("group histogram lists sizes in ascending order", "[train][metrics]") {
  CHECK(format_group_histogram({{4, 1}, {1, 12}, {2, 3}}) == "cp1:12 cp2:3 cp4:1");
  CHECK(format_group_histogram({}).empty());
}

TEST_CASE("metrics JSON line carries every documented field", "[train][metrics]") {
  StepMetrics metrics;
  metrics.iteration = 7;
  metrics.loss = 2.5;
  metrics.group_sizes = {{1, 6}, {4, 1}};
  metrics.time.cp_comm_ms = 3.25;
  const auto json = nlohmann::json::parse(to_json_line(metrics));
  for (const char* key :
       {"iteration", "consumed_samples", "loss", "grad_norm", "lr", "loss_tokens", "real_tokens",
        "tokens_per_s", "tflops_per_device", "microbatches", "group_sizes", "comm_bytes",
        "skipped_samples", "skipped_steps", "elapsed_ms", "time_ms"}) {
    INFO(key);
    CHECK(json.contains(key));
  }
  CHECK(json["iteration"] == 7);
  CHECK(json["group_sizes"]["4"] == 1);
  CHECK(json["time_ms"]["cp_comm"] == 3.25);
  for (const char* phase :
       {"data", "schedule", "compute", "cp_comm", "ep_comm", "grad_sync", "optimizer"}) {
    CHECK(json["time_ms"].contains(phase));
  }
}

TEST_CASE("console line shows iteration, loss and the group histogram", "[train][metrics]") {
  StepMetrics metrics;
  metrics.iteration = 3;
  metrics.train_iters = 10;
  metrics.loss = 1.23456;
  metrics.group_sizes = {{2, 3}};
  const std::string line = format_console_line(metrics);
  CHECK_THAT(line, Catch::Contains("iter 3/10") && Catch::Contains("loss 1.23456") &&
                       Catch::Contains("cp2:3"));
}
