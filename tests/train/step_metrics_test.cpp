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
  for (const char* key : {"iteration",
                          "consumed_samples",
                          "loss",
                          "grad_norm",
                          "lr",
                          "loss_tokens",
                          "real_tokens",
                          "tokens_per_s",
                          "tflops_per_device",
                          "microbatches",
                          "group_sizes",
                          "comm_bytes",
                          "dropped_samples",
                          "skipped_steps",
                          "elapsed_ms",
                          "elapsed_ms_min",
                          "elapsed_ms_max",
                          "eta_s",
                          "peak_memory_bytes",
                          "run_id",
                          "global_batch_size",
                          "time_ms"}) {
    INFO(key);
    CHECK(json.contains(key));
  }
  CHECK(json["iteration"] == 7);
  CHECK(json["group_sizes"]["4"] == 1);
  CHECK(json["time_ms"]["cp_comm"] == 3.25);
  for (const char* phase : {"data", "schedule", "compute", "cp_comm", "ep_comm", "straggler_wait",
                            "grad_sync", "optimizer"}) {
    CHECK(json["time_ms"].contains(phase));
  }
}

TEST_CASE("console line has Megatron's fields, the interval's counts and the group histogram",
          "[train][metrics]") {
  StepMetrics metrics;
  metrics.iteration = 3;
  metrics.train_iters = 10;
  metrics.consumed_samples = 48;
  metrics.global_batch_size = 16;
  metrics.loss = 1.23456;
  metrics.grad_norm = 0.5;
  metrics.lr = 1e-4;
  metrics.dropped_samples = 5;
  metrics.eta_seconds = 62;
  metrics.peak_memory_bytes = 3 << 20;
  metrics.group_sizes = {{2, 3}};
  metrics.time.straggler_wait_ms = 7;
  LogInterval interval;
  metrics.elapsed_ms = 100;
  interval.add(metrics, /*skipped=*/true, /*nan=*/true);
  metrics.elapsed_ms = 300;
  interval.add(metrics, false, false);
  const std::string line = format_console_line(metrics, interval);
  CHECK_THAT(line, Catch::Contains("iteration        3/      10 | consumed samples:           48"));
  CHECK_THAT(line, Catch::Contains("elapsed time per iteration (ms): 200.0 | "));
  CHECK_THAT(line, Catch::Contains("learning rate: 1.000000E-04 | global batch size:    16 | "
                                   "lm loss: 1.234560E+00 | grad norm: 0.500 | "));
  CHECK_THAT(line, Catch::Contains("number of skipped iterations:   1 | number of nan "
                                   "iterations:   1 | dropped samples: 5 | "));
  CHECK_THAT(line, Catch::Contains("ETA: 1m02s | peak memory (MiB): 3.0 | "));
  CHECK_THAT(line, Catch::Contains("cp2:3") && Catch::Contains("wait 7"));
  CHECK_THAT(line, !Catch::Contains("skipped 5"));
  interval.reset();
  CHECK(interval.skipped_iterations() == 0);
  CHECK(interval.mean_elapsed_ms() == 0);
}

TEST_CASE("run ids differ between launches and peak memory is measured", "[train][metrics]") {
  const std::string first = make_run_id();
  CHECK(first.size() == std::string("20261201-203015-4f2a9c").size());
  CHECK(first != make_run_id());
  CHECK(peak_resident_bytes() > (1 << 20));
}

TEST_CASE("a metrics write that fails is reported, not dropped silently", "[train][metrics]") {
  dyncp::train::MetricsWriter full("/dev/full");  // every write fails with ENOSPC
  dyncp::train::StepMetrics metrics;
  metrics.iteration = 1;
  CHECK_FALSE(full.write(metrics));
  metrics.iteration = 2;
  CHECK_FALSE(full.write(metrics));  // every time, not only the first
  dyncp::train::MetricsWriter none("");
  CHECK(none.write(metrics));
}
