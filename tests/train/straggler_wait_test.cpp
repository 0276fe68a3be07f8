// The straggler wait is timed where a rank waits for the slowest one: at the step's barriers over
// the pool. Run under mpirun with 2 ranks (dp 2): rank 1 reads sample lengths slowly, so rank 0
// reaches the step's reductions first and waits there. That wait must be rank 0's
// straggler_wait, not its grad_sync; rank 1, the straggler, waits for nobody.

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "config/config_loader.hpp"
#include "config/resolve.hpp"
#include "core/rng.hpp"
#include "data/sample.hpp"
#include "dist/parallel_layout.hpp"
#include "dist/parallel_state.hpp"
#include "model/qwen3_moe_model.hpp"
#include "mpi_test_world.hpp"
#include "packing/alignment.hpp"
#include "train/step_engine.hpp"

using namespace dyncp;

namespace {

constexpr double delay_ms = 1000;  // rank 1's extra schedule time per step

// Fixed random tokens. Every rank reads every sample's length once per step (for the schedule),
// so `ms_per_length` on each read delays a step by a known amount.
class SlowSource final : public data::SampleSource {
 public:
  SlowSource(std::int64_t count, std::int64_t length, std::int64_t vocab, double ms_per_length)
      : length_(length), ms_per_length_(ms_per_length) {
    for (std::int64_t i = 0; i < count; ++i) {
      std::vector<std::int32_t> tokens(static_cast<std::size_t>(length));
      core::Rng rng(5, core::RngPurpose::test, static_cast<std::uint64_t>(i));
      for (auto& token : tokens)
        token = static_cast<std::int32_t>(rng.below(static_cast<std::uint64_t>(vocab)));
      tokens_.push_back(std::move(tokens));
    }
  }
  std::int64_t size() const override { return static_cast<std::int64_t>(tokens_.size()); }
  std::int64_t length(std::int64_t) const override {
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms_per_length_));
    return length_;
  }
  data::Sample sample(std::int64_t index, std::int64_t alignment, std::int32_t pad) const override {
    const auto& tokens = tokens_[static_cast<std::size_t>(index)];
    const std::vector<std::uint8_t> targets(tokens.size(), 1);
    return data::make_sample(index, tokens, targets, alignment, pad);
  }

 private:
  std::int64_t length_;
  double ms_per_length_;
  std::vector<std::vector<std::int32_t>> tokens_;
};

}  // namespace

TEST_CASE("a slow rank's delay is the other rank's straggler wait, not its sync time",
          "[train][mpi]") {
  dist::Comm& world = dist::testing::test_world();
  REQUIRE(world.size() == 2);
  auto config = config::load_config_file(
      std::string(DYNCP_SOURCE_DIR) + "/configs/smoke/tiny_mock.yaml",
      {"model.context_parallel_size=1", "model.dynamic_context_parallel=false",
       "model.expert_model_parallel_size=1", "model.max_seqlen_per_dp_cp_rank=256"});
  config::resolve_config(config, 2);
  auto architecture = config.model.architecture;
  architecture.resolve();

  const dist::ParallelLayout layout = dist::layout_for_world(2, 1, 1, false, 1);
  dist::ParallelState parallel_state(world, layout);
  model::Qwen3MoeModel model(architecture, {});
  model.parameters().init_random(3);
  constexpr std::int64_t batch = 8;
  const SlowSource source(batch, 32, architecture.vocab_size,
                          world.rank() == 1 ? delay_ms / batch : 0.0);
  train::StepEngineOptions options;
  options.scheduler = config::PackingScheduler::dp_balanced;
  options.max_seqlen_per_dp_cp_rank = 256;
  options.alignment = packing::alignment_rule(config);
  train::StepEngine engine(model, parallel_state, source, options);
  std::vector<std::int64_t> ids(batch);
  for (std::int64_t i = 0; i < batch; ++i) ids[static_cast<std::size_t>(i)] = i;

  for (int step = 0; step < 2; ++step) {
    const train::StepOutcome outcome = engine.forward_backward(ids);
    const auto& time = outcome.time;
    INFO("rank " << world.rank() << " step " << step << ": schedule " << time.schedule_ms
                 << " ms, wait " << time.straggler_wait_ms << " ms, sync " << time.grad_sync_ms
                 << " ms");
    if (world.rank() == 1) {
      CHECK(time.schedule_ms >= delay_ms);
      CHECK(time.straggler_wait_ms < delay_ms / 2);
    } else {
      CHECK(time.schedule_ms < delay_ms / 2);
      // Rank 0 waits for rank 1's extra data time, less scheduling noise; none of it is
      // counted as the reductions' time.
      CHECK(time.straggler_wait_ms >= 0.75 * delay_ms);
      CHECK(time.grad_sync_ms < delay_ms / 2);
    }
  }
}
