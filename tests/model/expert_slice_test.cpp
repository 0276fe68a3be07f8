// Expert slices (expert parallelism): a rank holding experts [first, first + count) gets the
// whole model's seeded values there, and the whole model written from slices (one layer's
// experts gathered at a time while writing) is the same files the whole model writes.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>

#include "config/model_architecture.hpp"
#include "model/whole_model_tensors.hpp"
#include "model_test_support.hpp"

namespace dyncp::model {
namespace {

namespace fs = std::filesystem;

std::string file_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

config::ModelArchitecture fixture_architecture(const std::string& name) {
  auto architecture = config::load_hf_model_config(testing::fixture_dir(name));
  architecture.resolve();
  return architecture;
}

// An EP group simulated in one process: the slices have identical layouts, so a rank's gather
// takes the same offset from every rank's buffer of the same kind (values, a moment, ...).
class InProcessGather final : public ExpertGather {
 public:
  InProcessGather(std::vector<std::vector<core::Tensor>> buffers_per_rank, int rank)
      : buffers_(std::move(buffers_per_rank)), rank_(rank) {}
  void gather(std::span<const float> slice, std::span<float> whole) override {
    REQUIRE(whole.size() == slice.size() * buffers_.size());
    const auto& own = buffers_[static_cast<std::size_t>(rank_)];
    for (std::size_t kind = 0; kind < own.size(); ++kind) {
      const float* base = own[kind].data<float>();
      if (slice.data() < base || slice.data() >= base + own[kind].numel()) continue;
      const std::ptrdiff_t offset = slice.data() - base;
      for (std::size_t r = 0; r < buffers_.size(); ++r)
        std::copy_n(buffers_[r][kind].data<float>() + offset, slice.size(),
                    whole.begin() + static_cast<std::ptrdiff_t>(r * slice.size()));
      ++calls;
      return;
    }
    FAIL("the slice lies in none of this rank's buffers");
  }
  int calls = 0;

 private:
  std::vector<std::vector<core::Tensor>> buffers_;
  int rank_;
};

TEST_CASE("seeded init of an expert slice equals the whole model's values there",
          "[model][experts]") {
  for (const std::string fixture : {"qwen3_moe_a", "qwen3_5_moe_b"}) {
    const auto architecture = fixture_architecture(fixture);
    const Qwen3MoeParameters whole(architecture);
    whole.init_random(11);
    const std::int64_t experts = architecture.num_experts;
    for (const ExpertRange range :
         {ExpertRange{0, experts / 2}, ExpertRange{experts / 2, experts / 2}, ExpertRange{2, 3},
          ExpertRange{experts - 1, 1}}) {
      INFO(fixture << ": experts [" << range.first << ", " << range.first + range.count << ")");
      const Qwen3MoeParameters slice(architecture, range);
      slice.init_random(11);
      std::int64_t expert_tensors = 0, moe_layers = 0;
      for (const auto& layer : slice.layers) moe_layers += layer.is_moe ? 1 : 0;
      for (const auto& tensor : slice.hf_tensors()) {
        INFO(tensor.name);
        const HfTensor* reference = whole.find(tensor.name);
        REQUIRE(reference != nullptr);
        CHECK(std::equal(tensor.value.data<float>(),
                         tensor.value.data<float>() + tensor.value.numel(),
                         reference->value.data<float>()));
        expert_tensors += tensor.is_expert ? 1 : 0;
      }
      CHECK(expert_tensors == 3 * range.count * moe_layers);
      // Nothing of the other experts is allocated.
      CHECK(slice.num_parameters() < whole.num_parameters());
    }
  }
}

TEST_CASE("the whole model written from EP slices is the whole model's checkpoint",
          "[model][experts][checkpoint]") {
  // qwen3_moe writes one tensor per expert, qwen3_5_moe_text fused per layer.
  for (const std::string fixture : {"qwen3_moe_a", "qwen3_5_moe_b"}) {
    const auto architecture = fixture_architecture(fixture);
    const Qwen3MoeParameters whole(architecture);
    whole.init_random(5);
    const fs::path expected = testing::fresh_dir("slices_whole_" + fixture);
    // Sharded small, so tensors of one layer's experts span several files.
    constexpr std::uint64_t shard_bytes = 64 << 10;
    save_hf_checkpoint(expected.string(), whole, StoredDType::f32, shard_bytes);
    for (const int ep : {2, 4}) {
      INFO(fixture << ", ep " << ep);
      const std::int64_t count = architecture.num_experts / ep;
      std::vector<std::unique_ptr<Qwen3MoeParameters>> ranks;
      std::vector<std::vector<core::Tensor>> buffers;
      for (int r = 0; r < ep; ++r) {
        ranks.push_back(
            std::make_unique<Qwen3MoeParameters>(architecture, ExpertRange{r * count, count}));
        ranks.back()->init_random(5);
        buffers.push_back({ranks.back()->all_values()});
      }
      const fs::path written = testing::fresh_dir("slices_" + fixture + std::to_string(ep));
      for (int r = ep - 1; r >= 0; --r) {  // writer last: the others only run their gathers
        InProcessGather gather(buffers, r);
        save_hf_checkpoint(written.string(), *ranks[static_cast<std::size_t>(r)], StoredDType::f32,
                           shard_bytes, &gather, /*write=*/r == 0);
        // Every MoE layer's two fused tensors, gathered once each.
        std::int64_t moe_layers = 0;
        for (const auto& layer : whole.layers) moe_layers += layer.is_moe ? 1 : 0;
        CHECK(gather.calls == 2 * moe_layers);
      }
      std::vector<std::string> expected_files, written_files;
      for (const auto& entry : fs::directory_iterator(expected))
        expected_files.push_back(entry.path().filename().string());
      for (const auto& entry : fs::directory_iterator(written))
        written_files.push_back(entry.path().filename().string());
      std::sort(expected_files.begin(), expected_files.end());
      std::sort(written_files.begin(), written_files.end());
      CHECK(expected_files.size() > 2);
      REQUIRE(written_files == expected_files);
      for (const auto& name : expected_files) {
        INFO(name);
        CHECK(file_bytes(written / name) == file_bytes(expected / name));
      }
      // And each slice reads back exactly its experts.
      const Qwen3MoeParameters reread(architecture, ExpertRange{count, count});
      load_hf_weights(written.string(), reread);
      CHECK(std::equal(reread.all_values().data<float>(),
                       reread.all_values().data<float>() + reread.num_parameters(),
                       ranks[1]->all_values().data<float>()));
    }
  }
}

TEST_CASE("writing every expert from a slice without a gather is refused", "[model][experts]") {
  const auto architecture = fixture_architecture("qwen3_moe_a");
  const Qwen3MoeParameters slice(architecture, ExpertRange{0, 4});
  CHECK_THROWS_WITH(
      save_hf_checkpoint(testing::fresh_dir("slice_alone").string(), slice),
      Catch::Contains("holds experts [0, 4)") && Catch::Contains("other ranks' slices"));
}

TEST_CASE("a writer that fails part-way still runs every fill, once, in order",
          "[model][experts]") {
  std::vector<int> ran;
  std::vector<TensorToWrite> tensors;
  for (int i = 0; i < 5; ++i)
    tensors.push_back({"t" + std::to_string(i), {2}, {}, [&ran, i](std::span<float> out) {
                         out[0] = out[1] = static_cast<float>(i);
                         ran.push_back(i);
                       }});
  const auto fail_after_two = [](std::span<const TensorToWrite> all) {
    std::vector<float> buffer(2);
    all[0].fill(buffer);
    all[1].fill(buffer);
    throw std::runtime_error("disk full");
  };
  CHECK_THROWS_WITH(write_collectively(tensors, true, fail_after_two), "disk full");
  CHECK(ran == std::vector<int>{0, 1, 2, 3, 4});
  ran.clear();
  std::vector<TensorToWrite> again;
  for (int i = 0; i < 3; ++i)
    again.push_back({"t", {1}, {}, [&ran, i](std::span<float>) { ran.push_back(i); }});
  write_collectively(again, false, [](std::span<const TensorToWrite>) { FAIL("not a writer"); });
  CHECK(ran == std::vector<int>{0, 1, 2});
}

}  // namespace
}  // namespace dyncp::model
