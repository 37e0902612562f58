// The Module interface: explicit Forward and Backward over [rows, width] activations, with the
// saved state kept in a ForwardContext (forward_context.h) rather than in the module, so a module
// is a description (name, parameters, children, hyper-parameters) that any number of passes can
// run through.
//
// Modules run every op through the ops backend of their ForwardContext, enqueued on its stream
// (runtime/ops/ops_backend.h): the same layer code runs in fp64 on the reference backend for the
// finite-difference tests and in fp32 on the cpu backend for training. They are still templated
// on the scalar type of their activations (float or double) until the compute dtype becomes a
// run-time property of the context. Model<float> is what the engine trains; Model<double> is a
// test instrument.
//
// Contract of every module:
// - Forward(ctx, x): reads x [rows, in] (kept alive by its producer until this module's Backward
//   has run), writes its output into a buffer it allocates as saved under id(), and returns it.
// - Backward(ctx, dy): dy is the gradient of the output; returns dx, held as grads of the module
//   or of one of its descendants (the caller releases it with ReleaseGradsOf(ctx, module) once
//   used; dy itself may be overwritten or released by the time Backward returns), accumulates (+=)
//   every parameter gradient that ctx.params().Grad() does not report as null, and releases its
//   saved state (ctx.ReleaseSaved(id())) before returning. Modules whose input is token ids (the
//   embeddings) return an empty Act.
// - Recoverable failures (an allocation past the device arena) come back as a Status; programmer
//   errors (wrong widths) abort through CHECK.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/model/forward_context.h"
#include "engine/model/parameter_registry.h"

namespace sluice::model {

// Hands out module ids and registers parameters while a model (or a test's single layer) is
// built.
class ModuleBuilder {
 public:
  explicit ModuleBuilder(ParameterRegistry& registry) : registry_(&registry) {}

  ParameterRegistry& registry() const { return *registry_; }
  int NextModuleId() { return next_id_++; }
  int module_count() const { return next_id_; }

 private:
  ParameterRegistry* registry_;
  int next_id_ = 0;
};

template <typename T>
class Module {
 public:
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // The Hugging Face prefix of its parameters ("transformer.h.0.attn"), or a descriptive name
  // for modules without parameters ("transformer.h.0.attn.core").
  const std::string& name() const { return name_; }
  // Unique within the model; the key of its state in a ForwardContext.
  int id() const { return id_; }

  virtual Result<Act<T>> Forward(ForwardContext<T>& ctx, Act<T> x) = 0;
  virtual Result<Act<T>> Backward(ForwardContext<T>& ctx, Act<T> dy) = 0;

  // Registry indices of the parameters this module reads itself (not its children's).
  std::span<const int> parameters() const { return parameters_; }
  std::span<Module<T>* const> children() const { return children_; }
  // Its own and its descendants' parameters, depth-first in registration order.
  std::vector<int> AllParameters() const;
  // Its own and its descendants' ids.
  std::vector<int> AllModuleIds() const;

 protected:
  Module(ModuleBuilder& builder, std::string name);

  // Registers "<name()>.<local_name>" and makes it one of this module's parameters.
  int AddParameter(ModuleBuilder& builder, std::string_view local_name, Shape shape, InitKind init);
  // Makes an already registered parameter (or alias) one of this module's parameters.
  void UseParameter(int index) { parameters_.push_back(index); }
  // Children are owned by the subclass (unique_ptr members); this lists them for traversal.
  void AddChild(Module<T>* child) { children_.push_back(child); }
  // For a subclass that lets a plan wrap a child at build time: `now` takes `old`'s place.
  void ReplaceChild(const Module<T>* old, Module<T>* now);

 private:
  std::string name_;
  int id_;
  std::vector<int> parameters_;
  std::vector<Module<T>*> children_;
};

// Releases the dx that `module`'s Backward returned.
template <typename T>
void ReleaseGradsOf(ForwardContext<T>& ctx, const Module<T>& module) {
  for (int id : module.AllModuleIds()) ctx.ReleaseGrads(id);
}

extern template class Module<float>;
extern template class Module<double>;

}  // namespace sluice::model
