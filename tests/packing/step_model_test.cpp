#include "packing/step_model.hpp"

#include <catch2/catch.hpp>
#include <cmath>

using namespace dyncp::packing;
using dyncp::config::DeltaNetKernel;

namespace {

// Qwen3.5-35B-A3B's text model (configs/qwen3_5_35b_a3b_dynamic_cp.yaml).
dyncp::config::ModelArchitecture qwen3_5_architecture() {
  dyncp::config::ModelArchitecture a;
  a.model_type = "qwen3_5_moe_text";
  a.vocab_size = 248320;
  a.hidden_size = 2048;
  a.num_hidden_layers = 40;
  a.full_attention_interval = 4;
  a.num_attention_heads = 16;
  a.num_key_value_heads = 2;
  a.head_dim = 256;
  a.num_experts = 256;
  a.num_experts_per_tok = 8;
  a.moe_intermediate_size = 512;
  a.shared_expert_intermediate_size = 512;
  a.linear_num_key_heads = 16;
  a.linear_num_value_heads = 32;
  a.linear_key_head_dim = 128;
  a.linear_value_head_dim = 128;
  a.linear_conv_kernel_dim = 4;
  a.resolve();
  return a;
}

StepModelInput one_bin(dyncp::config::ModelArchitecture a, std::int64_t group,
                       std::vector<std::int64_t> lengths) {
  StepModelInput input;
  input.architecture = a;
  input.bins.push_back({group, std::move(lengths)});
  return input;
}

double sum_of_rows(const StepModel& model) {
  double total = 0;
  for (const auto& row : model.rows) total += row.seconds();
  return total;
}

}  // namespace

TEST_CASE("the breakdown is the cost model's FLOP formula, split by kernel class", "[packing]") {
  for (const auto& a : {qwen3_30b_a3b_architecture(), qwen3_5_architecture()}) {
    const ModelFlopsBreakdown flops = model_flops_breakdown(a);
    const ModelCost cost = model_cost_from_architecture(a);
    CHECK(flops.linear_flops_per_token() == cost.linear_flops_per_token);
    CHECK(flops.attention_flops_per_token_squared == cost.attention_flops_per_token_squared);
    CHECK(flops.experts.flops_per_token > 0);
    // A product's weight is in x out: 6 x weights x rows per token = its FLOPs per token.
    CHECK(flops.logits.weight_values * 6.0 == flops.logits.flops_per_token);
  }
  const ModelFlopsBreakdown qwen3 = model_flops_breakdown(qwen3_30b_a3b_architecture());
  CHECK(qwen3.deltanet_flops_per_token == 0);
  CHECK(qwen3.experts.flops_per_token == Approx(48 * 6.0 * 2048 * 768 * 3 * 8));
  CHECK(qwen3.experts.weight_values == Approx(48 * 128 * 2048.0 * 768 * 3));
  const ModelFlopsBreakdown hybrid = model_flops_breakdown(qwen3_5_architecture());
  CHECK(hybrid.linear_attention_layers == 30);
  CHECK(hybrid.attention_layers == 10);
}

TEST_CASE("the modelled step's FLOPs are the model FLOPs of its bins", "[packing]") {
  // No recomputation: every compute class together runs exactly Megatron's count, 1 / c of it
  // on each rank of a group of c.
  const auto a = qwen3_5_architecture();
  const CostModel cost(model_cost_from_architecture(a), {});
  const StepModel model = model_step(one_bin(a, 2, {8192, 4096}), {});
  double flops = 0;
  for (const auto& row : model.rows) flops += row.flops;
  CHECK(flops == Approx((cost.sequence_flops(8192) + cost.sequence_flops(4096)) / 2));
  // Full recomputation runs each layer's forward again: 4/3 of every class but the LM head.
  StepModelInput input = one_bin(a, 2, {8192, 4096});
  input.recompute_full = true;
  const StepModel again = model_step(input, {});
  CHECK(again.row(StepOpClass::dense_gemm).flops ==
        Approx(model.row(StepOpClass::dense_gemm).flops * 4.0 / 3.0));
  CHECK(again.row(StepOpClass::cross_entropy).flops == model.row(StepOpClass::cross_entropy).flops);
}

TEST_CASE("a GEMM-bound class is roofline-bound on FLOPs, a memory-bound one on bytes",
          "[packing]") {
  const StepModelParameters p;
  const StepModel model = model_step(one_bin(qwen3_30b_a3b_architecture(), 1, {8192}), p);
  const StepOpRow& dense = model.row(StepOpClass::dense_gemm);
  CHECK(std::string(dense.bound()) == "FLOPs");
  CHECK(dense.compute_seconds ==
        Approx(dense.flops / (p.bf16_flops_per_second * p.dense_gemm_efficiency)));
  CHECK(dense.compute_seconds > dense.memory_seconds);
  CHECK(dense.seconds() == Approx(dense.compute_seconds + dense.latency_seconds));
  const StepOpRow& elementwise = model.row(StepOpClass::elementwise);
  CHECK(elementwise.flops == 0);
  CHECK(std::string(elementwise.bound()) == "bytes");
  CHECK(elementwise.memory_seconds ==
        Approx(elementwise.bytes / (p.memory_bytes_per_second * p.memory_efficiency)));
  CHECK(elementwise.seconds() == Approx(elementwise.memory_seconds + elementwise.latency_seconds));
  // fp32 products run at the fp32 peak.
  StepModelInput fp32 = one_bin(qwen3_30b_a3b_architecture(), 1, {8192});
  fp32.bf16 = false;
  const StepModel fp32_model = model_step(fp32, p);
  const StepOpRow& slow = fp32_model.row(StepOpClass::dense_gemm);
  CHECK(slow.compute_seconds ==
        Approx(slow.flops / (p.fp32_flops_per_second * p.dense_gemm_efficiency)));
}

TEST_CASE("the latency term scales with the serial depth of the kernel design", "[packing]") {
  const auto a = qwen3_5_architecture();
  StepModelParameters token;
  token.deltanet_kernel = DeltaNetKernel::token_by_token;
  StepModelParameters chunked;
  chunked.deltanet_kernel = DeltaNetKernel::chunked;
  const auto gdn = [&](std::vector<std::int64_t> lengths, const StepModelParameters& p) {
    return model_step(one_bin(a, 1, std::move(lengths)), p).row(StepOpClass::deltanet);
  };
  // Token by token: one sequence of L over 32 heads, 32 <= 64 backward blocks: the forward
  // walks L tokens and the backward 4 L, on each of the 30 layers.
  const StepOpRow one = gdn({4096}, token);
  CHECK(one.serial_steps == Approx(30.0 * (4096 + 4 * 4096)));
  CHECK(one.latency_seconds == Approx(one.serial_steps * token.deltanet_token_step_seconds +
                                      one.launches * token.launch_latency_seconds));
  CHECK(gdn({8192}, token).serial_steps == Approx(2 * one.serial_steps));
  // Four sequences: 128 (sequence, head) items on 64 blocks, two each, so the backward's
  // depth doubles while the forward's stays one sequence long.
  CHECK(gdn({4096, 4096, 4096, 4096}, token).serial_steps == Approx(30.0 * (4096 + 4 * 2 * 4096)));
  // Chunked: ceil(L / 64) chunk steps, once forward and twice backward.
  const StepOpRow chunks = gdn({4096}, chunked);
  CHECK(chunks.serial_steps == Approx(30.0 * 3 * 64));
  CHECK(gdn({4097}, chunked).serial_steps == Approx(30.0 * 3 * 65));
  CHECK(chunks.latency_seconds == Approx(chunks.serial_steps * chunked.deltanet_chunk_step_seconds +
                                         chunks.launches * chunked.launch_latency_seconds));
  // Under CP (all-gather exchange) a rank runs two zigzag pieces of L / 2c.
  CHECK(model_step(one_bin(a, 4, {32768}), chunked).row(StepOpClass::deltanet).serial_steps ==
        Approx(30.0 * 3 * (4096 / 64)));
  // The same FLOPs either way; the token-by-token one is slower.
  CHECK(one.flops == chunks.flops);
  CHECK(one.seconds() > 10 * chunks.seconds());
}

TEST_CASE("the totals add up", "[packing]") {
  StepModelInput input = one_bin(qwen3_5_architecture(), 4, {32768});
  input.bins.push_back({2, {16384, 8192}});
  input.pool_size = 8;
  input.expert_model_parallel_size = 8;
  input.dense_parameters = 1'000'000'000;
  input.expert_parameters = 4'000'000'000;
  input.distributed_optimizer = true;
  input.step_real_tokens = 65536;
  input.step_model_flops = 1e15;
  const StepModelParameters p;
  const StepModel model = model_step(input, p);
  CHECK(model.microbatches == 2);
  // Less the CP all-gather's backward gather, hidden behind the MLP backward.
  CHECK(model.step_seconds ==
        Approx(sum_of_rows(model) - model.row(StepOpClass::cp_exchange).hidden_seconds));
  CHECK(model.tokens_per_second == Approx(65536 / model.step_seconds));
  CHECK(model.mfu == Approx(1e15 / model.step_seconds / 8 / p.bf16_flops_per_second));
  CHECK(model.mfu_of_datasheet == Approx(model.mfu * p.bf16_flops_per_second / 989e12));
  // Every communication is there: CP (groups of 4 and 2), EP, gradients and the gather.
  for (const auto op : {StepOpClass::cp_exchange, StepOpClass::ep_all_to_all,
                        StepOpClass::gradient_reduce, StepOpClass::optimizer_gather}) {
    CHECK(model.row(op).bytes > 0);
    CHECK(std::string(model.row(op).bound()) != "FLOPs");
  }
  // The bins add: the model of both is the rows of each, summed.
  const StepModel first = model_step(one_bin(input.architecture, 4, {32768}), p);
  StepModelInput second_input = one_bin(input.architecture, 2, {16384, 8192});
  const StepModel second = model_step(second_input, p);
  CHECK(model.row(StepOpClass::attention).seconds() ==
        Approx(first.row(StepOpClass::attention).seconds() +
               second.row(StepOpClass::attention).seconds()));
  // Distributed optimizer: reduce-scatter (n - 1) / n of the fp32 gradients over 8 ranks;
  // without it an all-reduce moves twice as much and there is no gather.
  CHECK(model.row(StepOpClass::gradient_reduce).bytes == Approx(4.0 * 1e9 * 7 / 8));
  input.distributed_optimizer = false;
  const StepModel replicated = model_step(input, p);
  CHECK(replicated.row(StepOpClass::gradient_reduce).bytes == Approx(2 * 4.0 * 1e9 * 7 / 8));
  CHECK(replicated.row(StepOpClass::optimizer_gather).bytes == 0);
}

TEST_CASE("the CP exchange row is the cost model's exchange", "[packing]") {
  const auto a = qwen3_5_architecture();
  StepModelParameters p;
  p.collective_latency_seconds = 1e-5;
  p.link_bytes_per_second = 2e11;
  CostModelParameters cost_parameters;
  cost_parameters.collective_latency_seconds = 1e-5;
  cost_parameters.link_bytes_per_second = 2e11;
  const CostModel cost(model_cost_from_architecture(a), cost_parameters);
  const StepOpRow row = model_step(one_bin(a, 4, {32768}), p).row(StepOpClass::cp_exchange);
  CHECK(row.seconds() == Approx(cost.communication_seconds(32768, 4, 1)));
  CHECK(row.memory_seconds == Approx(cost.transfer_seconds(32768, 4, 1)));
}

TEST_CASE("an override of the table changes the modelled step", "[packing]") {
  dyncp::config::PackingCostConfig section;
  const StepModelParameters defaults = step_model_parameters(section);
  CHECK(defaults.bf16_flops_per_second == StepModelParameters{}.bf16_flops_per_second);
  CHECK(defaults.deltanet_kernel == DeltaNetKernel::chunked);
  const StepModelInput input = one_bin(qwen3_5_architecture(), 1, {8192});
  const StepModel before = model_step(input, defaults);

  section.step_model_dense_gemm_efficiency = defaults.dense_gemm_efficiency / 2;
  section.step_model_deltanet_kernel = DeltaNetKernel::token_by_token;
  section.step_model_launch_latency_seconds = 2 * defaults.launch_latency_seconds;
  section.link_bytes_per_second = 1e11;
  const StepModelParameters changed = step_model_parameters(section);
  CHECK(changed.link_bytes_per_second == 1e11);
  const StepModel after = model_step(input, changed);
  CHECK(after.row(StepOpClass::dense_gemm).compute_seconds ==
        Approx(2 * before.row(StepOpClass::dense_gemm).compute_seconds));
  CHECK(after.row(StepOpClass::elementwise).latency_seconds ==
        Approx(2 * before.row(StepOpClass::elementwise).latency_seconds));
  CHECK(after.deltanet_kernel == DeltaNetKernel::token_by_token);
  CHECK(after.row(StepOpClass::deltanet).serial_steps >
        before.row(StepOpClass::deltanet).serial_steps);
  CHECK(after.step_seconds > before.step_seconds);
  // The printed table follows.
  CHECK(format_step_model(after, changed) != format_step_model(before, defaults));
}

TEST_CASE("the table prints every class and the totals", "[packing]") {
  StepModelInput input = one_bin(qwen3_5_architecture(), 4, {32768});
  input.pool_size = 8;
  input.step_real_tokens = 32768;
  input.step_model_flops = 1e15;
  const StepModelParameters p;
  const std::string text = format_step_model(model_step(input, p), p);
  for (const char* name :
       {"dense GEMMs", "expert GEMMs", "attention", "Gated DeltaNet", "LM head + CE",
        "element-wise", "optimizer", "CP exchange", "EP all-to-all", "TP collectives",
        "gradient reduce", "param all-gather", "modelled step:", "modelled MFU:", "tokens/s"})
    CHECK(text.find(name) != std::string::npos);
}

TEST_CASE("tensor parallelism prices its collectives and divides each device's work", "[packing]") {
  const auto a = qwen3_5_architecture();
  StepModelInput input = one_bin(a, 2, {16384});
  input.pool_size = 4;
  input.expert_model_parallel_size = 4;
  const StepModelParameters p;
  const StepModel alone = model_step(input, p);
  CHECK(alone.row(StepOpClass::tensor_parallel).seconds() == 0);
  CHECK(alone.ranks == 4);

  StepModelInput tp = input;
  tp.tensor_model_parallel_size = 2;
  {
    auto rank = a;
    rank.num_attention_heads /= 2;
    rank.num_key_value_heads /= 2;
    rank.linear_num_key_heads /= 2;
    rank.linear_num_value_heads /= 2;
    rank.shared_expert_intermediate_size /= 2;
    rank.vocab_size /= 2;
    tp.rank_architecture = rank;
  }
  const StepModel split = model_step(tp, p);
  CHECK(split.ranks == 8);
  const StepOpRow& collectives = split.row(StepOpClass::tensor_parallel);
  CHECK(collectives.seconds() > 0);
  CHECK(collectives.hidden_seconds == 0);
  // Without expert TP each device routes half the tokens through whole experts.
  CHECK(split.row(StepOpClass::expert_gemm).flops ==
        Approx(alone.row(StepOpClass::expert_gemm).flops / 2));
  CHECK(split.row(StepOpClass::ep_all_to_all).bytes ==
        Approx(alone.row(StepOpClass::ep_all_to_all).bytes / 2));
  CHECK(split.row(StepOpClass::attention).flops < alone.row(StepOpClass::attention).flops);
  // (Its element-wise work shrinks only with its heads: every device holds every token's row.)
  CHECK(split.row(StepOpClass::elementwise).bytes < alone.row(StepOpClass::elementwise).bytes);

  // Sequence parallelism: the same forward bytes, one more gather backward (5 / 4 the bytes
  // without recomputation), and half the element-wise traffic.
  StepModelInput sp = tp;
  sp.sequence_parallel = true;
  const StepModel sequence = model_step(sp, p);
  CHECK(sequence.row(StepOpClass::tensor_parallel).bytes == Approx(collectives.bytes * 5 / 4));
  CHECK(sequence.row(StepOpClass::elementwise).bytes ==
        Approx(split.row(StepOpClass::elementwise).bytes / 2));
}

TEST_CASE("overlapped collectives hide at most the compute they run beside", "[packing]") {
  StepModelInput input = one_bin(qwen3_5_architecture(), 4, {32768});
  input.bins.push_back({2, {16384, 8192}});
  input.pool_size = 8;
  input.expert_model_parallel_size = 8;
  input.dense_parameters = 1'000'000'000;
  input.expert_parameters = 4'000'000'000;
  const StepModelParameters p;
  const StepModel waited = model_step(input, p);
  // With no overlap key only the CP all-gather's backward gather (started before the layer's
  // MLP backward) hides, at most a third of the exchange.
  const StepOpRow& exchange = waited.row(StepOpClass::cp_exchange);
  CHECK(exchange.hidden_seconds > 0);
  CHECK(exchange.hidden_seconds <= exchange.seconds() / 3.0 * (1 + 1e-12));
  for (const auto& row : waited.rows)
    if (row.op != StepOpClass::cp_exchange) CHECK(row.hidden_seconds == 0);
  CHECK(waited.step_seconds == Approx(sum_of_rows(waited) - exchange.hidden_seconds));
  StepModelInput ring = input;
  ring.cp_comm_type = dyncp::config::CpCommType::p2p;
  CHECK(model_step(ring, p).row(StepOpClass::cp_exchange).hidden_seconds == 0);

  input.overlap_grad_reduce = true;
  const StepModel overlapped = model_step(input, p);
  const StepOpRow& reduce = overlapped.row(StepOpClass::gradient_reduce);
  CHECK(reduce.seconds() == Approx(waited.row(StepOpClass::gradient_reduce).seconds()));
  CHECK(reduce.hidden_seconds > 0);
  // The window: 2/3 of the last bin's compute (its backward).
  StepModelInput last = input;
  last.bins = {{2, {16384, 8192}}};
  const StepModel last_bin = model_step(last, p);
  double last_compute = 0;
  for (const auto& row : last_bin.rows)
    if (!is_communication(row.op) && row.op != StepOpClass::optimizer)
      last_compute += row.seconds();
  CHECK(overlapped.gradient_overlap_window_seconds == Approx(2.0 / 3.0 * last_compute));
  CHECK(reduce.hidden_seconds <= overlapped.gradient_overlap_window_seconds * (1 + 1e-12));
  // The embedding's bucket is final only at the end of the backward: it stays exposed.
  CHECK(overlapped.gradient_last_bucket_seconds > 0);
  CHECK(reduce.exposed_seconds() >= overlapped.gradient_last_bucket_seconds * (1 - 1e-12));
  // Nothing else changes, and the step is shorter by exactly what the reduction hides.
  for (const auto& row : overlapped.rows)
    if (row.op != StepOpClass::gradient_reduce)
      CHECK(row.hidden_seconds == waited.row(row.op).hidden_seconds);
  CHECK(overlapped.step_seconds == Approx(waited.step_seconds - reduce.hidden_seconds));

  // A short backward beside a large reduction: the hidden part is the window, not the whole
  // reduction.
  StepModelInput short_backward = input;
  short_backward.bins = {{1, {256}}};
  short_backward.dense_parameters = 20'000'000'000;
  const StepModel short_model = model_step(short_backward, p);
  const StepOpRow& short_reduce = short_model.row(StepOpClass::gradient_reduce);
  CHECK(short_reduce.hidden_seconds == Approx(short_model.gradient_overlap_window_seconds));
  CHECK(short_reduce.hidden_seconds <
        short_reduce.seconds() - short_model.gradient_last_bucket_seconds);

  // The distributed optimizer: its reduce to the owners hides as the all-reduce does; its
  // parameter gather only with overlap_param_gather, beside the first bin's forward (a third of
  // its compute), the embedding's bucket exposed.
  input.distributed_optimizer = true;
  const StepModel sharded = model_step(input, p);
  CHECK(sharded.row(StepOpClass::gradient_reduce).hidden_seconds > 0);
  CHECK(sharded.row(StepOpClass::optimizer_gather).seconds() > 0);
  CHECK(sharded.row(StepOpClass::optimizer_gather).hidden_seconds == 0);
  input.overlap_param_gather = true;
  const StepModel gathered = model_step(input, p);
  const StepOpRow& gather = gathered.row(StepOpClass::optimizer_gather);
  StepModelInput first = input;
  first.bins = {{4, {32768}}};
  double first_compute = 0;
  for (const auto& row : model_step(first, p).rows)
    if (!is_communication(row.op) && row.op != StepOpClass::optimizer)
      first_compute += row.seconds();
  CHECK(gathered.gather_overlap_window_seconds == Approx(first_compute / 3.0));
  CHECK(gather.hidden_seconds > 0);
  CHECK(gather.hidden_seconds <= gathered.gather_overlap_window_seconds * (1 + 1e-12));
  CHECK(gather.exposed_seconds() >= gathered.gather_first_bucket_seconds * (1 - 1e-12));
  CHECK(gathered.step_seconds == Approx(sharded.step_seconds - gather.hidden_seconds));

  // The shared expert beside the dispatch: at most the forward's dispatches (a quarter of the
  // exchanges without recomputation), at most the shared expert's products.
  input.moe_shared_expert_overlap = true;
  const StepModel shared = model_step(input, p);
  const StepOpRow& all_to_all = shared.row(StepOpClass::ep_all_to_all);
  CHECK(gathered.row(StepOpClass::ep_all_to_all).hidden_seconds == 0);
  CHECK(all_to_all.hidden_seconds > 0);
  CHECK(all_to_all.hidden_seconds <= all_to_all.seconds() / 4.0 * (1 + 1e-12));
  CHECK(shared.step_seconds == Approx(gathered.step_seconds - all_to_all.hidden_seconds));
  StepModelInput no_shared = input;
  no_shared.architecture.shared_expert_intermediate_size = 0;
  CHECK(model_step(no_shared, p).row(StepOpClass::ep_all_to_all).hidden_seconds == 0);

  // The table lists every collective with its hidden part.
  const std::string text = format_step_model(shared, p);
  for (const char* name : {"CP exchange", "EP all-to-all", "gradient reduce", "param all-gather"})
    CHECK(text.find(std::string("overlap:     ") + name) != std::string::npos);
  CHECK(text.find("hidden behind compute") != std::string::npos);
}
