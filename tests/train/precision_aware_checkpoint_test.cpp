// The precision-aware optimizer (bf16 Adam moments) through a training checkpoint: the file
// keeps fp32 moments, which bf16 ones widen to exactly and narrow back from to the same bits;
// fp32 moments load into a bf16 run rounded to nearest even, bf16 ones into an fp32 run widened.

#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <string>

#include "config/config_loader.hpp"
#include "config/resolve.hpp"
#include "core/rng.hpp"
#include "parallel/parameter_partition.hpp"
#include "train/optimizer.hpp"
#include "train/training_checkpoint.hpp"

using namespace dyncp;
using core::DType;
using core::Tensor;

namespace {

namespace fs = std::filesystem;

config::ModelArchitecture tiny_architecture() {
  auto config =
      config::load_config_file(std::string(DYNCP_SOURCE_DIR) + "/configs/smoke/tiny_mock.yaml", {});
  config::resolve_config(config, 4);
  auto architecture = config.model.architecture;
  architecture.resolve();
  return architecture;
}

train::AdamWSettings settings(DType exp_avg, DType exp_avg_sq) {
  train::AdamWSettings adam;
  adam.beta2 = 0.95;
  adam.exp_avg_dtype = exp_avg;
  adam.exp_avg_sq_dtype = exp_avg_sq;
  return adam;
}

// A few steps with random gradients, so every moment holds a value of its own.
void train_steps(const model::Qwen3MoeParameters& parameters, train::AdamWOptimizer& optimizer) {
  const Tensor& grads = parameters.all_grads();
  for (std::int64_t step = 1; step <= 3; ++step) {
    for (std::int64_t i = 0; i < grads.numel(); ++i) {
      const auto bits =
          core::random_bits(9, core::RngPurpose::test, static_cast<std::uint64_t>(step),
                            static_cast<std::uint64_t>(i));
      grads.data<float>()[i] = static_cast<float>(bits >> 40) * 0x1.0p-24f - 0.5f;
    }
    optimizer.step(1e-3, step, 1.0);
  }
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.numel() == b.numel() &&
         std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("dyncp_train_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

}  // namespace

TEST_CASE("bf16 optimizer moments round-trip a training checkpoint bit-exactly",
          "[train][checkpoint][bf16]") {
  const auto architecture = tiny_architecture();
  const model::Qwen3MoeParameters parameters(architecture);
  parameters.init_random(5);
  const auto partition = parallel::partition_parameters(parameters);
  train::AdamWOptimizer optimizer(parameters, partition, settings(DType::bf16, DType::bf16));
  REQUIRE(optimizer.exp_avg().dtype() == DType::bf16);
  REQUIRE(optimizer.exp_avg_sq().dtype() == DType::bf16);
  CHECK(optimizer.owned_state_bytes() == 2 * 2 * parameters.all_values().numel());
  train_steps(parameters, optimizer);

  // The checkpoint form is fp32 and every value in it is exactly a bf16.
  const auto full = optimizer.full_size_moments();
  REQUIRE(full.exp_avg.dtype() == DType::f32);
  std::int64_t nonzero = 0;
  for (const Tensor* moment : {&full.exp_avg, &full.exp_avg_sq}) {
    for (std::int64_t i = 0; i < moment->numel(); ++i) {
      const float x = moment->data<float>()[i];
      if (core::bf16_bits_to_float(core::float_to_bf16_bits(x)) != x) FAIL("not a bf16: " << x);
      if (x != 0) ++nonzero;
    }
  }
  CHECK(nonzero > parameters.all_values().numel());

  const fs::path folder = fresh_dir("ckpt_bf16_moments");
  train::LoopState state;
  state.iteration = 3;
  train::write_training_checkpoint(folder, parameters, full.exp_avg, full.exp_avg_sq, state);

  SECTION("into a bf16-moment run: the same bits") {
    const model::Qwen3MoeParameters reread(architecture);
    train::AdamWOptimizer resumed(reread, parallel::partition_parameters(reread),
                                  settings(DType::bf16, DType::bf16));
    const auto loaded = resumed.full_size_moments();
    CHECK(train::read_training_checkpoint(folder, 3, reread, loaded.exp_avg, loaded.exp_avg_sq)
              .iteration == 3);
    resumed.load_full_size_moments(loaded);
    CHECK(same_bytes(resumed.exp_avg(), optimizer.exp_avg()));
    CHECK(same_bytes(resumed.exp_avg_sq(), optimizer.exp_avg_sq()));
    CHECK(same_bytes(reread.all_values(), parameters.all_values()));
  }
  SECTION("into an fp32-moment run: the same values, widened") {
    const model::Qwen3MoeParameters reread(architecture);
    train::AdamWOptimizer resumed(reread, parallel::partition_parameters(reread),
                                  settings(DType::f32, DType::f32));
    const auto loaded = resumed.full_size_moments();
    train::read_training_checkpoint(folder, 3, reread, loaded.exp_avg, loaded.exp_avg_sq);
    resumed.load_full_size_moments(loaded);
    CHECK(same_bytes(resumed.exp_avg(), full.exp_avg));
    CHECK(same_bytes(resumed.exp_avg_sq(), full.exp_avg_sq));
  }
}

TEST_CASE("fp32 optimizer moments load into a bf16-moment run rounded to nearest even",
          "[train][checkpoint][bf16]") {
  const auto architecture = tiny_architecture();
  const model::Qwen3MoeParameters parameters(architecture);
  parameters.init_random(6);
  train::AdamWOptimizer optimizer(parameters, parallel::partition_parameters(parameters),
                                  settings(DType::f32, DType::f32));
  train_steps(parameters, optimizer);
  const fs::path folder = fresh_dir("ckpt_fp32_moments");
  train::write_training_checkpoint(folder, parameters, optimizer.exp_avg(), optimizer.exp_avg_sq(),
                                   {});

  // Only the second moment in bf16: each moment's dtype is its own.
  const model::Qwen3MoeParameters reread(architecture);
  train::AdamWOptimizer resumed(reread, parallel::partition_parameters(reread),
                                settings(DType::f32, DType::bf16));
  const auto loaded = resumed.full_size_moments();
  train::read_training_checkpoint(folder, 0, reread, loaded.exp_avg, loaded.exp_avg_sq);
  resumed.load_full_size_moments(loaded);
  CHECK(same_bytes(resumed.exp_avg(), optimizer.exp_avg()));
  const Tensor& want = optimizer.exp_avg_sq();
  const Tensor& got = resumed.exp_avg_sq();
  REQUIRE(got.dtype() == DType::bf16);
  std::int64_t rounded = 0;
  for (std::int64_t i = 0; i < want.numel(); ++i) {
    const float x = want.data<float>()[i];
    if (got.bf16_bits()[i] != core::float_to_bf16_bits(x)) FAIL("element " << i);
    if (core::bf16_bits_to_float(got.bf16_bits()[i]) != x) ++rounded;
  }
  CHECK(rounded > 0);  // the fp32 values were not all bf16 already
}
