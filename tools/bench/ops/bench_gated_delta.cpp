// bench_gated_delta: the gated delta rule (Gated DeltaNet core) on CPU, chunked against the
// token recurrence, forward and backward, f32. Each shape is first checked (chunked forward and
// backward against the recurrent reference), then timed: warm-up, then `repeats` timed calls;
// one JSON line per case with median / min wall milliseconds and median process CPU
// milliseconds (the steadier number on a shared machine).
//
//   build-*/tools/bench/ops/bench_gated_delta [repeats]      (threads: OPENBLAS_NUM_THREADS)

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
#include "ops/gated_delta_rule.hpp"

using namespace dyncp;
using core::DType;
using core::Shape;
using core::Tensor;
using ops::OpContext;

namespace {

Tensor random_f32(const Shape& shape, std::uint64_t stream, double low, double high) {
  Tensor t = Tensor::empty(shape, DType::f32);
  core::Rng rng(11, core::RngPurpose::test, stream);
  for (std::int64_t i = 0; i < t.numel(); ++i)
    t.data<float>()[i] = static_cast<float>(low + (high - low) * rng.uniform());
  return t;
}

// Unit rows over the last dim (q and k arrive L2-normalised in the model).
void normalise_rows(const Tensor& x) {
  const std::int64_t d = x.shape().last();
  float* p = x.data<float>();
  for (std::int64_t r = 0; r < x.numel() / d; ++r) {
    double sum = 0;
    for (std::int64_t j = 0; j < d; ++j) sum += double(p[r * d + j]) * p[r * d + j];
    for (std::int64_t j = 0; j < d; ++j)
      p[r * d + j] = static_cast<float>(p[r * d + j] / std::sqrt(sum + 1e-6));
  }
}

struct Timing {
  double median_ms, min_ms, median_cpu_ms;
};

double process_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

Timing time_it(int repeats, const std::function<void()>& body) {
  body();  // warm-up (also grows the scratch arena to its high-water mark)
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

void report(const std::string& name, const std::string& shape, const Timing& t) {
  std::printf(
      "{\"bench\": \"%s\", \"shape\": \"%s\", \"median_ms\": %.1f, \"min_ms\": %.1f, "
      "\"median_cpu_ms\": %.1f}\n",
      name.c_str(), shape.c_str(), t.median_ms, t.min_ms, t.median_cpu_ms);
  std::fflush(stdout);
}

double relative_error(const Tensor& a, const Tensor& b) {
  double diff = 0, norm = 0;
  for (std::int64_t i = 0; i < a.numel(); ++i) {
    const double d = double(a.data<float>()[i]) - b.data<float>()[i];
    diff += d * d;
    norm += double(b.data<float>()[i]) * b.data<float>()[i];
  }
  return std::sqrt(diff / std::max(norm, 1e-30));
}

void bench_case(std::int64_t tokens, std::int64_t heads, std::int64_t head_dim, int chunk_size,
                int repeats) {
  const std::vector<std::int32_t> cu{0, static_cast<std::int32_t>(tokens)};
  ops::GatedDeltaRuleInputs in;
  in.q = random_f32(Shape{tokens, heads, head_dim}, 1, -1, 1);
  in.k = random_f32(Shape{tokens, heads, head_dim}, 2, -1, 1);
  normalise_rows(in.q);
  normalise_rows(in.k);
  in.v = random_f32(Shape{tokens, heads, head_dim}, 3, -1, 1);
  in.g = random_f32(Shape{tokens, heads}, 4, -0.5, -0.01);
  in.beta = random_f32(Shape{tokens, heads}, 5, 0.05, 0.95);
  in.cu_seqlens = Tensor::empty(Shape{2}, DType::i32);
  std::copy(cu.begin(), cu.end(), in.cu_seqlens.data<std::int32_t>());
  const ops::GatedDeltaRuleParams params{1.0 / std::sqrt(double(head_dim)), chunk_size};
  const Tensor dout = random_f32(in.v.shape(), 6, -1, 1);
  const Tensor out = Tensor::empty(in.v.shape(), DType::f32);
  const Tensor ref_out = Tensor::empty(in.v.shape(), DType::f32);
  auto grads = [&] {
    return ops::GatedDeltaRuleGrads{
        Tensor::empty(in.q.shape(), DType::f32),    Tensor::empty(in.k.shape(), DType::f32),
        Tensor::empty(in.v.shape(), DType::f32),    Tensor::empty(in.g.shape(), DType::f32),
        Tensor::empty(in.beta.shape(), DType::f32), Tensor()};
  };
  const ops::GatedDeltaRuleGrads chunked_grads = grads(), ref_grads = grads();
  ops::GatedDeltaRuleSaved saved{Tensor::empty(
      Shape{ops::gated_delta_rule_num_chunks(in.cu_seqlens, chunk_size), heads, head_dim, head_dim},
      DType::f32)};
  const ops::GatedDeltaRuleSaved no_saved;
  core::Arena scratch("bench-gdn", 1 << 20);
  OpContext ctx;
  ctx.scratch = &scratch;

  // Check the chunked form against the reference before timing.
  ops::gated_delta_rule_chunked_forward(ctx, in, params, out, Tensor(), saved);
  ops::gated_delta_rule_recurrent_forward(ctx, in, params, ref_out, Tensor());
  ops::gated_delta_rule_chunked_backward(ctx, dout, Tensor(), in, params, saved, chunked_grads);
  ops::gated_delta_rule_recurrent_backward(ctx, dout, Tensor(), in, params, ref_grads);
  const double errors[] = {relative_error(out, ref_out),
                           relative_error(chunked_grads.dq, ref_grads.dq),
                           relative_error(chunked_grads.dk, ref_grads.dk),
                           relative_error(chunked_grads.dv, ref_grads.dv),
                           relative_error(chunked_grads.dg, ref_grads.dg),
                           relative_error(chunked_grads.dbeta, ref_grads.dbeta)};
  const double worst = *std::max_element(std::begin(errors), std::end(errors));
  if (!(worst < 1e-4)) {
    std::fprintf(stderr, "gated delta rule: chunked vs recurrent relative error %g\n", worst);
    std::exit(1);
  }
  const std::string shape = "T=" + std::to_string(tokens) + " H=" + std::to_string(heads) +
                            " dk=dv=" + std::to_string(head_dim) +
                            " C=" + std::to_string(chunk_size);
  std::printf("{\"check\": \"chunked vs recurrent\", \"shape\": \"%s\", \"max_rel_error\": %.2e}\n",
              shape.c_str(), worst);
  report("gdn_chunked_forward", shape, time_it(repeats, [&] {
           ops::gated_delta_rule_chunked_forward(ctx, in, params, out, Tensor(), saved);
         }));
  report("gdn_chunked_backward_saved_states", shape, time_it(repeats, [&] {
           ops::gated_delta_rule_chunked_backward(ctx, dout, Tensor(), in, params, saved,
                                                  chunked_grads);
         }));
  report("gdn_chunked_backward_recompute", shape, time_it(repeats, [&] {
           ops::gated_delta_rule_chunked_backward(ctx, dout, Tensor(), in, params, no_saved,
                                                  chunked_grads);
         }));
  report("gdn_recurrent_forward", shape, time_it(repeats, [&] {
           ops::gated_delta_rule_recurrent_forward(ctx, in, params, ref_out, Tensor());
         }));
  report("gdn_recurrent_backward", shape, time_it(repeats, [&] {
           ops::gated_delta_rule_recurrent_backward(ctx, dout, Tensor(), in, params, ref_grads);
         }));
}

}  // namespace

int main(int argc, char** argv) {
  const int repeats = argc > 1 ? std::max(1, std::atoi(argv[1])) : 3;
  // One 4,096-token sequence, 4 heads (Hk = Hv), head dims 64 and 128 (the released models use
  // dk = dv = 128), chunk size 64 (HF / FLA).
  bench_case(4096, 4, 64, 64, repeats);
  bench_case(4096, 4, 128, 64, repeats);
  return 0;
}
