// Megatron-Bridge keys that describe how Megatron runs, not what is trained. They are accepted
// so real Bridge recipes load unchanged, but only with the value that matches this program.

#include "config/key_table.hpp"

namespace dyncp::config {

namespace {

std::vector<InertKey> build_inert_keys() {
  return {
      {"model.cuda_graph_impl", {"none"}, "no CUDA graphs", "CUDA graphs"},
      {"model.transformer_impl",
       {"transformer_engine", "local"},
       "layers run on this program's own fused kernels",
       "another transformer implementation"},
      {"model.moe_token_dispatcher_type",
       {"alltoall"},
       "tokens reach their experts by all-to-all over the EP group",
       "the allgather or flex token dispatcher"},
      {"model.cross_entropy_loss_fusion",
       {"true"},
       "the loss is a fused, chunked cross-entropy",
       "unfused cross-entropy"},
      {"model.cross_entropy_fusion_impl",
       {"native"},
       "the loss is a fused, chunked cross-entropy",
       "the Transformer Engine cross-entropy kernel"},
      {"model.hybrid_context_parallel",
       {"false"},
       "deprecated Megatron alias",
       "the deprecated hybrid CP switch (set model.dynamic_context_parallel=true instead)"},
      {"ddp.grad_reduce_in_fp32",
       {"true"},
       "gradients are reduced in fp32",
       "bf16 gradient reduction"},
      {"ddp.check_for_nan_in_grad",
       {"true"},
       "non-finite losses and gradients are always detected (train.stop_on_nan decides)",
       "skipping the non-finite check (use train.stop_on_nan=false)"},
      {"ddp.use_megatron_fsdp", {"false"}, "no FSDP sharding of weights", "Megatron FSDP"},
      {"dataset.packed_sequence_specs",
       {"null"},
       "no offline packing: global batches are packed online",
       "offline packing (global-batch packing is the only data path)"},
  };
}

}  // namespace

const std::vector<InertKey>& inert_keys() {
  static const std::vector<InertKey> keys = build_inert_keys();
  return keys;
}

const InertKey* find_inert_key(const std::string& path) {
  for (const auto& key : inert_keys()) {
    if (key.path == path) return &key;
  }
  return nullptr;
}

}  // namespace dyncp::config
