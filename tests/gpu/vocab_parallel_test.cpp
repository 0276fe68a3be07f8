// The vocabulary-parallel ops on the device against the CPU ops, through the ops' entry points:
// the LM head + cross-entropy over 1 and 3 vocabulary shards (step 1's shard lse and target
// logit, the combined lse, step 3's loss, per-token loss, dhidden and dW; the TP reductions done
// with ops::add on each device), fp32 and bf16 products, tiled vocab chunks and one tile; the
// embedding shard lookup and gradient; a bin without loss rows; bad labels and ids named as on
// the CPU; and, emulated, that steps 1 and 3 read back one status each and the combine and the
// gradients nothing.
//
// Tolerances (docs/cuda.md section 3): lse, target, loss as the fp32 GEMM rows (logits from
// cuBLASLt in another accumulation order); dhidden / dW as the GEMM rows in fp32 and as the
// fused cross-entropy's in bf16 (dlogits rounded to bf16 before both products); embedding rows
// are copies (exact), its gradient sums with atomics (fp32 row).
#include <cmath>
#include <string>

#include "core/arena.hpp"
#include "core/error.hpp"
#include "gpu_test.hpp"
#include "ops/cuda/cuda_backend.hpp"
#include "ops/elementwise.hpp"
#include "ops/embedding.hpp"
#include "ops/vocab_parallel_cross_entropy.hpp"
#ifdef DYNCP_CUDA_EMULATION
#include "emulation_counters.h"
#endif

namespace dyncp::gpu_test {
namespace {

using core::Device;

constexpr std::int64_t kTokens = 70, kHidden = 32, kVocab = 96;

struct Inputs {
  std::vector<float> hidden, weight, dweight_start;
  std::vector<std::int32_t> labels;
  std::vector<std::uint8_t> mask;
};

Inputs make_inputs() {
  Inputs in{random_floats(kTokens * kHidden, 90), random_floats(kVocab * kHidden, 91, -0.3f, 0.3f),
            random_floats(kVocab * kHidden, 92, -0.01f, 0.01f), std::vector<std::int32_t>(kTokens),
            std::vector<std::uint8_t>(kTokens, 1)};
  for (std::int64_t t = 0; t < kTokens; ++t)
    in.labels[t] = static_cast<std::int32_t>((t * 37 + 5) % kVocab);
  in.labels[3] = -100;  // ignored
  in.labels[40] = -1;   // ignored
  in.mask[10] = 0;      // masked out
  in.mask[69] = 0;      // the last row
  return in;
}

// Everything the sharded pipeline produces, on the host.
struct Results {
  double loss_sum = 0;
  std::int64_t count = 0;
  std::vector<float> shard_lses, target, lse, per_token, dhidden, dweight;
};

// A tensor on `device` holding `values` (from `arena`).
template <typename T>
Tensor place(core::Arena& arena, std::vector<T> values, const Shape& shape) {
  const Tensor t = arena.allocate(shape, view(values, shape).dtype());
  t.copy_from(view(values, shape));
  return t;
}

// Steps 1-3 over `shards` shards on ctx's device, with the TP reductions as ops::add there.
Results run_sharded(const ops::OpContext& ctx, core::Arena& tensors, const Inputs& in, int shards,
                    const ops::CrossEntropyOptions& options) {
  core::ArenaScope scope(tensors);
  const std::int64_t rows = kVocab / shards;
  const Tensor hidden = place(tensors, in.hidden, {kTokens, kHidden});
  const Tensor weight = place(tensors, in.weight, {kVocab, kHidden});
  const Tensor dweight = place(tensors, in.dweight_start, {kVocab, kHidden});
  const Tensor labels = place(tensors, in.labels, {kTokens});
  const Tensor mask = place(tensors, in.mask, {kTokens});
  const Tensor shard_lses = tensors.allocate({shards, kTokens}, DType::f32);
  const Tensor targets = tensors.allocate({shards, kTokens}, DType::f32);
  const Tensor target = tensors.allocate({kTokens}, DType::f32);
  const Tensor lse = tensors.allocate({kTokens}, DType::f32);
  const Tensor per_token = tensors.allocate({kTokens}, DType::f32);
  const Tensor dhidden = tensors.allocate({kTokens, kHidden}, DType::f32);
  const Tensor dhidden_shard = tensors.allocate({kTokens, kHidden}, DType::f32);
  const auto range = [&](int s) { return ops::VocabShardRange{s * rows, kVocab}; };
  for (int s = 0; s < shards; ++s) {
    ops::vocab_shard_logsumexp(ctx, hidden, weight.slice(s * rows, (s + 1) * rows), range(s),
                               labels, mask, shard_lses.select(s), targets.select(s), options);
  }
  target.copy_from(targets.select(0));
  for (int s = 1; s < shards; ++s) ops::add(ctx, target, targets.select(s), target);
  ops::combine_shard_logsumexp(ctx, shard_lses, lse);
  Results out;
  for (int s = 0; s < shards; ++s) {
    const ops::CrossEntropyResult result = ops::vocab_shard_cross_entropy(
        ctx, hidden, weight.slice(s * rows, (s + 1) * rows), range(s), labels, mask, lse, target,
        per_token, s == 0 ? dhidden : dhidden_shard, dweight.slice(s * rows, (s + 1) * rows),
        options);
    if (s > 0) {
      ops::add(ctx, dhidden, dhidden_shard, dhidden);
      expect(result.loss_sum == out.loss_sum && result.num_loss_tokens == out.count,
             "every shard returns the same loss");
    }
    out.loss_sum = result.loss_sum;
    out.count = result.num_loss_tokens;
  }
  out.shard_lses = to_host(shard_lses);
  out.target = to_host(target);
  out.lse = to_host(lse);
  out.per_token = to_host(per_token);
  out.dhidden = to_host(dhidden);
  out.dweight = to_host(dweight);
  return out;
}

void check_pipeline(int shards, bool bf16, const ops::CrossEntropyOptions& options) {
  ops::cuda::install_backend();
  const Inputs in = make_inputs();
  core::Arena host_scratch("vocab shard cpu scratch"), host_tensors("vocab shard cpu");
  core::Arena device_scratch("vocab shard gpu scratch", std::size_t{8} << 20, Device::cuda);
  core::Arena device_tensors("vocab shard gpu", std::size_t{8} << 20, Device::cuda);
  ops::OpContext cpu, gpu;
  cpu.scratch = &host_scratch;
  gpu.device = Device::cuda;
  gpu.scratch = &device_scratch;
  if (bf16) cpu.precision = gpu.precision = ops::ComputePrecision::bf16;
  const Results want = run_sharded(cpu, host_tensors, in, shards, options);
  const Results got = run_sharded(gpu, device_tensors, in, shards, options);
  const std::string what = std::to_string(shards) + " shard(s), " + (bf16 ? "bf16" : "fp32") +
                           ", vocab_chunk " + std::to_string(options.vocab_chunk) + ": ";
  expect(
      got.count == want.count && want.count == kTokens - 4,
      what + "loss tokens " + std::to_string(got.count) + " vs CPU " + std::to_string(want.count));
  expect(std::fabs(got.loss_sum - want.loss_sum) <= 1e-5 * std::fabs(want.loss_sum),
         what + "loss sum " + std::to_string(got.loss_sum) + " vs CPU " +
             std::to_string(want.loss_sum));
  expect_close(what + "shard lse", got.shard_lses, want.shard_lses, kGemmAtolRel, kGemmRtol);
  expect_close(what + "target logit", got.target, want.target, kGemmAtolRel, kGemmRtol);
  expect_close(what + "lse", got.lse, want.lse, kGemmAtolRel, kGemmRtol);
  expect_close(what + "per-token loss", got.per_token, want.per_token, kGemmAtolRel, kGemmRtol);
  const double atol = bf16 ? kBf16AtolRel : kGemmAtolRel, rtol = bf16 ? kBf16Rtol : kGemmRtol;
  expect_close(what + "dhidden (summed over shards)", got.dhidden, want.dhidden, atol, rtol);
  expect_close(what + "dlm_weight (shards' rows, accumulated)", got.dweight, want.dweight, atol,
               rtol);
}

GPU_TEST(vocab_shard_cross_entropy_matches_cpu) {
  for (const int shards : {1, 3}) {
    for (const bool bf16 : {false, true}) {
      check_pipeline(shards, bf16, {.token_chunk = 16, .vocab_chunk = 20, .grad_scale = 0.5});
      check_pipeline(shards, bf16, {.token_chunk = 64, .vocab_chunk = 262144, .grad_scale = 1.0});
    }
  }
}

// Runs `call`, which must throw a data error whose message has every one of `parts`.
template <typename Call>
void expect_data_error(const std::string& what, const Call& call,
                       std::initializer_list<std::string> parts) {
  try {
    call();
    fail(what + ": no error");
  } catch (const core::Error& error) {
    bool named = error.exit_code() == 2;
    for (const std::string& part : parts)
      named = named && std::string(error.what()).find(part) != std::string::npos;
    expect(named, what + ": " + error.what());
  }
}

GPU_TEST(vocab_shard_cross_entropy_bad_label_and_host_copies) {
  ops::cuda::install_backend();
  Inputs in = make_inputs();
  core::Arena scratch("vocab shard gpu scratch", std::size_t{8} << 20, Device::cuda);
  core::Arena tensors("vocab shard gpu", std::size_t{8} << 20, Device::cuda);
  ops::OpContext gpu;
  gpu.device = Device::cuda;
  gpu.scratch = &scratch;
  const std::int64_t rows = kVocab / 2;
  const Tensor hidden = place(tensors, in.hidden, {kTokens, kHidden});
  const Tensor weight =
      place(tensors, std::vector<float>(in.weight.begin(), in.weight.begin() + rows * kHidden),
            {rows, kHidden});
  const Tensor dweight = tensors.allocate({rows, kHidden}, DType::f32);
  const Tensor lse = tensors.allocate({kTokens}, DType::f32);
  const Tensor target = tensors.allocate({kTokens}, DType::f32);
  const Tensor dhidden = tensors.allocate({kTokens, kHidden}, DType::f32);
  const Tensor labels = place(tensors, in.labels, {kTokens});
  const ops::VocabShardRange shard{rows, kVocab};  // the second half
#ifdef DYNCP_CUDA_EMULATION
  const auto copies_of = [](const auto& call) {
    const auto before = emulation::runtime_counters().device_to_host_copies;
    call();
    return emulation::runtime_counters().device_to_host_copies - before;
  };
  expect(copies_of([&] {
           ops::vocab_shard_logsumexp(gpu, hidden, weight, shard, labels, Tensor(), lse, target,
                                      {.token_chunk = 16, .vocab_chunk = 20});
         }) == 1,
         "step 1 reads back one status");
  expect(copies_of([&] {
           ops::combine_shard_logsumexp(gpu, lse.reshape({1, kTokens}), lse);
         }) == 0,
         "the combine reads back nothing");
  dweight.fill_zero();
  expect(copies_of([&] {
           ops::vocab_shard_cross_entropy(gpu, hidden, weight, shard, labels, Tensor(), lse, target,
                                          Tensor(), dhidden, dweight,
                                          {.token_chunk = 16, .vocab_chunk = 20});
         }) == 1,
         "step 3 with gradients reads back one status");
#endif
  in.labels[7] = static_cast<std::int32_t>(kVocab);  // past the whole vocabulary
  const Tensor bad = place(tensors, in.labels, {kTokens});
  expect_data_error(
      "step 1, label past the vocabulary",
      [&] { ops::vocab_shard_logsumexp(gpu, hidden, weight, shard, bad, Tensor(), lse, target); },
      {"token 7", "label 96", "vocab_shard_logsumexp"});
  expect_data_error("step 3, label past the vocabulary",
                    [&] {
                      ops::vocab_shard_cross_entropy(gpu, hidden, weight, shard, bad, Tensor(), lse,
                                                     target, Tensor(), Tensor(), Tensor());
                    },
                    {"token 7", "label 96", "vocab_shard_cross_entropy"});
}

// A bin without loss rows (a prompt-only microbatch): no product runs, every output is zero,
// dhidden is overwritten and dW left as it was; forward only returns the same (empty) loss.
GPU_TEST(vocab_shard_cross_entropy_without_loss_rows) {
  ops::cuda::install_backend();
  const Inputs in = make_inputs();
  core::Arena scratch("vocab shard gpu scratch", std::size_t{8} << 20, Device::cuda);
  core::Arena tensors("vocab shard gpu", std::size_t{8} << 20, Device::cuda);
  ops::OpContext gpu;
  gpu.device = Device::cuda;
  gpu.scratch = &scratch;
  const Tensor hidden = place(tensors, in.hidden, {kTokens, kHidden});
  const Tensor weight = place(tensors, in.weight, {kVocab, kHidden});
  const Tensor dweight = place(tensors, in.dweight_start, {kVocab, kHidden});
  const Tensor labels = place(tensors, std::vector<std::int32_t>(kTokens, -100), {kTokens});
  const Tensor garbage = place(tensors, random_floats(kTokens * kHidden, 96), {kTokens, kHidden});
  const Tensor lse = garbage.reshape({kTokens * kHidden}).slice(0, kTokens);
  const Tensor target = garbage.reshape({kTokens * kHidden}).slice(kTokens, 2 * kTokens);
  const Tensor per_token = garbage.reshape({kTokens * kHidden}).slice(2 * kTokens, 3 * kTokens);
  const Tensor dhidden = place(tensors, random_floats(kTokens * kHidden, 97), {kTokens, kHidden});
  ops::vocab_shard_logsumexp(gpu, hidden, weight, {0, kVocab}, labels, Tensor(), lse, target);
  const std::vector<float> zeros(kTokens, 0.0f);
  expect_close("shard lse without loss rows", to_host(lse), zeros, 0.0, 0.0);
  expect_close("target logit without loss rows", to_host(target), zeros, 0.0, 0.0);
  const auto result = ops::vocab_shard_cross_entropy(
      gpu, hidden, weight, {0, kVocab}, labels, Tensor(), lse, target, per_token, dhidden, dweight);
  expect(result.num_loss_tokens == 0 && result.loss_sum == 0.0, "no loss, no loss tokens");
  expect_close("per-token loss without loss rows", to_host(per_token), zeros, 0.0, 0.0);
  expect_close("dhidden without loss rows", to_host(dhidden),
               std::vector<float>(kTokens * kHidden, 0.0f), 0.0, 0.0);
  expect_close("dW untouched", to_host(dweight), in.dweight_start, 0.0, 0.0);
  const auto forward =
      ops::vocab_shard_cross_entropy(gpu, hidden, weight, {0, kVocab}, labels, Tensor(), lse,
                                     target, Tensor(), Tensor(), Tensor());
  expect(forward.num_loss_tokens == 0 && forward.loss_sum == 0.0, "forward only: the same");
}

GPU_TEST(embedding_shard_matches_cpu) {
  ops::cuda::install_backend();
  const int shards = 3, tokens = 41, hidden = 24;
  const std::int64_t rows = kVocab / shards;
  std::vector<float> table = random_floats(kVocab * hidden, 93);
  std::vector<float> dout = random_floats(tokens * hidden, 94);
  std::vector<float> dtable = random_floats(kVocab * hidden, 95, -0.1f, 0.1f);
  std::vector<std::int32_t> ids(tokens);
  for (int t = 0; t < tokens; ++t) ids[t] = (t * 53 + 11) % kVocab;
  ids[5] = ids[20] = ids[33] = 40;  // repeated, on shard 1
  const std::int64_t padding_idx = ids[0];
  core::Arena scratch("embedding shard gpu scratch", std::size_t{1} << 20, Device::cuda);
  core::Arena tensors("embedding shard gpu", std::size_t{4} << 20, Device::cuda);
  const ops::OpContext cpu{};
  ops::OpContext gpu;
  gpu.device = Device::cuda;
  gpu.scratch = &scratch;
  const Tensor d_table = place(tensors, table, {kVocab, hidden});
  const Tensor d_dout = place(tensors, dout, {tokens, hidden});
  const Tensor d_dtable = place(tensors, dtable, {kVocab, hidden});
  const Tensor d_ids = place(tensors, ids, {tokens});
  const Tensor d_out = tensors.allocate({tokens, hidden}, DType::f32);
  std::vector<float> out(tokens * hidden);
  for (int s = 0; s < shards; ++s) {
    const ops::VocabShardRange range{s * rows, kVocab};
    std::vector<float> cpu_table(table.begin() + s * rows * hidden,
                                 table.begin() + (s + 1) * rows * hidden);
    ops::embedding_shard_forward(cpu, view(ids, {tokens}), view(cpu_table, {rows, hidden}), range,
                                 view(out, {tokens, hidden}));
    ops::embedding_shard_forward(gpu, d_ids, d_table.slice(s * rows, (s + 1) * rows), range, d_out);
    expect_close("embedding shard " + std::to_string(s) + " rows", to_host(d_out), out, 0.0, 0.0);
    ops::embedding_shard_backward(gpu, d_ids, d_dout, d_dtable.slice(s * rows, (s + 1) * rows),
                                  range, padding_idx);
  }
  ops::embedding_backward(cpu, view(ids, {tokens}), view(dout, {tokens, hidden}),
                          view(dtable, {kVocab, hidden}), padding_idx);
  expect_close("embedding shards' dtable rows (padding row untouched)", to_host(d_dtable), dtable,
               kF32AtolRel, kF32Rtol);

  ids[3] = static_cast<std::int32_t>(kVocab);
  const Tensor bad = place(tensors, ids, {tokens});
  expect_data_error(
      "embedding shard, id past the vocabulary",
      [&] {
        ops::embedding_shard_forward(gpu, bad, d_table.slice(0, rows), {0, kVocab}, d_out);
      },
      {"token 3", "token id 96", "embedding_shard_forward"});
}

}  // namespace
}  // namespace dyncp::gpu_test
