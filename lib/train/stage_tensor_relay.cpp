#include "train/stage_tensor_relay.hpp"

#include "core/error.hpp"

namespace dyncp::train {

namespace {

// Layer i of "model.layers.{i}.*", or -1.
std::int64_t layer_of_name(const std::string& name) {
  static const std::string prefix = "model.layers.";
  if (!name.starts_with(prefix)) return -1;
  return std::stoll(name.substr(prefix.size()));
}

}  // namespace

PipelineTensorRelay::PipelineTensorRelay(Role role, dist::Comm& pipeline,
                                         const config::PipelineSplit& split)
    : role_(role), pipeline_(pipeline), split_(split) {
  DYNCP_CHECK(pipeline.size() == split.pipeline_size,
              "the relays' pipeline group has one rank per stage");
}

std::int64_t PipelineTensorRelay::stage_of(const model::WholeModelTensor& tensor) const {
  const std::int64_t layer = tensor.layer >= 0 ? tensor.layer : layer_of_name(tensor.name);
  if (layer < 0) return tensor.name == "model.embed_tokens.weight" ? 0 : split_.pipeline_size - 1;
  for (const config::LayerChunk& chunk : split_.chunks)
    if (layer >= chunk.first_layer && layer < chunk.first_layer + chunk.num_layers)
      return chunk.stage;
  core::throw_runtime_error("no pipeline stage holds layer " + std::to_string(layer));
}

void PipelineTensorRelay::receive(const model::WholeModelTensor& tensor, std::span<float> out) {
  DYNCP_CHECK(role_ == Role::writer, "only the writer receives relayed tensors");
  pipeline_.recv(out.data(), out.size(), core::DType::f32, static_cast<int>(stage_of(tensor)));
}

void PipelineTensorRelay::send(const model::WholeModelTensor& tensor,
                               std::span<const float> values) {
  DYNCP_CHECK(role_ == Role::relay && stage_of(tensor) == pipeline_.rank(),
              "a relay sends its own stage's tensors");
  pipeline_.send(values.data(), values.size(), core::DType::f32, 0);
}

}  // namespace dyncp::train
