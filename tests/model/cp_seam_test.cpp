// The seams are enough for context parallelism: two "ranks" (threads) each hold zigzag chunks
// k and 2c−1−k of every sequence, exchange K/V and aux-loss statistics only through the seam
// interfaces, and together reproduce the single-rank loss and gradients. This is the shape of
// the CP runtime (all-gather K/V, reduce-scatter dK/dV, all-reduce statistics) without MPI.
#include <barrier>
#include <catch2/catch.hpp>
#include <cstring>
#include <thread>

#include "model_test_support.hpp"
#include "ops/attention.hpp"

namespace dyncp::model {
namespace {

using core::DType;

constexpr int group_size = 2;

struct SharedGroup {
  std::barrier<> barrier{group_size};
  std::vector<Tensor> cu{group_size}, positions{group_size}, published{group_size},
      published_second{group_size};
  // Linear attention: each rank's local row -> row of the whole sequences in position order.
  std::vector<std::vector<std::int64_t>> whole_row{group_size};
};

// Row offset, in the gathered layout, of rank r's rows of sequence s (ranks in order inside
// each sequence), and the row count.
struct GatheredLayout {
  std::vector<std::vector<std::int64_t>> offset;  // [rank][sequence]
  Tensor cu, positions;
};

class ThreadCpAttention final : public AttentionContext {
 public:
  ThreadCpAttention(SharedGroup& group, int rank) : group_(group), rank_(rank) {}

  void begin_bin(const SeamContext& context, const LocalBinLayout& layout) override {
    local_ = layout;
    group_.cu[rank_] = layout.cu_seqlens;
    group_.positions[rank_] = layout.positions;
    group_.barrier.arrive_and_wait();
    const std::int64_t sequences = layout.cu_seqlens.numel() - 1;
    std::int64_t total = 0;
    for (int r = 0; r < group_size; ++r) total += group_.positions[r].numel();
    gathered_.cu = context.activations->allocate({sequences + 1}, DType::i32);
    gathered_.positions = context.activations->allocate({total}, DType::i32);
    gathered_.offset.assign(group_size, std::vector<std::int64_t>(sequences));
    std::int64_t row = 0;
    gathered_.cu.data<std::int32_t>()[0] = 0;
    for (std::int64_t s = 0; s < sequences; ++s) {
      for (int r = 0; r < group_size; ++r) {
        const std::int32_t* cu = group_.cu[r].data<std::int32_t>();
        gathered_.offset[r][s] = row;
        for (std::int32_t i = cu[s]; i < cu[s + 1]; ++i)
          gathered_.positions.data<std::int32_t>()[row++] =
              group_.positions[r].data<std::int32_t>()[i];
      }
      gathered_.cu.data<std::int32_t>()[s + 1] = static_cast<std::int32_t>(row);
    }
    group_.barrier.arrive_and_wait();
  }

  void forward(const SeamContext& context, int, const Tensor& q, const Tensor& k, const Tensor& v,
               double scale, const Tensor& out, ops::AttentionSaved& saved) override {
    core::ArenaScope scope(*context.scratch);
    const auto [k_all, v_all] = all_gather(context, k, v);
    ops::attention_forward(context.ops, q, k_all, v_all, layout(), scale, out, saved);
  }

  void backward(const SeamContext& context, int, const Tensor& dout, const Tensor& q,
                const Tensor& k, const Tensor& v, const Tensor& out,
                const ops::AttentionSaved& saved, double scale, const Tensor& dq, const Tensor& dk,
                const Tensor& dv) override {
    core::ArenaScope scope(*context.scratch);
    const auto [k_all, v_all] = all_gather(context, k, v);
    const Tensor dk_all = context.scratch->allocate(k_all.shape(), DType::f32);
    const Tensor dv_all = context.scratch->allocate(v_all.shape(), DType::f32);
    ops::OpContext ops_context = context.ops;
    ops_context.scratch = context.scratch;
    ops::attention_backward(ops_context, dout, q, k_all, v_all, out, saved, layout(), scale, dq,
                            dk_all, dv_all);
    reduce_scatter(dk_all, dv_all, dk, dv);
  }

 private:
  ops::VarlenAttentionLayout layout() const {
    return {local_.cu_seqlens, gathered_.cu, local_.positions, gathered_.positions};
  }

  std::pair<Tensor, Tensor> all_gather(const SeamContext& context, const Tensor& k,
                                       const Tensor& v) {
    const std::int64_t total = gathered_.positions.numel();
    const Tensor k_all = context.scratch->allocate({total, k.size(1), k.size(2)}, DType::f32);
    const Tensor v_all = context.scratch->allocate({total, v.size(1), v.size(2)}, DType::f32);
    group_.published[rank_] = k;
    group_.published_second[rank_] = v;
    group_.barrier.arrive_and_wait();
    for (int r = 0; r < group_size; ++r) copy_rows(r, group_.published[r], k_all, true);
    for (int r = 0; r < group_size; ++r) copy_rows(r, group_.published_second[r], v_all, true);
    group_.barrier.arrive_and_wait();  // peers may now reuse their buffers
    return {k_all, v_all};
  }

  // Local rows = Σ over ranks of their gradient for this rank's rows.
  void reduce_scatter(const Tensor& dk_all, const Tensor& dv_all, const Tensor& dk,
                      const Tensor& dv) {
    group_.published[rank_] = dk_all;
    group_.published_second[rank_] = dv_all;
    group_.barrier.arrive_and_wait();
    dk.fill_zero();
    dv.fill_zero();
    for (int r = 0; r < group_size; ++r) {
      copy_rows(rank_, group_.published[r], dk, false);
      copy_rows(rank_, group_.published_second[r], dv, false);
    }
    group_.barrier.arrive_and_wait();
  }

  // gather: local rows of `rank` (from `source`) into their gathered place in `target`;
  // scatter (gather = false): rank's gathered rows of `source` added onto local `target`.
  void copy_rows(int rank, const Tensor& source, const Tensor& target, bool gather) const {
    const std::int32_t* cu = group_.cu[rank].data<std::int32_t>();
    const std::int64_t row_numel = source.numel() / source.size(0);
    for (std::size_t s = 0; s + 1 < static_cast<std::size_t>(group_.cu[rank].numel()); ++s) {
      for (std::int32_t i = cu[s]; i < cu[s + 1]; ++i) {
        const std::int64_t gathered_row = gathered_.offset[rank][s] + (i - cu[s]);
        if (gather) {
          std::memcpy(target.data<float>() + gathered_row * row_numel,
                      source.data<float>() + i * row_numel, sizeof(float) * row_numel);
        } else {
          for (std::int64_t j = 0; j < row_numel; ++j)
            target.data<float>()[i * row_numel + j] +=
                source.data<float>()[gathered_row * row_numel + j];
        }
      }
    }
  }

  SharedGroup& group_;
  int rank_;
  LocalBinLayout local_;
  GatheredLayout gathered_;
};

class ThreadStatisticsReducer final : public SequenceStatisticsReducer {
 public:
  ThreadStatisticsReducer(SharedGroup& group, int rank) : group_(group), rank_(rank) {}
  void reduce(const SeamContext& context, const Tensor& counts, const Tensor& prob_sums) override {
    core::ArenaScope scope(*context.scratch);
    group_.published[rank_] = counts;
    group_.published_second[rank_] = prob_sums;
    group_.barrier.arrive_and_wait();
    const Tensor counts_sum = context.scratch->zeros(counts.shape(), DType::f32);
    const Tensor probs_sum = context.scratch->zeros(prob_sums.shape(), DType::f32);
    for (int r = 0; r < group_size; ++r)
      for (std::int64_t i = 0; i < counts.numel(); ++i) {
        counts_sum.data<float>()[i] += group_.published[r].data<float>()[i];
        probs_sum.data<float>()[i] += group_.published_second[r].data<float>()[i];
      }
    group_.barrier.arrive_and_wait();
    counts.copy_from(counts_sum);
    prob_sums.copy_from(probs_sum);
  }

 private:
  SharedGroup& group_;
  int rank_;
};

// The sequence-level part of a Gated DeltaNet layer under CP, done the plain way: all-gather
// the layer's inputs (q/k/v before the conv, g, beta) into whole sequences in position order,
// run them with the local implementation and keep this rank's rows; in backward all-gather
// d(out), run the whole-sequence backward (identical on every rank) and keep this rank's rows.
// The conv weight gradient of the whole sequences is added on rank 0 only, so the gradient sum
// over the group is exact.
class ThreadCpLinearAttention final : public LinearAttentionContext {
 public:
  ThreadCpLinearAttention(SharedGroup& group, int rank) : group_(group), rank_(rank) {}

  void begin_bin(const SeamContext& context, const LocalBinLayout& layout) override {
    group_.cu[rank_] = layout.cu_seqlens;
    group_.positions[rank_] = layout.positions;
    group_.barrier.arrive_and_wait();
    const std::int64_t sequences = layout.cu_seqlens.numel() - 1;
    whole_cu_ = context.activations->allocate({sequences + 1}, DType::i32);
    std::int32_t* whole_cu = whole_cu_.data<std::int32_t>();
    whole_cu[0] = 0;
    for (std::int64_t s = 0; s < sequences; ++s) {
      std::int32_t length = 0;
      for (int r = 0; r < group_size; ++r)
        length += group_.cu[r].data<std::int32_t>()[s + 1] - group_.cu[r].data<std::int32_t>()[s];
      whole_cu[s + 1] = whole_cu[s] + length;
    }
    auto& mine = group_.whole_row[rank_];
    mine.assign(static_cast<std::size_t>(layout.positions.numel()), 0);
    const std::int32_t* cu = layout.cu_seqlens.data<std::int32_t>();
    for (std::int64_t s = 0; s < sequences; ++s)
      for (std::int32_t i = cu[s]; i < cu[s + 1]; ++i)
        mine[static_cast<std::size_t>(i)] = whole_cu[s] + layout.positions.data<std::int32_t>()[i];
    group_.barrier.arrive_and_wait();
    whole_.begin_bin(context, {whole_cu_, Tensor()});
  }

  void forward(const SeamContext& context, int layer, const LinearAttentionDims& dims,
               const Tensor& q_raw, const Tensor& k_raw, const Tensor& v_raw,
               const Tensor& conv_weight, const Tensor& g, const Tensor& beta, const Tensor& out,
               LinearAttentionSaved&) override {
    auto& state = layer_state(layer);
    core::Arena& keep = *context.activations;
    state.q_raw = all_gather(keep, q_raw);
    state.k_raw = all_gather(keep, k_raw);
    state.v_raw = all_gather(keep, v_raw);
    state.g = all_gather(keep, g);
    state.beta = all_gather(keep, beta);
    core::ArenaScope scope(*context.scratch);
    const Tensor whole_out = context.scratch->allocate(whole_shape(out), DType::f32);
    whole_.forward(context, layer, dims, state.q_raw, state.k_raw, state.v_raw, conv_weight,
                   state.g, state.beta, whole_out, state.saved);
    keep_mine(whole_out, out);
  }

  void backward(const SeamContext& context, int layer, const LinearAttentionDims& dims,
                const Tensor& dout, const Tensor&, const Tensor&, const Tensor&,
                const Tensor& conv_weight, const Tensor&, const Tensor&,
                const LinearAttentionSaved&, const Tensor& dq_raw, const Tensor& dk_raw,
                const Tensor& dv_raw, const Tensor& dconv_weight, const Tensor& dg,
                const Tensor& dbeta) override {
    auto& state = layer_state(layer);
    core::Arena& scratch = *context.scratch;
    core::ArenaScope scope(scratch);
    const Tensor whole_dout = all_gather(scratch, dout);
    const auto like = [&](const Tensor& t) { return scratch.allocate(t.shape(), DType::f32); };
    const Tensor dq = like(state.q_raw), dk = like(state.k_raw), dv = like(state.v_raw),
                 dg_whole = like(state.g), dbeta_whole = like(state.beta);
    const Tensor dconv =
        rank_ == 0 ? dconv_weight : scratch.zeros(dconv_weight.shape(), DType::f32);
    whole_.backward(context, layer, dims, whole_dout, state.q_raw, state.k_raw, state.v_raw,
                    conv_weight, state.g, state.beta, state.saved, dq, dk, dv, dconv, dg_whole,
                    dbeta_whole);
    keep_mine(dq, dq_raw);
    keep_mine(dk, dk_raw);
    keep_mine(dv, dv_raw);
    keep_mine(dg_whole, dg);
    keep_mine(dbeta_whole, dbeta);
  }

 private:
  struct LayerState {
    Tensor q_raw, k_raw, v_raw, g, beta;  // whole sequences
    LinearAttentionSaved saved;
  };

  LayerState& layer_state(int layer) {
    if (static_cast<std::size_t>(layer) >= states_.size()) states_.resize(layer + 1);
    return states_[static_cast<std::size_t>(layer)];
  }

  core::Shape whole_shape(const Tensor& local) const {
    core::Shape shape = local.shape();
    shape[0] = whole_cu_.data<std::int32_t>()[whole_cu_.numel() - 1];
    return shape;
  }

  Tensor all_gather(core::Arena& arena, const Tensor& local) {
    const Tensor whole = arena.allocate(whole_shape(local), DType::f32);
    const std::int64_t row_numel = local.numel() / std::max<std::int64_t>(local.size(0), 1);
    group_.published[rank_] = local;
    group_.barrier.arrive_and_wait();
    for (int r = 0; r < group_size; ++r) {
      const auto& rows = group_.whole_row[r];
      for (std::size_t i = 0; i < rows.size(); ++i)
        std::memcpy(whole.data<float>() + rows[i] * row_numel,
                    group_.published[r].data<float>() + static_cast<std::int64_t>(i) * row_numel,
                    sizeof(float) * row_numel);
    }
    group_.barrier.arrive_and_wait();
    return whole;
  }

  void keep_mine(const Tensor& whole, const Tensor& local) const {
    const std::int64_t row_numel = local.numel() / std::max<std::int64_t>(local.size(0), 1);
    const auto& rows = group_.whole_row[rank_];
    for (std::size_t i = 0; i < rows.size(); ++i)
      std::memcpy(local.data<float>() + static_cast<std::int64_t>(i) * row_numel,
                  whole.data<float>() + rows[i] * row_numel, sizeof(float) * row_numel);
  }

  SharedGroup& group_;
  int rank_;
  Tensor whole_cu_;
  LocalLinearAttentionContext whole_;
  std::vector<LayerState> states_;
};

// Rank k of a group of c keeps chunks k and 2c−1−k of every sequence (lengths divisible by 2c).
OwnedPackedBin zigzag_shard(const TokenSequences& sequences, int rank) {
  const auto whole = pack_sequences(sequences);
  std::vector<std::int32_t> ids, labels, positions, cu{0};
  for (std::size_t s = 0; s < sequences.size(); ++s) {
    const auto begin = whole.sequence_offsets[s];
    const auto length = static_cast<std::int64_t>(sequences[s].size());
    const std::int64_t chunk = length / (2 * group_size);
    for (const int c : {rank, 2 * group_size - 1 - rank})
      for (std::int64_t p = c * chunk; p < (c + 1) * chunk; ++p) {
        ids.push_back(whole.bin.token_ids.data<std::int32_t>()[begin + p]);
        labels.push_back(whole.bin.labels.data<std::int32_t>()[begin + p]);
        positions.push_back(static_cast<std::int32_t>(p));
      }
    cu.push_back(static_cast<std::int32_t>(ids.size()));
  }
  OwnedPackedBin shard;
  const auto to_tensor = [](const std::vector<std::int32_t>& values) {
    Tensor tensor = Tensor::empty({static_cast<std::int64_t>(values.size())}, DType::i32);
    std::memcpy(tensor.data<std::int32_t>(), values.data(), values.size() * sizeof(std::int32_t));
    return tensor;
  };
  shard.bin = {to_tensor(ids), to_tensor(labels), to_tensor(positions), to_tensor(cu), Tensor()};
  // What each rank's bin builder passes: the whole sequences' lengths (dynamic RoPE's
  // frequencies depend on them, and a rank's rows alone do not tell them).
  std::vector<std::int32_t> lengths;
  for (const auto& sequence : sequences)
    lengths.push_back(static_cast<std::int32_t>(sequence.size()));
  shard.bin.sequence_lengths = to_tensor(lengths);
  for (const auto offset : cu) shard.sequence_offsets.push_back(offset);
  return shard;
}

TEST_CASE("context parallelism through the seams reproduces the single-rank loss and gradients",
          "[model][seams]") {
  // Qwen3-MoE, and the hybrid model whose DeltaNet layers go through the linear-attention
  // seam (one sequence spans two 64-token chunks of the recurrence); dynamic RoPE, whose
  // 72-token sequence is past max_position_embeddings (32): rank 1 holds its positions 18..53
  // only and still rotates them with the whole sequence's frequencies.
  const std::string name =
      GENERATE(as<std::string>{}, "qwen3_moe_a", "qwen3_5_moe_b", "qwen3_moe_rope_dynamic");
  INFO(name);
  const auto fixture = testing::fixture_dir(name);
  ModelOptions options;
  options.aux_loss = ops::MoeAuxLossType::seq_aux_loss;
  TokenSequences sequences = {{5, 77, 301, 12, 9, 400, 33, 1},
                              {100, 200, 300, 400, 500, 11, 22, 33, 44, 55, 66, 77, 88, 99, 7, 8},
                              {42, 43, 44, 45}};
  std::vector<std::int32_t> long_sequence;
  for (int i = 0; i < 72; ++i) long_sequence.push_back((37 * i + 11) % 256);
  sequences.push_back(long_sequence);
  BinOptions bin_options;
  bin_options.aux_num_sequences_global = static_cast<std::int64_t>(sequences.size());

  const auto single = load_hf_model(fixture, options);
  for (auto& sequence : sequences)
    for (auto& id : sequence) id %= static_cast<std::int32_t>(single->architecture().vocab_size);
  LocalSeams local;
  const auto packed = pack_sequences(sequences);
  single->parameters().zero_grads();
  const auto reference = single->run_bin(packed.bin, local.seams(), bin_options);

  SharedGroup group;
  std::vector<std::unique_ptr<Qwen3MoeModel>> models;
  for (int rank = 0; rank < group_size; ++rank) models.push_back(load_hf_model(fixture, options));
  std::vector<BinResult> results(group_size);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < group_size; ++rank) {
    threads.emplace_back([&, rank] {
      ThreadCpAttention attention(group, rank);
      LocalExpertDispatcher experts;
      ThreadStatisticsReducer statistics(group, rank);
      ThreadCpLinearAttention linear_attention(group, rank);
      const auto shard = zigzag_shard(sequences, rank);
      models[rank]->parameters().zero_grads();
      results[rank] = models[rank]->run_bin(
          shard.bin, {&attention, &experts, &statistics, &linear_attention}, bin_options);
    });
  }
  for (auto& thread : threads) thread.join();

  CHECK(results[0].loss_tokens + results[1].loss_tokens == reference.loss_tokens);
  CHECK(results[0].loss_sum + results[1].loss_sum == Approx(reference.loss_sum).epsilon(1e-6));
  // Every rank reports the whole group's aux loss (reduced statistics).
  CHECK(results[0].aux_loss == Approx(reference.aux_loss).epsilon(1e-6));
  CHECK(results[1].aux_loss == Approx(reference.aux_loss).epsilon(1e-6));
  // Gradient sync = sum over the CP group.
  const auto& expected = single->parameters().all_grads();
  double diff = 0.0, norm = 0.0;
  for (std::int64_t i = 0; i < expected.numel(); ++i) {
    const double summed = double(models[0]->parameters().all_grads().data<float>()[i]) +
                          models[1]->parameters().all_grads().data<float>()[i];
    diff += (summed - expected.data<float>()[i]) * (summed - expected.data<float>()[i]);
    norm += double(expected.data<float>()[i]) * expected.data<float>()[i];
  }
  CHECK(std::sqrt(diff / norm) <= 1e-5);
}

}  // namespace
}  // namespace dyncp::model
