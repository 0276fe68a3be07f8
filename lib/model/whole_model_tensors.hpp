#pragma once
// The whole model's tensors as written to layout-independent files (HF exports, training
// checkpoints), from a rank that may hold only a slice of the experts and, under tensor
// parallelism, only its piece of a tensor.
//
// Under expert parallelism EP rank j holds experts [j E/ep, (j+1) E/ep) of every MoE layer:
// their weights, gradients and optimizer moments, nothing of the others. The files list every
// expert, so any layout can read them. Their writer rebuilds one MoE layer's fused expert
// tensors at a time from the slices of its EP group (ExpertGather), while writing: the extra
// memory is one layer's experts, never the whole model.
//
// Under tensor parallelism a TP rank holds a piece of every split tensor (model::HfTensor: rows
// and a column range of the whole tensor), and with expert_tensor_parallel_size > 1 a piece of
// each of its experts. The writer rebuilds one whole tensor at a time with a PieceSum: every
// rank of the group holding the pieces writes what it holds into a whole tensor filled with
// -0.0 and the group sums it. Each element is held by exactly one rank, and x + (-0.0) == x for
// every float x (+0.0 and -0.0 included), so the sum is the whole tensor bit for bit, in any
// summation order. Experts are first made whole over their expert-TP group, then gathered over
// the EP group.
//
// Rebuilding is collective. Every rank taking part builds the same list of tensors to write
// and runs its fills in the same order: the writer while it writes, the others without
// writing (write_collectively), and a writer that fails part-way runs the remaining fills
// before reporting the failure, so no rank is left waiting in a gather.

#include <array>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "model/qwen3_moe_parameters.hpp"
#include "model/safetensors.hpp"

namespace dyncp::model {

class ExpertGather {
 public:
  virtual ~ExpertGather() = default;
  // Collective over the ranks whose slices make up every expert. `slice`: this rank's part of
  // one fused expert tensor (its experts, contiguous); `whole` receives every rank's parts in
  // expert order.
  virtual void gather(std::span<const float> slice, std::span<float> whole) = 0;
};

class PieceSum {
 public:
  virtual ~PieceSum() = default;
  // Collective over the ranks holding the pieces of a tensor: `values` (a whole tensor where
  // each rank wrote its piece and left -0.0 elsewhere) summed over them, in place.
  virtual void sum(std::span<float> values) = 0;
};

// The collectives that rebuild whole tensors for the writer, and the rebuilds this rank takes
// part in. The writer takes part in all of them; a rank helping it takes part in those of its
// groups that hold the writer's pieces (dense: the writer's TP group; experts: the expert-TP
// groups of the writer's EP group). A null collective is one this rank does not need (the
// tensors are whole on it) or does not take part in.
struct WholeModelGathers {
  PieceSum* tensor_parallel = nullptr;         // dense pieces over the TP group
  PieceSum* expert_tensor_parallel = nullptr;  // expert pieces over the expert-TP group
  ExpertGather* expert_parallel = nullptr;     // expert slices over the EP group
  bool dense = true;                           // runs the dense tensors' fills
  bool experts = true;                         // runs the experts' fills
};

// One MoE layer's fused expert tensors holding every expert, read from a buffer laid out like
// parameters.all_values() (the values themselves, or an optimizer moment).
class WholeExpertLayer {
 public:
  // `gather` may be null when `parameters` hold every expert; `flat` must outlive this.
  WholeExpertLayer(const Qwen3MoeParameters& parameters, Tensor flat, ExpertGather* gather);
  // With the gathers of `gathers`. `whole` (the writer): every expert must come out whole, so a
  // collective it needs must be there (a runtime error otherwise); a helping rank runs the
  // collectives it has and its parts are not read.
  WholeExpertLayer(const Qwen3MoeParameters& parameters, Tensor flat,
                   const WholeModelGathers& gathers, bool whole);
  // gate_up [E, 2I, h] (part 0) or down [E, h, I] (part 1) of layer `layer`, valid until a
  // call for another layer. The first call for a layer rebuilds both parts (collective).
  std::span<const float> part(std::int64_t layer, int part);
  // Whether part() holds every expert (always on the writer; a helping rank's may not).
  bool complete() const { return complete_; }

 private:
  // This rank's experts of `layer`, whole (their pieces summed over the expert-TP group).
  std::span<const float> held_experts(std::int64_t layer, int part);

  const Qwen3MoeParameters& parameters_;
  Tensor flat_;
  WholeModelGathers gathers_;
  bool complete_ = true;
  std::int64_t layer_ = -1;
  std::vector<float> pieces_[2];
  std::vector<float> parts_[2];
  std::span<const float> views_[2];
  // Experts split over the expert-TP group: layer -> local expert -> gate, up, down.
  std::vector<std::vector<std::array<const HfTensor*, 3>>> expert_tensors_;
};

// One tensor of the whole model in HF checkpoint order (text-model names, one tensor per
// expert).
struct WholeModelTensor {
  std::string name;
  std::vector<std::int64_t> shape;
  // Non-expert tensors: this rank's own, or nullptr when another pipeline stage holds it.
  const HfTensor* held = nullptr;
  std::int64_t layer = -1;  // experts: their (whole-model) layer, expert index and
  std::int64_t expert = -1;
  int part = 0;  // 0 gate_proj, 1 up_proj, 2 down_proj
  // Stored with its rows reordered (HfTensor::rows: the gated q_proj, Qwen3-Next's fused
  // projections), which only the whole tensor can be read back from.
  bool reordered = false;
};

// Identical on every rank whatever expert slice and pipeline stage it holds: every tensor of
// the whole model (from its architecture), `held` set where this rank holds it.
std::vector<WholeModelTensor> whole_model_tensors(const Qwen3MoeParameters& parameters);
// Whether this rank holds `tensor` (an expert tensor: its layer and expert).
bool holds(const Qwen3MoeParameters& parameters, const WholeModelTensor& tensor);

// Whether this rank's pipeline stage holds `tensor` (an expert tensor: its layer; the EP
// group's gather rebuilds every expert of it).
bool stage_holds(const Qwen3MoeParameters& parameters, const WholeModelTensor& tensor);

// An entry writing `tensor` as `stored_name`, its values read (in HF order) from `flat`, laid
// out like parameters.all_values(); experts come through `experts`, which reads `flat` too.
// A tensor this rank holds a piece of is rebuilt through `tensor_parallel` (null: a runtime
// error, unless the rank holds it whole).
// A tensor another pipeline stage holds gets an entry without values or fill (route_through_stages
// gives it one).
TensorToWrite tensor_to_write(const WholeModelTensor& tensor, std::string stored_name,
                              const Qwen3MoeParameters& parameters, const Tensor& flat,
                              WholeExpertLayer& experts, PieceSum* tensor_parallel = nullptr);

// Whether this rank runs the fills of `tensor` (WholeModelGathers::dense / experts); an entry
// it does not run is listed without values or fill.
bool takes_part(const WholeModelTensor& tensor, const WholeModelGathers& gathers);

// Pipeline stages under one writer (single-writer checkpoints): the writer holds only its own
// stage, so each tensor of another stage comes from that stage's relay (the rank at its first
// pool position, which holds it), one at a time in file order; the other ranks of a relay's EP
// group take part in its expert gathers. Implemented over the pipeline group
// (train/stage_tensor_relay.hpp).
class StageTensorRelay {
 public:
  // The writer and the other ranks of its EP group (its stage's expert gathers); a relay and the
  // other ranks of its EP group.
  enum class Role { writer, writer_gathers, relay, relay_gathers };
  virtual ~StageTensorRelay() = default;
  virtual Role role() const = 0;
  // Whether the writer's stage holds `tensor` (then no relay sends it).
  virtual bool writer_holds(const WholeModelTensor& tensor) const = 0;
  // Writer: the values of `tensor` (its entry's, in HF order) from the stage holding it.
  virtual void receive(const WholeModelTensor& tensor, std::span<float> out) = 0;
  // Relay: its stage's values of `tensor`, to the writer.
  virtual void send(const WholeModelTensor& tensor, std::span<const float> values) = 0;
};

// Rewrites `entries` (entries[i] writes sources[i]) for this rank's role: the writer receives
// what its stage does not hold; a relay fills what its stage holds and the writer's does not and
// sends it, and skips the rest; the other ranks of a relay's EP group keep the fills of what the
// relay sends (their expert gathers); those of the writer's keep everything, as without stages.
void route_through_stages(std::vector<TensorToWrite>& entries,
                          const std::vector<const WholeModelTensor*>& sources,
                          const Qwen3MoeParameters& parameters, StageTensorRelay& relay);

// On the writer (`writer` true) calls `write` with the tensors; elsewhere only runs their
// fills. Either way every fill runs once, in order: a write that throws part-way runs the rest
// before the exception propagates.
void write_collectively(std::vector<TensorToWrite>& tensors, bool writer,
                        const std::function<void(std::span<const TensorToWrite>)>& write);

}  // namespace dyncp::model
