// Permute plan and token permutation kernels against lib/ops.
#include "ops/permute.hpp"

#include <climits>

#include "gpu_test.hpp"
#include "ops.hpp"

namespace dyncp::gpu_test {
namespace {

const ops::OpContext cpu{};

GPU_TEST(permute_plan_and_round_trip) {
  const int tokens = 150, k = 4, experts = 16, hidden = 33;
  std::vector<std::int32_t> ids(tokens * k);
  std::mt19937 engine(50);
  for (int t = 0; t < tokens; ++t) {
    for (int j = 0; j < k; ++j)
      ids[t * k + j] = static_cast<int>((engine() % 12) + (j % 2));  // experts 13..15 empty
  }
  std::vector<std::int32_t> order(tokens * k), arow(tokens * k);
  std::vector<std::int64_t> offsets(experts + 1), per_expert(experts);
  ops::PermutePlan plan{view(order, {tokens * k}), view(arow, {tokens * k}),
                        view(offsets, {experts + 1}), view(per_expert, {experts})};
  ops::build_permute_plan(cpu, view(ids, {tokens, k}), experts, plan);
  DeviceBuffer<std::int32_t> d_ids(ids), d_order(ids.size()), d_arow(ids.size()),
      d_bad(std::vector<std::int32_t>{INT_MAX});
  DeviceBuffer<std::int64_t> d_offsets(experts + 1);
  kernels::build_permute_plan(d_ids.get(), tokens * k, experts, d_order.get(), d_arow.get(),
                              d_offsets.get(), d_bad.get(), nullptr);
  expect(d_order.download() == order, "expert_order equals the CPU's (stable by token, slot)");
  expect(d_arow.download() == arow, "assignment_row equals the CPU's");
  expect(d_offsets.download() == offsets, "expert_offsets equal the CPU's");
  expect(d_bad.download()[0] == INT_MAX, "no bad expert id reported");

  std::vector<float> x = random_floats(tokens * hidden, 51), x_perm(tokens * k * hidden);
  std::vector<float> weights = random_floats(tokens * k, 52), y(tokens * hidden);
  std::vector<float> dx = random_floats(tokens * hidden, 53),
                     dy = random_floats(tokens * hidden, 54);
  std::vector<float> dy_perm(tokens * k * hidden), dweights(tokens * k);
  const std::vector<float> dx_start = dx;
  ops::permute_forward(cpu, view(x, {tokens, hidden}), plan, view(x_perm, {tokens * k, hidden}));
  // The experts' outputs: any values, one distinct row per assignment.
  std::vector<float> y_perm = random_floats(tokens * k * hidden, 55);
  ops::unpermute_forward(cpu, view(y_perm, {tokens * k, hidden}), plan, view(weights, {tokens, k}),
                         view(y, {tokens, hidden}));
  ops::permute_backward(cpu, view(y_perm, {tokens * k, hidden}), plan, view(dx, {tokens, hidden}),
                        ops::GradMode::accumulate);
  ops::unpermute_backward(cpu, view(dy, {tokens, hidden}), view(y_perm, {tokens * k, hidden}), plan,
                          view(weights, {tokens, k}), view(dy_perm, {tokens * k, hidden}),
                          view(dweights, {tokens, k}));
  DeviceBuffer<float> d_x(x), d_x_perm(x_perm.size()), d_y_perm(y_perm), d_weights(weights),
      d_y(y.size()), d_dx(dx_start), d_dy(dy), d_dy_perm(dy_perm.size()),
      d_dweights(dweights.size());
  kernels::permute_forward(d_x.get(), d_order.get(), d_x_perm.get(), tokens, k, hidden, nullptr);
  kernels::unpermute_forward(d_y_perm.get(), d_arow.get(), d_weights.get(), d_y.get(), tokens, k,
                             hidden, nullptr);
  kernels::permute_backward(d_y_perm.get(), d_arow.get(), d_dx.get(), tokens, k, hidden, true,
                            nullptr);
  kernels::unpermute_backward(d_dy.get(), d_y_perm.get(), d_arow.get(), d_weights.get(),
                              d_dy_perm.get(), d_dweights.get(), tokens, k, hidden, nullptr);
  expect_close("permute forward", d_x_perm.download(), x_perm, 0.0, 0.0);
  expect_close("unpermute forward", d_y.download(), y, kF32AtolRel, kF32Rtol);
  expect_close("permute backward (accumulate)", d_dx.download(), dx, kF32AtolRel, kF32Rtol);
  expect_close("unpermute backward dy_perm", d_dy_perm.download(), dy_perm, kF32AtolRel, kF32Rtol);
  expect_close("unpermute backward dweights", d_dweights.download(), dweights, kF32AtolRel,
               kF32Rtol);

  // y_perm as bf16 storage (bf16 activations): the op reads the rows widened, so it equals the
  // fp32 op on the rounded rows bit for bit on the CPU, and the kernels match it.
  std::vector<std::uint16_t> y_perm_bits(y_perm.size());
  std::vector<float> y_perm_rounded(y_perm.size());
  for (std::size_t i = 0; i < y_perm.size(); ++i) {
    y_perm_bits[i] = core::float_to_bf16_bits(y_perm[i]);
    y_perm_rounded[i] = core::bf16_bits_to_float(y_perm_bits[i]);
  }
  const Tensor bf16_rows = Tensor::view_of(y_perm_bits.data(), {tokens * k, hidden}, DType::bf16);
  std::vector<float> y16(y.size()), y_ref(y.size()), dy_perm16(dy_perm.size()),
      dy_perm_ref(dy_perm.size()), dweights16(dweights.size()), dweights_ref(dweights.size());
  ops::unpermute_forward(cpu, bf16_rows, plan, view(weights, {tokens, k}),
                         view(y16, {tokens, hidden}));
  ops::unpermute_forward(cpu, view(y_perm_rounded, {tokens * k, hidden}), plan,
                         view(weights, {tokens, k}), view(y_ref, {tokens, hidden}));
  ops::unpermute_backward(cpu, view(dy, {tokens, hidden}), bf16_rows, plan,
                          view(weights, {tokens, k}), view(dy_perm16, {tokens * k, hidden}),
                          view(dweights16, {tokens, k}));
  ops::unpermute_backward(cpu, view(dy, {tokens, hidden}),
                          view(y_perm_rounded, {tokens * k, hidden}), plan,
                          view(weights, {tokens, k}), view(dy_perm_ref, {tokens * k, hidden}),
                          view(dweights_ref, {tokens, k}));
  expect(y16 == y_ref && dy_perm16 == dy_perm_ref && dweights16 == dweights_ref,
         "CPU op on bf16 y_perm = fp32 op on the rounded rows, bit for bit");
  DeviceBuffer<std::uint16_t> d_y_perm16(y_perm_bits);
  const auto* rows16 = reinterpret_cast<const kernels::bf16*>(d_y_perm16.get());
  kernels::unpermute_forward(rows16, d_arow.get(), d_weights.get(), d_y.get(), tokens, k, hidden,
                             nullptr);
  kernels::unpermute_backward(d_dy.get(), rows16, d_arow.get(), d_weights.get(), d_dy_perm.get(),
                              d_dweights.get(), tokens, k, hidden, nullptr);
  expect_close("unpermute forward, bf16 y_perm", d_y.download(), y16, kF32AtolRel, kF32Rtol);
  expect_close("unpermute backward dweights, bf16 y_perm", d_dweights.download(), dweights16,
               kF32AtolRel, kF32Rtol);

  ids[7] = experts;
  d_ids.upload(ids);
  d_bad.upload(std::vector<std::int32_t>{INT_MAX});
  kernels::build_permute_plan(d_ids.get(), tokens * k, experts, d_order.get(), d_arow.get(),
                              d_offsets.get(), d_bad.get(), nullptr);
  expect(d_bad.download()[0] == 7, "an expert id out of range is reported by assignment");
}

}  // namespace
}  // namespace dyncp::gpu_test
