// What the energy-shaping controller of docs/method.md §10 needs from a model of the system:
// keypoints from an image, the potential energy and its gradient, the input matrix, the mass
// matrix and the projection onto the tangent space of the holonomic constraints. Two
// implementations: the learned KeyCLD model (LearnedControlModel, here) and the true pendulum
// written in keypoint coordinates (TruePendulumModel, true_pendulum.h).
//
// Conventions: states are float64 CPU tensors [B, 2K] in the normalized image coordinates of
// docs/method.md §2 ordered (x₁, y₁, …, x_K, y_K); velocities in normalized units per second;
// energies in the model's own energy unit (arbitrary for a learned model, J for the true one).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <filesystem>
#include <span>

#include "keycld/models/registry.h"
#include "keycld/sim/environment.h"

namespace keycld {

class ControlModel {
 public:
  virtual ~ControlModel() = default;

  /// K keypoints (state width 2K).
  virtual int num_keypoints() const = 0;
  /// A actuators (the columns of B).
  virtual int action_dim() const = 0;
  /// Side S of the square images EstimateKeypoints reads (pixels).
  virtual int image_size() const = 0;

  /// Keypoints of one frame: rgb uint8 [S, S, 3], row 0 = top (OffscreenRenderer's layout)
  /// → x [1, 2K]. Throws InputError for a buffer of another size.
  virtual torch::Tensor EstimateKeypoints(std::span<const uint8_t> rgb) = 0;
  /// Potential energy V(x): [B, 2K] → [B].
  virtual torch::Tensor Potential(const torch::Tensor& x) = 0;
  /// ∇V(x): [B, 2K] → [B, 2K].
  virtual torch::Tensor PotentialGradient(const torch::Tensor& x) = 0;
  /// Input matrix B(x): [B, 2K] → [B, 2K, A]; the generalised force of u [A] is B(x) u.
  virtual torch::Tensor InputMatrix(const torch::Tensor& x) = 0;
  /// Diagonal of the constant mass matrix M [2K].
  virtual torch::Tensor MassDiagonal() = 0;
  /// v − D⁺ D v, the projection onto the tangent space of Φ at x (docs/method.md §5), for
  /// velocities and forces alike (the identity without constraints): x, v [B, 2K] → [B, 2K].
  virtual torch::Tensor ProjectTangent(const torch::Tensor& x, const torch::Tensor& v) = 0;
};

/// The learned KeyCLD model behind the ControlModel interface: the keypoint estimator for
/// EstimateKeypoints (no augmentation), the learned V, ∇V (autograd), B, M and the model's
/// constraint projection. Runs the networks on the model's device and dtype, without
/// gradients, and returns float64 CPU tensors.
class LearnedControlModel : public ControlModel {
 public:
  explicit LearnedControlModel(Model model);

  int num_keypoints() const override { return model_->spec().num_keypoints; }
  int action_dim() const override { return model_->spec().action_dim; }
  int image_size() const override { return model_->spec().image_size; }
  torch::Tensor EstimateKeypoints(std::span<const uint8_t> rgb) override;
  torch::Tensor Potential(const torch::Tensor& x) override;
  torch::Tensor PotentialGradient(const torch::Tensor& x) override;
  torch::Tensor InputMatrix(const torch::Tensor& x) override;
  torch::Tensor MassDiagonal() override;
  torch::Tensor ProjectTangent(const torch::Tensor& x, const torch::Tensor& v) override;

  Model& model() { return model_; }

 private:
  torch::Tensor ToModel(const torch::Tensor& x) const;
  Model model_;
  torch::Device device_;
  torch::ScalarType dtype_;
};

/// Refuses, with an InputError that says why, a trained model that cannot drive `env` with
/// the controller of docs/method.md §10: another environment, an action dimension other than the
/// environment's actuator count, or a model trained on data of another control mode than
/// "full" (its input matrix was never trained for every actuator). `control_mode` is the
/// run's [data] control ("" when unknown: refused too, as nothing says the model is fully
/// actuated).
void CheckFullyActuated(const ModelSpec& spec, const std::string& control_mode,
                        const Environment& env);

/// The control mode ([data] control) of the training run holding `file_or_run` (a run folder
/// or a checkpoint in its checkpoints/ folder), read from the run's config.toml; "" when no
/// config.toml is found. Throws InputError for a config.toml that does not parse.
std::string RunControlMode(const std::filesystem::path& file_or_run);

}  // namespace keycld
