#include "keycld/models/registry.h"

#include <algorithm>

#include "keycld/models/chain_vae_model.h"
#include "keycld/models/hgn_model.h"
#include "keycld/models/lag_vae_model.h"
#include "keycld/models/lagrangian_model.h"
#include "keycld/models/node2_model.h"
#include "keycld/util/error.h"

namespace keycld {

namespace {

// lag-vae and lag-cavae: one angle for the pendulum, two coordinates for the cartpole and the
// acrobot (docs/baselines.md).
Model LagVaeModel(const ModelSpec& spec, bool coordinate_aware) {
  if (spec.env == EnvName::kPendulum) {
    return Model(std::make_shared<LagVaeModelImpl>(spec, coordinate_aware));
  }
  return Model(std::make_shared<ChainLagVaeModelImpl>(spec, coordinate_aware));
}

}  // namespace

const std::vector<ModelVariant>& ModelVariants() {
  // Every field named: image_keypoints, systems, loss_integrators, augmentation and takes_actions
  // say what the baselines differ in (registry.h).
  static const std::vector<IntegratorMethod> any_integrator,
      published{IntegratorMethod::kEuler, IntegratorMethod::kRk4};
  static const std::vector<ModelVariant> variants = {
      {.name = "keycld",
       .description = "constrained Lagrangian",
       .has_energy = true,
       .create =
           [](const ModelSpec& s) { return Model(std::make_shared<LagrangianModelImpl>(s, true)); },
       .image_keypoints = true,
       .systems = {},
       .loss_integrators = any_integrator,
       .augmentation = true,
       .takes_actions = true},
      {.name = "keycld-nc",
       .description = "Lagrangian without constraints",
       .has_energy = true,
       .create =
           [](const ModelSpec& s) {
             return Model(std::make_shared<LagrangianModelImpl>(s, false));
           },
       .image_keypoints = true,
       .systems = {},
       .loss_integrators = any_integrator,
       .augmentation = true,
       .takes_actions = true},
      {.name = "node2",
       .description = "black-box second-order ODE",
       .has_energy = false,
       .create = [](const ModelSpec& s) { return Model(std::make_shared<Node2ModelImpl>(s)); },
       .image_keypoints = true,
       .systems = {},
       .loss_integrators = any_integrator,
       .augmentation = true,
       .takes_actions = true},
      {.name = "lag-vae",
       .description = "Lagrangian VAE baseline: posteriors of generalised coordinates, MLP decoder",
       .has_energy = false,
       .create =
           [](const ModelSpec& s) { return LagVaeModel(s, false); },
       .image_keypoints = false,
       .systems = {EnvName::kPendulum, EnvName::kCartpole, EnvName::kAcrobot},
       .loss_integrators = published,
       .augmentation = false,
       .takes_actions = true},
      {.name = "lag-cavae",
       .description = "Lagrangian VAE baseline: posteriors of generalised coordinates, coordinate-aware sprite decoder",
       .has_energy = false,
       .create =
           [](const ModelSpec& s) { return LagVaeModel(s, true); },
       .image_keypoints = false,
       .systems = {EnvName::kPendulum, EnvName::kCartpole, EnvName::kAcrobot},
       .loss_integrators = published,
       .augmentation = false,
       .takes_actions = true},
      {.name = "hgn",
       .description = "Hamiltonian Generative Network baseline: stacked-frame encoder, "
                      "convolutional Hamiltonian",
       .has_energy = false,
       .create = [](const ModelSpec& s) { return Model(std::make_shared<HgnModelImpl>(s)); },
       .image_keypoints = false,
       .systems = {},
       .loss_integrators = any_integrator,
       .augmentation = false,
       .takes_actions = false},
  };
  return variants;
}

std::vector<std::string> ModelVariantNames() {
  std::vector<std::string> names;
  for (const ModelVariant& v : ModelVariants()) names.push_back(v.name);
  return names;
}

const ModelVariant& FindModelVariant(const std::string& name) {
  std::string known;
  for (const ModelVariant& v : ModelVariants()) {
    if (v.name == name) return v;
    known += (known.empty() ? "" : ", ") + v.name;
  }
  throw InputError("unknown model '" + name + "' (expected one of " + known + ")");
}

bool ModelSupportsSystem(const std::string& model, EnvName env) {
  const std::vector<EnvName>& systems = FindModelVariant(model).systems;
  return systems.empty() || std::find(systems.begin(), systems.end(), env) != systems.end();
}

bool ModelSupportsControl(const std::string& model, ControlMode control) {
  return FindModelVariant(model).takes_actions || control == ControlMode::kNone;
}

std::string SupportedSystems(const std::string& model) {
  const std::vector<EnvName>& systems = FindModelVariant(model).systems;
  if (systems.empty()) return "every system";
  std::string out;
  for (EnvName e : systems) out += (out.empty() ? "" : ", ") + EnvNameString(e);
  return out;
}

Model CreateModel(const ModelSpec& spec) { return FindModelVariant(spec.model).create(spec); }

std::string ModelFromLegacyDynamics(const std::string& dynamics) {
  if (dynamics == "constrained") return "keycld";
  if (dynamics == "unconstrained") return "keycld-nc";
  throw InputError("unknown dynamics '" + dynamics +
                   "' (expected constrained or unconstrained; newer files say model = keycld, "
                   "keycld-nc, node2, lag-vae, lag-cavae or hgn)");
}

std::string DescribeModel(const ModelSpec& spec) {
  return spec.model + " (" + FindModelVariant(spec.model).description + "), " + spec.SystemName() +
         ", h = " + std::to_string(spec.hidden) + ", " + std::to_string(spec.image_size) + " px, " +
         std::to_string(spec.action_dim) + " actuator(s)";
}

}  // namespace keycld
