// The parameter registry: every parameter's Hugging Face name, shape, storage dtype, initializer
// and place in the model's flat buffers.
//
// Layout. All parameters of a model live in ONE flat parameter buffer (storage dtype) and ONE
// flat gradient buffer (compute dtype, fp32) with the same element offsets. Parameters are laid
// out densely (no padding) in registration order, which is trace order: embeddings, block 0, ...,
// block n-1, final norm, untied LM head. A unit (the granularity at which the engine fetches,
// releases and reduces: the embeddings, one decoder block, the final norm, the LM head) owns one
// contiguous range [offset, offset + numel) of the flat buffers, so ZeRO can shard the flat
// buffers by plain ranges and gather a unit with one collective.
//
// Tied weights. A tied LM head is an alias entry ("lm_head.weight") with the offset of
// "transformer.wte.weight" (or "model.embed_tokens.weight"): it owns no storage, is not counted
// by total_elements(), and both the embedding and the head accumulate into the same gradient.
// A unit's `params` lists what it reads, aliases included, so the LM head unit of a tied model
// reads outside its own (empty) range.
//
// Tensor parallelism. A registry given a sharding rule (the tensor-parallel plan,
// engine/parallel/tensor_plan.h) asks it how each parameter is laid out over the tensor ranks as
// the parameter is added: `shape` is then this rank's piece and `sharding` says which piece of
// which global tensor it is (engine/parallel/tensor_sharding.h). Without a rule every parameter
// is whole.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/parallel/tensor_sharding.h"
#include "runtime/dtype.h"
#include "runtime/tensor.h"

namespace sluice::model {

// How a parameter is initialized (init.h).
enum class InitKind : uint8_t {
  kNormal = 0,      // normal(0, init_std): weights, embeddings
  kNormalResidual,  // normal(0, init_std / sqrt(2 * n_layer)): projections into the residual
  kZeros,           // biases
  kOnes,            // norm weights
};

struct ParameterInfo {
  std::string name;           // Hugging Face name: "transformer.h.0.attn.c_attn.weight"
  Shape shape;                // this rank's; linear weights are [out, in] (nn.Linear layout)
  DType dtype = DType::kF32;  // storage dtype of the flat parameter buffer
  int64_t offset = 0;         // element offset in the flat parameter and gradient buffers
  int64_t numel = 0;
  int unit = -1;  // index into ParameterRegistry::units()
  InitKind init = InitKind::kNormal;
  int tied_to = -1;  // alias: index of the parameter whose storage this one shares
  // A copy of the parameter of this name that another pipeline stage owns (the last stage's token
  // table for a tied LM head): initialized alike, its gradient summed with the owner's before each
  // step, saved by the owner alone, not counted twice in the gradient norm.
  bool mirror = false;
  // Which piece of which global tensor `shape` is (whole without tensor parallelism).
  parallel::TensorSharding sharding;

  bool is_alias() const { return tied_to >= 0; }
};

struct UnitInfo {
  std::string name;    // "transformer.wte+wpe", "transformer.h.3", "lm_head", ...
  int64_t offset = 0;  // owned range of the flat buffers
  int64_t numel = 0;
  std::vector<int> params;  // indices of the parameters it reads (owned ones, then aliases)
};

// The layout over the tensor ranks of the parameter `name` whose global shape is `global`.
using ShardingRule =
    std::function<parallel::TensorSharding(std::string_view name, const Shape& global)>;

class ParameterRegistry {
 public:
  explicit ParameterRegistry(DType dtype = DType::kF32) : dtype_(dtype) {}

  // Applies to the parameters added from now on; empty: each is whole.
  void SetShardingRule(ShardingRule rule) { sharding_rule_ = std::move(rule); }

  // Starts a unit; parameters added from now on belong to it. Returns its index.
  int BeginUnit(std::string name);
  // Appends a parameter of global shape `shape`, owning the next elements: as many as this
  // rank's piece of it holds (all of them without a sharding rule). Returns its index.
  // CHECK-fails on a duplicate name or when no unit was begun.
  int Add(std::string name, Shape shape, InitKind init);
  // Appends an alias of parameter `target` to the current unit.
  int AddAlias(std::string name, int target);
  // Appends a mirror (ParameterInfo::mirror) of the parameter `name` of global shape `shape` that
  // another pipeline stage holds, with storage of its own, as Add.
  int AddMirror(std::string name, Shape shape, InitKind init);

  const std::vector<ParameterInfo>& parameters() const { return parameters_; }
  const ParameterInfo& parameter(int index) const;
  const std::vector<UnitInfo>& units() const { return units_; }
  // Index of the parameter named `name`, if any.
  std::optional<int> Find(std::string_view name) const;
  // Elements of the flat buffers (aliases excluded) = the model's parameter count.
  int64_t total_elements() const { return total_elements_; }
  // The whole model's registry: the same units and parameters at the same indices, each with its
  // global shape (the one a model without tensor parallelism has). What checkpoints and Hugging
  // Face files are checked against (engine/train/checkpointing.cpp).
  ParameterRegistry GlobalRegistry() const;
  DType dtype() const { return dtype_; }

 private:
  DType dtype_;
  ShardingRule sharding_rule_;
  std::vector<ParameterInfo> parameters_;
  std::vector<UnitInfo> units_;
  int64_t total_elements_ = 0;
};

}  // namespace sluice::model
