// The --dry-run schedule preview: drawn, padded and scheduled like the trainer's first step.

#include "train/dry_run.hpp"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "data/mock_dataset.hpp"
#include "data/sampler.hpp"
#include "packing/alignment.hpp"
#include "smoke_recipe.hpp"
#include "train/training_data.hpp"

namespace fs = std::filesystem;

using namespace dyncp;
using test::smoke_config;

namespace {

// The histogram must account for every group and every rank of every microbatch.
void check_histogram(const train::SchedulePreview& preview) {
  std::int64_t groups = 0, rank_slots = 0;
  for (const auto& [size, count] : preview.group_sizes) {
    groups += count;
    rank_slots += size * count;
  }
  CHECK(groups == preview.groups);
  CHECK(rank_slots == preview.microbatches * preview.pool_size);
}

}  // namespace

TEST_CASE("dry-run preview: the smoke recipe's first step passes the schedule check",
          "[train][dry_run]") {
  const auto config = smoke_config(4);
  const train::TrainingData data = train::open_preview_data(config, 100);
  REQUIRE(data.source != nullptr);
  const train::SchedulePreview preview = train::preview_first_step(config, *data.source);
  CHECK(preview.check_problem.empty());
  CHECK(preview.scheduler == "default_dynamic_cp");
  CHECK(preview.pool_size == 4);
  CHECK(preview.batch_size == config.train.global_batch_size);
  CHECK(preview.microbatches >= 1);
  check_histogram(preview);

  // Token counts: the first batch of the same sampler; each sequence padded for its group
  // (per_group, the default) pays less than Megatron's pool multiple, which the pool rule
  // reproduces exactly.
  data::Sampler sampler(train::sampler_options(config), data.source->size());
  std::int64_t real = 0, padded = 0;
  for (const auto id : sampler.next_global_batch()) {
    real += data.source->length(id);
    padded += packing::padded_length(data.source->length(id), config.layout.alignment_multiple);
  }
  CHECK(preview.real_tokens == real);
  CHECK(preview.padded_tokens >= real);
  CHECK(preview.padded_tokens < padded);
  const auto pool_config = smoke_config(4, {"packing.alignment=pool"});
  const train::SchedulePreview pool_preview = train::preview_first_step(pool_config, *data.source);
  CHECK(pool_preview.check_problem.empty());
  CHECK(pool_preview.padded_tokens == padded);
  CHECK(pool_preview.padded_tokens % config.layout.alignment_multiple == 0);

  CHECK(preview.step_seconds > 0);
  CHECK(preview.lower_bound_seconds > 0);
  CHECK(preview.lower_bound_seconds <= preview.step_seconds * (1 + 1e-9));
  // lognormal up to 256 tokens with cap 128 and cp 2: static CP can run every sequence.
  CHECK(preview.static_cp_step_seconds >= preview.lower_bound_seconds * (1 - 1e-9));
}

TEST_CASE("dry-run preview: every scheduler and the static layout give valid schedules",
          "[train][dry_run]") {
  const std::vector<std::vector<std::string>> variants = {
      {"model.sequence_packing_scheduler=cost_aware"},
      {"model.dynamic_context_parallel=false", "model.max_seqlen_per_dp_cp_rank=128"},
      {"train.global_batch_size=64", "model.max_seqlen_per_dp_cp_rank=256"},
  };
  for (const auto& overrides : variants) {
    for (const std::int64_t world : {2, 8}) {
      INFO(overrides.front() << ", world " << world);
      const auto config = smoke_config(world, overrides);
      const auto data = train::open_preview_data(config, 100);
      const auto preview = train::preview_first_step(config, *data.source);
      CHECK(preview.check_problem.empty());
      CHECK(preview.batch_size == config.train.global_batch_size);
      check_histogram(preview);
      if (!config.model.dynamic_context_parallel || preview.scheduler == "dp_balanced") {
        REQUIRE(preview.group_sizes.size() == 1);
        CHECK(preview.group_sizes.begin()->first == config.model.context_parallel_size);
      }
    }
  }
}

TEST_CASE("dry-run preview: times are plain milliseconds at any size", "[train][dry_run]") {
  CHECK(train::milliseconds(0.373) == "373 ms");
  CHECK(train::milliseconds(12.3) == "12300 ms");  // "%.3g" printed 1.23e+04 ms
  CHECK(train::milliseconds(1234.5) == "1234500 ms");
  CHECK(train::milliseconds(0.0456) == "45.6 ms");
  CHECK(train::milliseconds(0.00456) == "4.56 ms");
  CHECK(train::milliseconds(0.000456) == "0.456 ms");
  train::SchedulePreview preview;
  preview.step_seconds = 25.0;
  preview.lower_bound_seconds = 20.0;
  const std::string text = train::format_schedule_preview(preview);
  CHECK(text.find("25000 ms") != std::string::npos);
  CHECK(text.find("e+") == std::string::npos);
}

TEST_CASE("dry-run preview: group histogram format", "[train][dry_run]") {
  CHECK(train::format_group_histogram({{1, 12}, {2, 3}, {4, 1}}) == "cp1:12 cp2:3 cp4:1");
  CHECK(train::format_group_histogram({}) == "");
}

TEST_CASE("dry-run data: a missing data file is a note, not an error", "[train][dry_run]") {
  auto config =
      smoke_config(4, {"dataset.type=chat_jsonl", "dataset.data_path=/nonexistent/train.jsonl",
                       "tokenizer.tokenizer_type=HuggingFaceTokenizer",
                       "tokenizer.tokenizer_model=/nonexistent/tokenizer"});
  const train::TrainingData data = train::open_preview_data(config, 100);
  CHECK(data.source == nullptr);
  CHECK(data.description.find("/nonexistent/train.jsonl") != std::string::npos);
  CHECK(data.description.find("does not exist") != std::string::npos);
}

TEST_CASE("dry-run data: tokenizes only a prefix, then reuses the full cache once it exists",
          "[train][dry_run]") {
  const fs::path cache =
      fs::temp_directory_path() / ("dyncp-dry-run-test-" + std::to_string(::getpid()));
  fs::remove_all(cache);
  const std::string demo = std::string(DYNCP_SOURCE_DIR) + "/tests/fixtures/data/demo";
  const auto config =
      smoke_config(4, {"dataset.type=chat_jsonl", "dataset.data_path=" + demo + "/train.jsonl",
                       "tokenizer.tokenizer_model=" + demo + "/tokenizer",
                       "tokenizer.tokenizer_type=HuggingFaceTokenizer",
                       "dataset.cache_dir=" + cache.string(), "train.global_batch_size=8"});

  const train::TrainingData prefix = train::open_preview_data(config, 10);
  REQUIRE(prefix.source != nullptr);
  CHECK(prefix.source->size() <= 10);
  CHECK(prefix.source->size() >= 8);
  CHECK(prefix.description.find("first 10 records") != std::string::npos);
  const auto preview = train::preview_first_step(config, *prefix.source);
  CHECK(preview.check_problem.empty());
  check_histogram(preview);

  const train::TrainingData full = train::open_training_data(config);
  CHECK(full.source->size() > prefix.source->size());
  const train::TrainingData again = train::open_preview_data(config, 10);
  CHECK(again.source->size() == full.source->size());
  CHECK(again.description.find("prepared cache") != std::string::npos);
  fs::remove_all(cache);
}

TEST_CASE("dry-run report: pp > 1 lists every stage's memory and the largest stage's table",
          "[train][dry_run]") {
  const auto config = smoke_config(16, {"model.pipeline_model_parallel_size=2"});
  train::MemoryEstimateInput largest;
  train::MemoryEstimate largest_estimate;
  const std::string stages =
      train::format_pipeline_stage_memory(config, 0, &largest, &largest_estimate);
  CHECK_THAT(stages,
             Catch::Contains("memory estimate per pipeline stage, per rank (2 stages, 1F1B") &&
                 Catch::Contains("stage 0     1 layers") &&
                 Catch::Contains("stage 1     1 layers") && !Catch::Contains("not built"));
  // Stage 0 keeps two microbatches in flight: it is the larger.
  CHECK(largest.stage_holds_embedding);
  CHECK(largest.pipeline_in_flight == 2.0);
  std::ostringstream report;
  train::write_dry_run_report(report, config, 64);
  CHECK_THAT(report.str(), Catch::Contains("pipeline bubble:") &&
                               Catch::Contains("memory estimate of the largest stage, per rank") &&
                               Catch::Contains("pipeline P2P buffers") &&
                               Catch::Contains("pipeline_parallel:"));
}

TEST_CASE("dry-run preview: pipeline stages add the bubble to the modelled step",
          "[train][dry_run]") {
  const auto flat = smoke_config(8);
  const auto piped = smoke_config(16, {"model.pipeline_model_parallel_size=2"});
  train::TrainingData data = train::open_preview_data(flat, 64);
  REQUIRE(data.source);
  const auto one = train::preview_first_step(flat, *data.source);
  const auto two = train::preview_first_step(piped, *data.source);
  CHECK(one.pipeline_bubble_fraction == 0.0);
  CHECK(two.microbatches == one.microbatches);  // one plan for all stages
  CHECK(two.pipeline_bubble_fraction > 0.0);
  // Half the layers a stage, plus the bubble.
  CHECK(two.step_seconds > one.step_seconds / 2);
  CHECK(two.step_seconds < one.step_seconds);
}

TEST_CASE("dry-run: the static-CP suggestion of a pipelined recipe is for one stage's ranks",
          "[train][dry_run]") {
  const std::string flat = train::suggest_static_layout(smoke_config(8));
  const std::string piped =
      train::suggest_static_layout(smoke_config(16, {"model.pipeline_model_parallel_size=2"}));
  // 16 ranks over 2 stages: the same 8-rank pool as the flat recipe.
  CHECK(piped == flat);
}
