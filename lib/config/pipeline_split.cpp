#include "config/pipeline_split.hpp"

#include <string>

#include "core/error.hpp"

namespace dyncp::config {

namespace {

std::string str(std::int64_t value) {
  return std::to_string(value);
}

// The layer count of every stage (before the embedding / loss adjustment), or problems.
std::vector<std::int64_t> stage_layers(const PipelineSplitInput& in,
                                       std::vector<PipelineSplitProblem>& problems) {
  const std::int64_t pp = in.pipeline_size;
  const bool uneven = in.first_stage_layers >= 0 || in.last_stage_layers >= 0;
  std::vector<std::int64_t> layers(static_cast<std::size_t>(pp), 0);
  if (!uneven) {
    const std::int64_t counted =
        in.num_layers + (in.account_for_embedding ? 1 : 0) + (in.account_for_loss ? 1 : 0);
    if (counted % pp != 0) {
      problems.push_back(
          {"model.num_hidden_layers", str(in.num_layers),
           "the layers" +
               std::string(counted != in.num_layers ? " (+ " + str(counted - in.num_layers) +
                                                          " for the embedding / loss counted by "
                                                          "account_for_*_in_pipeline_split)"
                                                    : "") +
               ", " + str(counted) +
               ", must divide evenly over "
               "model.pipeline_model_parallel_size " +
               str(pp) +
               " stages; use a pp that divides it, or set "
               "model.num_layers_in_first_pipeline_stage / _last_pipeline_stage"});
      return {};
    }
    for (auto& count : layers) count = counted / pp;
    return layers;
  }
  std::int64_t rest = in.num_layers;
  std::int64_t middle = pp;
  if (in.first_stage_layers >= 0) {
    rest -= in.first_stage_layers;
    --middle;
  }
  if (in.last_stage_layers >= 0) {
    rest -= in.last_stage_layers;
    --middle;
  }
  const std::string given = "num_hidden_layers " + str(in.num_layers) +
                            " less the first / last "
                            "stage's layers leaves " +
                            str(rest);
  if (rest < 0 || (middle == 0 && rest != 0) || (middle > 0 && (rest % middle != 0 || rest == 0))) {
    problems.push_back(
        {in.first_stage_layers >= 0 ? "model.num_layers_in_first_pipeline_stage"
                                    : "model.num_layers_in_last_pipeline_stage",
         str(in.first_stage_layers >= 0 ? in.first_stage_layers : in.last_stage_layers),
         given + " layers, which must divide evenly (at least one each) over the " + str(middle) +
             " other stage(s) of model.pipeline_model_parallel_size " + str(pp)});
    return {};
  }
  for (auto& count : layers) count = middle > 0 ? rest / middle : 0;
  if (in.first_stage_layers >= 0) layers.front() = in.first_stage_layers;
  if (in.last_stage_layers >= 0) layers.back() = in.last_stage_layers;
  return layers;
}

}  // namespace

std::int64_t PipelineSplit::layers_of_stage(std::int64_t stage) const {
  std::int64_t total = 0;
  for (const LayerChunk& c : chunks)
    if (c.stage == stage) total += c.num_layers;
  return total;
}

std::string PipelineSplit::describe() const {
  std::string text;
  for (std::int64_t s = 0; s < pipeline_size; ++s) {
    text += "  stage " + str(s) + ": " + str(layers_of_stage(s)) + " layers";
    for (std::int64_t v = 0; v < virtual_size; ++v) {
      const LayerChunk& c = chunk(s, v);
      text += (v == 0 ? " " : ", ");
      if (virtual_size > 1) text += "chunk " + str(v) + " ";
      text += "[" + str(c.first_layer) + ", " + str(c.first_layer + c.num_layers) + ")";
      if (c.holds_embedding) text += " + embedding";
      if (c.holds_loss) text += " + final norm, LM head and loss";
    }
    text += "\n";
  }
  return text;
}

PipelineSplitInput pipeline_split_input(const ModelConfig& model) {
  PipelineSplitInput in;
  in.num_layers = model.architecture.num_hidden_layers;
  in.pipeline_size = model.pipeline_model_parallel_size;
  in.virtual_size = model.virtual_pipeline_model_parallel_size.value_or(1);
  in.first_stage_layers = model.num_layers_in_first_pipeline_stage.value_or(-1);
  in.last_stage_layers = model.num_layers_in_last_pipeline_stage.value_or(-1);
  in.account_for_embedding = model.account_for_embedding_in_pipeline_split;
  in.account_for_loss = model.account_for_loss_in_pipeline_split;
  return in;
}

std::vector<PipelineSplitProblem> pipeline_split_problems(const PipelineSplitInput& in) {
  std::vector<PipelineSplitProblem> problems;
  const std::int64_t pp = in.pipeline_size;
  if (pp < 1) {
    problems.push_back({"model.pipeline_model_parallel_size", str(pp), "must be >= 1"});
    return problems;
  }
  if (in.virtual_size < 1) {
    problems.push_back({"model.virtual_pipeline_model_parallel_size", str(in.virtual_size),
                        "must be >= 1 (or unset)"});
  } else if (in.virtual_size > 1 && pp == 1) {
    problems.push_back({"model.virtual_pipeline_model_parallel_size", str(in.virtual_size),
                        "virtual pipeline chunks interleave pipeline stages and need "
                        "model.pipeline_model_parallel_size > 1 (it is 1); unset it"});
  }
  const bool uneven = in.first_stage_layers >= 0 || in.last_stage_layers >= 0;
  for (const auto& [key, value] :
       {std::pair{"model.num_layers_in_first_pipeline_stage", in.first_stage_layers},
        std::pair{"model.num_layers_in_last_pipeline_stage", in.last_stage_layers}}) {
    if (value < 0) continue;
    if (pp == 1) {
      problems.push_back({key, str(value),
                          "sizes a stage of a pipeline and needs "
                          "model.pipeline_model_parallel_size > 1 (it is 1); unset it"});
    } else if (value < 1) {
      problems.push_back({key, str(value), "must be >= 1 (or unset for an even share)"});
    }
  }
  if (uneven && (in.account_for_embedding || in.account_for_loss)) {
    problems.push_back({in.account_for_embedding ? "model.account_for_embedding_in_pipeline_split"
                                                 : "model.account_for_loss_in_pipeline_split",
                        "true",
                        "cannot be combined with an uneven first / last stage "
                        "(model.num_layers_in_first/last_pipeline_stage), as in Megatron; set "
                        "one or the other"});
  }
  if (!problems.empty()) return problems;
  const std::vector<std::int64_t> layers = stage_layers(in, problems);
  if (!problems.empty()) return problems;
  for (std::int64_t s = 0; s < pp; ++s) {
    const std::int64_t count = layers[static_cast<std::size_t>(s)];
    if (count % in.virtual_size != 0) {
      problems.push_back({"model.virtual_pipeline_model_parallel_size", str(in.virtual_size),
                          "stage " + str(s) + " holds " + str(count) +
                              " layers (counting an embedding / loss layer), which do not divide "
                              "into " +
                              str(in.virtual_size) + " virtual chunks"});
      return problems;
    }
  }
  return problems;
}

PipelineSplit split_layers(const PipelineSplitInput& in) {
  const auto problems = pipeline_split_problems(in);
  if (!problems.empty()) {
    core::throw_config_error(problems.front().key,
                             problems.front().value + ": " + problems.front().rule);
  }
  std::vector<PipelineSplitProblem> unused;
  const std::vector<std::int64_t> layers = stage_layers(in, unused);
  PipelineSplit split;
  split.pipeline_size = in.pipeline_size;
  split.virtual_size = in.virtual_size;
  const std::int64_t chunks = in.pipeline_size * in.virtual_size;
  std::int64_t next_layer = 0;
  for (std::int64_t k = 0; k < chunks; ++k) {
    LayerChunk c;
    c.stage = k % in.pipeline_size;
    c.virtual_index = k / in.pipeline_size;
    c.first_layer = next_layer;
    c.num_layers = layers[static_cast<std::size_t>(c.stage)] / in.virtual_size;
    c.holds_embedding = k == 0;
    c.holds_loss = k == chunks - 1;
    // The embedding and the loss fill a layer's slot when they count in the split.
    if (c.holds_embedding && in.account_for_embedding) --c.num_layers;
    if (c.holds_loss && in.account_for_loss) --c.num_layers;
    next_layer += c.num_layers;
    split.chunks.push_back(c);
  }
  return split;
}

}  // namespace dyncp::config
