#include "train/memory_estimate.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "config/head_sharding.hpp"
#include "config/pipeline_split.hpp"
#include "model/qwen3_moe_parameters.hpp"
#include "ops/gated_delta_rule_scratch.hpp"
#include "packing/alignment.hpp"
#include "packing/schedule.hpp"

namespace dyncp::train {

namespace {

constexpr double bytes_per_value = 4.0;  // fp32 (i32 ids count the same)
constexpr double mebibyte = 1024.0 * 1024.0;

struct Shape {
  double hidden, q_width, kv_width, q_heads, kv_heads, experts, top_k, moe_intermediate,
      dense_intermediate, vocab;
};

Shape shape_of(const config::ModelArchitecture& a) {
  const auto head_dim = a.head_dim > 0 ? a.head_dim : a.hidden_size / a.num_attention_heads;
  return {static_cast<double>(a.hidden_size),
          static_cast<double>(a.num_attention_heads * head_dim),
          static_cast<double>(a.num_key_value_heads * head_dim),
          static_cast<double>(a.num_attention_heads),
          static_cast<double>(a.num_key_value_heads),
          static_cast<double>(a.num_experts),
          static_cast<double>(a.num_experts_per_tok),
          static_cast<double>(a.moe_intermediate_size),
          static_cast<double>(a.intermediate_size),
          static_cast<double>(a.vocab_size)};
}

// The shape one TP rank computes with: heads, FFN columns and vocabulary over tp (an expert's
// columns over tp either way: ETP splits them, ETP 1 splits its tokens), the hidden width over
// tp under sequence parallelism (the residual stream, norms and MoE rows hold T / tp tokens:
// dividing the width divides every [T, h] term the same).
Shape tensor_parallel_shape(Shape s, const MemoryEstimateInput& input) {
  const double tp =
      static_cast<double>(std::max<std::int64_t>(input.tensor_model_parallel_size, 1));
  if (tp == 1) return s;
  s.q_width /= tp;
  s.kv_width /= tp;
  s.q_heads /= tp;
  s.kv_heads /= tp;
  s.moe_intermediate /= tp;
  s.dense_intermediate /= tp;
  s.vocab /= tp;
  if (input.sequence_parallel) s.hidden /= tp;
  return s;
}

// Values one layer saves for backward, per local token. The two residual norms' outputs
// (normed input, normed mid) are counted apart: norm_outputs_saved_per_token.
double attention_saved_per_token(const Shape& s) {
  return s.hidden                         // mid (residual)
         + 2                              // input and post-attention norm statistics
         + 3 * s.q_width + 2 * s.q_heads  // q raw, q, attention output; q-norm stats, lse
         + 3 * s.kv_width + s.kv_heads;   // k raw, k, v; k-norm stats
}

// The outputs of the input and post-attention norms; not kept under selective layernorm.
double norm_outputs_saved_per_token(const Shape& s, bool recompute_layernorm) {
  return recompute_layernorm ? 0.0 : 2 * s.hidden;
}

// With bf16 activations (model::ModelOptions::bf16_activations) x_perm, y_perm, the
// EP-received rows, the experts' gate_up and SwiGLU output are bf16 (half a value an element),
// and under EP x_perm is only the bf16 send buffer (counted in "EP dispatch").
double moe_saved_per_token(const Shape& s, std::int64_t ep,
                           const config::SelectiveRecompute& recompute, bool bf16_activations) {
  const double rows = s.top_k;  // every token is routed to k experts
  const double bf16 = bf16_activations ? 0.5 : 1.0;
  const double x_perm = bf16_activations && ep > 1 ? 0.0 : bf16;
  const double y_perm = bf16;
  double values = s.experts      // router probabilities
                  + 4 * s.top_k  // expert ids, weights, permute order and rows
                  + (x_perm + y_perm) * rows * s.hidden                // x_perm, y_perm
                  + bf16 * 2 * rows * s.moe_intermediate;              // expert gate_up
  if (!recompute.moe_act) values += bf16 * rows * s.moe_intermediate;  // expert SwiGLU output
  if (ep > 1) values += bf16 * rows * s.hidden;  // rows received from the EP group
  return values;
}

// A Gated DeltaNet layer (hybrid family), per local token. Under CP each rank keeps only its
// own rows (parallel/cp_linear_attention_states): the conv outputs, L2-norm statistics, the
// chunk-boundary states, and the state maps' query weights w (Hv·dk per row). bf16
// activations keep z, the rule output and the gated-norm output in bf16.
double deltanet_saved_per_token(const config::ModelArchitecture& a, bool bf16_activations) {
  const double bf16 = bf16_activations ? 0.5 : 1.0;
  const double h = static_cast<double>(a.hidden_size);
  const double hk = static_cast<double>(a.linear_num_key_heads);
  const double hv = static_cast<double>(a.linear_num_value_heads);
  const double key = hk * static_cast<double>(a.linear_key_head_dim);
  const double value = hv * static_cast<double>(a.linear_value_head_dim);
  constexpr double chunk = 64;  // the chunked delta rule's chunk (model::LinearAttentionDims)
  return h + 2                  // mid; norm stats (the norm outputs: apart)
         + 2 * key + value      // q/k/v before the conv
         + bf16 * value         // z
         + 4 * hv               // a, b, g, beta
         + (1 + 2 * bf16) * value + hv  // rule output, gated-norm output and stats
         + 2 * key + value + 2 * hk     // conv outputs, L2-norm statistics
         + hv * static_cast<double>(a.linear_key_head_dim * a.linear_value_head_dim) / chunk +
         hv * static_cast<double>(a.linear_key_head_dim);  // w of the state maps
}

// The hybrid family's shared expert behind its sigmoid gate: gate_up and SwiGLU output (neither
// under shared_experts, only gate_up under moe_act), output and gate logit.
double shared_expert_saved_per_token(const config::ModelArchitecture& a,
                                     const config::SelectiveRecompute& recompute) {
  if (!a.is_hybrid() || a.shared_expert_intermediate_size <= 0) return 0.0;
  const double kept = recompute.shared_experts ? 0 : recompute.moe_act ? 2 : 3;
  return kept * static_cast<double>(a.shared_expert_intermediate_size) + 2;
}

// A dense MLP's gate_up and SwiGLU output; neither under selective mlp.
double dense_saved_per_token(const Shape& s, bool recompute_mlp) {
  return recompute_mlp ? 0.0 : 3 * s.dense_intermediate;
}

// One layer's backward temporaries, per token (the larger of the MLP and attention phases).
// Selective recomputation adds what it rebuilds: the norm output each phase reads (layernorm)
// and the experts' SwiGLU output beside their gradients (moe_act).
double backward_scratch_per_token(const Shape& s, bool moe_layers, bool dense_layers,
                                  const config::SelectiveRecompute& recompute) {
  const double norm_output = recompute.layernorm ? s.hidden + 1 : 0.0;  // + its statistics
  const double attention = s.hidden + 2 * s.q_width + 2 * s.kv_width + s.q_width + norm_output;
  const double moe = s.hidden + 2 * s.top_k * s.hidden + s.top_k + s.experts +
                     (recompute.moe_act ? 4 : 3) * s.top_k * s.moe_intermediate;
  const double dense = s.hidden + (recompute.mlp ? 6 : 3) * s.dense_intermediate;
  const double mlp = norm_output + std::max(moe_layers ? moe : 0.0, dense_layers ? dense : 0.0);
  return std::max(attention, mlp);
}

// Values of the bf16 operand copies the largest single matrix product holds under bf16_mixed
// (lib/ops/cuda/cuda_ops.cpp converts them into scratch per call; the CPU rounds fp32 copies):
// a linear's backward converts dy [T, out], x [T, in] and W [in, out]; the grouped expert
// products the same over T x k rows and the rank's experts; the fused LM head converts the
// whole hidden [T, h] and W_lm [V, h]; attention its q, k, v, out and dout.
double bf16_operand_values(const Shape& s, double tokens, double local_experts, bool any_moe,
                           bool any_dense) {
  const auto linear = [&](double in, double out) { return tokens * (in + out) + in * out; };
  double worst = std::max({linear(s.hidden, s.q_width), linear(s.q_width, s.hidden),
                           linear(s.hidden, s.kv_width),
                           tokens * (3 * s.q_width + 2 * s.kv_width),  // attention
                           tokens * s.hidden + s.vocab * s.hidden});   // LM head
  if (any_dense)
    worst = std::max({worst, linear(s.hidden, 2 * s.dense_intermediate),
                      linear(s.dense_intermediate, s.hidden)});
  if (any_moe) {
    const double rows = tokens * s.top_k;
    worst = std::max(worst, rows * (s.hidden + 2 * s.moe_intermediate) +
                                local_experts * s.hidden * 2 * s.moe_intermediate);
  }
  return worst;
}

std::string with_commas(double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.0f", value);
  const std::string digits = buffer;
  std::string out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

}  // namespace

// Both counts come from the model's own layout plan (model::Qwen3MoeParameters::count), so
// they are exactly what a rank allocates, alignment gaps and the hybrid family's tensors
// included.
std::int64_t count_parameters(const config::ModelArchitecture& a,
                              std::int64_t expert_model_parallel_size) {
  const std::int64_t ep = std::max<std::int64_t>(expert_model_parallel_size, 1);
  return model::Qwen3MoeParameters::count(a, {0, std::max<std::int64_t>(a.num_experts / ep, 1)});
}

std::int64_t count_expert_parameters(const config::ModelArchitecture& a,
                                     std::int64_t expert_model_parallel_size) {
  const std::int64_t ep = std::max<std::int64_t>(expert_model_parallel_size, 1);
  std::int64_t dense = 0;
  const std::int64_t total = model::Qwen3MoeParameters::count(
      a, {0, std::max<std::int64_t>(a.num_experts / ep, 1)}, &dense);
  return total - dense;
}

namespace {

// The values TP replicates on every rank (norms, q/k norms, routers, shared-expert gates) of the
// layers `holds` accepts, plus the final norm when `final_norm`.
template <typename Holds>
std::int64_t replicated_parameters(const config::ModelArchitecture& a, Holds holds,
                                   bool final_norm) {
  const std::int64_t head_dim =
      a.head_dim > 0 ? a.head_dim
                     : a.hidden_size / std::max<std::int64_t>(a.num_attention_heads, 1);
  std::int64_t values = final_norm ? a.hidden_size : 0;
  for (std::int64_t layer = 0; layer < a.num_hidden_layers; ++layer) {
    if (!holds(layer)) continue;
    values += 2 * a.hidden_size;  // input and post-attention norms
    values += a.mixer_of_layer(layer) == config::LayerMixer::linear_attention
                  ? a.linear_value_head_dim  // gated RMSNorm weight, per head dim
                  : 2 * head_dim;            // q and k RMSNorm
    if (a.is_moe_layer(layer)) {
      values += a.num_experts * a.hidden_size;                             // router
      if (a.shared_expert_intermediate_size > 0) values += a.hidden_size;  // shared gate
    }
  }
  return values;
}

}  // namespace

std::int64_t count_tensor_parallel_replicated_parameters(const config::ModelArchitecture& a) {
  return replicated_parameters(
      a, [](std::int64_t) { return true; }, true);
}

namespace {

bool has_layers(const config::ModelArchitecture& a, bool moe) {
  for (std::int64_t layer = 0; layer < a.num_hidden_layers; ++layer)
    if (a.is_moe_layer(layer) == moe) return true;
  return false;
}

// weights, gradients and AdamW moments: the first three lines, in parameter_state_bytes.
// This rank's parameters and their routed-expert part: the whole model, or one stage's.
std::int64_t held_parameters(const MemoryEstimateInput& input, std::int64_t ep,
                             std::int64_t* experts) {
  const auto& a = input.architecture;
  if (input.stage_layers.empty()) {
    *experts = count_expert_parameters(a, ep);
    return count_parameters(a, ep);
  }
  std::int64_t total = 0;
  *experts = 0;
  for (std::size_t i = 0; i < input.stage_layers.size(); ++i) {
    std::int64_t routed = 0;
    const bool first = i == 0;
    total += model::Qwen3MoeParameters::count_stage(
        a, {0, std::max<std::int64_t>(a.num_experts / ep, 1)},
        {input.stage_layers[i].first, input.stage_layers[i].second,
         first && input.stage_holds_embedding, first && input.stage_holds_loss},
        &routed);
    *experts += routed;
  }
  return total;
}

// Whether `layer` is one of this estimate's layers.
bool estimates_layer(const MemoryEstimateInput& input, std::int64_t layer) {
  if (input.stage_layers.empty()) return true;
  for (const auto& [first, count] : input.stage_layers)
    if (layer >= first && layer < first + count) return true;
  return false;
}

// The replicated values of this estimate's layers (the final norm sits with the loss).
std::int64_t held_replicated_parameters(const MemoryEstimateInput& input) {
  return replicated_parameters(
      input.architecture, [&](std::int64_t layer) { return estimates_layer(input, layer); },
      input.stage_layers.empty() || input.stage_holds_loss);
}

void add_parameter_state(MemoryEstimate& out, const MemoryEstimateInput& input) {
  const auto& a = input.architecture;
  // Under EP a rank holds only its E/ep experts of every MoE layer.
  const std::int64_t ep = std::max<std::int64_t>(input.expert_model_parallel_size, 1);
  const std::int64_t tp = std::max<std::int64_t>(input.tensor_model_parallel_size, 1);
  const std::int64_t etp = std::max<std::int64_t>(input.expert_tensor_parallel_size, 1);
  // Under TP a rank holds 1/tp of the dense tensors of its stage but all of the replicated
  // ones, and 1/etp of each of its experts.
  std::int64_t all_experts_here = 0;
  const std::int64_t held = held_parameters(input, ep, &all_experts_here);
  const std::int64_t replicated = tp > 1 ? held_replicated_parameters(input) : 0;
  const std::int64_t dense_here = held - all_experts_here;
  const std::int64_t experts_here = (all_experts_here + etp - 1) / etp;
  out.num_parameters = (dense_here - replicated + tp - 1) / tp + replicated + experts_here;
  const double parameter_bytes = static_cast<double>(out.num_parameters) * bytes_per_value;
  const std::string tensor_part =
      tp > 1 ? " (TP " + std::to_string(tp) + ": dense 1/" + std::to_string(tp) + " but " +
                   with_commas(static_cast<double>(replicated)) + " replicated" +
                   (etp > 1 ? ", each expert 1/" + std::to_string(etp) : std::string()) + ")"
             : std::string();
  const std::string parameters =
      with_commas(static_cast<double>(out.num_parameters)) + " fp32" +
      (input.bf16_products ? std::string(" (master)") : std::string()) +
      (!input.stage_layers.empty() ? std::string(" of this stage") : std::string()) +
      (ep > 1 && input.stage_layers.empty()
           ? " (experts 1/" + std::to_string(ep) + ": " +
                 with_commas(static_cast<double>(experts_here)) + " of " +
                 with_commas(static_cast<double>(count_expert_parameters(a))) + ")"
           : "") +
      tensor_part;
  out.lines.push_back({"weights", parameter_bytes, parameters});
  out.lines.push_back({"gradients", parameter_bytes,
                       input.bf16_products
                           ? with_commas(static_cast<double>(out.num_parameters)) +
                                 " fp32 (main_grad: bf16 products accumulate in fp32)"
                           : parameters});
  const double moment_bytes = input.exp_avg_bytes + input.exp_avg_sq_bytes;
  const auto dtype_name = [](double bytes) { return bytes == 2 ? "bf16" : "fp32"; };
  const std::string moment_dtypes = moment_bytes == 8
                                        ? ""
                                        : std::string(", ") + dtype_name(input.exp_avg_bytes) +
                                              " + " + dtype_name(input.exp_avg_sq_bytes);
  if (input.distributed_optimizer && input.pool_size > 1) {
    const std::int64_t pool = input.pool_size;
    // This rank's experts are split over the pool / ep ranks of its expert-DP group.
    // Dense pieces over this TP rank's pool; experts over the stage's ranks / (etp x ep).
    const std::int64_t experts = experts_here;
    const std::int64_t dense = out.num_parameters - experts;
    const std::int64_t expert_shards = std::max<std::int64_t>(pool * tp / (etp * ep), 1);
    const double owned = static_cast<double>((dense + pool - 1) / pool +
                                             (experts + expert_shards - 1) / expert_shards);
    out.lines.push_back({"AdamW moments", owned * moment_bytes,
                         "exp_avg + exp_avg_sq of this rank's pieces: dense over " +
                             std::to_string(pool) + " pool ranks, experts over " +
                             std::to_string(expert_shards) +
                             " expert-DP ranks (distributed optimizer)" + moment_dtypes});
    out.parameter_state_bytes = 2 * parameter_bytes + owned * moment_bytes;
  } else {
    const double moments = static_cast<double>(out.num_parameters) * moment_bytes;
    out.lines.push_back(
        {"AdamW moments", moments,
         "exp_avg + exp_avg_sq of every parameter this rank holds" + moment_dtypes});
    out.parameter_state_bytes = 2 * parameter_bytes + moments;
  }
}

// What one bin keeps for backward and needs during it: layer inputs, saved activations (by the
// recompute settings), one layer's backward scratch and the cross-entropy chunk.
void add_activations(MemoryEstimate& out, const MemoryEstimateInput& input, const Shape& s) {
  const auto& a = input.architecture;
  // The Gated DeltaNet heads and the shared expert's columns of one TP rank.
  config::ModelArchitecture per_rank = a;
  if (const std::int64_t tp = input.tensor_model_parallel_size; tp > 1) {
    per_rank.linear_num_key_heads = std::max<std::int64_t>(a.linear_num_key_heads / tp, 1);
    per_rank.linear_num_value_heads = std::max<std::int64_t>(a.linear_num_value_heads / tp, 1);
    per_rank.shared_expert_intermediate_size = a.shared_expert_intermediate_size / tp;
    if (input.sequence_parallel) per_rank.hidden_size = a.hidden_size / tp;
  }
  const double tokens = static_cast<double>(input.tokens_per_rank);
  double kept_layers = 0;  // saved for backward through the whole bin
  double largest_layer = 0;
  bool any_moe = false;
  bool any_dense = false;
  std::int64_t num_layers = 0;
  for (std::int64_t layer = 0; layer < a.num_hidden_layers; ++layer)
    num_layers += estimates_layer(input, layer) ? 1 : 0;
  // Every microbatch in flight keeps its layer inputs and saved activations.
  const double in_flight = input.pipeline ? input.pipeline_in_flight : 1.0;
  const std::string in_flight_text =
      input.pipeline ? " x " + std::to_string(in_flight).substr(0, 4) + " microbatches in flight"
                     : std::string();
  for (std::int64_t layer = 0; layer < a.num_hidden_layers; ++layer) {
    if (!estimates_layer(input, layer)) continue;
    const bool moe = a.is_moe_layer(layer);
    any_moe = any_moe || moe;
    any_dense = any_dense || !moe;
    const double mixer =
        norm_outputs_saved_per_token(s, input.selective.layernorm) +
        (a.mixer_of_layer(layer) == config::LayerMixer::linear_attention
             ? deltanet_saved_per_token(per_rank, input.bf16_activations)
             : attention_saved_per_token(s) + (a.is_hybrid() ? 2 * s.q_width : 0.0));  // gate
    const double per_token =
        mixer + (moe ? moe_saved_per_token(s, input.expert_model_parallel_size, input.selective,
                                           input.bf16_activations) +
                           shared_expert_saved_per_token(per_rank, input.selective)
                     : dense_saved_per_token(s, input.selective.mlp));
    const bool recomputed = input.recompute_full && (input.recompute_first_layers < 0 ||
                                                     layer < input.recompute_first_layers);
    if (recomputed) {
      largest_layer = std::max(largest_layer, per_token);
    } else {
      kept_layers += per_token;
    }
  }
  const std::string at_tokens = "at " + std::to_string(input.tokens_per_rank) + " tokens/rank";
  const double layers = static_cast<double>(num_layers);
  if (input.bf16_activations) {
    // The kept inputs in bf16, the residual gradient and, in backward, the layer's input
    // widened to fp32. Forward runs on two fp32 rows in scratch instead of the last two, and the
    // final norm's input, output and gradient (fp32) are held only until the final norm's
    // backward, while no layer's saves or backward scratch are held: a smaller phase.
    out.lines.push_back({"layer inputs + final norm",
                         (layers * in_flight / 2 + 2) * s.hidden * tokens * bytes_per_value,
                         std::to_string(num_layers) + " layer inputs in bf16" + in_flight_text +
                             " + the residual gradient and one widened input, [T, h] each, " +
                             at_tokens});
  } else {
    const double residual_stream =
        ((layers + 1) * in_flight + 3) * s.hidden * tokens * bytes_per_value;
    out.lines.push_back({"layer inputs + final norm", residual_stream,
                         std::to_string(num_layers + 1) + " layer inputs" + in_flight_text +
                             " + final norm and gradients, [T, h] each, " + at_tokens});
  }
  if (!input.recompute_full) {
    const std::string selective = config::dropped_modules(input.selective);
    out.lines.push_back({"saved activations", kept_layers * tokens * bytes_per_value * in_flight,
                         "every layer, incl. " + std::to_string(a.num_experts_per_tok) +
                             " top-k copies per token" + in_flight_text +
                             (selective.empty() ? "" : " (recomputed: " + selective + ")")});
  } else if (kept_layers == 0) {
    out.lines.push_back({"saved activations", (largest_layer + s.hidden) * tokens * bytes_per_value,
                         "one layer at a time (recompute full)"});
  } else {
    // Kept layers are released as backward passes them and the recomputed (first) layers come
    // last, so the peak is the larger of the two phases.
    out.lines.push_back(
        {"saved activations",
         std::max(kept_layers, largest_layer + s.hidden) * tokens * bytes_per_value,
         "layers past the first " + std::to_string(input.recompute_first_layers) +
             " kept until their backward, then one recomputed layer at a time (recompute "
             "block)"});
  }
  out.lines.push_back({"backward scratch",
                       backward_scratch_per_token(s, any_moe, any_dense, input.selective) * tokens *
                           bytes_per_value,
                       "one layer's gradient temporaries"});
  const double token_chunk =
      static_cast<double>(std::min(input.cross_entropy_token_chunk, input.tokens_per_rank));
  const double vocab_chunk =
      std::min(static_cast<double>(input.cross_entropy_vocab_chunk), s.vocab);
  out.lines.push_back(
      {"cross-entropy chunk",
       input.stage_holds_loss ? token_chunk * (vocab_chunk + 2 * s.hidden + 5) * bytes_per_value
                              : 0.0,
       input.stage_holds_loss
           ? with_commas(token_chunk) + " tokens x " + with_commas(vocab_chunk) + " vocab tile"
           : std::string("not on this stage (the loss is on the last)")});
  if (input.pipeline) {
    out.lines.push_back({"pipeline P2P buffers", 4 * tokens * s.hidden * bytes_per_value,
                         "one bin's activation and gradient, sent and received, [T, h] each"});
  }
}

// The buffers of the CP exchange that runs (for the largest group a step forms) and of the EP
// dispatch.
void add_communication_buffers(MemoryEstimate& out, const MemoryEstimateInput& input,
                               const Shape& s) {
  const auto& a = input.architecture;
  const double tokens = static_cast<double>(input.tokens_per_rank);
  const bool any_moe = has_layers(a, /*moe=*/true);
  const double group = static_cast<double>(input.largest_cp_group);
  const bool all_to_all = input.cp_comm_type == config::CpCommType::a2a ||
                          input.cp_comm_type == config::CpCommType::a2a_p2p;
  if (all_to_all) {
    // Kept per attention layer: the head-sharded Q, out, lse and (ρ-replicated) K, V, as many
    // layers as keep their activations; plus one layer's staging (send and receive of the
    // largest tensor) and head-sharded gradients; a2a+p2p adds its ring's buffers over the
    // all-to-all group's rows for this rank's heads (10 x ρ x T x Hkv x d).
    const std::int64_t a2a_group =
        input.cp_comm_type == config::CpCommType::a2a_p2p && input.hierarchical_inner_size > 0
            ? std::min(input.largest_cp_group, input.hierarchical_inner_size)
            : input.largest_cp_group;
    const double replicas = static_cast<double>(config::HeadSharding{
        std::max<std::int64_t>(a2a_group, 1), a.num_attention_heads, a.num_key_value_heads}
                                                    .kv_replicas());
    const double kept = 2 * s.q_width + 2 * replicas * s.kv_width + s.q_heads;
    const double layers_kept =
        input.recompute_full ? 1.0 : static_cast<double>(a.num_hidden_layers);
    const double ring = input.largest_cp_group > a2a_group ? 10 * replicas * s.kv_width : 0.0;
    out.lines.push_back(
        {"CP all-to-all",
         input.largest_cp_group > 1
             ? (layers_kept * kept + 2 * s.q_width + kept + ring) * tokens * bytes_per_value
             : 0.0,
         "head-sharded Q, K, V, out, lse kept per layer + staging, K/V replicated " +
             std::to_string(static_cast<int>(replicas)) + "x" +
             (ring > 0 ? " + the ring's blocks" : "")});
  } else if (input.cp_comm_type == config::CpCommType::p2p) {
    out.lines.push_back(
        {"CP ring", input.largest_cp_group > 1 ? 10 * tokens * s.kv_width * bytes_per_value : 0.0,
         "K/V blocks in flight + dK/dV accumulators, any group size"});
  } else {
    out.lines.push_back(
        {"CP all-gather",
         input.largest_cp_group > 1 ? 5 * group * tokens * s.kv_width * bytes_per_value : 0.0,
         "K, V, dK, dV + staging of a group of " + std::to_string(input.largest_cp_group) +
             (input.largest_cp_group_why.empty() ? "" : " (" + input.largest_cp_group_why + ")")});
  }
  // bf16 activations: the bf16 x_perm sent, the bf16 rows received (reused for the outputs'
  // way home) and the experts' fp32 outputs: 2 + 2 + 4 bytes a row element, as fp32 rows +
  // outputs without them.
  out.lines.push_back(
      {"EP dispatch",
       input.expert_model_parallel_size > 1 && any_moe
           ? 2 * tokens * s.top_k * s.hidden * bytes_per_value
           : 0.0,
       std::string(input.bf16_activations ? "bf16 rows sent and received + fp32 expert outputs"
                                          : "received rows + expert outputs") +
           ", balanced routing over ep " + std::to_string(input.expert_model_parallel_size)});
}

// bf16_mixed's operand copies and the GPU gated delta rule's backward scratch.
void add_precision_and_device_buffers(MemoryEstimate& out, const MemoryEstimateInput& input,
                                      const Shape& s) {
  const auto& a = input.architecture;
  const double tokens = static_cast<double>(input.tokens_per_rank);
  const std::int64_t ep = std::max<std::int64_t>(input.expert_model_parallel_size, 1);
  const bool any_moe = has_layers(a, /*moe=*/true);
  const bool any_dense = has_layers(a, /*moe=*/false);
  if (input.bf16_products) {
    const double copy_bytes = input.on_gpu ? 2.0 : bytes_per_value;
    const double local_experts = static_cast<double>(std::max<std::int64_t>(a.num_experts / ep, 1));
    out.lines.push_back(
        {"bf16 operand copies",
         bf16_operand_values(s, tokens, local_experts, any_moe, any_dense) * copy_bytes,
         std::string("the largest product's operands, converted per call (bf16_mixed; ") +
             (input.on_gpu ? "2 bytes each on the GPU)" : "fp32-held on the CPU)")});
  }
  if (input.on_gpu && a.is_hybrid()) {
    // The CUDA gated delta rule's (chunked) backward, one layer at a time: prepared rows, the
    // outgoing-state gradient of every chunk (T / 64 chunks, as the saved chunk states count
    // them), the per-chunk kernel's slots and per-head dq, dk rows.
    // Under TP a rank runs its tp-th of the value heads.
    const std::int64_t value_heads = std::max<std::int64_t>(
        a.linear_num_value_heads / std::max<std::int64_t>(input.tensor_model_parallel_size, 1), 1);
    const ops::GatedDeltaRuleScratchShape shape{input.tokens_per_rank, value_heads,
                                                a.linear_key_head_dim, a.linear_value_head_dim};
    const std::int64_t chunks = (input.tokens_per_rank + shape.chunk - 1) / shape.chunk;
    out.lines.push_back(
        {"DeltaNet backward (GPU)",
         4.0 * static_cast<double>(ops::gated_delta_rule_chunked_backward_scratch_floats(
                   shape, input.tokens_per_rank, chunks)),
         "chunked: prepared rows, " + std::to_string(chunks) +
             " chunks' state gradients, per-head dq, dk rows, fp32"});
  }
}

}  // namespace

MemoryEstimate estimate_memory(const MemoryEstimateInput& input) {
  const Shape s = tensor_parallel_shape(shape_of(input.architecture), input);
  MemoryEstimate out;
  add_parameter_state(out, input);
  add_activations(out, input, s);
  add_communication_buffers(out, input, s);
  add_precision_and_device_buffers(out, input, s);
  for (std::size_t i = 3; i < out.lines.size(); ++i) out.per_bin_bytes += out.lines[i].bytes;
  return out;
}

std::int64_t largest_cp_group_for(const config::ConfigContainer& config, std::string* why) {
  const auto& model = config.model;
  const auto say = [&](std::string text) {
    if (why != nullptr) *why = std::move(text);
  };
  if (!model.dynamic_context_parallel) {
    say("static CP");
    return model.context_parallel_size;
  }
  const std::int64_t pool = std::max<std::int64_t>(config.layout.pool_size, 1);
  const auto scheduler =
      model.sequence_packing_scheduler.value_or(config::PackingScheduler::default_dynamic_cp);
  const bool power_of_two = (pool & (pool - 1)) == 0;
  if (scheduler != config::PackingScheduler::default_dynamic_cp || !power_of_two) {
    say(std::string(scheduler == config::PackingScheduler::cost_aware
                        ? "cost_aware may fill the whole pool"
                        : "a pool that is not a power of two may fall back to one pool group"));
    return pool;
  }
  const std::int64_t cap = model.max_seqlen_per_dp_cp_rank.value_or(model.seq_length);
  const std::int64_t needed =
      std::min(pool, packing::group_size_needed(model.seq_length, cap,
                                                model.min_dynamic_context_parallel_size,
                                                packing::alignment_rule(config)));
  say("the longest sample's group: seq_length " + std::to_string(model.seq_length) + " over " +
      std::to_string(cap) + " tokens per rank; the pool is " + std::to_string(pool));
  return needed;
}

MemoryEstimateInput memory_estimate_input(const config::ConfigContainer& config) {
  MemoryEstimateInput input;
  input.architecture = config.model.architecture;
  input.architecture.resolve();
  input.tokens_per_rank = config.model.max_seqlen_per_dp_cp_rank.value_or(config.model.seq_length);
  input.recompute_full = config.model.recompute_granularity == config::RecomputeGranularity::full;
  if (input.recompute_full && config.model.recompute_method == config::RecomputeMethod::block)
    input.recompute_first_layers = config.model.recompute_num_layers.value_or(1);
  input.selective = config::selective_recompute(config.model);
  input.largest_cp_group = largest_cp_group_for(config, &input.largest_cp_group_why);
  input.bf16_products = config.mixed_precision == config::MixedPrecision::bf16_mixed;
  input.on_gpu = config.dist.device == config::Device::cuda;
  input.bf16_activations = input.bf16_products && input.on_gpu;
  input.expert_model_parallel_size = config.model.expert_model_parallel_size;
  input.pool_size = config.layout.pool_size;
  input.distributed_optimizer = config.ddp.use_distributed_optimizer;
  const auto moment_bytes = [](config::StateDType dtype) {
    return dtype == config::StateDType::bfloat16 ? 2.0 : 4.0;
  };
  input.exp_avg_bytes = moment_bytes(config.optimizer.exp_avg_dtype);
  input.exp_avg_sq_bytes = moment_bytes(config.optimizer.exp_avg_sq_dtype);
  input.cp_comm_type = config.model.cp_comm_type;
  if (!config.model.hierarchical_context_parallel_sizes.empty())
    input.hierarchical_inner_size = config.model.hierarchical_context_parallel_sizes.front();
  input.tensor_model_parallel_size = config.layout.tensor_model_parallel_size;
  input.expert_tensor_parallel_size = config.layout.expert_tensor_parallel_size;
  input.sequence_parallel = config.model.sequence_parallel;
  return input;
}

MemoryEstimateInput memory_estimate_input_for_stage(const config::ConfigContainer& config,
                                                    std::int64_t stage, std::int64_t microbatches) {
  MemoryEstimateInput input = memory_estimate_input(config);
  const config::PipelineSplit split =
      config::split_layers(config::pipeline_split_input(config.model));
  const std::int64_t pp = split.pipeline_size;
  const std::int64_t vpp = split.virtual_size;
  input.pipeline = pp > 1;
  for (std::int64_t v = 0; v < vpp; ++v)
    input.stage_layers.emplace_back(split.chunk(stage, v).first_layer,
                                    split.chunk(stage, v).num_layers);
  input.stage_holds_embedding = stage == 0;
  input.stage_holds_loss = stage == pp - 1;
  if (vpp > 1) {
    const std::int64_t chunk_in_flight = 2 * (pp - stage - 1) + (vpp - 1) * pp + 1;
    input.pipeline_in_flight = static_cast<double>(chunk_in_flight) / static_cast<double>(vpp);
  } else {
    input.pipeline_in_flight = static_cast<double>(pp - stage);
  }
  if (microbatches > 0)
    input.pipeline_in_flight =
        std::min(input.pipeline_in_flight, static_cast<double>(microbatches));
  return input;
}

std::string format_memory_table(const MemoryEstimate& estimate) {
  std::ostringstream out;
  char line[256];
  for (const auto& item : estimate.lines) {
    std::snprintf(line, sizeof line, "  %-26s %12.1f MiB  %s\n", item.name.c_str(),
                  item.bytes / mebibyte, item.detail.c_str());
    out << line;
  }
  std::snprintf(line, sizeof line,
                "  %-26s %12.1f MiB  (parameters and optimizer %.1f MiB, "
                "activations and buffers %.1f MiB)\n",
                "total", estimate.total_bytes() / mebibyte,
                estimate.parameter_state_bytes / mebibyte, estimate.per_bin_bytes / mebibyte);
  out << line;
  return out.str();
}

std::string memory_fit_line(const MemoryEstimate& estimate, std::int64_t ranks_here,
                            double available_bytes, const std::string& available_what) {
  char line[320];
  const double needed = estimate.total_bytes() * static_cast<double>(ranks_here);
  if (available_bytes <= 0) {
    std::snprintf(line, sizeof line,
                  "  fits?: not checked (%s): compare %.1f MiB per rank with the memory "
                  "each rank has\n",
                  available_what.c_str(), estimate.total_bytes() / mebibyte);
    return line;
  }
  std::snprintf(line, sizeof line, "  %s %.1f MiB x %lld rank(s) = %.1f MiB of %.1f MiB %s\n",
                needed <= available_bytes ? "fits:" : "does NOT fit:",
                estimate.total_bytes() / mebibyte, static_cast<long long>(ranks_here),
                needed / mebibyte, available_bytes / mebibyte, available_what.c_str());
  return line;
}

double host_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page_size <= 0) return 0;
  return static_cast<double>(pages) * static_cast<double>(page_size);
}

}  // namespace dyncp::train
