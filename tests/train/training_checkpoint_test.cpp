// Training checkpoints stay layout-independent when each rank holds only its experts: written
// from EP slices (experts gathered layer by layer for the writer) they are the very files the
// whole model writes, and each slice reads back exactly its weights and moments.

#include "train/training_checkpoint.hpp"

#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>

#include "checkpoint_test_moments.hpp"
#include "config/config_loader.hpp"
#include "config/resolve.hpp"
#include "core/rng.hpp"

using namespace dyncp;

namespace {

namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("dyncp_train_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string file_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// An EP group in one process: slices share one layout, so a rank's gather takes the same
// offset from every rank's buffer of the same kind (values, exp_avg, exp_avg_sq).
class InProcessGather final : public model::ExpertGather {
 public:
  InProcessGather(std::vector<std::vector<core::Tensor>> buffers_per_rank, int rank)
      : buffers_(std::move(buffers_per_rank)), rank_(rank) {}
  void gather(std::span<const float> slice, std::span<float> whole) override {
    const auto& own = buffers_[static_cast<std::size_t>(rank_)];
    for (std::size_t kind = 0; kind < own.size(); ++kind) {
      const float* base = own[kind].data<float>();
      if (slice.data() < base || slice.data() >= base + own[kind].numel()) continue;
      for (std::size_t r = 0; r < buffers_.size(); ++r)
        std::copy_n(buffers_[r][kind].data<float>() + (slice.data() - base), slice.size(),
                    whole.begin() + static_cast<std::ptrdiff_t>(r * slice.size()));
      return;
    }
    FAIL("the slice lies in none of this rank's buffers");
  }

 private:
  std::vector<std::vector<core::Tensor>> buffers_;
  int rank_;
};

using test::moments_for;

}  // namespace

TEST_CASE("training checkpoints written from EP slices are the whole model's",
          "[train][checkpoint]") {
  auto config =
      config::load_config_file(std::string(DYNCP_SOURCE_DIR) + "/configs/smoke/tiny_mock.yaml", {});
  config::resolve_config(config, 4);
  auto architecture = config.model.architecture;
  architecture.resolve();
  train::LoopState state;
  state.iteration = 7;
  state.consumed_samples = 112;
  // A run resumed from a format-1 (or sharded, format-3) checkpoint still writes format 2.
  state.format = GENERATE(1, 2, 3);

  const model::Qwen3MoeParameters whole(architecture);
  whole.init_random(3);
  const fs::path expected = fresh_dir("ckpt_whole");
  train::write_training_checkpoint(expected, whole, moments_for(whole, 1), moments_for(whole, 2),
                                   state);

  const int ep = 4;
  const std::int64_t count = architecture.num_experts / ep;
  std::vector<std::unique_ptr<model::Qwen3MoeParameters>> ranks;
  std::vector<std::vector<core::Tensor>> buffers;
  for (int r = 0; r < ep; ++r) {
    ranks.push_back(std::make_unique<model::Qwen3MoeParameters>(
        architecture, model::ExpertRange{r * count, count}));
    ranks.back()->init_random(3);
    buffers.push_back(
        {ranks.back()->all_values(), moments_for(*ranks.back(), 1), moments_for(*ranks.back(), 2)});
  }
  const fs::path written = fresh_dir("ckpt_slices");
  for (int r = ep - 1; r >= 0; --r) {
    InProcessGather gather(buffers, r);
    const auto& own = buffers[static_cast<std::size_t>(r)];
    train::write_training_checkpoint(r == 0 ? written : fs::path(),
                                     *ranks[static_cast<std::size_t>(r)], own[1], own[2], state,
                                     &gather, /*write=*/r == 0);
  }
  for (const char* part :
       {"model/model.safetensors", "model/config.json", "optimizer.safetensors", "state.json"}) {
    INFO(part);
    CHECK(file_bytes(written / part) == file_bytes(expected / part));
  }

  // Each slice reads back its own experts' weights and moments, nothing else.
  const auto& slice = *ranks[2];
  const model::Qwen3MoeParameters reread(architecture, model::ExpertRange{2 * count, count});
  core::Tensor exp_avg = core::Tensor::zeros(reread.all_values().shape(), core::DType::f32);
  core::Tensor exp_avg_sq = core::Tensor::zeros(reread.all_values().shape(), core::DType::f32);
  const train::LoopState loaded =
      train::read_training_checkpoint(written, 7, reread, exp_avg, exp_avg_sq);
  CHECK(loaded.iteration == 7);
  CHECK(loaded.consumed_samples == 112);
  CHECK(loaded.format == 2);
  const auto same = [](const core::Tensor& a, const core::Tensor& b) {
    return a.numel() == b.numel() &&
           std::equal(a.data<float>(), a.data<float>() + a.numel(), b.data<float>());
  };
  CHECK(same(reread.all_values(), slice.all_values()));
  CHECK(same(exp_avg, buffers[2][1]));
  CHECK(same(exp_avg_sq, buffers[2][2]));
}
