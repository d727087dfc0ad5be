// The registry of model variants: the one place that lists them by name. Configurations,
// checkpoints, the CLI's choices and the benchmark read the names from here; creating a model
// from a ModelSpec goes through CreateModel. A new variant adds one entry in registry.cc
// (docs/architecture.md, "Adding a model").
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "keycld/models/model.h"

namespace keycld {

struct ModelVariant {
  std::string name;         // the name in configs, checkpoints and `--model`
  std::string description;  // what its dynamics are, for one-line descriptions
  bool has_energy = false;  // provides ModelImpl::energy() (M, V, ∇V, B) for control
  std::function<Model(const ModelSpec&)> create;
  /// Whether the states are keypoints in image coordinates (KeyCLD and its ablations); the VAE
  /// baselines' are generalised coordinates, so the diagnostics that read joints, constraints or
  /// image positions off the states do not apply to them.
  bool image_keypoints = true;
  /// The built-in systems it is built for; empty = every system (built-in or described).
  std::vector<EnvName> systems;
  /// The training integrators its objective accepts ([train] integrator, and warmup_integrator
  /// while a warm-up lasts); empty = every fixed-step one (euler, rk4, verlet).
  std::vector<IntegratorMethod> loss_integrators;
  /// Whether its objective uses the dihedral augmentation ([train] augment).
  bool augmentation = true;
  /// Whether it models an action input; HGN does not (as published: unactuated data only), so
  /// training refuses actuated data sets and the benchmark skips those settings.
  bool takes_actions = true;
};

/// Every variant, in the order of the paper's table.
const std::vector<ModelVariant>& ModelVariants();
/// The names of ModelVariants(), in order.
std::vector<std::string> ModelVariantNames();
/// The variant called `name`; InputError listing the known names otherwise.
const ModelVariant& FindModelVariant(const std::string& name);
/// Whether variant `model` is built for system `env` (ModelVariant::systems); InputError for an
/// unknown variant.
bool ModelSupportsSystem(const std::string& model, EnvName env);
/// Whether variant `model` trains on data of `control` (ModelVariant::takes_actions: a variant
/// without an action input on unactuated data only); InputError for an unknown variant.
bool ModelSupportsControl(const std::string& model, ControlMode control);
/// "pendulum" or "pendulum, cartpole": the systems variant `model` is built for, or "every system".
std::string SupportedSystems(const std::string& model);
/// A new model of spec.model with freshly initialised parameters (from torch's global RNG).
/// Throws InputError for an unknown variant or an inconsistent spec.
Model CreateModel(const ModelSpec& spec);
/// Reads the `dynamics` value of configurations and checkpoints written before model variants
/// existed: "constrained" → "keycld", "unconstrained" → "keycld-nc"; InputError otherwise.
std::string ModelFromLegacyDynamics(const std::string& dynamics);
/// One line naming a model, e.g. "keycld (constrained Lagrangian), pendulum, h = 16, 32 px,
/// 1 actuator(s)"; what the commands print about a checkpoint.
std::string DescribeModel(const ModelSpec& spec);

}  // namespace keycld
