// The HF tensor list of Qwen3MoeParameters: every checkpoint tensor's name, the views holding
// this rank's part of it, and where that part sits in the whole HF tensor (qwen-moe.md §4.2-4.4,
// tensor parallelism in tensor_parallel.hpp).

#include "core/error.hpp"
#include "model/qwen3_moe_parameters.hpp"

namespace dyncp::model {

namespace {

// This rank's share of `count` things split over `parts` ranks: [first, first + share).
struct Share {
  std::int64_t first = 0;
  std::int64_t count = 0;
};

Share share_of(std::int64_t count, int parts, int index) {
  return {count / parts * index, count / parts};
}

// HF interleaves two row blocks per head, [first_j (w) | second_j (w)] for head j; we keep
// [first rows of our heads | second rows of our heads].
std::vector<HfRowRun> paired_per_head_runs(Share heads, std::int64_t width) {
  std::vector<HfRowRun> runs;
  for (std::int64_t j = 0; j < heads.count; ++j) {
    const std::int64_t hf = 2 * width * (heads.first + j);
    runs.push_back({j * width, hf, width});
    runs.push_back({(heads.count + j) * width, hf + width, width});
  }
  return runs;
}

// Gated q_proj: query and gate interleaved per head, d rows each (qwen-moe.md §3.3).
std::vector<HfRowRun> gated_query_runs(Share heads, std::int64_t head_dim) {
  return paired_per_head_runs(heads, head_dim);
}

// Qwen3-Next in_proj_qkvz: Hk groups of [q_g (dk) | k_g (dk) | v_g (r·dv) | z_g (r·dv)],
// r = Hv / Hk, over our storage [q ours | k ours | v ours | z ours] (qwen-moe.md §3.4 step 1).
std::vector<HfRowRun> next_qkvz_runs(const config::ModelArchitecture& whole, Share key_heads) {
  const std::int64_t dk = whole.linear_key_head_dim,
                     ratio = whole.linear_num_value_heads / whole.linear_num_key_heads,
                     value_rows = ratio * whole.linear_value_head_dim;
  const std::int64_t key_rows = key_heads.count * dk, group_rows = 2 * dk + 2 * value_rows;
  std::vector<HfRowRun> runs;
  for (std::int64_t g = 0; g < key_heads.count; ++g) {
    const std::int64_t hf = (key_heads.first + g) * group_rows;
    runs.push_back({g * dk, hf, dk});
    runs.push_back({key_rows + g * dk, hf + dk, dk});
    runs.push_back({2 * key_rows + g * value_rows, hf + 2 * dk, value_rows});
    runs.push_back(
        {2 * key_rows + (key_heads.count + g) * value_rows, hf + 2 * dk + value_rows, value_rows});
  }
  return runs;
}

// Qwen3-Next in_proj_ba: Hk groups of [b_g (r) | a_g (r)], r = Hv / Hk, over our storage
// [b ours | a ours].
std::vector<HfRowRun> next_ba_runs(const config::ModelArchitecture& whole, Share key_heads) {
  return paired_per_head_runs(key_heads, whole.linear_num_value_heads / whole.linear_num_key_heads);
}

// One row run covering a contiguous share of HF rows.
std::vector<HfRowRun> rows_run(Share rows) {
  return {{0, rows.first, rows.count}};
}

Param rows_of(const Param& param, std::int64_t begin, std::int64_t end) {
  return {param.value.slice(begin, end), param.grad.slice(begin, end)};
}

Param select(const Param& param, std::int64_t index) {
  return {param.value.select(index), param.grad.select(index)};
}

// Rows [0, rows) of the storage starting at `first` (adjacent parameters), as one tensor.
Param spanning(const Param& first, std::int64_t rows, std::int64_t columns) {
  const auto view = [&](const Tensor& t) {
    return Tensor::view_of(t.raw_data(), {rows, columns}, t.dtype(), t.device());
  };
  return {view(first.value), view(first.grad)};
}

// Appends the HF tensors of one rank: each with its name, its views and the part of the whole
// HF tensor it holds.
class HfTensorList {
 public:
  HfTensorList(std::vector<HfTensor>& out, std::vector<std::size_t>& whole_model_index,
               const config::ModelArchitecture& whole, const TensorParallelShape& tp)
      : out_(out),
        whole_model_index_(whole_model_index),
        a_(whole),
        split_(tp.active()),
        by_tp_(tp.active() ? TensorSplit::tensor_parallel : TensorSplit::whole),
        by_etp_(tp.expert_size > 1 ? TensorSplit::expert_tensor_parallel : TensorSplit::whole),
        sequence_parallel_(tp.sequence_parallel),
        q_heads_(share_of(whole.num_attention_heads, tp.size, tp.index)),
        kv_heads_(share_of(whole.num_key_value_heads, tp.size, tp.index)),
        key_heads_(share_of(whole.linear_num_key_heads, tp.size, tp.index)),
        value_heads_(share_of(whole.linear_num_value_heads, tp.size, tp.index)),
        vocab_(share_of(whole.vocab_size, tp.size, tp.index)),
        dense_i_(share_of(whole.intermediate_size, tp.size, tp.index)),
        shared_i_(share_of(whole.shared_expert_intermediate_size, tp.size, tp.index)),
        moe_i_(share_of(whole.moe_intermediate_size, tp.expert_size, tp.expert_index)) {}

  // The embedding and the LM head: vocabulary rows.
  void vocabulary(std::string name, const Param& table) {
    add_rows(std::move(name), table, {a_.vocab_size, a_.hidden_size}, rows_run(vocab_), by_tp_);
  }
  // Norm weights of the residual stream act on the rank's rows under sequence parallelism.
  void residual_norm(std::string name, const Param& norm) {
    add_whole(std::move(name), norm, sequence_parallel_);
  }
  // The next tensor's index in the whole model's list (seeded initialisation keys on it).
  void continue_at(std::size_t index) { index_ = index; }
  void skip(std::size_t tensors) { index_ += tensors; }
  void attention(const std::string& prefix, const AttentionParams& attention);
  void gated_deltanet(const std::string& prefix, const GatedDeltaNetParams& gdn);
  void mlp(const std::string& prefix, const DecoderLayerParams& layer, ExpertRange experts);

 private:
  // A tensor held whole by every rank: its gradient is this rank's part when `partial`.
  void add_whole(std::string name, const Param& param, bool partial = false) {
    HfTensor tensor{std::move(name), param.value, param.grad};
    for (int dim = 0; dim < param.value.rank(); ++dim)
      tensor.hf_shape.push_back(param.value.size(dim));
    tensor.tp_partial_grad = split_ && partial;
    push(std::move(tensor));
  }
  // Rows of the whole tensor of shape `hf_shape` (column-parallel pieces, vocabulary rows and
  // the de-interleaved layouts); `over` says which group splits it.
  void add_rows(std::string name, const Param& param, std::vector<std::int64_t> hf_shape,
                std::vector<HfRowRun> runs, TensorSplit over, bool is_expert = false) {
    HfTensor tensor{std::move(name), param.value, param.grad, is_expert};
    tensor.hf_shape = std::move(hf_shape);
    tensor.row_runs = std::move(runs);
    tensor.split = over;
    push(std::move(tensor));
  }
  // Columns [first, first + value columns) of a whole [rows, columns] tensor (row-parallel).
  void add_columns(std::string name, const Param& param, std::int64_t hf_columns,
                   std::int64_t first, TensorSplit over, bool is_expert = false) {
    HfTensor tensor{std::move(name), param.value, param.grad, is_expert};
    tensor.hf_shape = {param.value.size(0), hf_columns};
    tensor.hf_column_first = first;
    tensor.split = over;
    push(std::move(tensor));
  }
  // gate_proj rows [0, I) and up_proj rows [I, 2I) of a fused gate_up, down's columns.
  void swiglu(const std::string& prefix, const DenseMlpParams& params, Share rows,
              std::int64_t whole_rows, TensorSplit over, bool is_expert) {
    const std::int64_t h = a_.hidden_size;
    add_rows(prefix + "gate_proj.weight", rows_of(params.gate_up, 0, rows.count), {whole_rows, h},
             rows_run(rows), over, is_expert);
    add_rows(prefix + "up_proj.weight", rows_of(params.gate_up, rows.count, 2 * rows.count),
             {whole_rows, h}, rows_run(rows), over, is_expert);
    add_columns(prefix + "down_proj.weight", params.down, whole_rows, rows.first, over, is_expert);
  }

  void push(HfTensor tensor) {
    out_.push_back(std::move(tensor));
    whole_model_index_.push_back(index_++);
  }

  std::vector<HfTensor>& out_;
  std::vector<std::size_t>& whole_model_index_;
  std::size_t index_ = 0;
  const config::ModelArchitecture& a_;
  bool split_;
  TensorSplit by_tp_, by_etp_;
  bool sequence_parallel_;
  Share q_heads_, kv_heads_, key_heads_, value_heads_, vocab_, dense_i_, shared_i_, moe_i_;
};

void HfTensorList::attention(const std::string& prefix, const AttentionParams& attention) {
  const std::int64_t h = a_.hidden_size, d = a_.head_dim;
  const std::string attn = prefix + "self_attn.";
  const std::int64_t q_rows = a_.num_attention_heads * d, kv_rows = a_.num_key_value_heads * d;
  if (a_.is_hybrid()) {
    add_rows(attn + "q_proj.weight", spanning(attention.q_proj, 2 * q_heads_.count * d, h),
             {2 * q_rows, h}, gated_query_runs(q_heads_, d), by_tp_);
  } else {
    add_rows(attn + "q_proj.weight", attention.q_proj, {q_rows, h},
             rows_run({q_heads_.first * d, q_heads_.count * d}), by_tp_);
  }
  const std::vector<HfRowRun> kv_run = rows_run({kv_heads_.first * d, kv_heads_.count * d});
  add_rows(attn + "k_proj.weight", attention.k_proj, {kv_rows, h}, kv_run, by_tp_);
  add_rows(attn + "v_proj.weight", attention.v_proj, {kv_rows, h}, kv_run, by_tp_);
  add_columns(attn + "o_proj.weight", attention.o_proj, q_rows, q_heads_.first * d, by_tp_);
  // q/k norms are per head dim, shared by all heads: each TP rank's heads add to them.
  add_whole(attn + "q_norm.weight", attention.q_norm, true);
  add_whole(attn + "k_norm.weight", attention.k_norm, true);
}

void HfTensorList::gated_deltanet(const std::string& prefix, const GatedDeltaNetParams& gdn) {
  const std::int64_t h = a_.hidden_size, dk = a_.linear_key_head_dim, dv = a_.linear_value_head_dim,
                     heads = a_.linear_num_value_heads;
  const std::int64_t key_dim = a_.linear_num_key_heads * dk, value_dim = heads * dv;
  const std::int64_t conv_dim = 2 * key_dim + value_dim;
  const std::int64_t key_rows = key_heads_.count * dk, value_rows = value_heads_.count * dv;
  const std::string linear = prefix + "linear_attn.";
  // Our [q | k | v] rows (the conv's channels): three runs of the whole [q | k | v].
  const std::vector<HfRowRun> qkv_runs = {
      {0, key_heads_.first * dk, key_rows},
      {key_rows, key_dim + key_heads_.first * dk, key_rows},
      {2 * key_rows, 2 * key_dim + value_heads_.first * dv, value_rows}};
  if (a_.model_type == "qwen3_next") {
    add_rows(linear + "in_proj_qkvz.weight",
             spanning(gdn.in_proj_qkv, 2 * key_rows + 2 * value_rows, h), {conv_dim + value_dim, h},
             next_qkvz_runs(a_, key_heads_), by_tp_);
    add_rows(linear + "in_proj_ba.weight", spanning(gdn.in_proj_b, 2 * value_heads_.count, h),
             {2 * heads, h}, next_ba_runs(a_, key_heads_), by_tp_);
  } else {
    add_rows(linear + "in_proj_qkv.weight", gdn.in_proj_qkv, {conv_dim, h}, qkv_runs, by_tp_);
    add_rows(linear + "in_proj_z.weight", gdn.in_proj_z, {value_dim, h},
             rows_run({value_heads_.first * dv, value_rows}), by_tp_);
    add_rows(linear + "in_proj_b.weight", gdn.in_proj_b, {heads, h}, rows_run(value_heads_),
             by_tp_);
    add_rows(linear + "in_proj_a.weight", gdn.in_proj_a, {heads, h}, rows_run(value_heads_),
             by_tp_);
  }
  add_rows(linear + "conv1d.weight", gdn.conv1d, {conv_dim, 1, a_.linear_conv_kernel_dim}, qkv_runs,
           by_tp_);
  add_rows(linear + "A_log", gdn.A_log, {heads}, rows_run(value_heads_), by_tp_);
  add_rows(linear + "dt_bias", gdn.dt_bias, {heads}, rows_run(value_heads_), by_tp_);
  // The gated output norm is per value head dim, shared by all heads.
  add_whole(linear + "norm.weight", gdn.norm, true);
  add_columns(linear + "out_proj.weight", gdn.out_proj, value_dim, value_heads_.first * dv, by_tp_);
}

void HfTensorList::mlp(const std::string& prefix, const DecoderLayerParams& layer,
                       ExpertRange experts) {
  if (!layer.is_moe) {
    swiglu(prefix + "mlp.", layer.dense, dense_i_, a_.intermediate_size, by_tp_, false);
    return;
  }
  // The router and the shared-expert gate act on the rank's rows of the MoE block.
  add_whole(prefix + "mlp.gate.weight", layer.moe.router, true);
  if (layer.moe.has_shared_expert) {
    swiglu(prefix + "mlp.shared_expert.", layer.moe.shared_expert, shared_i_,
           a_.shared_expert_intermediate_size, by_tp_, false);
    add_whole(prefix + "mlp.shared_expert_gate.weight", layer.moe.shared_expert_gate, true);
  }
  skip(3 * static_cast<std::size_t>(experts.first));  // gate, up, down of each earlier expert
  for (std::int64_t local = 0; local < experts.count; ++local) {
    const std::int64_t expert = experts.first + local;
    const DenseMlpParams one{select(layer.moe.experts.gate_up, local),
                             select(layer.moe.experts.down, local)};
    swiglu(prefix + "mlp.experts." + std::to_string(expert) + ".", one, moe_i_,
           a_.moe_intermediate_size, by_etp_, true);
  }
}

}  // namespace

// HF tensors of whole-model layer i (every expert): what a part skips over when it does not
// hold the layer, so its own tensors keep their whole-model indices.
std::size_t hf_tensors_of_layer(const config::ModelArchitecture& a, std::int64_t i) {
  std::size_t count = 2;  // input and post-attention norms
  if (a.mixer_of_layer(i) == config::LayerMixer::full_attention)
    count += 6;  // q, k, v, o projections, q and k norms
  else
    count += (a.model_type == "qwen3_next" ? 2 : 4) + 5;  // projections, conv, A, dt, norm, out
  if (a.is_moe_layer(i))
    count += 1 + (a.is_hybrid() ? 4 : 0) + 3 * static_cast<std::size_t>(a.num_experts);
  else
    count += 3;
  return count;
}

void Qwen3MoeParameters::add_hf_tensors() {
  const config::ModelArchitecture& a = architecture_;
  HfTensorList list(hf_tensors_, whole_model_index_, a, tensor_parallel_);
  if (embed_tokens.value.defined()) list.vocabulary("model.embed_tokens.weight", embed_tokens);
  // Each held layer's tensors start after every earlier layer's, held or not.
  std::vector<std::size_t> layer_start(static_cast<std::size_t>(a.num_hidden_layers) + 1, 1);
  for (std::int64_t i = 0; i < a.num_hidden_layers; ++i)
    layer_start[static_cast<std::size_t>(i) + 1] =
        layer_start[static_cast<std::size_t>(i)] + hf_tensors_of_layer(a, i);
  for (std::size_t position = 0; position < layers.size(); ++position) {
    const std::int64_t i = layer_ids_[position];
    list.continue_at(layer_start[static_cast<std::size_t>(i)]);
    const auto& layer = layers[position];
    const std::string prefix = "model.layers." + std::to_string(i) + ".";
    list.residual_norm(prefix + "input_layernorm.weight", layer.input_norm);
    if (layer.mixer == config::LayerMixer::full_attention) {
      list.attention(prefix, layer.attention);
    } else {
      list.gated_deltanet(prefix, layer.linear_attention);
    }
    list.residual_norm(prefix + "post_attention_layernorm.weight", layer.post_attention_norm);
    list.mlp(prefix, layer, expert_range_);
  }
  list.continue_at(layer_start.back());
  if (part_.head) {
    list.residual_norm("model.norm.weight", final_norm);
    if (!a.tie_word_embeddings) list.vocabulary("lm_head.weight", lm_head);
  }
  // A tied copy draws the embedding's values.
  if (holds_tied_head_copy()) whole_model_index_.front() = 0;
}

std::vector<HfRowRun> whole_model_row_runs(const config::ModelArchitecture& a,
                                           const std::string& name) {
  // Whole storage in HF order, except where the model de-interleaves rows (add_hf_tensors).
  if (a.is_hybrid() && name.ends_with(".self_attn.q_proj.weight"))
    return gated_query_runs({0, a.num_attention_heads}, a.head_dim);
  if (a.model_type == "qwen3_next" && name.ends_with(".linear_attn.in_proj_qkvz.weight"))
    return next_qkvz_runs(a, {0, a.linear_num_key_heads});
  if (a.model_type == "qwen3_next" && name.ends_with(".linear_attn.in_proj_ba.weight"))
    return next_ba_runs(a, {0, a.linear_num_key_heads});
  return {};
}

}  // namespace dyncp::model
