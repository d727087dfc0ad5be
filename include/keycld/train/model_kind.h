// The model variants (KEYCLD.md §5, §9).
#pragma once

#include <string>

namespace keycld {

/// The model variant: they share the keypoint estimator, the renderer and the losses and differ
/// only in the dynamics (KEYCLD.md §5, §9).
enum class ModelKind {
  kKeycld,    // "keycld": constrained Lagrangian, ẍ = M⁻¹ (f − Dᵀ λ)
  kKeycldNc,  // "keycld-nc": the same Lagrangian without constraints, ẍ = M⁻¹ f
  kNode2,     // "node2": black-box second-order neural ODE ẍ = g(x, ẋ, u)
};
/// Parses "keycld" | "keycld-nc" | "node2"; throws InputError otherwise.
ModelKind ParseModelKind(const std::string& name);
/// The name ParseModelKind reads ("keycld", "keycld-nc", "node2").
std::string ModelKindName(ModelKind kind);
/// Reads the `dynamics` value of configurations and checkpoints written before model variants
/// existed: "constrained" → keycld, "unconstrained" → keycld-nc; throws InputError otherwise.
ModelKind ModelKindFromLegacyDynamics(const std::string& dynamics);
/// All variants, in the order of the paper's table.
inline constexpr ModelKind kAllModelKinds[] = {ModelKind::kKeycld, ModelKind::kKeycldNc,
                                               ModelKind::kNode2};

}  // namespace keycld
