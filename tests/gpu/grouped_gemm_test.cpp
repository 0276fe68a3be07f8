// The grouped expert kernels (kernels/grouped_gemm.hpp) against the CPU grouped op on the same
// inputs: fp32 (CUDA cores) and bf16 products (tensor cores, operands rounded as they are
// staged), groups longer than a tile, empty groups at the start, middle and end, feature sizes
// off every tile multiple and off the 16-byte load width; and, through ops::grouped_linear_*,
// that device offsets run ONE launch per product where host offsets run one per expert.
#include "grouped_gemm.hpp"

#include <string>

#include "core/arena.hpp"
#include "gpu_test.hpp"
#include "ops/cuda/cuda_backend.hpp"
#include "ops/gemm.hpp"
#ifdef DYNCP_CUDA_EMULATION
#include "emulation_counters.h"
#endif

namespace dyncp::gpu_test {
namespace {

using core::Device;

struct GroupedCase {
  std::vector<std::int64_t> offsets;
  int in, out;
  std::uint64_t seed;
};

void check_grouped(const GroupedCase& c, bool bf16) {
  const int experts = static_cast<int>(c.offsets.size()) - 1;
  const int rows = static_cast<int>(c.offsets.back()), in = c.in, out = c.out;
  std::vector<float> x = random_floats(rows * in, c.seed),
                     w = random_floats(experts * out * in, c.seed + 1),
                     dy = random_floats(rows * out, c.seed + 2),
                     dx_start = random_floats(rows * in, c.seed + 3),
                     dw_start = random_floats(experts * out * in, c.seed + 4);
  // The CPU reference on the values the bf16 kernel multiplies (it rounds while staging).
  std::vector<float> xr = bf16 ? round_to_bf16(x) : x, wr = bf16 ? round_to_bf16(w) : w,
                     dyr = bf16 ? round_to_bf16(dy) : dy;
  std::vector<std::int64_t> offsets = c.offsets;
  std::vector<float> y(rows * out), dx = dx_start, dw = dw_start;
  const ops::OpContext cpu{};
  ops::grouped_linear_forward(cpu, view(xr, {rows, in}), view(wr, {experts, out, in}),
                              view(offsets, {experts + 1}), view(y, {rows, out}));
  ops::grouped_linear_backward(cpu, view(dyr, {rows, out}), view(xr, {rows, in}),
                               view(wr, {experts, out, in}), view(offsets, {experts + 1}),
                               view(dx, {rows, in}), view(dw, {experts, out, in}),
                               ops::GradMode::accumulate);

  DeviceBuffer<float> d_x(x), d_w(w), d_dy(dy), d_y(y.size()), d_dx(dx_start), d_dw(dw_start),
      d_dx_overwrite(dx_start);
  DeviceBuffer<std::int64_t> d_offsets(c.offsets);
  kernels::GroupedGemmShape shape{d_offsets.get(), experts, rows, in, out, bf16};
  kernels::grouped_gemm_forward(shape, d_x.get(), d_w.get(), d_y.get(), nullptr);
  kernels::grouped_gemm_data_grad(shape, d_dy.get(), d_w.get(), d_dx.get(), true, nullptr);
  kernels::grouped_gemm_data_grad(shape, d_dy.get(), d_w.get(), d_dx_overwrite.get(), false,
                                  nullptr);
  kernels::grouped_gemm_weight_grad(shape, d_dy.get(), d_x.get(), d_dw.get(), nullptr);

  std::vector<float> dx_overwrite = dx;
  for (std::size_t i = 0; i < dx.size(); ++i) dx_overwrite[i] = dx[i] - dx_start[i];
  const std::string name = std::string(bf16 ? "bf16" : "fp32") + " grouped " +
                           std::to_string(rows) + "x" + std::to_string(in) + "->" +
                           std::to_string(out) + " over " + std::to_string(experts) + " experts: ";
  expect_close(name + "forward", d_y.download(), y, kGemmAtolRel, kGemmRtol);
  expect_close(name + "data gradient (accumulate)", d_dx.download(), dx, kGemmAtolRel, kGemmRtol);
  expect_close(name + "data gradient (overwrite)", d_dx_overwrite.download(), dx_overwrite,
               kGemmAtolRel, kGemmRtol);
  const std::vector<float> got_dw = d_dw.download();
  expect_close(name + "weight gradient (accumulates)", got_dw, dw, kGemmAtolRel, kGemmRtol);
  if (bf16) {
    // x in bf16 storage (bf16 activations): the kernels stage the stored value, which is what
    // they round the fp32 x to, so forward and weight gradient are the fp32-x results bit for bit.
    std::vector<std::uint16_t> x_bits(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) x_bits[i] = core::float_to_bf16_bits(x[i]);
    DeviceBuffer<std::uint16_t> d_x16(x_bits);
    DeviceBuffer<float> d_y16(y.size()), d_dw16(dw_start);
    const auto* x16 = reinterpret_cast<const __nv_bfloat16*>(d_x16.get());
    kernels::grouped_gemm_forward(shape, x16, d_w.get(), d_y16.get(), nullptr);
    kernels::grouped_gemm_weight_grad(shape, d_dy.get(), x16, d_dw16.get(), nullptr);
    expect(d_y16.download() == d_y.download(), name + "forward from bf16 rows, bit for bit");
    expect(d_dw16.download() == got_dw, name + "weight gradient from bf16 rows, bit for bit");
  }
  for (int e = 0; e < experts; ++e) {
    if (c.offsets[e + 1] != c.offsets[e]) continue;
    const auto first = static_cast<std::size_t>(e) * out * in;
    bool untouched = true;
    for (std::size_t i = first; i < first + static_cast<std::size_t>(out) * in; ++i)
      untouched = untouched && got_dw[i] == dw_start[i];
    expect(untouched, name + "an empty expert's weight gradient is bitwise untouched");
  }
}

// Groups of 0..150 rows (several 64-row tiles, partial tiles, empty experts first, inside and
// last); in / out off the 64-wide tiles and the 32-deep slices.
const GroupedCase kCases[] = {
    {{0, 0, 17, 17, 167, 230, 230}, 72, 40, 80},
    {{0, 5, 5, 70, 71}, 45, 23, 90},  // 45 and 23: no 16-byte loads (the scalar staging path)
    {{0, 130}, 136, 96, 100},         // one expert, k beyond several slices
};

GPU_TEST(grouped_gemm_fp32_matches_cpu) {
  for (const auto& c : kCases) check_grouped(c, false);
}

GPU_TEST(grouped_gemm_bf16_matches_cpu_on_rounded_operands) {
  for (const auto& c : kCases) check_grouped(c, true);
}

#ifdef DYNCP_CUDA_EMULATION
// The op with device offsets is one launch per product whatever the expert count; with host
// offsets one cuBLASLt product per non-empty expert (the model.moe_grouped_gemm: false path).
GPU_TEST(grouped_linear_device_offsets_is_one_launch_per_product) {
  ops::cuda::install_backend();
  const int experts = 6, in = 32, out = 24;
  std::vector<std::int64_t> offsets = {0, 9, 9, 30, 31, 50, 64};
  const int rows = 64;
  core::Arena arena("grouped launches", std::size_t{8} << 20, Device::cuda);
  ops::OpContext ctx;
  ctx.device = Device::cuda;
  ctx.scratch = &arena;
  const auto upload = [&](const std::vector<float>& values, const core::Shape& shape) {
    std::vector<float> copy = values;
    const Tensor t = arena.allocate(shape, DType::f32);
    t.copy_from(view(copy, shape));
    return t;
  };
  const Tensor x = upload(random_floats(rows * in, 5), {rows, in});
  const Tensor w = upload(random_floats(experts * out * in, 6), {experts, out, in});
  const Tensor dy = upload(random_floats(rows * out, 7), {rows, out});
  const Tensor y = arena.allocate({rows, out}, DType::f32),
               dx = arena.allocate({rows, in}, DType::f32);
  const Tensor dw = arena.allocate({experts, out, in}, DType::f32);
  dw.fill_zero();
  const Tensor host_offsets = view(offsets, {experts + 1});
  const Tensor device_offsets = arena.allocate({experts + 1}, DType::i64);
  device_offsets.copy_from(host_offsets);

  const auto launches_of = [](const auto& run) {
    const auto before = emulation::runtime_counters().launches;
    run();
    return emulation::runtime_counters().launches - before;
  };
  expect(launches_of([&] { ops::grouped_linear_forward(ctx, x, w, device_offsets, y); }) == 1,
         "device offsets: the forward is one launch");
  expect(launches_of(
             [&] { ops::grouped_linear_backward(ctx, dy, x, w, device_offsets, dx, dw); }) == 2,
         "device offsets: the backward is one data- and one weight-gradient launch");
  const auto d2h_before = emulation::runtime_counters().device_to_host_copies;
  ops::grouped_linear_forward(ctx, x, w, device_offsets, y);
  ops::grouped_linear_backward(ctx, dy, x, w, device_offsets, dx, dw);
  expect(emulation::runtime_counters().device_to_host_copies == d2h_before,
         "device offsets: nothing comes back to the host");
  expect(launches_of([&] { ops::grouped_linear_forward(ctx, x, w, host_offsets, y); }) == 5,
         "host offsets: one product per non-empty expert (5 of 6)");
}
#endif

}  // namespace
}  // namespace dyncp::gpu_test
