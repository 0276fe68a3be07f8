// Fused chunked cross-entropy against the CPU op on the same bf16-rounded hidden states and
// LM head: loss sum and count, per-token loss, dhidden, dW (with ignored labels, a loss
// mask and a token count that is not a multiple of the chunk).
#include "cross_entropy.hpp"

#include <climits>
#include <cmath>

#include "core/arena.hpp"
#include "gpu_test.hpp"
#include "ops/cross_entropy.hpp"

namespace dyncp::gpu_test {
namespace {

GPU_TEST(cross_entropy_forward_backward) {
  const int tokens = 150, hidden = 64, vocab = 1000, chunk = 64;
  std::vector<float> h = round_to_bf16(random_floats(tokens * hidden, 80)),
                     w = round_to_bf16(random_floats(vocab * hidden, 81, -0.3f, 0.3f));
  std::vector<std::int32_t> labels(tokens);
  std::vector<std::uint8_t> mask(tokens, 1);
  for (int t = 0; t < tokens; ++t) labels[t] = (t * 37) % vocab;
  labels[3] = -100;  // ignored
  mask[10] = 0;      // masked out
  std::vector<float> loss(tokens), dh(tokens * hidden),
      dw = random_floats(vocab * hidden, 82, -0.01f, 0.01f);
  const std::vector<float> dw_start = dw;
  core::Arena arena("cross_entropy_test");
  ops::OpContext cpu{};
  cpu.scratch = &arena;
  const auto result = ops::fused_cross_entropy(
      cpu, view(h, {tokens, hidden}), view(w, {vocab, hidden}), view(labels, {tokens}),
      view(mask, {tokens}), view(loss, {tokens}), view(dh, {tokens, hidden}),
      view(dw, {vocab, hidden}), {.token_chunk = chunk, .vocab_chunk = 262144, .grad_scale = 0.25});

  kernels::Blas blas;
  auto d_h = to_device_bf16(h), d_w = to_device_bf16(w);
  DeviceBuffer<std::int32_t> d_labels(labels), d_bad(std::vector<std::int32_t>{INT_MAX});
  DeviceBuffer<std::uint8_t> d_mask(mask);
  DeviceBuffer<float> d_loss(tokens), d_dh(dh.size()), d_dw(dw_start), d_logits(chunk * vocab);
  DeviceBuffer<kernels::bf16> d_dlogits(chunk * vocab);
  DeviceBuffer<double> d_sum(1);
  DeviceBuffer<unsigned long long> d_count(1);
  d_sum.zero();
  d_count.zero();
  kernels::CrossEntropyArgs args;
  args.hidden = d_h.get();
  args.lm_weight = d_w.get();
  args.labels = d_labels.get();
  args.loss_mask = d_mask.get();
  args.tokens = tokens;
  args.hidden_size = hidden;
  args.vocab = vocab;
  args.token_chunk = chunk;
  args.grad_scale = 0.25f;
  args.per_token_loss = d_loss.get();
  args.dhidden = d_dh.get();
  args.dlm_weight = d_dw.get();
  args.loss_sum = d_sum.get();
  args.num_loss_tokens = d_count.get();
  args.bad_label = d_bad.get();
  kernels::fused_cross_entropy(blas, args, d_logits.get(), d_dlogits.get(), nullptr);

  const double got_sum = d_sum.download()[0];
  expect(d_count.download()[0] == static_cast<unsigned long long>(result.num_loss_tokens),
         "loss token count " + std::to_string(d_count.download()[0]) + " vs CPU " +
             std::to_string(result.num_loss_tokens));
  expect(std::fabs(got_sum - result.loss_sum) <= 1e-4 * std::fabs(result.loss_sum),
         "loss sum " + std::to_string(got_sum) + " vs CPU " + std::to_string(result.loss_sum));
  expect_close("per-token loss", d_loss.download(), loss, kGemmAtolRel, kGemmRtol);
  // dlogits are rounded to bf16 before the two backward products.
  expect_close("dhidden", d_dh.download(), dh, kBf16AtolRel, kBf16Rtol);
  expect_close("dlm_weight (accumulates)", d_dw.download(), dw, kBf16AtolRel, kBf16Rtol);
  expect(d_bad.download()[0] == INT_MAX, "no bad label reported");

  // Forward only (no gradients asked for) gives the same loss; a label >= vocab is reported.
  labels[20] = vocab;
  d_labels.upload(labels);
  d_sum.zero();
  d_count.zero();
  args.dhidden = nullptr;
  args.dlm_weight = nullptr;
  kernels::fused_cross_entropy(blas, args, d_logits.get(), d_dlogits.get(), nullptr);
  const double row20 = loss[20];
  expect(std::fabs(d_sum.download()[0] - (result.loss_sum - row20)) <=
             1e-4 * std::fabs(result.loss_sum),
         "forward-only loss sum without the bad row");
  expect(d_bad.download()[0] == 20, "a label >= vocab is reported by row");
}

}  // namespace
}  // namespace dyncp::gpu_test
