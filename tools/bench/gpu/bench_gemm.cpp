// The GEMM anchor of tools/bench/gpu_step.sh: bf16 x bf16 -> fp32 products through the
// project's own cuBLASLt wrapper (kernels/gemm.hpp), at the shapes one Qwen-MoE layer runs on a
// bin of T tokens, timed on the device. One JSON line per shape and a FLOP-weighted total:
//   {"impl": "gemm-anchor", "name", "m", "n", "k", "count", "seconds", "tflops"}
// Shapes (h hidden, q = Hq d, kv = Hkv d, E experts top-k, expert FFN I, V vocabulary):
//   qkv_proj        [T, h] x [h, q + 2 kv]
//   o_proj          [T, q] x [q, h]
//   expert_gate_up  E x [T k / E, h] x [h, 2 I]   (uniform routing, one call per expert, as
//   expert_down     E x [T k / E, I] x [I, h]      kernels::grouped_linear_* runs them)
//   lm_head         [T, h] x [h, V]
// Built against the real kernels (bench_gemm) and the emulated backend (bench_gemm_emulated:
// the same code on the host, so the script's plumbing is tested without a GPU).
//
//   bench_gemm [--tokens T] [--hidden h] [--q-heads n] [--kv-heads n] [--head-dim d]
//              [--experts E] [--top-k k] [--expert-ffn I] [--vocab V] [--repeats R]
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "cuda_check.hpp"
#include "device_buffer.hpp"
#include "gemm.hpp"
#include "ops.hpp"

namespace {

using dyncp::kernels::bf16;

struct Shape {
  const char* name;
  std::int64_t m, n, k, count;
};

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::int64_t tokens = 4096, hidden = 2048, q_heads = 32, kv_heads = 4, head_dim = 128,
               experts = 128, top_k = 8, expert_ffn = 768, vocab = 151936, repeats = 10;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "bench_gemm: %s needs a value\n", arg.c_str());
      return 2;
    }
    const std::int64_t value = std::atoll(argv[++i]);
    std::int64_t* target = arg == "--tokens"       ? &tokens
                           : arg == "--hidden"     ? &hidden
                           : arg == "--q-heads"    ? &q_heads
                           : arg == "--kv-heads"   ? &kv_heads
                           : arg == "--head-dim"   ? &head_dim
                           : arg == "--experts"    ? &experts
                           : arg == "--top-k"      ? &top_k
                           : arg == "--expert-ffn" ? &expert_ffn
                           : arg == "--vocab"      ? &vocab
                           : arg == "--repeats"    ? &repeats
                                                   : nullptr;
    if (target == nullptr || value < 1) {
      std::fprintf(stderr, "bench_gemm: unknown argument or value below 1: %s %s\n", arg.c_str(),
                   argv[i]);
      return 2;
    }
    *target = value;
  }
  try {
    const std::int64_t q = q_heads * head_dim, kv = kv_heads * head_dim;
    const std::int64_t rows = std::max<std::int64_t>(1, tokens * top_k / experts);
    const std::vector<Shape> shapes = {{"qkv_proj", tokens, q + 2 * kv, hidden, 1},
                                       {"o_proj", tokens, hidden, q, 1},
                                       {"expert_gate_up", rows, 2 * expert_ffn, hidden, experts},
                                       {"expert_down", rows, hidden, expert_ffn, experts},
                                       {"lm_head", tokens, vocab, hidden, 1}};
    dyncp::kernels::Blas blas;
    cudaStream_t stream = nullptr;
    DYNCP_CUDA_CHECK(cudaStreamCreate(&stream));
    double total_flops = 0, total_seconds = 0;
    for (const Shape& s : shapes) {
      // One operand pair per call of the group (the experts' weights are distinct matrices).
      const std::int64_t a_size = s.m * s.k, b_size = s.k * s.n;
      std::vector<float> host(static_cast<std::size_t>(std::max(a_size, b_size)));
      for (std::size_t i = 0; i < host.size(); ++i)
        host[i] = static_cast<float>((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
      dyncp::kernels::DeviceBuffer<float> staging(host);
      dyncp::kernels::DeviceBuffer<bf16> a(static_cast<std::size_t>(a_size * s.count));
      dyncp::kernels::DeviceBuffer<bf16> b(static_cast<std::size_t>(b_size * s.count));
      dyncp::kernels::DeviceBuffer<float> c(static_cast<std::size_t>(s.m * s.n * s.count));
      for (std::int64_t g = 0; g < s.count; ++g) {
        dyncp::kernels::convert_f32_to_bf16(staging.get(), a.get() + g * a_size, a_size, stream);
        dyncp::kernels::convert_f32_to_bf16(staging.get(), b.get() + g * b_size, b_size, stream);
      }
      const auto run = [&] {
        for (std::int64_t g = 0; g < s.count; ++g)
          blas.gemm(false, false, s.m, s.n, s.k, 1.0f, a.get() + g * a_size, s.k,
                    b.get() + g * b_size, s.n, 0.0f, c.get() + g * s.m * s.n,
                    dyncp::kernels::OutType::f32, s.n, stream);
        DYNCP_CUDA_CHECK(cudaStreamSynchronize(stream));
      };
      run();  // warm-up: cuBLASLt picks its algorithm
      std::vector<double> seconds;
      for (std::int64_t r = 0; r < repeats; ++r) {
        const auto start = std::chrono::steady_clock::now();
        run();
        seconds.push_back(
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      }
      const double flops = 2.0 * static_cast<double>(s.m * s.n * s.k * s.count);
      const double t = median(seconds);
      total_flops += flops;
      total_seconds += t;
      std::printf(
          "{\"impl\": \"gemm-anchor\", \"name\": \"%s\", \"m\": %lld, \"n\": %lld, \"k\": %lld, "
          "\"count\": %lld, \"seconds\": %.6f, \"tflops\": %.4f}\n",
          s.name, static_cast<long long>(s.m), static_cast<long long>(s.n),
          static_cast<long long>(s.k), static_cast<long long>(s.count), t, flops / t / 1e12);
    }
    // The rate of the whole set, each shape weighted by its FLOPs: the layer's GEMM ceiling.
    std::printf(
        "{\"impl\": \"gemm-anchor\", \"name\": \"all_shapes\", \"seconds\": %.6f, "
        "\"tflops\": %.4f}\n",
        total_seconds, total_flops / total_seconds / 1e12);
    DYNCP_CUDA_CHECK(cudaStreamDestroy(stream));
  } catch (const std::exception& error) {
    std::fprintf(stderr, "bench_gemm: %s\n", error.what());
    return 1;
  }
  return 0;
}
