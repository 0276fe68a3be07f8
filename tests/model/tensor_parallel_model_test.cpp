// Tensor parallelism in the model itself, without MPI: the TP ranks of one group are threads of
// this process whose collectives meet over shared memory. In fp64 the TP ranks' loss and
// gradients equal the whole model's to 1e-10 (the partial sums change only the summation
// order), for both model families, tp 2 and 4, with and without sequence parallelism, with
// recompute; after warm-up a TP step allocates no heap memory.

#include <algorithm>
#include <barrier>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "core/alloc_counter.hpp"
#include "core/rng.hpp"
#include "model/local_seams.hpp"
#include "model/packed_batch.hpp"
#include "model/qwen3_moe_model.hpp"
#include "model/tensor_parallel.hpp"
#include "tiny_architectures.hpp"

namespace dyncp::model {
namespace {

// What the threads of one TP group share: a barrier and each rank's published buffer.
struct ThreadGroup {
  explicit ThreadGroup(int size)
      : size(size), barrier(size), published(static_cast<std::size_t>(size)) {}
  int size;
  std::barrier<> barrier;
  std::vector<const void*> published;
};

// Sums and gathers in rank order through shared memory; f32 and f64 rows.
class ThreadTensorParallelContext final : public TensorParallelContext {
 public:
  ThreadTensorParallelContext(ThreadGroup& group, int rank) : group_(group), rank_(rank) {}
  int size() const override { return group_.size; }
  int rank() const override { return rank_; }

  void all_reduce(const SeamContext&, const Tensor& x) override {
    publish(x.raw_data());
    grow(x.numel());
    sum_published(0, x.numel(), x.dtype(), staging_.data());
    group_.barrier.arrive_and_wait();  // every rank has read every other's
    store(staging_.data(), x.raw_data(), 0, x.numel(), x.dtype());
  }
  void all_gather_rows(const SeamContext&, const Tensor& shard, const Tensor& full) override {
    publish(shard.raw_data());
    const std::int64_t width = full.numel() / std::max<std::int64_t>(full.size(0), 1);
    const std::size_t element = core::dtype_size(full.dtype());
    for (int r = 0; r < group_.size; ++r) {
      const auto [begin, end] = tensor_parallel_row_range(full.size(0), group_.size, r);
      std::memcpy(static_cast<char*>(full.raw_data()) + begin * width * element,
                  group_.published[static_cast<std::size_t>(r)],
                  static_cast<std::size_t>((end - begin) * width) * element);
    }
    group_.barrier.arrive_and_wait();
  }
  void reduce_scatter_rows(const SeamContext&, const Tensor& full, const Tensor& shard) override {
    publish(full.raw_data());
    grow(shard.numel());
    sum_published(shard.numel() * rank_, shard.numel(), shard.dtype(), staging_.data());
    group_.barrier.arrive_and_wait();
    store(staging_.data(), shard.raw_data(), 0, shard.numel(), shard.dtype());
  }

 private:
  void publish(const void* data) {
    group_.published[static_cast<std::size_t>(rank_)] = data;
    group_.barrier.arrive_and_wait();
  }
  void grow(std::int64_t count) {
    if (static_cast<std::int64_t>(staging_.size()) < count)
      staging_.resize(static_cast<std::size_t>(count));
  }
  // staging[i] = Σ_r published_r[first + i], in rank order.
  void sum_published(std::int64_t first, std::int64_t count, core::DType dtype, double* out) {
    for (std::int64_t i = 0; i < count; ++i) {
      double sum = 0.0;
      for (int r = 0; r < group_.size; ++r) {
        const void* data = group_.published[static_cast<std::size_t>(r)];
        sum += dtype == core::DType::f64 ? static_cast<const double*>(data)[first + i]
                                         : static_cast<const float*>(data)[first + i];
      }
      out[i] = sum;
    }
  }
  static void store(const double* from, void* to, std::int64_t first, std::int64_t count,
                    core::DType dtype) {
    for (std::int64_t i = 0; i < count; ++i) {
      if (dtype == core::DType::f64) {
        static_cast<double*>(to)[first + i] = from[i];
      } else {
        static_cast<float*>(to)[first + i] = static_cast<float>(from[i]);
      }
    }
  }

  ThreadGroup& group_;
  int rank_;
  std::vector<double> staging_;
};

config::ModelArchitecture tiny_moe(int heads, int kv_heads) {
  return dyncp::testing::tiny_qwen3_moe(heads, kv_heads, 8);
}

config::ModelArchitecture tiny_hybrid(int heads, int kv_heads) {
  return dyncp::testing::tiny_hybrid(heads, kv_heads, 8);
}

// Sequences whose lengths are multiples of 4, so that their rows divide over tp 4 (the
// alignment rule pads to multiples of tp under sequence parallelism).
TokenSequences batch(std::int64_t vocab) {
  TokenSequences sequences;
  core::Rng rng(5, core::RngPurpose::test, 0);
  for (const int length : {12, 4, 20, 8}) {
    std::vector<std::int32_t> tokens(static_cast<std::size_t>(length));
    for (auto& token : tokens)
      token = static_cast<std::int32_t>(rng.below(static_cast<std::uint64_t>(vocab)));
    sequences.push_back(tokens);
  }
  return sequences;
}

struct RankResult {
  BinResult result;
  std::vector<double> grads;  // this rank's pieces, laid out as the whole model's HF tensors
  std::vector<char> held;     // 1 where this rank's pieces hold the element
  // 1 where the gradient is this rank's part of a sum over TP (TP-partial whole tensors, and
  // the experts, which every TP rank holds whole and runs on its own rows)
  std::vector<char> summed;
  std::uint64_t steady_state_allocations = 0;
};

// Every tensor's elements in HF order, concatenated in the model's tensor order.
std::int64_t whole_elements(const Qwen3MoeParameters& parameters) {
  std::int64_t total = 0;
  for (const HfTensor& tensor : parameters.hf_tensors()) total += tensor.hf_numel();
  return total;
}

// `flat` (f64, laid out like the parameters) scattered into the whole tensors' HF order.
void scatter_whole(const Qwen3MoeParameters& parameters, const Tensor& flat,
                   std::vector<double>& whole, std::vector<char>* held,
                   std::vector<char>* summed = nullptr) {
  std::int64_t at = 0;
  const auto* base = static_cast<const double*>(parameters.all_values().raw_data());
  for (const HfTensor& tensor : parameters.hf_tensors()) {
    const std::int64_t offset = static_cast<const double*>(tensor.value.raw_data()) - base;
    const double* source = flat.data<double>() + offset;
    const std::int64_t columns = tensor.value.numel() / tensor.value.size(0);
    const std::int64_t hf_columns = tensor.hf_numel() / tensor.hf_shape.at(0);
    tensor.for_each_row_run([&](std::int64_t row, std::int64_t hf_row, std::int64_t count) {
      for (std::int64_t r = 0; r < count; ++r)
        for (std::int64_t c = 0; c < columns; ++c) {
          const auto to =
              static_cast<std::size_t>(at + (hf_row + r) * hf_columns + tensor.hf_column_first + c);
          whole[to] = source[(row + r) * columns + c];
          if (held != nullptr) (*held)[to] = 1;
          if (summed != nullptr) (*summed)[to] = tensor.tp_partial_grad || tensor.is_expert;
        }
    });
    at += tensor.hf_numel();
  }
}

struct Setup {
  config::ModelArchitecture architecture;
  int tp = 2;
  bool sequence_parallel = false;
  bool recompute = false;
};

BinOptions bin_options(const TokenSequences& sequences) {
  std::int64_t loss_tokens = 0;
  for (const auto& sequence : sequences)
    loss_tokens += static_cast<std::int64_t>(sequence.size()) - 1;
  BinOptions options;
  options.loss_grad_scale = 1.0 / static_cast<double>(loss_tokens);
  options.aux_num_sequences_global = static_cast<std::int64_t>(sequences.size());
  return options;
}

ModelOptions model_options(const Setup& setup) {
  ModelOptions options;
  options.dtype = core::DType::f64;
  options.aux_loss = ops::MoeAuxLossType::seq_aux_loss;
  options.recompute_full = setup.recompute;
  return options;
}

std::vector<RankResult> run_tensor_parallel(const Setup& setup, const TokenSequences& sequences) {
  const OwnedPackedBin packed = pack_sequences(sequences);
  ThreadGroup group(setup.tp);
  std::vector<RankResult> results(static_cast<std::size_t>(setup.tp));
  std::vector<std::thread> threads;
  for (int rank = 0; rank < setup.tp; ++rank) {
    threads.emplace_back([&, rank] {
      ModelOptions options = model_options(setup);
      options.tensor_parallel = {setup.tp, rank, 1, 0, setup.sequence_parallel};
      Qwen3MoeModel model(setup.architecture, options);
      model.parameters().init_random(11);
      ThreadTensorParallelContext context(group, rank);
      LocalSeams local;
      BinSeams seams = local.seams();
      seams.tensor_parallel = &context;
      const BinOptions bin = bin_options(sequences);
      RankResult& out = results[static_cast<std::size_t>(rank)];
      for (int warm_up = 0; warm_up < 2; ++warm_up) model.run_bin(packed.bin, seams, bin);
      group.barrier.arrive_and_wait();
      const std::uint64_t before = core::heap_allocation_count();
      group.barrier.arrive_and_wait();
      model.parameters().zero_grads();
      out.result = model.run_bin(packed.bin, seams, bin);
      group.barrier.arrive_and_wait();
      out.steady_state_allocations = core::heap_allocation_count() - before;
      group.barrier.arrive_and_wait();  // every rank has read the count before anyone allocates
      const std::int64_t total = whole_elements(model.parameters());
      out.grads.assign(static_cast<std::size_t>(total), 0.0);
      out.held.assign(static_cast<std::size_t>(total), 0);
      out.summed.assign(static_cast<std::size_t>(total), 0);
      scatter_whole(model.parameters(), model.parameters().all_grads(), out.grads, &out.held,
                    &out.summed);
    });
  }
  for (auto& thread : threads) thread.join();
  return results;
}

void check_against_whole_model(const Setup& setup) {
  const TokenSequences sequences = batch(setup.architecture.vocab_size);
  Qwen3MoeModel whole(setup.architecture, model_options(setup));
  whole.parameters().init_random(11);
  LocalSeams local;
  const OwnedPackedBin packed = pack_sequences(sequences);
  const BinResult expected = whole.run_bin(packed.bin, local.seams(), bin_options(sequences));
  std::vector<double> expected_grads(static_cast<std::size_t>(whole_elements(whole.parameters())));
  scatter_whole(whole.parameters(), whole.parameters().all_grads(), expected_grads, nullptr);

  const std::vector<RankResult> ranks = run_tensor_parallel(setup, sequences);
  // A piece is held by one rank; a whole tensor by every rank, as its part of a sum over TP
  // (partial gradients, the experts) or as the same values on every rank.
  std::vector<double> total(expected_grads.size(), 0.0);
  std::vector<int> holders(expected_grads.size(), 0);
  for (const RankResult& rank : ranks) {
    CHECK(rank.result.loss_sum == Approx(expected.loss_sum).epsilon(1e-12));
    CHECK(rank.result.loss_tokens == expected.loss_tokens);
    CHECK(rank.result.aux_loss == Approx(expected.aux_loss).epsilon(1e-10));
    CHECK(rank.steady_state_allocations == 0);
    for (std::size_t i = 0; i < total.size(); ++i)
      if (rank.held[i] != 0) {
        total[i] += rank.grads[i];
        ++holders[i];
      }
  }
  double worst = 0.0, scale = 0.0;
  std::int64_t wrongly_held = 0;
  for (std::size_t i = 0; i < total.size(); ++i) {
    const bool summed = ranks.front().summed[i] != 0;
    wrongly_held += holders[i] != (summed ? setup.tp : 1) &&
                    !(holders[i] == setup.tp && !summed);  // whole tensors: every rank
    double error = 0.0;
    if (summed || holders[i] == 1) {
      error = std::abs(total[i] - expected_grads[i]);
    } else {
      for (const RankResult& rank : ranks)
        error = std::max(error, std::abs(rank.grads[i] - expected_grads[i]));
    }
    worst = std::max(worst, error);
    scale = std::max(scale, std::abs(expected_grads[i]));
  }
  CHECK(wrongly_held == 0);
  INFO("worst gradient error " << worst << " of scale " << scale);
  CHECK(worst <= 1e-10 * scale);
}

TEST_CASE("tensor-parallel ranks reproduce the whole model in fp64", "[model][tensor_parallel]") {
  SECTION("Qwen3-MoE, tp 2") {
    check_against_whole_model({tiny_moe(4, 2), 2, false, false});
  }
  SECTION("Qwen3-MoE, tp 2, sequence parallel") {
    check_against_whole_model({tiny_moe(4, 2), 2, true, false});
  }
  SECTION("Qwen3-MoE, tp 4, sequence parallel, recompute") {
    check_against_whole_model({tiny_moe(8, 4), 4, true, true});
  }
  SECTION("hybrid, tp 2") {
    check_against_whole_model({tiny_hybrid(4, 2), 2, false, false});
  }
  SECTION("hybrid, tp 4, sequence parallel") {
    check_against_whole_model({tiny_hybrid(8, 4), 4, true, false});
  }
  SECTION("hybrid, tp 2, recompute") {
    check_against_whole_model({tiny_hybrid(4, 2), 2, false, true});
  }
}

TEST_CASE("a model piece is its share of every split tensor", "[model][tensor_parallel]") {
  const config::ModelArchitecture a = tiny_hybrid(4, 2);
  Qwen3MoeParameters whole(a);
  Qwen3MoeParameters piece(a, {}, core::DType::f32, core::Device::cpu, {2, 1, 2, 1, true});
  CHECK(piece.local_architecture().num_attention_heads == 2);
  CHECK(piece.local_architecture().linear_num_value_heads == 2);
  CHECK(piece.local_architecture().vocab_size == 48);
  CHECK(piece.local_architecture().moe_intermediate_size == 10);
  for (const HfTensor& tensor : piece.hf_tensors()) {
    INFO(tensor.name);
    const HfTensor* match = whole.find(tensor.name);
    REQUIRE(match != nullptr);
    CHECK(tensor.hf_shape == match->hf_shape);
    const std::int64_t parts = tensor.split == TensorSplit::whole ? 1 : 2;
    CHECK(tensor.value.numel() * parts == tensor.hf_numel());
    // Norms acting on a rank's heads or rows, the router and the gate: partial gradients.
    const bool partial = tensor.name.ends_with("norm.weight") ||
                         tensor.name.ends_with("mlp.gate.weight") ||
                         tensor.name.ends_with("shared_expert_gate.weight");
    CHECK(tensor.tp_partial_grad == partial);
  }
  // Seeded pieces hold the whole model's values there.
  whole.init_random(3);
  piece.init_random(3);
  for (const HfTensor& tensor : piece.hf_tensors()) {
    std::vector<float> from_whole(static_cast<std::size_t>(tensor.hf_numel()), 0.0f);
    std::vector<float> from_piece(from_whole.size(), 0.0f);
    const HfTensor* match = whole.find(tensor.name);
    match->read_hf_order(match->value, from_whole.data());
    tensor.read_hf_order(tensor.value, from_piece.data());
    std::int64_t differing = 0;
    for (std::size_t i = 0; i < from_piece.size(); ++i)
      differing += from_piece[i] != 0.0f && from_piece[i] != from_whole[i];
    INFO(tensor.name);
    CHECK(differing == 0);
  }
}

TEST_CASE("tensor parallelism refuses what does not divide", "[model][tensor_parallel]") {
  const config::ModelArchitecture a = tiny_moe(4, 2);
  CHECK_THROWS_WITH(local_architecture(a, {4, 0, 1, 0, false}),
                    Catch::Contains("model.tensor_model_parallel_size") &&
                        Catch::Contains("num_key_value_heads"));
  CHECK_THROWS_WITH(local_architecture(a, {2, 0, 3, 0, false}),
                    Catch::Contains("model.expert_tensor_parallel_size"));
  CHECK_THROWS_WITH(local_architecture(a, {1, 0, 1, 0, true}),
                    Catch::Contains("model.sequence_parallel"));
}

}  // namespace
}  // namespace dyncp::model
