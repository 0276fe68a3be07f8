// cuBLASLt products (bf16 in, fp32 accumulate) against the CPU gemm on the same bf16-rounded
// inputs: every transpose pair, sizes off every tile multiple, bf16 output, and the expert
// (grouped) path with empty groups.
#include "gemm.hpp"

#include "gpu_test.hpp"
#include "ops/gemm.hpp"

namespace dyncp::gpu_test {
namespace {

const ops::OpContext cpu{};

std::vector<float> bf16_download(const DeviceBuffer<kernels::bf16>& buffer) {
  const auto bits = buffer.download();
  std::vector<float> values(bits.size());
  for (std::size_t i = 0; i < bits.size(); ++i) values[i] = __bfloat162float(bits[i]);
  return values;
}

void check_gemm(int m, int n, int k, std::uint64_t seed) {
  kernels::Blas blas;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      std::vector<float> a = round_to_bf16(random_floats(m * k, seed)),
                         b = round_to_bf16(random_floats(k * n, seed + 1));
      std::vector<float> c = random_floats(m * n, seed + 2);
      const std::vector<float> c_start = c;
      const Shape a_shape = ta ? Shape{k, m} : Shape{m, k},
                  b_shape = tb ? Shape{n, k} : Shape{k, n};
      ops::gemm(cpu, view(a, a_shape), ta ? ops::Transpose::yes : ops::Transpose::no,
                view(b, b_shape), tb ? ops::Transpose::yes : ops::Transpose::no, view(c, {m, n}),
                0.5, true);
      auto d_a = to_device_bf16(a), d_b = to_device_bf16(b);
      DeviceBuffer<float> d_c(c_start);
      blas.gemm(ta, tb, m, n, k, 0.5f, d_a.get(), ta ? m : k, d_b.get(), tb ? k : n, 1.0f,
                d_c.get(), kernels::OutType::f32, n, nullptr);
      expect_close("gemm " + std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) +
                       " ta=" + (ta ? "T" : "N") + " tb=" + (tb ? "T" : "N"),
                   d_c.download(), c, kGemmAtolRel, kGemmRtol);
    }
  }
}

// Feature dims (the leading dimensions in the model) are multiples of 8; row counts are not.
GPU_TEST(gemm_every_transpose) {
  check_gemm(72, 40, 136, 60);
}

// Odd leading dimensions: cuBLASLt must still find an algorithm (a slower, unaligned one).
GPU_TEST(gemm_unaligned_leading_dims) {
  check_gemm(67, 45, 129, 160);
}

GPU_TEST(gemm_empty_inner_dimension) {
  // k = 0 (an expert with no rows in a weight gradient): the product is zero.
  kernels::Blas blas;
  DeviceBuffer<float> d_c(random_floats(6 * 5, 68));
  DeviceBuffer<kernels::bf16> d_a(1), d_b(1);
  blas.gemm(false, false, 6, 5, 0, 1.0f, d_a.get(), 1, d_b.get(), 5, 0.0f, d_c.get(),
            kernels::OutType::f32, 5, nullptr);
  expect_close("gemm k=0", d_c.download(), std::vector<float>(30, 0.0f), 0.0, 0.0);
}

GPU_TEST(linear_forward_backward_bf16_out) {
  kernels::Blas blas;
  const int rows = 100, in = 72, out = 40;
  std::vector<float> x = round_to_bf16(random_floats(rows * in, 63)),
                     w = round_to_bf16(random_floats(out * in, 64));
  std::vector<float> dy = round_to_bf16(random_floats(rows * out, 65)), y(rows * out);
  std::vector<float> dx = random_floats(rows * in, 66), dw = random_floats(out * in, 67);
  const std::vector<float> dx_start = dx, dw_start = dw;
  ops::linear_forward(cpu, view(x, {rows, in}), view(w, {out, in}), view(y, {rows, out}));
  ops::linear_backward(cpu, view(dy, {rows, out}), view(x, {rows, in}), view(w, {out, in}),
                       view(dx, {rows, in}), view(dw, {out, in}), ops::GradMode::accumulate);
  auto d_x = to_device_bf16(x), d_w = to_device_bf16(w), d_dy = to_device_bf16(dy);
  DeviceBuffer<kernels::bf16> d_y16(y.size());
  DeviceBuffer<float> d_y(y.size()), d_dx(dx_start), d_dw(dw_start);
  kernels::linear_forward(blas, d_x.get(), d_w.get(), d_y.get(), kernels::OutType::f32, rows, in,
                          out, nullptr);
  kernels::linear_forward(blas, d_x.get(), d_w.get(), d_y16.get(), kernels::OutType::bf16, rows, in,
                          out, nullptr);
  kernels::linear_backward(blas, d_dy.get(), d_x.get(), d_w.get(), d_dx.get(), true, d_dw.get(),
                           rows, in, out, nullptr);
  expect_close("linear forward", d_y.download(), y, kGemmAtolRel, kGemmRtol);
  expect_close("linear forward, bf16 out", bf16_download(d_y16), y, kBf16AtolRel, 1.0 / 128);
  expect_close("linear backward dx (accumulate)", d_dx.download(), dx, kGemmAtolRel, kGemmRtol);
  expect_close("linear backward dw (accumulates)", d_dw.download(), dw, kGemmAtolRel, kGemmRtol);
}

GPU_TEST(grouped_linear_with_empty_groups) {
  kernels::Blas blas;
  const int experts = 5, in = 48, out = 24;
  std::vector<std::int64_t> offsets = {0, 17, 17, 50, 51, 51};  // experts 1 and 4 get no rows
  const int rows = 51;
  std::vector<float> x = round_to_bf16(random_floats(rows * in, 70)),
                     w = round_to_bf16(random_floats(experts * out * in, 71));
  std::vector<float> dy = round_to_bf16(random_floats(rows * out, 72)), y(rows * out),
                     dx(rows * in);
  std::vector<float> dw = random_floats(experts * out * in, 73);
  const std::vector<float> dw_start = dw;
  ops::grouped_linear_forward(cpu, view(x, {rows, in}), view(w, {experts, out, in}),
                              view(offsets, {experts + 1}), view(y, {rows, out}));
  ops::grouped_linear_backward(cpu, view(dy, {rows, out}), view(x, {rows, in}),
                               view(w, {experts, out, in}), view(offsets, {experts + 1}),
                               view(dx, {rows, in}), view(dw, {experts, out, in}));
  auto d_x = to_device_bf16(x), d_w = to_device_bf16(w), d_dy = to_device_bf16(dy);
  DeviceBuffer<float> d_y(y.size()), d_dx(dx.size()), d_dw(dw_start);
  kernels::grouped_linear_forward(blas, d_x.get(), d_w.get(), offsets.data(), experts, d_y.get(),
                                  kernels::OutType::f32, in, out, nullptr);
  kernels::grouped_linear_backward(blas, d_dy.get(), d_x.get(), d_w.get(), offsets.data(), experts,
                                   d_dx.get(), false, d_dw.get(), in, out, nullptr);
  expect_close("grouped forward", d_y.download(), y, kGemmAtolRel, kGemmRtol);
  expect_close("grouped backward dx", d_dx.download(), dx, kGemmAtolRel, kGemmRtol);
  expect_close("grouped backward dw (empty experts untouched)", d_dw.download(), dw, kGemmAtolRel,
               kGemmRtol);
}

}  // namespace
}  // namespace dyncp::gpu_test
