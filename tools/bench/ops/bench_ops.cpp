// bench_ops: GFLOP/s of the CPU attention and linear (gemm) ops at the tiny and small model
// shapes (reference qwen-moe.md §8 config A; the small config: hidden 512, bins of 2,048
// tokens). Each case is first checked against a reference, then timed: warm-up, then `repeats`
// timed calls; one JSON line per case with median and min milliseconds and GFLOP/s of the median.
//
//   build-*/tools/bench/ops/bench_ops [repeats]      (threads: OPENBLAS_NUM_THREADS)

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <string>
#include <vector>

#include "core/arena.hpp"
#include "core/rng.hpp"
#include "ops/attention.hpp"
#include "ops/cross_entropy.hpp"
#include "ops/gemm.hpp"

using namespace dyncp;
using core::DType;
using core::Shape;
using core::Tensor;
using ops::OpContext;

namespace {

Tensor random_f32(const Shape& shape, std::uint64_t stream, double scale = 1.0) {
  Tensor t = Tensor::empty(shape, DType::f32);
  core::Rng rng(7, core::RngPurpose::test, stream);
  for (std::int64_t i = 0; i < t.numel(); ++i)
    t.data<float>()[i] = static_cast<float>(scale * (2 * rng.uniform() - 1));
  return t;
}

Tensor int_tensor(const std::vector<std::int32_t>& values) {
  Tensor t = Tensor::empty(Shape{static_cast<std::int64_t>(values.size())}, DType::i32);
  std::copy(values.begin(), values.end(), t.data<std::int32_t>());
  return t;
}

struct Timing {
  double median_ms, min_ms, median_cpu_ms;
};

double process_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

// Wall time and process CPU time: on a shared machine the CPU time is the steadier number.
Timing time_it(int repeats, const std::function<void()>& body) {
  body();  // warm-up
  std::vector<double> ms, cpu_ms;
  for (int r = 0; r < repeats; ++r) {
    const double cpu_start = process_cpu_ms();
    const auto start = std::chrono::steady_clock::now();
    body();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                     .count());
    cpu_ms.push_back(process_cpu_ms() - cpu_start);
  }
  std::sort(ms.begin(), ms.end());
  std::sort(cpu_ms.begin(), cpu_ms.end());
  return {ms[ms.size() / 2], ms.front(), cpu_ms[cpu_ms.size() / 2]};
}

void report(const std::string& name, const std::string& shape, double flops, const Timing& t) {
  std::printf(
      "{\"bench\": \"%s\", \"shape\": \"%s\", \"median_ms\": %.3f, \"min_ms\": %.3f, "
      "\"median_cpu_ms\": %.3f, \"gflops\": %.2f, \"gflops_cpu\": %.2f}\n",
      name.c_str(), shape.c_str(), t.median_ms, t.min_ms, t.median_cpu_ms,
      flops / (t.median_ms * 1e6), flops / (t.median_cpu_ms * 1e6));
}

struct AttentionCase {
  const char* name;
  std::vector<std::int32_t> lengths;
  std::int64_t q_heads, kv_heads, head_dim;
};

void bench_attention(const AttentionCase& c, int repeats) {
  std::vector<std::int32_t> cu{0}, positions;
  double visible_pairs = 0;
  for (std::int32_t length : c.lengths) {
    cu.push_back(cu.back() + length);
    for (std::int32_t p = 0; p < length; ++p) positions.push_back(p);
    visible_pairs += 0.5 * length * (length + 1.0);
  }
  const std::int64_t tokens = cu.back();
  const ops::VarlenAttentionLayout layout{int_tensor(cu), int_tensor(cu), int_tensor(positions),
                                          int_tensor(positions)};
  const Tensor q = random_f32(Shape{tokens, c.q_heads, c.head_dim}, 1);
  const Tensor k = random_f32(Shape{tokens, c.kv_heads, c.head_dim}, 2);
  const Tensor v = random_f32(Shape{tokens, c.kv_heads, c.head_dim}, 3);
  const Tensor out = Tensor::empty(q.shape(), DType::f32);
  ops::AttentionSaved saved{Tensor::empty(Shape{tokens, c.q_heads}, DType::f32)};
  core::Arena scratch("bench", 1 << 20);
  OpContext ctx;
  ctx.scratch = &scratch;
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim));

  // Check against the reference before timing.
  ops::attention_forward(ctx, q, k, v, layout, scale, out, saved);
  const Tensor ref_out = Tensor::empty(q.shape(), DType::f32);
  const Tensor ref_lse = Tensor::empty(saved.lse.shape(), DType::f32);
  ops::attention_forward_reference(ctx, q, k, v, layout, scale, ref_out, ref_lse);
  double max_err = 0;
  for (std::int64_t i = 0; i < out.numel(); ++i) {
    max_err = std::max(
        max_err, static_cast<double>(std::abs(out.data<float>()[i] - ref_out.data<float>()[i])));
  }
  if (max_err > 1e-4) {
    std::fprintf(stderr, "attention %s: max |tiled - reference| = %g\n", c.name, max_err);
    std::exit(1);
  }
  const std::string shape =
      "T=" + std::to_string(tokens) + " seqs=" + std::to_string(c.lengths.size()) +
      " Hq=" + std::to_string(c.q_heads) + " Hkv=" + std::to_string(c.kv_heads) +
      " d=" + std::to_string(c.head_dim);
  const double forward_flops = 4.0 * visible_pairs * static_cast<double>(c.q_heads * c.head_dim);
  report(std::string("attention_forward/") + c.name, shape, forward_flops, time_it(repeats, [&] {
           ops::attention_forward(ctx, q, k, v, layout, scale, out, saved);
         }));
  const Tensor dout = random_f32(q.shape(), 4);
  const Tensor dq = Tensor::empty(q.shape(), DType::f32);
  const Tensor dk = Tensor::empty(k.shape(), DType::f32), dv = Tensor::empty(v.shape(), DType::f32);
  // Backward: 5 products per visible pair against forward's 2 (the score product is recomputed).
  report(std::string("attention_backward/") + c.name, shape, 2.5 * forward_flops,
         time_it(repeats, [&] {
           ops::attention_backward(ctx, dout, q, k, v, out, saved, layout, scale, dq, dk, dv);
         }));
}

void bench_linear(const char* name, std::int64_t rows, std::int64_t in, std::int64_t out_dim,
                  int repeats) {
  const Tensor x = random_f32(Shape{rows, in}, 5);
  const Tensor w = random_f32(Shape{out_dim, in}, 6, 0.05);
  const Tensor y = Tensor::empty(Shape{rows, out_dim}, DType::f32);
  const Tensor dy = random_f32(y.shape(), 7);
  const Tensor dx = Tensor::empty(x.shape(), DType::f32);
  const Tensor dw = Tensor::zeros(w.shape(), DType::f32);
  const OpContext ctx;
  const std::string shape = "[" + std::to_string(rows) + "x" + std::to_string(in) + "]·[" +
                            std::to_string(out_dim) + "x" + std::to_string(in) + "]ᵀ";
  const double flops = 2.0 * static_cast<double>(rows * in * out_dim);
  report(std::string("linear_forward/") + name, shape, flops,
         time_it(repeats, [&] { ops::linear_forward(ctx, x, w, y); }));
  report(std::string("linear_backward/") + name, shape, 2 * flops,
         time_it(repeats, [&] { ops::linear_backward(ctx, dy, x, w, dx, dw); }));
}

// Fused LM head + cross-entropy with every other token counted (prompt tokens carry no loss);
// FLOPs counted for the counted rows only: 3 products of rows x vocab x hidden.
void bench_cross_entropy(std::int64_t tokens, std::int64_t hidden, std::int64_t vocab,
                         int repeats) {
  const Tensor h = random_f32(Shape{tokens, hidden}, 8);
  const Tensor w = random_f32(Shape{vocab, hidden}, 9, 0.05);
  std::vector<std::int32_t> label_values(static_cast<std::size_t>(tokens));
  for (std::int64_t t = 0; t < tokens; ++t)
    label_values[static_cast<std::size_t>(t)] =
        t % 2 == 0 ? static_cast<std::int32_t>((t * 7919) % vocab) : -100;
  const Tensor labels = int_tensor(label_values);
  const Tensor dh = Tensor::empty(h.shape(), DType::f32);
  const Tensor dw = Tensor::zeros(w.shape(), DType::f32);
  core::Arena scratch("bench-ce", 1 << 20);
  OpContext ctx;
  ctx.scratch = &scratch;
  const std::string shape = "T=" + std::to_string(tokens) +
                            " (half counted) h=" + std::to_string(hidden) +
                            " V=" + std::to_string(vocab);
  const double flops =
      3.0 * 2.0 * static_cast<double>(tokens / 2) * static_cast<double>(vocab * hidden);
  report("fused_cross_entropy", shape, flops, time_it(repeats, [&] {
           ops::fused_cross_entropy(ctx, h, w, labels, Tensor(), Tensor(), dh, dw);
         }));
}

}  // namespace

int main(int argc, char** argv) {
  const int repeats = argc > 1 ? std::max(1, std::atoi(argv[1])) : 5;
  // Tiny (config A: h 64, Hq 4, Hkv 2, d 24) and small (h 512; Hq 8, Hkv 4, d 64) models on a
  // packed bin of 2,048 tokens: four sequences of mixed lengths.
  const std::vector<std::int32_t> bin{1024, 512, 384, 128};
  bench_attention({"tiny", bin, 4, 2, 24}, repeats);
  bench_attention({"small", bin, 8, 4, 64}, repeats);
  bench_attention({"small_one_seq", {2048}, 8, 4, 64}, repeats);
  bench_linear("tiny_qkv", 2048, 64, 192, repeats);
  bench_linear("small_qkv", 2048, 512, 1024, repeats);
  bench_linear("small_lm_head_chunk", 2048, 512, 4096, repeats);
  bench_cross_entropy(2048, 512, 16384, repeats);
  return 0;
}
