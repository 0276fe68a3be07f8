#include "ops/elementwise.hpp"

#include "core/dtype.hpp"
#include "op_test_utils.hpp"

using namespace dyncp::ops;
using namespace dyncp::ops::test;

TEST_CASE("add, axpy and scale compute element-wise and allow aliasing", "[ops][elementwise]") {
  const OpContext ctx;
  const DType dtype = GENERATE(DType::f32, DType::f64);
  const Tensor a = random_tensor(Shape{3, 5}, dtype, 1), b = random_tensor(Shape{15}, dtype, 2);
  const Tensor a0 = clone(a);
  const Tensor out = Tensor::empty(Shape{3, 5}, dtype);
  add(ctx, a, b, out);
  for (int i = 0; i < 15; ++i) CHECK(element(out, i) == Approx(element(a, i) + element(b, i)));
  add(ctx, a, b, a);  // in place
  require_close(a, out, 0, 0, "in place add");
  axpy(ctx, -1.0, b, a);
  require_close(a, a0, 1e-6, 1e-6, "axpy undoes add");
  scale(ctx, a, 2.0);
  for (int i = 0; i < 15; ++i) CHECK(element(a, i) == Approx(2 * element(a0, i)));
  zero(ctx, a);
  for (int i = 0; i < 15; ++i) CHECK(element(a, i) == 0.0);
  CHECK_THROWS_WITH(add(ctx, a, Tensor::empty(Shape{4}, dtype), out), Catch::Contains("add"));
}

TEST_CASE("convert rounds f32 to bf16 to nearest even and back", "[ops][elementwise]") {
  const OpContext ctx;
  const Tensor src = Tensor::empty(Shape{3}, DType::f32);
  src.data<float>()[0] = 1.0F;
  src.data<float>()[1] = 1.0F + 1.0F / 256;  // exactly halfway between two bf16 values: to even
  src.data<float>()[2] = -3.140625F;
  const Tensor bf = Tensor::empty(Shape{3}, DType::bf16);
  convert(ctx, src, bf);
  CHECK(bf.bf16_bits()[0] == 0x3f80);
  CHECK(bf.bf16_bits()[1] == 0x3f80);
  const Tensor back = Tensor::empty(Shape{3}, DType::f64);
  convert(ctx, bf, back);
  CHECK(element(back, 0) == 1.0);
  CHECK(element(back, 2) == -3.140625);
  CHECK_THROWS_WITH(convert(ctx, src, Tensor::empty(Shape{3}, DType::i32)),
                    Catch::Contains("convert"));
}
