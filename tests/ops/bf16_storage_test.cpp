// bf16 storage (bf16 activations) read by the ops that consume kept activations: each op given
// bf16 inputs computes, on the CPU, exactly what its fp32 form computes on the widened values,
// and refuses dtype mixes it does not define.

#include <cstring>
#include <vector>

#include "core/dtype.hpp"
#include "op_test_utils.hpp"
#include "ops/bf16_operands.hpp"
#include "ops/elementwise.hpp"
#include "ops/gated_rmsnorm.hpp"
#include "ops/gemm.hpp"
#include "ops/swiglu.hpp"

using namespace dyncp;
using namespace dyncp::ops;
using namespace dyncp::ops::test;

namespace {

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.numel() == b.numel() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

// x rounded into bf16 storage, and the same values widened back to fp32.
struct Stored {
  Tensor bf16, widened;
};

Stored stored(const Tensor& x) {
  const OpContext cpu{};
  Stored s{Tensor::empty(x.shape(), DType::bf16), Tensor::empty(x.shape(), DType::f32)};
  convert(cpu, x, s.bf16);
  convert(cpu, s.bf16, s.widened);
  return s;
}

}  // namespace

TEST_CASE("fused SwiGLU reads a bf16 gate_up as its widened values", "[ops][bf16]") {
  const OpContext cpu{};
  const std::int64_t rows = 9, inner = 13;
  const Stored gate_up = stored(random_tensor(Shape{rows, 2 * inner}, DType::f32, 21));
  const Tensor dout = random_tensor(Shape{rows, inner}, DType::f32, 22);
  const Tensor out = Tensor::empty(Shape{rows, inner}, DType::f32), out_want = clone(out);
  swiglu_fused_forward(cpu, gate_up.bf16, out);
  swiglu_fused_forward(cpu, gate_up.widened, out_want);
  CHECK(bitwise_equal(out, out_want));
  const Tensor grad = Tensor::empty(Shape{rows, 2 * inner}, DType::f32), grad_want = clone(grad);
  swiglu_fused_backward(cpu, dout, gate_up.bf16, grad);
  swiglu_fused_backward(cpu, dout, gate_up.widened, grad_want);
  CHECK(bitwise_equal(grad, grad_want));
  const Tensor out64 = Tensor::empty(Shape{rows, inner}, DType::f64);
  CHECK_THROWS_WITH(swiglu_fused_forward(cpu, gate_up.bf16, out64),
                    Catch::Contains("bf16 gate_up needs f32"));
}

TEST_CASE("gated RMSNorm reads bf16 x and z as their widened values", "[ops][bf16]") {
  const OpContext cpu{};
  const std::int64_t rows = 11, n = 19;
  const Stored x = stored(random_tensor(Shape{rows, n}, DType::f32, 31));
  const Stored z = stored(random_tensor(Shape{rows, n}, DType::f32, 32));
  const Tensor w = random_tensor(Shape{n}, DType::f32, 33);
  const Tensor dy = random_tensor(Shape{rows, n}, DType::f32, 34);
  const Tensor y = Tensor::empty(Shape{rows, n}, DType::f32), y_want = clone(y);
  RmsNormSaved saved{Tensor::empty(Shape{rows}, DType::f32)};
  RmsNormSaved saved_want{Tensor::empty(Shape{rows}, DType::f32)};
  gated_rmsnorm_forward(cpu, x.bf16, z.bf16, w, 1e-6, y, saved);
  gated_rmsnorm_forward(cpu, x.widened, z.widened, w, 1e-6, y_want, saved_want);
  CHECK(bitwise_equal(y, y_want));
  CHECK(bitwise_equal(saved.inv_rms, saved_want.inv_rms));
  const Tensor dw_start = random_tensor(Shape{n}, DType::f32, 35);
  const Tensor dx = Tensor::empty(Shape{rows, n}, DType::f32), dx_want = clone(dx);
  const Tensor dz = Tensor::empty(Shape{rows, n}, DType::f32), dz_want = clone(dz);
  const Tensor dw = clone(dw_start), dw_want = clone(dw_start);
  gated_rmsnorm_backward(cpu, dy, x.bf16, z.bf16, w, saved, dx, dz, dw);
  gated_rmsnorm_backward(cpu, dy, x.widened, z.widened, w, saved_want, dx_want, dz_want, dw_want);
  CHECK(bitwise_equal(dx, dx_want));
  CHECK(bitwise_equal(dz, dz_want));
  CHECK(bitwise_equal(dw, dw_want));
  // bf16 x beside an fp32 z is no layout the model stores: refused.
  CHECK_THROWS_WITH(gated_rmsnorm_forward(cpu, x.bf16, z.widened, w, 1e-6, y, saved),
                    Catch::Contains("both x and z in bf16"));
}

TEST_CASE("linear backward reads a bf16 x as the rounded operand under bf16 products",
          "[ops][bf16][gemm]") {
  core::Arena scratch{"test.scratch", std::size_t{1} << 20};
  OpContext fp32, bf16;
  fp32.scratch = &scratch;
  bf16.scratch = &scratch;
  bf16.precision = ComputePrecision::bf16;
  const std::int64_t rows = 7, in = 21, out = 5;
  const Stored x = stored(random_tensor(Shape{rows, in}, DType::f32, 41));
  const Tensor w = random_tensor(Shape{out, in}, DType::f32, 42);
  const Tensor dy = random_tensor(Shape{rows, out}, DType::f32, 43);
  const Tensor dx = Tensor::empty(Shape{rows, in}, DType::f32), dx_want = clone(dx);
  const Tensor dw = Tensor::zeros(Shape{out, in}, DType::f32), dw_want = clone(dw);
  linear_backward(bf16, dy, x.bf16, w, dx, dw);
  linear_backward(bf16, dy, x.widened, w, dx_want, dw_want);
  CHECK(bitwise_equal(dx, dx_want));
  CHECK(bitwise_equal(dw, dw_want));
  CHECK_THROWS_WITH(linear_backward(fp32, dy, x.bf16, w, dx, dw),
                    Catch::Contains("needs bf16 products"));
}
