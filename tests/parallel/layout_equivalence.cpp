// The invariant behind dynamic CP: one global batch gives the same loss and gradients on every
// layout. Run under mpirun with the layout on the command line; every rank also computes the
// one-rank reference in-process (same seeded weights, whole sequences in one bin, local seams)
// and compares its own gradient ranges with it.
//
//   mpirun -np 4 layout_equivalence --cp 2 --dynamic 1 --ep 2 --scheduler default_dynamic_cp
//
// Checks, each reported as passed/failed: loss, aux loss, every owned gradient range
// (||ours - ref|| / ||ref|| <= 1e-5), and that work is divided: over the pool every query row
// was processed exactly once per layer (no rank recomputed another's share). Under EP each
// rank holds only its experts (dense parameters + experts / ep, seeded like the reference's
// experts there); the reference's buffers are compared through the tensors of the same names.
//
// With --window W the model has sliding-window attention (every exchange masks its keys by
// global position; the ring skips blocks no query's window reaches), and the reference without
// the window must give another loss, so the window is known to matter for the batch.
// With --rope-dynamic C the model has dynamic NTK RoPE (factor 4) over a context of C: each
// sequence longer than C is rotated with its own frequencies, which every rank of its CP group
// must derive from the whole sequence's length, not from the shard it holds; the reference
// with default RoPE must give another loss.
//
// With --device cuda (the layout_equivalence_emulated build) the layout under test runs on the
// emulated GPU: parameters, gradients, moments and activations in device memory, kernels,
// tensors over NCCL (emulated over MPI) and host metadata over MPI, against the same CPU
// reference.
//
// With --pp P (and --vpp V) the world is P pipeline stages of dp x cp ranks: each rank holds
// only its stage's layers (Megatron's split of --layers N layers over P x V virtual stages),
// the microbatches run the 1F1B (or interleaved) schedule with activations and gradients
// passed between stages, and every check above holds per stage (gradients of the tensors this
// rank holds, compared by name). --step-tolerance T then also compares the loss and the whole
// model's gradient (every stage's, every rank's own part once) with the reference at every
// optimizer step, relative difference <= T, each step at the same weights: after both optimizers
// step, the layout takes the reference's new values (AdamW turns round-off in near-zero
// gradients into lr-sized moves, which separate two trajectories by more than the round-off of
// any one gradient, on every layout alike).
//
// With --distributed-optimizer 1 the gradients are reduce-scattered: each rank checks its own
// pieces (relative to the reference range's norm), holds optimizer state for only its
// 1/shards of the elements (rounded up), and the moments gathered for a checkpoint match the
// reference optimizer's and survive a reload.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "../model/tiny_architectures.hpp"
#include "config/pipeline_split.hpp"
#include "core/device_memory.hpp"
#include "core/error.hpp"
#include "core/rng.hpp"
#include "data/sample.hpp"
#include "dist/abort.hpp"
#include "dist/launch_env.hpp"
#include "dist/mpi_comm.hpp"
#include "dist/parallel_layout.hpp"
#include "dist/parallel_state.hpp"
#include "model/local_seams.hpp"
#include "model/qwen3_moe_model.hpp"
#include "packing/alignment.hpp"
#include "parallel/expert_gather.hpp"
#include "parallel/pipeline_stage.hpp"
#include "train/optimizer.hpp"
#include "train/step_engine.hpp"
#ifdef DYNCP_EQUIVALENCE_ON_CUDA
#include "dist/nccl_comm.hpp"
#include "dist/routed_comm.hpp"
#include "ops/cuda/cuda_backend.hpp"
#endif

using namespace dyncp;

namespace {

// Short and long sequences mixed, fixed token ids, loss on every next token.
class FixedSource final : public data::SampleSource {
 public:
  FixedSource(std::vector<std::int64_t> lengths, std::int64_t vocab)
      : lengths_(std::move(lengths)) {
    for (std::size_t i = 0; i < lengths_.size(); ++i) {
      std::vector<std::int32_t> tokens(static_cast<std::size_t>(lengths_[i]));
      core::Rng rng(99, core::RngPurpose::test, i);
      for (auto& token : tokens)
        token = static_cast<std::int32_t>(rng.below(static_cast<std::uint64_t>(vocab)));
      tokens_.push_back(std::move(tokens));
    }
  }
  std::int64_t size() const override { return static_cast<std::int64_t>(lengths_.size()); }
  std::int64_t length(std::int64_t index) const override {
    return lengths_[static_cast<std::size_t>(index)];
  }
  data::Sample sample(std::int64_t index, std::int64_t alignment, std::int32_t pad) const override {
    const auto& tokens = tokens_[static_cast<std::size_t>(index)];
    const std::vector<std::uint8_t> targets(tokens.size(), 1);
    return data::make_sample(index, tokens, targets, alignment, pad);
  }

 private:
  std::vector<std::int64_t> lengths_;
  std::vector<std::vector<std::int32_t>> tokens_;
};

struct Options {
  int cp = 1;
  // --tp N: tensor parallelism (world = tp x cp x dp); --sp 1 sequence parallelism; --etp N the
  // experts' tensor parallelism (1 or tp; unset: tp, Megatron's default).
  int tp = 1;
  bool sequence_parallel = false;
  int etp = 0;
  // --heads Q,KV: attention heads (and for the hybrid its DeltaNet value, key heads); 0: the
  // tiny models' own 4, 2.
  int query_heads = 0, kv_heads = 0;
  // --mix 1248: a batch whose lengths need dynamic groups of 1, 2, 4 and 8 (8 ranks).
  bool mix_group_sizes = false;
  int hierarchical_inner = 0;  // --hierarchical N: a2a+p2p's inner size
  int ep = 1;
  bool dynamic = false;
  int min_cp = 1;
  bool aux = false;
  bool recompute = false;
  // --selective 1: the layout under test (not the reference) recomputes moe_act and layernorm
  // (selective recomputation): the CP / EP seams see the experts' and norms' recomputation.
  bool selective = false;
  // --moe-kernels 0: the layout under test sets model.moe_grouped_gemm and moe_permute_fusion
  // false (host expert offsets, per-expert products, the unfused dispatch).
  bool moe_kernels = true;
  // --force-balance 1: uniform routing (model.moe_router_force_load_balancing) on the reference
  // and the layout: the experts come from the positions, which every layout shards differently.
  bool force_balance = false;
  int optimizer_steps = 3;
  // --lr: the AdamW steps' learning rate. Long runs (8 steps) use a smaller one: with 1e-2 a
  // tiny model's near-tied expert choices start to flip by round-off after a few steps.
  double lr = 1e-2;
  // --overlap-steps N: N steps (forward/backward and AdamW) with the overlap keys off and on,
  // in buckets of --bucket-size elements: losses, gradients and parameters bitwise equal.
  // --overlap-keys: which keys the second run turns on, comma-separated from grad_reduce
  // (ddp.overlap_grad_reduce), param_gather (ddp.overlap_param_gather, distributed optimizer)
  // and shared_expert (model.moe_shared_expert_overlap, the hybrid); default: every one the
  // layout takes.
  // --overlap-expect-mismatch 1 (a build whose overlap lost an event): they differ.
  int overlap_steps = 0;
  std::int64_t bucket_size = 4096;
  std::string overlap_keys;
  bool overlap_expect_mismatch = false;
  bool distributed_optimizer = false;
  bool hybrid = false;  // --model qwen3_5_moe: the Gated DeltaNet hybrid
  // --alignment per_group (default) | pool: how sequences are padded for their CP group.
  config::PackingAlignment alignment = config::PackingAlignment::per_group;
  bool fold_alignment_padding = false;  // --fold 1
  config::CpCommType cp_comm_type = config::CpCommType::all_gather;
  config::PackingScheduler scheduler = config::PackingScheduler::dp_balanced;
  core::Device device = core::Device::cpu;  // --device cuda: the layout under test on the GPU path
  // --window W: the model's sliding-window attention (config.json's sliding_window), on the
  // reference and the layout; the step checks that it changes the loss.
  std::int64_t sliding_window = 0;
  std::int64_t rope_dynamic_context = 0;  // --rope-dynamic C: dynamic RoPE past C positions
  int pp = 1;                             // --pp: pipeline stages
  int vpp = 1;                            // --vpp: virtual chunks per stage (interleaved 1F1B)
  std::int64_t layers = 0;                // --layers N: decoder layers (0: the tiny model's 2)
  double step_tolerance = 0;              // --step-tolerance T: loss and gradient every step
  bool tie = false;  // --tie 1: tied embeddings (the LM head is the embedding table)
};

Options parse(int argc, char** argv) {
  Options options;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i];
    const std::string value = argv[i + 1];
    if (key == "--cp")
      options.cp = std::stoi(value);
    else if (key == "--tp")
      options.tp = std::stoi(value);
    else if (key == "--sp")
      options.sequence_parallel = value == "1";
    else if (key == "--etp")
      options.etp = std::stoi(value);
    else if (key == "--ep")
      options.ep = std::stoi(value);
    else if (key == "--dynamic")
      options.dynamic = value == "1";
    else if (key == "--min-cp")
      options.min_cp = std::stoi(value);
    else if (key == "--aux")
      options.aux = value == "1";
    else if (key == "--recompute")
      options.recompute = value == "1";
    else if (key == "--selective")
      options.selective = value == "1";
    else if (key == "--moe-kernels")
      options.moe_kernels = value == "1";
    else if (key == "--force-balance")
      options.force_balance = value == "1";
    else if (key == "--pp")
      options.pp = std::stoi(value);
    else if (key == "--vpp")
      options.vpp = std::stoi(value);
    else if (key == "--layers")
      options.layers = std::stoi(value);
    else if (key == "--step-tolerance")
      options.step_tolerance = std::stod(value);
    else if (key == "--tie")
      options.tie = value == "1";
    else if (key == "--optimizer-steps")
      options.optimizer_steps = std::stoi(value);
    else if (key == "--lr")
      options.lr = std::stod(value);
    else if (key == "--overlap-steps")
      options.overlap_steps = std::stoi(value);
    else if (key == "--bucket-size")
      options.bucket_size = std::stoll(value);
    else if (key == "--overlap-keys")
      options.overlap_keys = value;
    else if (key == "--overlap-expect-mismatch")
      options.overlap_expect_mismatch = value == "1";
    else if (key == "--distributed-optimizer")
      options.distributed_optimizer = value == "1";
    else if (key == "--model") {
      if (value != "qwen3_moe" && value != "qwen3_5_moe")
        throw std::runtime_error("--model: qwen3_moe or qwen3_5_moe");
      options.hybrid = value == "qwen3_5_moe";
    } else if (key == "--alignment") {
      if (value != "per_group" && value != "pool")
        throw std::runtime_error("--alignment: per_group or pool");
      options.alignment =
          value == "pool" ? config::PackingAlignment::pool : config::PackingAlignment::per_group;
    } else if (key == "--fold") {
      options.fold_alignment_padding = value == "1";
    } else if (key == "--cp-comm-type") {
      const auto type = config::parse_enum<config::CpCommType>(value);
      if (!type) throw std::runtime_error("--cp-comm-type: all_gather, p2p, a2a or a2a+p2p");
      options.cp_comm_type = *type;
    } else if (key == "--window") {
      options.sliding_window = std::stoi(value);
      if (options.sliding_window < 1) throw std::runtime_error("--window: >= 1");
    } else if (key == "--rope-dynamic") {
      options.rope_dynamic_context = std::stoi(value);
      if (options.rope_dynamic_context < 1) throw std::runtime_error("--rope-dynamic: >= 1");
    } else if (key == "--hierarchical") {
      options.hierarchical_inner = std::stoi(value);
    } else if (key == "--heads") {
      const auto comma = value.find(',');
      if (comma == std::string::npos) throw std::runtime_error("--heads Q,KV");
      options.query_heads = std::stoi(value.substr(0, comma));
      options.kv_heads = std::stoi(value.substr(comma + 1));
    } else if (key == "--mix") {
      if (value != "1248") throw std::runtime_error("--mix: 1248");
      options.mix_group_sizes = true;
    } else if (key == "--device") {
      if (value != "cpu" && value != "cuda") throw std::runtime_error("--device: cpu or cuda");
      options.device = value == "cuda" ? core::Device::cuda : core::Device::cpu;
#ifndef DYNCP_EQUIVALENCE_ON_CUDA
      if (options.device == core::Device::cuda)
        throw std::runtime_error("--device cuda: use layout_equivalence_emulated");
#endif
    } else if (key == "--scheduler") {
      options.scheduler = value == "cost_aware" ? config::PackingScheduler::cost_aware
                          : value == "default_dynamic_cp"
                              ? config::PackingScheduler::default_dynamic_cp
                              : config::PackingScheduler::dp_balanced;
    } else {
      throw std::runtime_error("unknown option " + key);
    }
  }
  return options;
}

// The tensor's elements on the host, wherever it lives.
std::vector<float> host_floats(const core::Tensor& tensor) {
  std::vector<float> values(static_cast<std::size_t>(tensor.numel()));
  if (tensor.device() == core::Device::cpu) {
    std::memcpy(values.data(), tensor.raw_data(), values.size() * sizeof(float));
  } else {
    core::device_memory().copy(values.data(), core::Device::cpu, tensor.raw_data(), tensor.device(),
                               values.size() * sizeof(float));
  }
  return values;
}

template <typename T>
double norm(const T* x, std::int64_t n) {
  double sum = 0;
  for (std::int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  return std::sqrt(sum);
}

template <typename A, typename B>
double difference_norm(const A* a, const B* b, std::int64_t n) {
  double sum = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    sum += d * d;
  }
  return std::sqrt(sum);
}

// `reference_flat` (laid out like the one-rank reference's values) laid out like `ours`, which
// may hold an expert slice or tensor-parallel pieces: each of our HF tensors is cut from the
// whole reference tensor of the same name (in HF order).
template <typename T = float>
std::vector<T> laid_out_like(const model::Qwen3MoeParameters& ours,
                             const model::Qwen3MoeParameters& reference,
                             const core::Tensor& reference_flat) {
  std::vector<T> out(static_cast<std::size_t>(ours.num_parameters()), T{0});
  const float* our_base = ours.all_values().data<float>();
  const T* reference_base = reference.all_values().data<T>();
  std::vector<float> whole;
  for (const auto& tensor : ours.hf_tensors()) {
    const model::HfTensor* match = reference.find(tensor.name);
    if (match == nullptr) throw std::runtime_error("reference has no " + tensor.name);
    const std::int64_t at = tensor.value.data<float>() - our_base;
    const std::int64_t from = match->value.data<T>() - reference_base;
    const auto view = [](const T* data, const core::Tensor& like) {
      return core::Tensor::view_of(const_cast<T*>(data), like.shape(), core::dtype_of<T>::value);
    };
    whole.assign(static_cast<std::size_t>(match->hf_numel()), 0.0f);
    match->read_hf_order(view(reference_flat.data<T>() + from, match->value), whole.data());
    if constexpr (std::is_same_v<T, float>) {
      tensor.write_hf_order(whole.data(), view(out.data() + at, tensor.value));
    } else {
      // fp64 truth: re-read the whole tensor's doubles so no precision is lost.
      std::vector<double> whole_double(whole.size());
      std::vector<float> scratch(whole.size());
      const core::Tensor source = view(reference_flat.data<T>() + from, match->value);
      const std::int64_t columns = source.numel() / std::max<std::int64_t>(source.size(0), 1);
      const std::int64_t hf_columns = match->hf_numel() / match->hf_shape.at(0);
      match->for_each_row_run([&](std::int64_t row, std::int64_t hf_row, std::int64_t count) {
        for (std::int64_t r = 0; r < count; ++r)
          for (std::int64_t c = 0; c < columns; ++c)
            whole_double[static_cast<std::size_t>((hf_row + r) * hf_columns +
                                                  match->hf_column_first + c)] =
                source.data<double>()[(row + r) * columns + c];
      });
      const std::int64_t our_columns = tensor.value.numel() / tensor.value.size(0);
      const std::int64_t our_hf_columns = tensor.hf_numel() / tensor.hf_shape.at(0);
      tensor.for_each_row_run([&](std::int64_t row, std::int64_t hf_row, std::int64_t count) {
        for (std::int64_t r = 0; r < count; ++r)
          for (std::int64_t c = 0; c < our_columns; ++c)
            out[static_cast<std::size_t>(at + (row + r) * our_columns + c)] =
                whole_double[static_cast<std::size_t>((hf_row + r) * our_hf_columns +
                                                      tensor.hf_column_first + c)];
      });
    }
  }
  return out;
}

// The HF names of the tensors stored in [offset, offset + count) of the flat buffers.
std::string tensors_in(const model::Qwen3MoeParameters& parameters, std::int64_t offset,
                       std::int64_t count) {
  std::string names;
  const float* base = parameters.all_values().data<float>();
  for (const auto& tensor : parameters.hf_tensors()) {
    const std::int64_t at = tensor.value.data<float>() - base;
    if (at < offset + count && at + tensor.value.numel() > offset)
      names += (names.empty() ? "" : ", ") + tensor.name;
  }
  return names;
}

// Distributed optimizer: each rank holds state for its own piece of each kind, at most
// ceil(elements / shards), and the pieces of the pool cover every element exactly once.
template <typename Check>
void check_state_division(train::StepEngine& engine, dist::ParallelState& parallel_state,
                          const train::AdamWOptimizer& optimizer, const Check& check) {
  const parallel::OptimizerShards& shards = engine.sharded_state_sync()->shards();
  const parallel::ParameterPartition& partition = engine.partition();
  const int pool = parallel_state.pool().size();
  const int expert_data_parallel = parallel_state.expert_data_parallel().size();
  const std::int64_t dense = shards.dense.owned().count();
  const std::int64_t expert = shards.expert.owned().count();
  const auto within = [](std::int64_t piece, std::int64_t total, int shards_count) {
    return piece >= total / shards_count && piece <= (total + shards_count - 1) / shards_count;
  };
  check(within(dense, partition.dense_elements, pool),
        "dense piece " + std::to_string(dense) + " of " + std::to_string(partition.dense_elements) +
            " over " + std::to_string(pool) + " ranks");
  check(within(expert, partition.expert_elements, expert_data_parallel),
        "expert piece " + std::to_string(expert) + " of " +
            std::to_string(partition.expert_elements) + " over " +
            std::to_string(expert_data_parallel) + " ranks");
  check(optimizer.exp_avg().numel() == dense + expert &&
            optimizer.exp_avg_sq().numel() == dense + expert &&
            optimizer.owned_state_bytes() == 8 * (dense + expert),
        "moments allocated for the owned pieces only: " +
            std::to_string(optimizer.exp_avg().numel()) + " elements, " +
            std::to_string(optimizer.owned_state_bytes()) + " bytes");
  std::int64_t sums[3] = {dense, expert * expert_data_parallel, partition.expert_elements};
  parallel_state.pool().all_reduce(sums, sums, 3, core::DType::i64, dist::ReduceOp::sum);
  check(sums[0] == partition.dense_elements, "dense pieces over the pool add up to " +
                                                 std::to_string(sums[0]) + ", not " +
                                                 std::to_string(partition.dense_elements));
  check(sums[1] == sums[2], "expert pieces over the pool cover every EP index's experts once");
}

}  // namespace

// Which overlap keys the second run of compare_overlap turns on.
struct OverlapKeys {
  bool grad_reduce = false, param_gather = false, shared_expert = false;
};

OverlapKeys overlap_keys_of(const Options& options) {
  OverlapKeys keys;
  if (options.overlap_keys.empty()) {
    return {true, options.distributed_optimizer, options.hybrid};
  }
  for (std::size_t at = 0; at <= options.overlap_keys.size();) {
    const std::size_t comma =
        std::min(options.overlap_keys.find(',', at), options.overlap_keys.size());
    const std::string key = options.overlap_keys.substr(at, comma - at);
    if (key == "grad_reduce") {
      keys.grad_reduce = true;
    } else if (key == "param_gather") {
      keys.param_gather = true;
    } else if (key == "shared_expert") {
      keys.shared_expert = true;
    } else {
      throw std::runtime_error("--overlap-keys: grad_reduce, param_gather or shared_expert, not " +
                               key);
    }
    at = comma + 1;
  }
  if (keys.param_gather && !options.distributed_optimizer)
    throw std::runtime_error("--overlap-keys param_gather needs --distributed-optimizer 1");
  if (keys.shared_expert && !options.hybrid)
    throw std::runtime_error("--overlap-keys shared_expert needs --model qwen3_5_moe");
  return keys;
}

// The overlap keys change no bit: two models from the same seed, one engine with the keys off
// and one with them on (overlapped bucket reduction, overlapped parameter gather, the shared
// expert beside the EP exchange), the same batch and AdamW for several steps: losses, gradient
// norms, gradients and, after every optimizer step, parameters bitwise equal; and the overlap
// ran (buckets started during the backward, buckets waited for layer by layer in the forward,
// exchanges with the shared expert beside them).
template <typename Check>
void compare_overlap(const Options& options, const config::ModelArchitecture& architecture,
                     const model::ModelOptions& model_options, dist::ParallelState& parallel_state,
                     const data::SampleSource& source, const train::StepEngineOptions& base_options,
                     const std::vector<std::int64_t>& ids, Check& check) {
  const OverlapKeys keys = overlap_keys_of(options);
  model::ModelOptions overlap_model_options = model_options;
  overlap_model_options.moe_shared_expert_overlap = keys.shared_expert;
  model::Qwen3MoeModel plain_model(architecture, model_options);
  model::Qwen3MoeModel overlap_model(architecture, overlap_model_options);
  plain_model.parameters().init_random(7);
  overlap_model.parameters().init_random(7);
  train::StepEngineOptions overlap_options = base_options;
  overlap_options.overlap_grad_reduce = keys.grad_reduce;
  overlap_options.overlap_param_gather = keys.param_gather;
  overlap_options.bucket_elements = options.bucket_size;
  train::StepEngine plain(plain_model, parallel_state, source, base_options);
  train::StepEngine overlapped(overlap_model, parallel_state, source, overlap_options);
  const bool sharded = options.distributed_optimizer;
  check(keys.grad_reduce == (overlapped.overlapped_reduce() != nullptr) &&
            keys.param_gather == (overlapped.overlapped_parameter_gather() != nullptr),
        "the overlapped reduction and gather are built exactly when their keys are on");
  train::AdamWSettings adamw;
  adamw.eps = 1e-6;
  const auto optimizer_for = [&](model::Qwen3MoeModel& model, train::StepEngine& engine) {
    return sharded ? train::AdamWOptimizer(model.parameters(), *engine.sharded_state_sync(), adamw)
                   : train::AdamWOptimizer(model.parameters(), engine.partition(), adamw);
  };
  train::AdamWOptimizer plain_optimizer = optimizer_for(plain_model, plain);
  train::AdamWOptimizer overlap_optimizer = optimizer_for(overlap_model, overlapped);
  const auto& ranges =
      sharded ? plain.sharded_state_sync()->shards().owned_ranges : plain.partition().ranges;
  const auto differing_elements = [](const std::vector<float>& a, const std::vector<float>& b,
                                     std::int64_t offset, std::int64_t count) {
    std::int64_t differing = 0;
    for (std::int64_t i = offset; i < offset + count; ++i)
      differing += std::memcmp(&a[static_cast<std::size_t>(i)], &b[static_cast<std::size_t>(i)],
                               sizeof(float)) != 0;
    return differing;
  };
  int differing_steps = 0;
  std::int64_t started_during_backward = 0, waited_by_layer = 0, exchanges_beside = 0;
  for (int step = 1; step <= options.overlap_steps; ++step) {
    const train::StepOutcome a = plain.forward_backward(ids);
    const train::StepOutcome b = overlapped.forward_backward(ids);
    if (overlapped.overlapped_reduce())
      started_during_backward += overlapped.overlapped_reduce()->started_during_backward();
    if (overlapped.overlapped_parameter_gather())
      waited_by_layer += overlapped.overlapped_parameter_gather()->waited_by_layer();
    exchanges_beside += overlapped.seam_counters().exchanges_with_work_beside;
    const std::vector<float> ga = host_floats(plain_model.parameters().all_grads());
    const std::vector<float> gb = host_floats(overlap_model.parameters().all_grads());
    std::int64_t differing = 0;
    for (const auto& range : ranges)
      differing += differing_elements(ga, gb, range.offset, range.count);
    const bool same_loss =
        std::memcmp(&a.loss, &b.loss, sizeof(double)) == 0 &&
        std::memcmp(&a.grad_sum_of_squares, &b.grad_sum_of_squares, sizeof(double)) == 0;
    plain_optimizer.step(1e-2, step, 1.0);
    overlap_optimizer.step(1e-2, step, 1.0);
    // After the last update, the parameters every rank holds (the gathered ones included; the
    // earlier steps' gathers are proved by the next forward's numbers, which must wait for
    // them layer by layer rather than here).
    std::int64_t differing_values = 0;
    if (step == options.overlap_steps) {
      overlapped.complete_parameter_gather();
      const std::vector<float> pa = host_floats(plain_model.parameters().all_values());
      const std::vector<float> pb = host_floats(overlap_model.parameters().all_values());
      differing_values = differing_elements(pa, pb, 0, static_cast<std::int64_t>(pa.size()));
    }
    std::int64_t local[3] = {differing, same_loss ? 0 : 1, differing_values};
    parallel_state.pool().all_reduce(local, local, 3, core::DType::i64, dist::ReduceOp::sum);
    if (local[0] + local[1] + local[2] > 0) ++differing_steps;
    char line[240];
    std::snprintf(line, sizeof line,
                  "overlap step %d: loss %.9g vs %.9g, %lld gradient elements and %lld parameters "
                  "differ over the pool",
                  step, a.loss, b.loss, static_cast<long long>(local[0]),
                  static_cast<long long>(local[2]));
    if (!options.overlap_expect_mismatch)
      check(local[0] == 0 && local[1] == 0 && local[2] == 0, line);
    else if (parallel_state.rank() == 0)
      std::printf("%s\n", line);
  }
  if (parallel_state.rank() == 0) {
    std::printf(
        "overlap over %d steps: %lld buckets started during the backward, %lld gathered buckets "
        "waited for layer by layer, %lld EP exchanges with the shared expert beside them\n",
        options.overlap_steps, static_cast<long long>(started_during_backward),
        static_cast<long long>(waited_by_layer), static_cast<long long>(exchanges_beside));
  }
  if (keys.grad_reduce) {
    check(started_during_backward > 0,
          "buckets started during the backward: " + std::to_string(started_during_backward));
  }
  if (keys.param_gather) {
    check(waited_by_layer > 0, "gathered buckets waited for layer by layer in the forward: " +
                                   std::to_string(waited_by_layer));
  }
  if (keys.shared_expert && options.ep > 1) {
    check(exchanges_beside > 0,
          "EP exchanges with the shared expert beside them: " + std::to_string(exchanges_beside));
  }
  if (options.overlap_expect_mismatch) {
    check(differing_steps > 0, "the overlap without its event gives other numbers in " +
                                   std::to_string(differing_steps) + " of " +
                                   std::to_string(options.overlap_steps) + " steps");
  }
}

int main(int argc, char** argv) {
  dist::MpiRuntime runtime(&argc, &argv);
  int passed = 0;
  int failed = 0;
  try {
    const Options options = parse(argc, argv);
    auto launch_world = runtime.world();
    std::unique_ptr<dist::Comm> routed_world;
#ifdef DYNCP_EQUIVALENCE_ON_CUDA
    if (options.device == core::Device::cuda) {
      ops::cuda::install_backend();
      dist::install_nccl_device_comms();
      core::device_memory().select_device(dist::discover_launch_env().local_rank,
                                          launch_world->rank());
      routed_world = dist::make_routed_world(*launch_world, 600.0);
    }
#endif
    dist::Comm* world = routed_world ? routed_world.get() : launch_world.get();
    const int rank = world->rank();
    const auto check = [&](bool ok, const std::string& what) {
      if (ok) {
        ++passed;
      } else {
        ++failed;
        std::printf("rank %d FAILED: %s\n", rank, what.c_str());
      }
    };

    config::ModelArchitecture architecture =
        options.hybrid ? testing::tiny_hybrid() : testing::tiny_qwen3_moe();
    if (options.query_heads > 0) {
      architecture.num_attention_heads = options.query_heads;
      architecture.num_key_value_heads = options.kv_heads;
      if (options.hybrid) {
        architecture.linear_num_value_heads = options.query_heads;
        architecture.linear_num_key_heads = options.kv_heads;
      }
      architecture.resolve();
    }
    architecture.tie_word_embeddings = options.tie;
    if (options.layers > 0) {
      // More layers of the same kinds: the hybrid alternates DeltaNet and attention layers.
      architecture.num_hidden_layers = options.layers;
      if (options.hybrid) {
        architecture.layer_types.clear();
        for (std::int64_t i = 0; i < options.layers; ++i)
          architecture.layer_types.push_back(i % 2 == 0 ? config::LayerMixer::linear_attention
                                                        : config::LayerMixer::full_attention);
      }
      architecture.resolve();
    }
    if (options.sliding_window > 0) {
      if (options.hybrid) throw std::runtime_error("--window: the hybrid's attention has none");
      architecture.sliding_window = options.sliding_window;
    }
    if (options.rope_dynamic_context > 0) {
      architecture.rope_scaling.rope_type = "dynamic";
      architecture.rope_scaling.factor = 4.0;
      architecture.max_position_embeddings = options.rope_dynamic_context;
    }
    model::ModelOptions model_options;
    model_options.recompute_full = options.recompute;
    model_options.aux_loss =
        options.aux ? ops::MoeAuxLossType::seq_aux_loss : ops::MoeAuxLossType::none;
    model_options.moe_router_force_load_balancing = options.force_balance;
    // With the dynamic capacity of 32 tokens per rank, 200 needs 8 ranks, 100 four, 60 two.
    const std::vector<std::int64_t> lengths =
        options.mix_group_sizes
            ? std::vector<std::int64_t>{5, 7, 3, 41, 9, 12, 2, 60, 4, 6, 8, 200, 30, 3, 100, 21}
            : std::vector<std::int64_t>{5, 7, 3, 41, 9, 12, 2, 60, 4, 6, 8, 10, 30, 3, 5, 21};
    FixedSource source(lengths, architecture.vocab_size);
    const auto batch_size = static_cast<std::int64_t>(lengths.size());

    // Reference: one rank, whole sequences, one bin.
    model::Qwen3MoeModel reference(architecture, model_options);
    reference.parameters().init_random(7);
    std::vector<data::Sample> whole;
    packing::PackedSeqParams whole_params;
    whole_params.cu_seqlens_padded.push_back(0);
    whole_params.cu_seqlens.push_back(0);
    std::int64_t reference_tokens = 0;
    for (std::int64_t i = 0; i < batch_size; ++i) {
      whole.push_back(source.sample(i, 1, 0));
      const std::int64_t n = lengths[static_cast<std::size_t>(i)];
      whole_params.sample_ids.push_back(i);
      whole_params.local_ranges.push_back(
          {whole_params.cu_seqlens_padded.back(), whole_params.cu_seqlens_padded.back() + n, i, 0});
      whole_params.cu_seqlens_padded.push_back(whole_params.cu_seqlens_padded.back() + n);
      whole_params.cu_seqlens.push_back(whole_params.cu_seqlens_padded.back());
      for (auto mask : whole.back().loss_mask) reference_tokens += mask;
    }
    train::BinBuilder builder;
    model::LocalSeams local;
    model::BinOptions reference_options;
    reference_options.loss_grad_scale = 1.0 / static_cast<double>(reference_tokens);
    reference_options.aux_num_sequences_global = batch_size;
    reference.parameters().zero_grads();
    const model::BinResult reference_result =
        reference.run_bin(builder.build(whole_params, whole), local.seams(), reference_options);
    const double reference_loss = reference_result.loss_sum / static_cast<double>(reference_tokens);
    if (options.sliding_window > 0 || options.rope_dynamic_context > 0) {
      // The feature must matter for this batch (sequences longer than the window or the
      // context), or a layout that ignored it would pass: without it the reference's loss and
      // gradients move far past the tolerances below (10x the loss's, 100x the gradients').
      config::ModelArchitecture unwindowed = architecture;
      unwindowed.sliding_window = 0;
      unwindowed.rope_scaling.rope_type = "default";
      model::Qwen3MoeModel full(unwindowed, model_options);
      full.parameters().init_random(7);
      full.parameters().zero_grads();
      const double full_loss =
          full.run_bin(builder.build(whole_params, whole), local.seams(), reference_options)
              .loss_sum /
          static_cast<double>(reference_tokens);
      const core::Tensor& windowed_grads = reference.parameters().all_grads();
      const double grad_change =
          difference_norm(full.parameters().all_grads().data<float>(), windowed_grads.data<float>(),
                          windowed_grads.numel()) /
          norm(windowed_grads.data<float>(), windowed_grads.numel());
      const double loss_change = std::abs(full_loss - reference_loss) / std::abs(reference_loss);
      char line[200];
      std::snprintf(
          line, sizeof line,
          "%s %lld: without it the reference loss moves by %.3g, its gradients by "
          "%.3g (relative)",
          options.sliding_window > 0 ? "window" : "dynamic RoPE past",
          static_cast<long long>(options.sliding_window > 0 ? options.sliding_window
                                                            : options.rope_dynamic_context),
          loss_change, grad_change);
      // Dynamic RoPE barely moves a model this small's loss, but its gradients by percents.
      check((loss_change > 1e-4 || options.sliding_window == 0) && grad_change > 1e-3, line);
      if (rank == 0) std::printf("%s\n", line);
    }
    // The same reference in fp64 with the same (fp32) weights: the truth against which a
    // gradient that is a near-cancelling sum (e.g. a DeltaNet dt_bias, summed over every token)
    // shows how inexact the fp32 reference itself is.
    model::ModelOptions truth_options = model_options;
    truth_options.dtype = core::DType::f64;
    model::Qwen3MoeModel truth(architecture, truth_options);
    {
      const float* from = reference.parameters().all_values().data<float>();
      double* to = truth.parameters().all_values().data<double>();
      for (std::int64_t i = 0; i < reference.parameters().num_parameters(); ++i) to[i] = from[i];
    }
    truth.parameters().zero_grads();
    truth.run_bin(builder.build(whole_params, whole), local.seams(), reference_options);

    // The layout under test.
    const int etp = options.etp > 0 ? options.etp : options.tp;
    const dist::ParallelLayout layout =
        dist::layout_for_world(world->size(), options.cp, options.ep, options.dynamic,
                               options.min_cp, {options.pp, options.vpp}, {options.tp, etp});
    dist::ParallelState parallel_state(*world, layout);
    // This rank's pipeline stage: its layers of Megatron's split.
    config::PipelineSplitInput split_input;
    split_input.num_layers = architecture.num_hidden_layers;
    split_input.pipeline_size = options.pp;
    split_input.virtual_size = options.vpp;
    const config::PipelineSplit pipeline_split = config::split_layers(split_input);
    const int stage = parallel_state.coordinates().pipeline_parallel_index;
    const model::ModelPart part = parallel::stage_model_part(pipeline_split, stage);
    // Each rank holds only its EP index's experts; the reference holds every expert. Under TP
    // it holds its pieces of the split tensors.
    model::ModelOptions sliced_options = model_options;
    sliced_options.experts =
        parallel::local_expert_range(architecture.num_experts, parallel_state.expert_parallel());
    sliced_options.tensor_parallel = {options.tp, parallel_state.tensor_parallel().rank(), etp,
                                      parallel_state.expert_tensor_parallel().rank(),
                                      options.sequence_parallel};
    sliced_options.device = options.device;
    sliced_options.part = part;
    const bool s = options.selective;
    sliced_options.selective = {.moe_act = s, .layernorm = s, .mlp = s, .shared_experts = s};
    sliced_options.moe_grouped_gemm = options.moe_kernels;
    sliced_options.moe_permute_fusion = options.moe_kernels;
    model::Qwen3MoeModel model(architecture, sliced_options);
    model.parameters().init_random(7);
    {
      // Memory really is divided: this stage's dense parameters whole, its experts 1/ep, over
      // the EP group every expert exactly once, over the stages every tensor of the whole model
      // exactly once; and the seeded slice is the reference's values there.
      const model::Qwen3MoeParameters& ours = model.parameters();
      const model::Qwen3MoeParameters full(architecture, {}, core::DType::f32, core::Device::cpu,
                                           {}, part);
      std::int64_t stage_tensors[2] = {static_cast<std::int64_t>(full.hf_tensors().size()), 0};
      for (const auto& tensor : full.hf_tensors()) {
        // A tied head's copy on the last stage is the first stage's embedding.
        if (full.holds_tied_head_copy() && tensor.name == "model.embed_tokens.weight")
          --stage_tensors[0];
        stage_tensors[1] += reference.parameters().find(tensor.name) != nullptr ? 0 : 1;
      }
      parallel_state.pipeline().all_reduce(stage_tensors, stage_tensors, 2, core::DType::i64,
                                           dist::ReduceOp::sum);
      check(stage_tensors[0] ==
                    static_cast<std::int64_t>(reference.parameters().hf_tensors().size()) &&
                stage_tensors[1] == 0,
            "the stages hold " + std::to_string(stage_tensors[0]) + " tensors, each of the " +
                std::to_string(reference.parameters().hf_tensors().size()) +
                " of the whole model once");
      const int ep = parallel_state.expert_parallel().size();
      const auto expert_elements = [](const model::Qwen3MoeParameters& parameters) {
        std::int64_t count = 0;
        for (const auto& tensor : parameters.hf_tensors())
          if (tensor.is_expert) count += tensor.value.numel();
        return count;
      };
      std::int64_t experts_held = expert_elements(ours);
      const std::int64_t every_expert = expert_elements(full);
      const std::int64_t dense = full.num_parameters() - every_expert;  // incl. alignment gaps
      if (options.tp == 1) {
        check(experts_held * ep == every_expert &&
                  ours.num_parameters() == dense + every_expert / ep &&
                  ours.all_grads().numel() == ours.num_parameters(),
              "this rank holds " + std::to_string(ours.num_parameters()) + " parameters = dense " +
                  std::to_string(dense) + " + experts " + std::to_string(experts_held) +
                  " (the whole model's " + std::to_string(every_expert) + " / ep " +
                  std::to_string(ep) + ")");
      } else {
        // Every split tensor's piece is 1/tp (experts 1/etp) of the whole, whole ones whole.
        std::string wrong;
        for (const auto& tensor : ours.hf_tensors()) {
          const std::int64_t parts =
              tensor.split == model::TensorSplit::tensor_parallel          ? options.tp
              : tensor.split == model::TensorSplit::expert_tensor_parallel ? etp
                                                                           : 1;
          if (tensor.value.numel() * parts != tensor.hf_numel()) wrong += " " + tensor.name;
        }
        check(wrong.empty(), "every tensor-parallel piece is its share of the whole:" + wrong);
        experts_held *= etp;  // the expert-TP group's pieces make whole experts
      }
      parallel_state.expert_parallel().all_reduce(&experts_held, &experts_held, 1, core::DType::i64,
                                                  dist::ReduceOp::sum);
      check(experts_held == every_expert, "the EP group's slices add up to every expert once");
      const std::vector<float> initial =
          laid_out_like(ours, reference.parameters(), reference.parameters().all_values());
      check(std::memcmp(initial.data(), host_floats(ours.all_values()).data(),
                        initial.size() * sizeof(float)) == 0,
            "seeded init of this rank's slice equals the whole model's values there");
    }
    train::StepEngineOptions engine_options;
    engine_options.scheduler = options.scheduler;
    // Static CP must fit the longest sequence (60, padded to 64) on cp ranks; dynamic CP uses a
    // capacity that sends it to a group of two or more while short ones run alone.
    engine_options.max_seqlen_per_dp_cp_rank = options.dynamic ? 32 : 64 / options.cp;
    engine_options.alignment = packing::alignment_rule(
        {layout.data_parallel_size, layout.context_parallel_size, layout.dynamic_context_parallel,
         options.tp, options.sequence_parallel},
        options.alignment);
    engine_options.fold_alignment_padding = options.fold_alignment_padding;
    engine_options.distributed_optimizer = options.distributed_optimizer;
    engine_options.cp_comm_type = options.cp_comm_type;
    engine_options.hierarchical_inner_size = options.hierarchical_inner;
    engine_options.pipeline = pipeline_split;
    train::StepEngine engine(model, parallel_state, source, engine_options);
    std::vector<std::int64_t> ids(static_cast<std::size_t>(batch_size));
    for (std::int64_t i = 0; i < batch_size; ++i) ids[static_cast<std::size_t>(i)] = i;
    const train::StepOutcome outcome = engine.forward_backward(ids);

    char line[256];
    {
      // The exchange asked for is the one that ran: only the ring moves point-to-point bytes,
      // and it does whenever a microbatch ran on a group of two or more (a2a+p2p: on a group
      // larger than the inner size); only the a2a exchanges move all-to-all bytes over the CP
      // groups (EP's all-to-all runs on the EP group).
      const dist::CommCounters subgroups = engine.cp_exchange().subgroup_counters();
      // The pipeline's point-to-point transfers are not the CP ring's.
      const std::uint64_t pipeline_bytes =
          parallel_state.pipeline().counters()[dist::CommOp::send_recv].bytes_sent;
      std::int64_t bytes[2] = {
          static_cast<std::int64_t>(
              parallel_state.total_counters()[dist::CommOp::send_recv].bytes_sent +
              subgroups[dist::CommOp::send_recv].bytes_sent - pipeline_bytes),
          static_cast<std::int64_t>(subgroups[dist::CommOp::all_to_all].bytes_sent)};
      if (options.pp > 1) {
        check(pipeline_bytes > 0, "activations and gradients crossed stages: " +
                                      std::to_string(pipeline_bytes) + " bytes sent");
        check(outcome.pipeline_bubble_fraction >= 0 && outcome.pipeline_bubble_fraction < 1,
              "measured bubble " + std::to_string(outcome.pipeline_bubble_fraction));
      }
      std::vector<const dist::Comm*> cp_groups;
      for (const auto& [size, count] : outcome.group_sizes) {
        if (size < 2) continue;
        const dist::Comm* group = options.dynamic ? &parallel_state.dynamic_group(size)
                                                  : &parallel_state.context_parallel();
        if (std::find(cp_groups.begin(), cp_groups.end(), group) != cp_groups.end()) continue;
        cp_groups.push_back(group);
        bytes[1] +=
            static_cast<std::int64_t>(group->counters()[dist::CommOp::all_to_all].bytes_sent);
      }
      parallel_state.pool().all_reduce(bytes, bytes, 2, core::DType::i64, dist::ReduceOp::sum);
      const int largest = outcome.group_sizes.rbegin()->first;
      const bool split = largest > 1;
      const config::CpCommType type = options.cp_comm_type;
      const bool ring = type == config::CpCommType::p2p || (type == config::CpCommType::a2a_p2p &&
                                                            largest > options.hierarchical_inner);
      // The all-to-all runs on groups of min(c, inner) under a2a+p2p: none with inner 1.
      const bool all_to_all =
          type == config::CpCommType::a2a ||
          (type == config::CpCommType::a2a_p2p && options.hierarchical_inner > 1);
      check(ring && split ? bytes[0] > 0 : bytes[0] == 0,
            "ring (send_recv) bytes over the pool: " + std::to_string(bytes[0]));
      check(all_to_all && split ? bytes[1] > 0 : bytes[1] == 0,
            "CP all-to-all bytes over the pool: " + std::to_string(bytes[1]));
      if (options.mix_group_sizes) {
        std::string sizes;
        for (const auto& [size, count] : outcome.group_sizes) sizes += " " + std::to_string(size);
        check(outcome.group_sizes.size() == 4 && outcome.group_sizes.count(1) == 1 &&
                  outcome.group_sizes.count(2) == 1 && outcome.group_sizes.count(4) == 1 &&
                  outcome.group_sizes.count(8) == 1,
              "the step mixes group sizes 1, 2, 4 and 8; it used" + sizes);
      }
    }
    std::snprintf(line, sizeof line, "loss %.9g vs reference %.9g", outcome.loss, reference_loss);
    check(outcome.loss_tokens == reference_tokens, "loss tokens " +
                                                       std::to_string(outcome.loss_tokens) +
                                                       " vs " + std::to_string(reference_tokens));
    check(std::abs(outcome.loss - reference_loss) <= 1e-5 * std::abs(reference_loss), line);
    if (options.aux) {
      std::snprintf(line, sizeof line, "aux loss %.9g vs reference %.9g", outcome.aux_loss,
                    reference_result.aux_loss);
      check(
          reference_result.aux_loss > 0 && std::abs(outcome.aux_loss - reference_result.aux_loss) <=
                                               1e-5 * reference_result.aux_loss,
          line);
    }

    const std::vector<float> our_grads = host_floats(model.parameters().all_grads());
    const float* ours = our_grads.data();
    const std::vector<float> reference_grads = laid_out_like(
        model.parameters(), reference.parameters(), reference.parameters().all_grads());
    const float* theirs = reference_grads.data();
    const std::vector<double> truth_grads = laid_out_like<double>(
        model.parameters(), truth.parameters(), truth.parameters().all_grads());
    const double* truths = truth_grads.data();
    double worst = 0;
    // Distributed optimizer: only this rank's pieces hold sums; each piece of a range is
    // measured against the whole range's reference norm, as the replicated check is.
    const parallel::ShardedStateSync* sharded = engine.sharded_state_sync();
    const auto range_norm = [&](std::int64_t offset) {
      for (const auto& range : engine.partition().ranges)
        if (offset >= range.offset && offset < range.offset + range.count)
          return norm(theirs + range.offset, range.count);
      throw std::runtime_error("an owned piece outside the partition");
    };
    for (const auto& range : sharded ? sharded->shards().owned_ranges : engine.partition().ranges) {
      const double reference_norm = range_norm(range.offset);
      const double error =
          difference_norm(ours + range.offset, theirs + range.offset, range.count) /
          std::max(reference_norm, 1e-12);
      worst = std::max(worst, error);
      std::snprintf(line, sizeof line,
                    "gradient range at %lld (%lld elements, expert %d): relative error %.3g",
                    static_cast<long long>(range.offset), static_cast<long long>(range.count),
                    range.is_expert ? 1 : 0, error);
      bool ok = error <= 1e-5;
      if (!ok) {
        // Allowed only where the fp32 reference is itself that far from the fp64 truth: the
        // layout must then be as close to the truth as the reference, within 10x.
        const double truth_norm = norm(truths + range.offset, range.count);
        const double ours_vs_truth =
            difference_norm(ours + range.offset, truths + range.offset, range.count) / truth_norm;
        const double reference_vs_truth =
            difference_norm(theirs + range.offset, truths + range.offset, range.count) / truth_norm;
        ok = ours_vs_truth <= 10 * reference_vs_truth;
        std::snprintf(line + std::strlen(line), sizeof line - std::strlen(line),
                      "; vs fp64 truth %.3g, the fp32 reference %.3g", ours_vs_truth,
                      reference_vs_truth);
        if (ok && rank == 0) std::printf("accepted by the fp64 bound: %s\n", line);
      }
      check(ok, line + (" [" + tensors_in(model.parameters(), range.offset, range.count) + "]"));
    }

    // Work is divided: over the pool, every padded row of the batch is a query row exactly
    // once per full-attention layer (twice with full recompute, whose backward re-runs the
    // forward). Gated DeltaNet layers run whole sequences on every rank of a group (see
    // parallel/cp_linear_attention.hpp) and are not counted here.
    std::int64_t rows = engine.seam_counters().attention_query_rows;
    parallel_state.pool().all_reduce(&rows, &rows, 1, core::DType::i64, dist::ReduceOp::sum);
    std::int64_t attention_layers = 0;  // of this stage
    for (std::size_t i = 0; i < model.parameters().layers.size(); ++i)
      attention_layers += model.parameters().layers[i].mixer == config::LayerMixer::full_attention;
    // Each sequence is padded for the group it ran on; the step reports the same total.
    std::int64_t padded_total = 0;
    const packing::Schedule& schedule = engine.last_schedule();
    for (const packing::ScheduleGroup& group : schedule.groups)
      for (const std::int64_t id : schedule.ids_of(group))
        padded_total +=
            engine_options.alignment.padded(lengths[static_cast<std::size_t>(id)], group.size);
    check(outcome.padded_tokens == padded_total, "padded tokens " +
                                                     std::to_string(outcome.padded_tokens) +
                                                     " vs " + std::to_string(padded_total));
    if (options.dynamic && options.alignment == config::PackingAlignment::per_group) {
      // Per-group padding never pads more than the pool rule, and here strictly less (the
      // batch's odd lengths on one rank need no padding at all).
      std::int64_t pool_total = 0;
      const std::int64_t pool_multiple =
          packing::alignment_multiple({layout.data_parallel_size, layout.context_parallel_size,
                                       true, options.tp, options.sequence_parallel});
      for (const auto length : lengths) pool_total += packing::padded_length(length, pool_multiple);
      check(padded_total < pool_total, "per-group padding " + std::to_string(padded_total) +
                                           " below the pool rule's " + std::to_string(pool_total));
    }
    const std::int64_t expected_rows =
        padded_total * attention_layers * (options.recompute ? 2 : 1);
    check(rows == expected_rows, "query rows over the pool " + std::to_string(rows) + " vs " +
                                     std::to_string(expected_rows));

    // Several optimizer steps on both: the parameters stay together. AdamW moves every
    // parameter by about lr per step whatever the gradient's size, so the difference is
    // measured in units of lr. Tolerance 1e-2 lr: where a gradient is nearly zero, fp32
    // round-off from another summation order changes m / sqrt(v) by a visible fraction (up to
    // about 1e-3 lr is seen over 3 steps); a real layout bug moves parameters by whole lr units.
    // eps 1e-6 rather than AdamW's usual 1e-8: the hybrid's DeltaNet decay parameters (A_log,
    // dt_bias) start with gradients of 1e-10..1e-6 that are themselves sums over every token,
    // below their own fp32 round-off (see the fp64 floor above); with eps 1e-8 each such element
    // moves by +-lr on the sign of that round-off, whichever layout is the more exact one.
    const double lr = options.lr;
    train::AdamWSettings adamw;
    adamw.eps = 1e-6;
    const auto reference_partition = parallel::partition_parameters(reference.parameters());
    train::AdamWOptimizer reference_optimizer(reference.parameters(), reference_partition, adamw);
    train::AdamWOptimizer optimizer =
        sharded ? train::AdamWOptimizer(model.parameters(), *engine.sharded_state_sync(), adamw)
                : train::AdamWOptimizer(model.parameters(), engine.partition(), adamw);
    if (sharded) check_state_division(engine, parallel_state, optimizer, check);
    // Every step's loss agrees with the reference's to fp32 round-off (1e-6 relative).
    double worst_step_loss = std::abs(outcome.loss - reference_loss) / std::abs(reference_loss);
    // --step-tolerance: the loss and the whole model's gradient against the reference at every
    // step. Each rank adds its own part once: its pieces (distributed optimizer), else dense
    // ranges on pool rank 0 and expert ranges on expert-data-parallel rank 0 of each stage.
    double worst_step_errors[2] = {0, 0};
    const auto compare_step = [&](int step, const train::StepOutcome& step_outcome,
                                  const model::BinResult& step_reference) {
      if (options.step_tolerance <= 0) return;
      const double reference_total =
          step_reference.loss_sum / static_cast<double>(reference_tokens) + step_reference.aux_loss;
      const double loss_error =
          std::abs(step_outcome.loss + step_outcome.aux_loss - reference_total) /
          std::abs(reference_total);
      const std::vector<float> grads = host_floats(model.parameters().all_grads());
      const std::vector<float> expected = laid_out_like(model.parameters(), reference.parameters(),
                                                        reference.parameters().all_grads());
      double sums[2] = {0, 0};
      const auto add = [&](const parallel::ParameterRange& range) {
        for (std::int64_t i = range.offset; i < range.offset + range.count; ++i) {
          const double d = static_cast<double>(grads[static_cast<std::size_t>(i)]) -
                           expected[static_cast<std::size_t>(i)];
          sums[0] += d * d;
          sums[1] += static_cast<double>(expected[static_cast<std::size_t>(i)]) *
                     expected[static_cast<std::size_t>(i)];
        }
      };
      if (sharded) {
        for (const auto& range : sharded->shards().owned_ranges) add(range);
      } else {
        for (const auto& range : engine.partition().ranges)
          if ((range.is_expert ? parallel_state.expert_data_parallel() : parallel_state.pool())
                  .rank() == 0)
            add(range);
      }
      world->all_reduce(sums, sums, 2, core::DType::f64, dist::ReduceOp::sum);
      const double gradient_error = std::sqrt(sums[0] / sums[1]);
      worst_step_errors[0] = std::max(worst_step_errors[0], loss_error);
      worst_step_errors[1] = std::max(worst_step_errors[1], gradient_error);
      char text[200];
      std::snprintf(text, sizeof text,
                    "step %d: loss %.9g vs %.9g (relative %.3g), whole gradient relative "
                    "difference %.3g",
                    step, step_outcome.loss + step_outcome.aux_loss, reference_total, loss_error,
                    gradient_error);
      check(loss_error <= options.step_tolerance && gradient_error <= options.step_tolerance, text);
    };
    for (int step = 1; step <= options.optimizer_steps; ++step) {
      if (step > 1) {
        reference.parameters().zero_grads();
        const model::BinResult again =
            reference.run_bin(builder.build(whole_params, whole), local.seams(), reference_options);
        const double expected = again.loss_sum / static_cast<double>(reference_tokens);
        const train::StepOutcome step_outcome = engine.forward_backward(ids);
        worst_step_loss =
            std::max(worst_step_loss, std::abs(step_outcome.loss - expected) / std::abs(expected));
        compare_step(step, step_outcome, again);
      } else {
        compare_step(step, outcome, reference_result);
      }
      reference_optimizer.step(lr, step, 1.0);
      optimizer.step(lr, step, 1.0);
      if (options.step_tolerance > 0 && step < options.optimizer_steps) {
        const std::vector<float> values = laid_out_like(model.parameters(), reference.parameters(),
                                                        reference.parameters().all_values());
        model.parameters().all_values().copy_from(
            core::Tensor::view_of(const_cast<float*>(values.data()),
                                  {static_cast<std::int64_t>(values.size())}, core::DType::f32));
      }
    }
    std::snprintf(line, sizeof line, "largest relative loss difference over %d steps: %.3g",
                  std::max(options.optimizer_steps, 1), worst_step_loss);
    check(worst_step_loss <= 1e-6, line);
    if (rank == 0) std::printf("%s\n", line);
    if (options.step_tolerance > 0 && rank == 0)
      std::printf("over %d steps: worst loss difference %.3g, worst gradient difference %.3g\n",
                  options.optimizer_steps, worst_step_errors[0], worst_step_errors[1]);
    if (options.optimizer_steps > 0) {
      const std::vector<float> values_after = host_floats(model.parameters().all_values());
      const float* after = values_after.data();
      const std::vector<float> reference_values = laid_out_like(
          model.parameters(), reference.parameters(), reference.parameters().all_values());
      const float* reference_after = reference_values.data();
      double worst_lr_units = 0;
      std::int64_t worst_at = 0;
      for (std::int64_t i = 0; i < model.parameters().num_parameters(); ++i) {
        const double units = std::abs(static_cast<double>(after[i]) - reference_after[i]) / lr;
        if (units > worst_lr_units) {
          worst_lr_units = units;
          worst_at = i;
        }
      }
      std::snprintf(line, sizeof line,
                    "after %d AdamW steps the largest parameter difference is %.3g lr",
                    options.optimizer_steps, worst_lr_units);
      check(worst_lr_units <= 1e-2,
            line + (" [" + tensors_in(model.parameters(), worst_at, 1) + "]"));
      if (rank == 0) std::printf("%s\n", line);

      // What a checkpoint stores: moments the size of this rank's parameters, gathered from
      // their owners, agree with the reference optimizer's there, and reloading them gives a
      // fresh optimizer the same state.
      const train::AdamWOptimizer::FullSizeMoments moments = optimizer.full_size_moments();
      optimizer.gather_full_size_moments(moments);
      for (const auto& [name, full, reference_moment] :
           {std::tuple{"exp_avg", moments.exp_avg, reference_optimizer.exp_avg()},
            std::tuple{"exp_avg_sq", moments.exp_avg_sq, reference_optimizer.exp_avg_sq()}}) {
        const std::vector<float> expected =
            laid_out_like(model.parameters(), reference.parameters(), reference_moment);
        const auto n = static_cast<std::int64_t>(expected.size());
        const double error = difference_norm(host_floats(full).data(), expected.data(), n) /
                             std::max(norm(expected.data(), n), 1e-30);
        std::snprintf(line, sizeof line, "gathered %s: relative error %.3g", name, error);
        check(full.numel() == n && error <= 1e-4, line);
      }
      if (sharded) {
        train::AdamWOptimizer reloaded(model.parameters(), *engine.sharded_state_sync(), {});
        reloaded.load_full_size_moments(moments);
        const auto same = [](const core::Tensor& a, const core::Tensor& b) {
          return a.numel() == b.numel() && host_floats(a) == host_floats(b);
        };
        check(same(reloaded.exp_avg(), optimizer.exp_avg()) &&
                  same(reloaded.exp_avg_sq(), optimizer.exp_avg_sq()),
              "moments reloaded from the full-size form equal the owned pieces");
      }
    }

    if (options.overlap_steps > 0)
      compare_overlap(options, architecture, sliced_options, parallel_state, source, engine_options,
                      ids, check);

    if (rank == 0) {
      std::printf(
          "layout pp=%d vpp=%d tp=%d%s dp=%d cp=%d ep=%d dynamic=%d window=%lld on %s: "
          "microbatches %lld, worst gradient error %.3g\n",
          layout.pipeline_model_parallel_size, layout.virtual_pipeline_model_parallel_size,
          layout.tensor_model_parallel_size, options.sequence_parallel ? " (sp)" : "",
          layout.data_parallel_size, layout.context_parallel_size,
          layout.expert_model_parallel_size, layout.dynamic_context_parallel ? 1 : 0,
          static_cast<long long>(options.sliding_window),
          options.device == core::Device::cuda ? "the emulated GPU" : "the CPU",
          static_cast<long long>(outcome.microbatches), worst);
    }
    int totals[2] = {passed, failed};
    world->all_reduce(totals, totals, 2, core::DType::i32, dist::ReduceOp::sum);
    if (rank == 0) std::printf("%d passed, %d failed\n", totals[0], totals[1]);
    return totals[1] == 0 ? 0 : 1;
  } catch (const std::exception& error) {
    std::printf("error: %s\n", error.what());
    dist::abort_job(error.what());
  }
}
