// Runs every registered GPU test (or those whose name contains argv[1]); exit 77 = skipped.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdio>
#include <exception>
#include <utility>

#include "gpu_test.hpp"

namespace dyncp::gpu_test {
namespace {

struct Test {
  const char* name;
  std::function<void()> body;
};

std::vector<Test>& tests() {
  static std::vector<Test> all;
  return all;
}
int failures_in_test = 0;

}  // namespace

void register_test(const char* name, std::function<void()> body) {
  tests().push_back({name, std::move(body)});
}

void fail(const std::string& what) {
  std::printf("  FAILED: %s\n", what.c_str());
  ++failures_in_test;
}

void expect(bool condition, const std::string& what) {
  if (!condition) fail(what);
}

void expect_close(const std::string& what, const std::vector<float>& got,
                  const std::vector<float>& want, double atol_rel, double rtol) {
  if (got.size() != want.size()) {
    fail(what + ": " + std::to_string(got.size()) + " values, expected " +
         std::to_string(want.size()));
    return;
  }
  double max_want = 0.0;
  for (float w : want) max_want = std::max(max_want, static_cast<double>(std::fabs(w)));
  const double atol = atol_rel * std::max(max_want, 1e-30);
  std::size_t worst = 0, bad = 0;
  double worst_ratio = 0.0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    const double bound = atol + rtol * std::fabs(want[i]);
    const double ratio = std::isnan(err) ? INFINITY : (err == 0.0 ? 0.0 : err / bound);
    if (ratio > 1.0) ++bad;
    if (ratio > worst_ratio) {
      worst_ratio = ratio;
      worst = i;
    }
  }
  const std::string summary = what + ": " + std::to_string(want.size()) + " values, worst [" +
                              std::to_string(worst) + "] got " +
                              std::to_string(want.empty() ? 0.0f : got[worst]) + " want " +
                              std::to_string(want.empty() ? 0.0f : want[worst]) + " (error/bound " +
                              std::to_string(worst_ratio) + ")";
  if (bad > 0) {
    fail(summary + ", " + std::to_string(bad) + " outside tolerance");
  } else {
    std::printf("  ok: %s\n", summary.c_str());
  }
}

std::vector<float> random_floats(std::size_t n, std::uint64_t seed, float low, float high) {
  std::mt19937_64 engine(seed);
  std::uniform_real_distribution<float> dist(low, high);
  std::vector<float> values(n);
  for (float& value : values) value = dist(engine);
  return values;
}

std::vector<float> to_host(const Tensor& t) {
  std::vector<float> values(static_cast<std::size_t>(t.numel()));
  Tensor::view_of(values.data(), t.shape(), DType::f32).copy_from(t);
  return values;
}

std::vector<float> round_to_bf16(std::vector<float> values) {
  for (float& value : values) value = core::bf16_bits_to_float(core::float_to_bf16_bits(value));
  return values;
}

DeviceBuffer<__nv_bfloat16> to_device_bf16(const std::vector<float>& values) {
  std::vector<__nv_bfloat16> bits(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) bits[i] = __float2bfloat16_rn(values[i]);
  return DeviceBuffer<__nv_bfloat16>(bits);
}

}  // namespace dyncp::gpu_test

int main(int argc, char** argv) {
  using namespace dyncp::gpu_test;
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no CUDA device visible: GPU tests skipped\n");
    return 77;
  }
  cudaDeviceProp props{};
  cudaGetDeviceProperties(&props, 0);
  std::printf("device 0: %s (sm_%d%d)\n", props.name, props.major, props.minor);
  const char* filter = argc > 1 ? argv[1] : nullptr;
  int failed = 0, run = 0;
  for (const Test& test : tests()) {
    if (filter != nullptr && std::string(test.name).find(filter) == std::string::npos) continue;
    std::printf("[%s]\n", test.name);
    failures_in_test = 0;
    try {
      test.body();
      const cudaError_t status = cudaDeviceSynchronize();
      if (status != cudaSuccess) fail(std::string("CUDA error: ") + cudaGetErrorString(status));
    } catch (const std::exception& error) {
      fail(std::string("exception: ") + error.what());
    }
    ++run;
    if (failures_in_test > 0) ++failed;
    std::printf("[%s] %s\n", test.name, failures_in_test == 0 ? "passed" : "FAILED");
  }
  std::printf("%d of %d GPU tests passed\n", run - failed, run);
  return failed == 0 && run > 0 ? 0 : 1;
}
