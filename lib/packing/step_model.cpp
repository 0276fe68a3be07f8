#include "packing/step_model.hpp"

#include <algorithm>
#include <cmath>

#include "config/head_sharding.hpp"

namespace dyncp::packing {

namespace {

// Bytes a matrix product class moves per row value ((in + out) x rows) and per weight value,
// over the forward, input-gradient and weight-gradient products: each side is read twice as
// an operand and written once as an fp32 result (activations are stored in fp32); the
// weight is read twice and its fp32 main_grad read and written once. Under bf16_mixed every
// operand is first copied to bf16 (read 4, write 2 bytes) at each of its two uses.
double row_traffic(bool bf16) {
  return bf16 ? 2.0 * 2.0 + 4.0 + 2.0 * 6.0 : 2.0 * 4.0 + 4.0;
}
double weight_traffic(bool bf16) {
  return bf16 ? 2.0 * 2.0 + 8.0 + 2.0 * 6.0 : 2.0 * 4.0 + 8.0;
}

// Element-wise fp32 kernels per layer, forward and backward together (RMSNorms, residual adds,
// RoPE, q/k norms and gates, router, permute / unpermute, SwiGLU, DeltaNet's conv1d, L2 norms,
// gates and gated RMSNorm): the values each reads and writes per token, and their launches.
struct ElementwiseCounts {
  double values_per_token = 0.0;
  double launches = 0.0;
};

ElementwiseCounts elementwise_counts(const config::ModelArchitecture& a) {
  const double h = static_cast<double>(a.hidden_size);
  const double q = static_cast<double>(a.head_dim * a.num_attention_heads);
  const double kv = static_cast<double>(a.head_dim * a.num_key_value_heads);
  const double qk = static_cast<double>(a.linear_num_key_heads * a.linear_key_head_dim);
  const double v = static_cast<double>(a.linear_num_value_heads * a.linear_value_head_dim);
  const double value_heads = static_cast<double>(a.linear_num_value_heads);
  const double k = static_cast<double>(a.num_experts_per_tok);
  ElementwiseCounts counts;
  for (std::int64_t layer = 0; layer < a.num_hidden_layers; ++layer) {
    counts.values_per_token += 16.0 * h;  // two RMSNorms (5 h each), two residual adds (3 h)
    counts.launches += 12.0;
    if (a.mixer_of_layer(layer) == config::LayerMixer::full_attention) {
      counts.values_per_token += 9.0 * (q + kv) + (a.is_hybrid() ? 5.0 * q : 0.0);
      counts.launches += 12.0;
    } else {
      counts.values_per_token += 5.0 * (2.0 * qk + v) + 10.0 * qk + 10.0 * value_heads + 7.0 * v;
      counts.launches += 20.0;
    }
    if (a.is_moe_layer(layer)) {
      const double routed = static_cast<double>(a.moe_intermediate_size);
      const double shared = static_cast<double>(a.shared_expert_intermediate_size);
      counts.values_per_token += 3.0 * static_cast<double>(a.num_experts) + 4.0 * h * (1.0 + k) +
                                 8.0 * routed * k + 8.0 * shared + (shared > 0 ? 2.0 * h : 0.0);
      counts.launches += 16.0;
    } else {
      counts.values_per_token += 8.0 * static_cast<double>(a.intermediate_size);
      counts.launches += 2.0;
    }
  }
  counts.values_per_token += 3.0 * h;  // embedding lookup and its gradient
  counts.launches += 3.0;
  return counts;
}

// Pieces of each sequence one rank's Gated DeltaNet kernel runs, and over how many heads.
struct DeltaNetWork {
  std::vector<std::int64_t> segment_lengths;
  std::int64_t heads = 1;
};

DeltaNetWork deltanet_work(const ModelledBin& bin, const StepModelInput& input) {
  const std::int64_t c = std::max<std::int64_t>(bin.group_size, 1);
  // all_gather / p2p: the zigzag shard, two pieces of L / 2c joined by state passing; a2a:
  // whole sequences over 1 / c of the heads; a2a+p2p: the ring's shard over 1 / inner of them.
  std::int64_t head_split = 1, ring = c;
  if (input.cp_comm_type == config::CpCommType::a2a) {
    head_split = c;
    ring = 1;
  } else if (input.cp_comm_type == config::CpCommType::a2a_p2p) {
    head_split = input.hierarchical_inner_size > 0 ? std::min(c, input.hierarchical_inner_size) : c;
    ring = c / head_split;
  }
  DeltaNetWork work;
  work.heads = std::max<std::int64_t>(input.architecture.linear_num_value_heads / head_split, 1);
  for (const std::int64_t length : bin.lengths) {
    if (ring <= 1) {
      work.segment_lengths.push_back(length);
    } else {
      const std::int64_t piece = (length + 2 * ring - 1) / (2 * ring);
      work.segment_lengths.push_back(piece);
      work.segment_lengths.push_back(piece);
    }
  }
  return work;
}

// The serial depth, in tokens, of the token-by-token backward: (segment, head) items dealt
// round-robin to at most 64 blocks, each walking its items one after another.
double token_by_token_backward_depth(const DeltaNetWork& work) {
  std::vector<double> block_tokens(kTokenByTokenBackwardBlocks, 0.0);
  std::size_t item = 0;
  for (const std::int64_t length : work.segment_lengths) {
    for (std::int64_t head = 0; head < work.heads; ++head, ++item)
      block_tokens[item % block_tokens.size()] += static_cast<double>(length);
  }
  return *std::max_element(block_tokens.begin(), block_tokens.end());
}

void add(StepOpRow& row, const StepOpRow& more) {
  row.flops += more.flops;
  row.bytes += more.bytes;
  row.serial_steps += more.serial_steps;
  row.launches += more.launches;
  row.compute_seconds += more.compute_seconds;
  row.memory_seconds += more.memory_seconds;
  row.latency_seconds += more.latency_seconds;
  row.hidden_seconds += more.hidden_seconds;
  if (more.step_latency_seconds > 0) row.step_latency_seconds = more.step_latency_seconds;
}

class RowMaker {
 public:
  explicit RowMaker(const StepModelParameters& p) : p_(p) {}

  // A kernel class on the device: the roofline of its FLOPs and bytes plus its serial term.
  StepOpRow kernel(double flops, double peak, double efficiency, double bytes, double serial_steps,
                   double step_latency, double launches) const {
    StepOpRow row;
    row.flops = flops;
    row.bytes = bytes;
    row.serial_steps = serial_steps;
    row.step_latency_seconds = step_latency;
    row.launches = launches;
    row.compute_seconds = flops / (peak * efficiency);
    row.memory_seconds = bytes / (p_.memory_bytes_per_second * p_.memory_efficiency);
    row.latency_seconds = serial_steps * step_latency + launches * p_.launch_latency_seconds;
    return row;
  }

  // A collective over `ranks` ranks: the bytes this rank sends over the link, plus latencies.
  StepOpRow collective(double bytes, std::int64_t ranks, double collectives) const {
    StepOpRow row;
    row.bytes = bytes;
    row.launches = collectives;
    const double rate =
        ranks <= p_.ranks_per_node ? p_.link_bytes_per_second : p_.network_bytes_per_second;
    row.memory_seconds = bytes / rate;
    row.latency_seconds = collectives * p_.collective_latency_seconds;
    return row;
  }

 private:
  const StepModelParameters& p_;
};

struct Shape {
  ModelFlopsBreakdown flops;
  ElementwiseCounts elementwise;
  // Attention FLOPs (sliding window) and the CP exchange's terms, priced at 1 byte/s and 1 s
  // per collective: its transfer "seconds" are bytes and its latency "seconds" collectives.
  CostModel unit_cost;
  double local_experts;  // E / ep
};

// The sizes one device computes with (tensor_parallel: its share).
const config::ModelArchitecture& rank_architecture(const StepModelInput& input) {
  return input.rank_architecture ? *input.rank_architecture : input.architecture;
}

Shape shape_of(const StepModelInput& input) {
  CostModelParameters unit;
  unit.link_bytes_per_second = 1.0;
  unit.network_bytes_per_second = 1.0;
  unit.collective_latency_seconds = 1.0;
  unit.cp_comm_type = input.cp_comm_type;
  unit.hierarchical_inner_size = input.hierarchical_inner_size;
  const config::ModelArchitecture& rank = rank_architecture(input);
  const ModelCost model = model_cost_from_architecture(rank);
  const std::int64_t ep = std::max<std::int64_t>(input.expert_model_parallel_size, 1);
  return {model_flops_breakdown(rank), elementwise_counts(rank), CostModel(model, unit),
          static_cast<double>(std::max<std::int64_t>(input.architecture.num_experts / ep, 1))};
}

// The CP exchange and EP all-to-all rows of one microbatch (its compute rows already in
// `rows`), with the parts the overlaps hide.
void add_communication_rows(std::vector<StepOpRow>& rows, const ModelledBin& bin,
                            const StepModelInput& input, const StepModelParameters& p,
                            const Shape& shape, double tokens, double bin_tokens, double forwards) {
  const RowMaker make(p);
  const auto& a = rank_architecture(input);
  const auto& f = shape.flops;
  const bool bf16 = input.bf16;
  const double matrix_peak = bf16 ? p.bf16_flops_per_second : p.fp32_flops_per_second;
  const auto at = [&](StepOpClass op) -> StepOpRow& { return rows[static_cast<std::size_t>(op)]; };
  if (bin.group_size > 1) {
    // The cost model's CP exchange: its bytes per rank and its collectives (the same terms
    // the schedulers see).
    const std::int64_t sequences = static_cast<std::int64_t>(bin.lengths.size());
    const double bytes = shape.unit_cost.transfer_seconds(static_cast<std::int64_t>(bin_tokens),
                                                          bin.group_size, sequences);
    const double collectives =
        shape.unit_cost.communication_seconds(static_cast<std::int64_t>(bin_tokens), bin.group_size,
                                              sequences) -
        bytes;
    StepOpRow& exchange = at(StepOpClass::cp_exchange);
    exchange = make.collective(bytes, bin.group_size, collectives);
    // all_gather: of the forward gather, the backward gather and its reduce-scatter (one size),
    // the backward gather starts before the layer's MLP backward and runs beside it (2/3 of
    // the expert products' time, the attention layers' share).
    if (input.cp_comm_type == config::CpCommType::all_gather && a.num_hidden_layers > 0) {
      const double attention_share =
          static_cast<double>(f.attention_layers) / static_cast<double>(a.num_hidden_layers);
      const double mlp_backward =
          2.0 / 3.0 * at(StepOpClass::expert_gemm).seconds() * attention_share;
      exchange.hidden_seconds = std::min(exchange.seconds() / 3.0, mlp_backward);
    }
  }
  const std::int64_t ep = input.expert_model_parallel_size;
  if (ep > 1 && f.moe_layers > 0) {
    // Dispatch and combine, forward and backward (and the recomputed forward): every routed
    // row of this rank's tokens (under TP its 1 / tp of them), fp32, (ep - 1) / ep of them to
    // other ranks.
    const double exchanges = 2.0 * (forwards + 1.0) * static_cast<double>(f.moe_layers);
    const double routed = tokens / static_cast<double>(input.tensor_model_parallel_size);
    const double row_bytes = routed * static_cast<double>(a.num_experts_per_tok) *
                             static_cast<double>(a.hidden_size) * 4.0;
    const double sent = row_bytes * static_cast<double>(ep - 1) / static_cast<double>(ep);
    StepOpRow& all_to_all = at(StepOpClass::ep_all_to_all);
    all_to_all = make.collective(exchanges * sent, ep, exchanges);
    // moe_shared_expert_overlap: each forward's dispatch travels beside the shared expert's
    // forward products (gate/up and down, 6 h I FLOPs a token).
    const double shared = static_cast<double>(a.shared_expert_intermediate_size);
    if (input.moe_shared_expert_overlap && shared > 0) {
      const double h = static_cast<double>(a.hidden_size);
      const double weight_bytes = bf16 ? 2.0 : 4.0;
      const StepOpRow shared_expert = make.kernel(
          6.0 * h * shared * tokens, matrix_peak, p.dense_gemm_efficiency,
          tokens * (2.0 * h + 3.0 * shared) * 4.0 + 3.0 * h * shared * weight_bytes, 0.0, 0.0, 3.0);
      const double dispatch = make.collective(sent, ep, 1.0).seconds();
      all_to_all.hidden_seconds = forwards * static_cast<double>(f.moe_layers) *
                                  std::min(dispatch, shared_expert.seconds());
    }
  }
}

// The TP group's collectives of one microbatch: around each column-parallel / row-parallel
// block (the token mixer and the MLP of every layer, the embedding and the LM head), fp32 rows
// of the residual stream, `tokens` of them. Forward: one all-reduce, or with sequence
// parallelism an all-gather and a reduce-scatter (the same bytes); backward: one all-reduce, or
// two all-gathers (the input again, and the output's gradient) and a reduce-scatter. A ring
// sends (tp - 1) / tp of the tensor per all-gather or reduce-scatter and twice that per
// all-reduce. Nothing of it overlaps compute.
StepOpRow tensor_parallel_row(const StepModelInput& input, const StepModelParameters& p,
                              double tokens, double forwards) {
  const std::int64_t tp = input.tensor_model_parallel_size;
  if (tp <= 1) return {};
  const double share = static_cast<double>(tp - 1) / static_cast<double>(tp);
  const double rows = tokens * static_cast<double>(input.architecture.hidden_size) * 4.0 * share;
  const double blocks = 2.0 * static_cast<double>(input.architecture.num_hidden_layers) + 2.0;
  const bool sp = input.sequence_parallel;
  const double bytes = blocks * (forwards * 2.0 * rows + (sp ? 3.0 : 2.0) * rows);
  const double collectives = blocks * (forwards * (sp ? 2.0 : 1.0) + (sp ? 3.0 : 1.0));
  return RowMaker(p).collective(bytes, tp, collectives);
}

// The rows of one microbatch.
std::vector<StepOpRow> bin_rows(const ModelledBin& bin, const StepModelInput& input,
                                const StepModelParameters& p, const Shape& shape) {
  const RowMaker make(p);
  const auto& a = rank_architecture(input);
  const bool bf16 = input.bf16;
  const double matrix_peak = bf16 ? p.bf16_flops_per_second : p.fp32_flops_per_second;
  const double again = input.recompute_full ? 4.0 / 3.0 : 1.0;  // the forward runs twice
  const double forwards = input.recompute_full ? 2.0 : 1.0;
  const double c = static_cast<double>(std::max<std::int64_t>(bin.group_size, 1));
  double bin_tokens = 0.0;
  for (const std::int64_t length : bin.lengths) bin_tokens += static_cast<double>(length);
  const double tokens = bin_tokens / c;  // this rank's share
  const auto& f = shape.flops;
  std::vector<StepOpRow> rows(static_cast<std::size_t>(StepOpClass::optimizer_gather) + 1);
  const auto at = [&](StepOpClass op) -> StepOpRow& { return rows[static_cast<std::size_t>(op)]; };

  // Products: launches are three per product (forward, input and weight gradient).
  at(StepOpClass::dense_gemm) =
      make.kernel(f.dense.flops_per_token * tokens * again, matrix_peak, p.dense_gemm_efficiency,
                  (f.dense.row_values_per_token * tokens * row_traffic(bf16) +
                   f.dense.weight_values * weight_traffic(bf16)) *
                      again,
                  0.0, 0.0, f.dense.products * 3.0 * again);
  const double expert_share = shape.local_experts / std::max<double>(a.num_experts, 1.0);
  // Under TP each rank routes 1 / tp of the tokens; with expert TP it then runs its columns of
  // every expert on all of its TP group's rows (its rank architecture's share), the same work.
  const double tp = static_cast<double>(input.tensor_model_parallel_size);
  const double expert_tokens = input.expert_tensor_parallel_size > 1 ? tokens : tokens / tp;
  at(StepOpClass::expert_gemm) = make.kernel(
      f.experts.flops_per_token * expert_tokens * again, matrix_peak, p.expert_gemm_efficiency,
      (f.experts.row_values_per_token * expert_tokens * row_traffic(bf16) +
       f.experts.weight_values * expert_share * weight_traffic(bf16)) *
          again,
      0.0, 0.0, f.experts.products * shape.local_experts * 3.0 * again);

  // Attention: the rank's 1 / c of each sequence's pairs (zigzag balances them); operand
  // traffic of q, k, v, out and their gradients; three launches per layer and exchange step.
  if (f.attention_layers > 0) {
    double attention_flops = 0.0;
    for (const std::int64_t length : bin.lengths)
      attention_flops += shape.unit_cost.attention_flops(length) / c;
    const double q = static_cast<double>(a.head_dim * a.num_attention_heads);
    const double kv = static_cast<double>(a.head_dim * a.num_key_value_heads);
    const double operand = bf16 ? 2.0 : 4.0;
    const double per_token = (q + 2.0 * kv) * (2.0 * operand + 4.0) + q * (8.0 + operand) +
                             (bf16 ? 6.0 * (2.0 * q + 2.0 * kv) : 0.0);
    const double layers = static_cast<double>(f.attention_layers);
    const double steps_per_layer =
        input.cp_comm_type == config::CpCommType::p2p && bin.group_size > 1 ? c : 1.0;
    at(StepOpClass::attention) = make.kernel(
        attention_flops * again, matrix_peak, p.attention_efficiency,
        per_token * tokens * layers * again, 0.0, 0.0, 3.0 * steps_per_layer * layers * again);
  }

  // Gated DeltaNet: the model's conv + delta-rule FLOPs; the serial chain of the kernel design.
  if (f.linear_attention_layers > 0) {
    const DeltaNetWork work = deltanet_work(bin, input);
    const double layers = static_cast<double>(f.linear_attention_layers);
    const double qk = static_cast<double>(a.linear_num_key_heads * a.linear_key_head_dim);
    const double v = static_cast<double>(a.linear_num_value_heads * a.linear_value_head_dim);
    const double heads = static_cast<double>(a.linear_num_value_heads);
    const double state = static_cast<double>(a.linear_key_head_dim * a.linear_value_head_dim);
    // q, k, v, g, beta and out in fp32: read and written forward, and again with their
    // gradients backward; chunk-boundary states (one per 64 tokens) saved and read back.
    const double io = (2.0 * qk + 2.0 * v + 2.0 * heads) * 4.0 * 3.0 +
                      heads * state * 4.0 * 2.0 / static_cast<double>(kDeltaNetChunkTokens);
    double longest = 0.0, longest_chunks = 0.0;
    for (const std::int64_t length : work.segment_lengths) {
      longest = std::max(longest, static_cast<double>(length));
      longest_chunks = std::max(
          longest_chunks,
          std::ceil(static_cast<double>(length) / static_cast<double>(kDeltaNetChunkTokens)));
    }
    const double flops = f.deltanet_flops_per_token * tokens * again;
    if (p.deltanet_kernel == config::DeltaNetKernel::token_by_token) {
      // One block per (segment, head) forward; the backward's 64 blocks walk their items in
      // turn and keep every token's state and state gradient in scratch (4 passes of dk x dv).
      const double depth = forwards * longest +
                           kTokenByTokenBackwardStepsPerToken * token_by_token_backward_depth(work);
      const double scratch = tokens * heads * state * 4.0 * 4.0;
      at(StepOpClass::deltanet) =
          make.kernel(flops, p.fp32_flops_per_second, p.deltanet_efficiency,
                      (io * tokens * again + scratch) * layers, depth * layers,
                      p.deltanet_token_step_seconds, (forwards + 3.0) * layers);
    } else {
      // Chunked (WY): intra-chunk products on tensor cores in parallel; the state recurrence
      // over chunks is serial, once forward and twice backward (states recomputed, then dh).
      const double depth = (forwards + 2.0) * longest_chunks;
      at(StepOpClass::deltanet) = make.kernel(
          flops, matrix_peak, p.deltanet_efficiency, io * tokens * layers * again, depth * layers,
          p.deltanet_chunk_step_seconds, (5.0 * forwards + 8.0) * layers);
    }
  }

  // The fused LM head + cross-entropy (not recomputed): fp32 logits written and read, bf16
  // dlogits written and read, per token chunk; the LM head's weight as a product's.
  const double vocabulary = static_cast<double>(a.vocab_size);
  at(StepOpClass::cross_entropy) =
      make.kernel(f.logits.flops_per_token * tokens, matrix_peak, p.cross_entropy_efficiency,
                  tokens * (vocabulary * (bf16 ? 12.0 : 16.0) +
                            static_cast<double>(a.hidden_size) * row_traffic(bf16)) +
                      f.logits.weight_values * weight_traffic(bf16),
                  0.0, 0.0, 4.0);

  // Element-wise kernels, and under bf16_mixed the operand copies' launches (their bytes are
  // charged to the products): five per product (x and w forward; dy, x and w backward).
  const double conversions =
      bf16 ? 5.0 * (f.dense.products + f.experts.products + f.logits.products) : 0.0;
  // (Sequence parallelism splits the residual stream's rows, and so its element-wise work.)
  const double elementwise_tokens = input.sequence_parallel ? tokens / tp : tokens;
  at(StepOpClass::elementwise) =
      make.kernel(0.0, p.fp32_flops_per_second, 1.0,
                  shape.elementwise.values_per_token * elementwise_tokens * 4.0 * again, 0.0, 0.0,
                  (shape.elementwise.launches + conversions) * again);

  add_communication_rows(rows, bin, input, p, shape, tokens, bin_tokens, forwards);
  at(StepOpClass::tensor_parallel) = tensor_parallel_row(input, p, tokens, forwards);
  return rows;
}

}  // namespace

StepModelParameters step_model_parameters(const config::PackingCostConfig& section) {
  StepModelParameters p;
  p.deltanet_kernel = section.step_model_deltanet_kernel;
  p.bf16_flops_per_second = section.step_model_bf16_flops_per_second;
  p.fp32_flops_per_second = section.step_model_fp32_flops_per_second;
  p.memory_bytes_per_second = section.step_model_memory_bytes_per_second;
  p.launch_latency_seconds = section.step_model_launch_latency_seconds;
  p.dense_gemm_efficiency = section.step_model_dense_gemm_efficiency;
  p.expert_gemm_efficiency = section.step_model_expert_gemm_efficiency;
  p.attention_efficiency = section.step_model_attention_efficiency;
  p.deltanet_efficiency = section.step_model_deltanet_efficiency;
  p.cross_entropy_efficiency = section.step_model_cross_entropy_efficiency;
  p.memory_efficiency = section.step_model_memory_efficiency;
  p.deltanet_token_step_seconds = section.step_model_deltanet_token_step_seconds;
  p.deltanet_chunk_step_seconds = section.step_model_deltanet_chunk_step_seconds;
  p.link_bytes_per_second = section.link_bytes_per_second;
  p.collective_latency_seconds = section.collective_latency_seconds;
  const CostModelParameters cost;
  p.network_bytes_per_second = cost.network_bytes_per_second;
  p.ranks_per_node = cost.ranks_per_node;
  return p;
}

const char* step_op_class_name(StepOpClass op) {
  switch (op) {
    case StepOpClass::dense_gemm:
      return "dense GEMMs";
    case StepOpClass::expert_gemm:
      return "expert GEMMs";
    case StepOpClass::attention:
      return "attention";
    case StepOpClass::deltanet:
      return "Gated DeltaNet";
    case StepOpClass::cross_entropy:
      return "LM head + CE";
    case StepOpClass::elementwise:
      return "element-wise";
    case StepOpClass::optimizer:
      return "optimizer";
    case StepOpClass::cp_exchange:
      return "CP exchange";
    case StepOpClass::ep_all_to_all:
      return "EP all-to-all";
    case StepOpClass::tensor_parallel:
      return "TP collectives";
    case StepOpClass::gradient_reduce:
      return "gradient reduce";
    case StepOpClass::optimizer_gather:
      return "param all-gather";
  }
  return "?";
}

bool is_communication(StepOpClass op) {
  return op == StepOpClass::cp_exchange || op == StepOpClass::ep_all_to_all ||
         op == StepOpClass::tensor_parallel || op == StepOpClass::gradient_reduce ||
         op == StepOpClass::optimizer_gather;
}

double StepOpRow::seconds() const {
  return std::max(compute_seconds, memory_seconds) + latency_seconds;
}

const char* StepOpRow::bound() const {
  if (latency_seconds > std::max(compute_seconds, memory_seconds)) return "serial";
  if (is_communication(op)) return "link";
  return compute_seconds >= memory_seconds ? "FLOPs" : "bytes";
}

const StepOpRow& StepModel::row(StepOpClass op) const {
  return rows[static_cast<std::size_t>(op)];
}

StepModel model_step(const StepModelInput& input, const StepModelParameters& p) {
  const Shape shape = shape_of(input);
  const RowMaker make(p);
  StepModel model;
  model.deltanet_kernel = p.deltanet_kernel;
  model.microbatches = static_cast<std::int64_t>(input.bins.size());
  model.ranks = std::max<std::int64_t>(input.pool_size, 1) *
                std::max<std::int64_t>(input.tensor_model_parallel_size, 1);
  model.rows.resize(static_cast<std::size_t>(StepOpClass::optimizer_gather) + 1);
  for (std::size_t i = 0; i < model.rows.size(); ++i)
    model.rows[i].op = static_cast<StepOpClass>(i);
  double first_bin_compute = -1.0, last_bin_compute = 0.0;
  for (const ModelledBin& bin : input.bins) {
    const std::vector<StepOpRow> rows = bin_rows(bin, input, p, shape);
    for (std::size_t i = 0; i < rows.size(); ++i) add(model.rows[i], rows[i]);
    last_bin_compute = 0.0;
    for (std::size_t i = 0; i < rows.size(); ++i) {  // bin_rows leaves .op unset: by index
      const auto op = static_cast<StepOpClass>(i);
      if (!is_communication(op) && op != StepOpClass::optimizer)
        last_bin_compute += rows[i].seconds();
    }
    if (first_bin_compute < 0) first_bin_compute = last_bin_compute;
  }

  // Once per step. Dense gradients over the pool, expert gradients over the expert-data-
  // parallel group (fp32): reduce-scattered under the distributed optimizer (which then
  // all-gathers the fp32 parameters), all-reduced otherwise.
  const std::int64_t pool = std::max<std::int64_t>(input.pool_size, 1);
  const std::int64_t expert_dp =
      std::max<std::int64_t>(pool / std::max<std::int64_t>(input.expert_model_parallel_size, 1), 1);
  const auto share = [](std::int64_t ranks) {
    return static_cast<double>(ranks - 1) / static_cast<double>(ranks);
  };
  const double dense = static_cast<double>(input.dense_parameters);
  const double experts = static_cast<double>(input.expert_parameters);
  const double passes = input.distributed_optimizer ? 1.0 : 2.0;
  const double reduce_bytes = passes * 4.0 * (dense * share(pool) + experts * share(expert_dp));
  const double reductions = (pool > 1 ? 1.0 : 0.0) + (expert_dp > 1 && experts > 0 ? 1.0 : 0.0);
  if (reductions > 0) {
    StepOpRow& reduce = model.rows[static_cast<std::size_t>(StepOpClass::gradient_reduce)];
    add(reduce, make.collective(reduce_bytes, pool, reductions));
    if (input.distributed_optimizer) {
      add(model.rows[static_cast<std::size_t>(StepOpClass::optimizer_gather)],
          make.collective(reduce_bytes, pool, reductions));
    }
  }
  // AdamW over the values this rank updates: parameter and gradient read, moments read and
  // written, parameter written, and the gradient norm's read.
  const double owned = input.distributed_optimizer ? dense / static_cast<double>(pool) +
                                                         experts / static_cast<double>(expert_dp)
                                                   : dense + experts;
  add(model.rows[static_cast<std::size_t>(StepOpClass::optimizer)],
      make.kernel(0.0, p.fp32_flops_per_second, 1.0, owned * (16.0 + 2.0 * input.moment_bytes), 0.0,
                  0.0, 4.0));
  // Overlapped gradient buckets run beside the last microbatch's backward (twice the forward's
  // FLOPs: 2/3 of its compute); the embedding's bucket is final only when that backward ends.
  // The overlapped parameter gather runs beside the first microbatch's forward (1/3 of its
  // compute); the embedding's bucket is the one that forward needs first.
  const double embedding = static_cast<double>(rank_architecture(input).vocab_size) *
                           static_cast<double>(input.architecture.hidden_size);
  const double weighted_total = dense * share(pool) + experts * share(expert_dp);
  const double embedding_share =
      weighted_total > 0 ? std::min(1.0, embedding * share(pool) / weighted_total) : 0.0;
  StepOpRow& reduce = model.rows[static_cast<std::size_t>(StepOpClass::gradient_reduce)];
  if (input.overlap_grad_reduce && reduce.seconds() > 0) {
    model.gradient_overlap_window_seconds = 2.0 / 3.0 * last_bin_compute;
    model.gradient_last_bucket_seconds = embedding_share * reduce.seconds();
    reduce.hidden_seconds =
        std::max(0.0, std::min(reduce.seconds() - model.gradient_last_bucket_seconds,
                               model.gradient_overlap_window_seconds));
  }
  StepOpRow& gather = model.rows[static_cast<std::size_t>(StepOpClass::optimizer_gather)];
  if (input.overlap_param_gather && input.distributed_optimizer && gather.seconds() > 0) {
    model.gather_overlap_window_seconds = std::max(first_bin_compute, 0.0) / 3.0;
    model.gather_first_bucket_seconds = embedding_share * gather.seconds();
    gather.hidden_seconds =
        std::max(0.0, std::min(gather.seconds() - model.gather_first_bucket_seconds,
                               model.gather_overlap_window_seconds));
  }
  for (auto& row : model.rows) {
    model.step_seconds += row.exposed_seconds();
  }
  if (model.step_seconds > 0) {
    const double ranks = static_cast<double>(model.ranks);
    model.tokens_per_second = static_cast<double>(input.step_real_tokens) / model.step_seconds;
    model.model_flops_per_second_per_rank = input.step_model_flops / model.step_seconds / ranks;
    model.mfu = model.model_flops_per_second_per_rank / p.bf16_flops_per_second;
    model.mfu_of_datasheet =
        model.model_flops_per_second_per_rank / kH200DatasheetBf16FlopsPerSecond;
  }
  return model;
}

}  // namespace dyncp::packing
