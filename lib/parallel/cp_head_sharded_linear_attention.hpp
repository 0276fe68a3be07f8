#pragma once
// The sequence-level part of Gated DeltaNet layers (model::LinearAttentionContext) under the
// all-to-all CP exchanges (`cp_comm_type: a2a`, `a2a+p2p`), head-sharded like the attention
// (cp_head_sharded_attention.hpp): the raw q / k / v, g and beta go all-to-all from this rank's
// rows of every head to its all-to-all group's rows of a slice of the heads — the value heads
// Hv split evenly, the key heads Hk split or replicated by config/head_sharding.hpp's rule with
// Hv in the query role and Hk in the K/V role — and the rank runs the conv, L2 norms and gated
// delta rule for those heads only, with the conv weight rows of its channels.
//   a2a:     the all-to-all group is the runtime group, so every rank holds WHOLE sequences
//            for its heads: model::LocalLinearAttentionContext runs them from a zero state,
//            with no state passing at all.
//   a2a+p2p: the inner group's rows are runs of consecutive positions of each sequence (two
//            per sequence, as zigzag chunks of the outer ring); the chunk-boundary states of
//            those runs are passed over the ring ranks holding the same heads
//            (parallel::CpStatePassingLinearAttentionContext on the ring group).
// Backward: the output gradient all-to-alls the same way, the backward runs for this rank's
// heads, and dq / dk / dv / dg / dbeta all-to-all back (a replicated key head's gradients
// summed over its replicas). The conv weight gradient of this rank's channels (over the merged
// rows) is added to those rows of dconv_weight; summed over the group it is the whole gradient.
// Kept per layer (activation arena): the head-sharded raw inputs and this rank's conv weight
// rows, together the size of the local inputs (× replicas for q / k).

#include <memory>
#include <vector>

#include "model/local_seams.hpp"
#include "model/seams.hpp"
#include "parallel/comm_timing.hpp"
#include "parallel/cp_linear_attention_states.hpp"
#include "parallel/head_exchange.hpp"
#include "parallel/hierarchical_groups.hpp"
#include "parallel/runtime_group_seam.hpp"

namespace dyncp::parallel {

class CpHeadShardedLinearAttentionContext final
    : public RuntimeGroupSeam<model::LinearAttentionContext, model::LocalLinearAttentionContext> {
 public:
  // inner_size <= 0: a2a over the whole runtime group; > 0: a2a+p2p with that inner size.
  // `levels` may be shared with the other seams of the exchange (one split per group).
  explicit CpHeadShardedLinearAttentionContext(int inner_size, SeamCounters* counters = nullptr,
                                               std::shared_ptr<HierarchicalGroups> levels = nullptr)
      : RuntimeGroupSeam(counters),
        inner_size_(inner_size),
        levels_(levels ? std::move(levels) : std::make_shared<HierarchicalGroups>()) {}

  void begin_bin(const model::SeamContext& context, const model::LocalBinLayout& layout) override;
  void forward(const model::SeamContext& context, int layer, const model::LinearAttentionDims& dims,
               const core::Tensor& q_raw, const core::Tensor& k_raw, const core::Tensor& v_raw,
               const core::Tensor& conv_weight, const core::Tensor& g, const core::Tensor& beta,
               const core::Tensor& out, model::LinearAttentionSaved& saved) override;
  void backward(const model::SeamContext& context, int layer,
                const model::LinearAttentionDims& dims, const core::Tensor& dout,
                const core::Tensor& q_raw, const core::Tensor& k_raw, const core::Tensor& v_raw,
                const core::Tensor& conv_weight, const core::Tensor& g, const core::Tensor& beta,
                const model::LinearAttentionSaved& saved, const core::Tensor& dq_raw,
                const core::Tensor& dk_raw, const core::Tensor& dv_raw,
                const core::Tensor& dconv_weight, const core::Tensor& dg,
                const core::Tensor& dbeta) override;

 private:
  struct LayerState {
    core::Tensor q_raw, k_raw, v_raw, g, beta;  // head-sharded, merged rows
    core::Tensor conv_weight;                   // this rank's channels: q | k | v rows
  };
  // The three row ranges of the conv weight ([q | k | v] channels) this rank's heads use, in
  // the layer's and in the rank's own weight.
  struct ChannelRows {
    std::int64_t begin = 0, count = 0, local_begin = 0;
  };
  void plan(const model::LinearAttentionDims& dims);

  int inner_size_;
  std::shared_ptr<HierarchicalGroups> levels_;
  HeadExchange exchange_;
  // DeltaNet over the merged rows: state passing over the ring, or (no ring) the local
  // implementation over whole sequences.
  RingLevel<CpStatePassingLinearAttentionContext> states_;
  HeadSlices value_slices_, key_slices_;
  model::LinearAttentionDims local_dims_;
  ChannelRows channel_rows_[3];
  std::int64_t local_channels_ = 0;
  std::vector<LayerState> layers_;
};

}  // namespace dyncp::parallel
