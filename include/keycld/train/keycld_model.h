// The whole KeyCLD model (KEYCLD.md §1, §3, §5): keypoint estimator, renderer, and the learned
// dynamics, with the operations later commands reuse: encode, render, energy terms, rollout.
// Saved to and loaded from checkpoints (checkpoint.h).
//
// Three variants (ModelKind, KEYCLD.md §9) share everything but the dynamics, each an
// implementation of the one interface Dynamics (dynamics/dynamics.h):
//   keycld     LagrangianDynamics with the environment's holonomic constraints (KEYCLD.md §4, §5);
//   keycld-nc  LagrangianDynamics with HolonomicConstraints::None: ẍ = M⁻¹ (−∇V + B u);
//   node2      FunctionDynamics around SecondOrderOde: ẍ = g(x, ẋ, u), an MLP with no energy.
// The estimator and renderer are built first, so one seed gives the same estimator and renderer
// weights in every variant.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "keycld/dynamics/integrators.h"
#include "keycld/dynamics/lagrangian.h"
#include "keycld/model/keypoint_estimator.h"
#include "keycld/model/mechanics.h"
#include "keycld/model/neural_ode.h"
#include "keycld/model/renderer.h"
#include "keycld/sim/env_name.h"
#include "keycld/train/model_kind.h"

namespace keycld {

/// What fixes the shapes of a model; stored in every checkpoint.
struct ModelSpec {
  EnvName env = EnvName::kPendulum;
  int num_keypoints = 1;   // K: pendulum 1, cartpole 2, acrobot 2 (KEYCLD.md §4)
  int action_dim = 1;      // A: the system's actuators
  int hidden = 32;         // h
  int image_size = 64;     // H = W
  double sigma = 0.1;      // Gaussian map width
  double dt = 0.02;        // frame interval (s)
  ModelKind model = ModelKind::kKeycld;

  /// Throws InputError for inconsistent values (size not a multiple of 4, h not a multiple of
  /// 8 or smaller than K, ...).
  void Validate() const;
};

/// Number of keypoints of an environment (KEYCLD.md §4).
int KeypointCount(EnvName env);

/// One line naming a model, e.g. "keycld (constrained Lagrangian), pendulum, h = 16, 32 px,
/// 1 actuator(s)"; what the commands print about a checkpoint.
std::string DescribeModel(const ModelSpec& spec);

/// Floating-point work of one training step (KEYCLD.md §6) on a sequence of `frames` frames,
/// counting the convolutions of the keypoint estimator and the renderer (KeyCLD §3), which are
/// nearly all of it: forward 2·MACs of every convolution per frame; backward the same again for
/// the gradient with respect to the weights and once more for the gradient with respect to the
/// input, except the estimator's first layer (its input is the images). Left out: normalisation,
/// activations, pooling, the spatial softmax and the dynamics (a few MFLOP per step). Paper
/// setting (64×64, h = 32, K = 1, 50 frames): 172.0 GFLOP.
double TrainingStepFlops(const ModelSpec& spec, int64_t frames);

/// Arithmetic of the estimator's and renderer's convolutions (`--precision`). bf16 is autocast
/// (convolutions in bfloat16, GroupNorm, spatial softmax, keypoints, rendered images, dynamics
/// and losses in float32); it is a choice of speed, not part of the model (checkpoints hold
/// float32 weights either way).
enum class Precision { kFloat32, kBfloat16 };
/// Parses "fp32" | "bf16"; throws InputError otherwise.
Precision ParsePrecision(const std::string& name);
/// "fp32" | "bf16".
std::string PrecisionName(Precision precision);
/// Whether bf16 convolutions run natively on `device`: a CUDA device, or a CPU whose flags
/// (/proc/cpuinfo) include avx512_bf16 or amx_bf16. Elsewhere oneDNN would emulate them, slower
/// than float32.
bool HasNativeBf16(const torch::Device& device);

/// Encoded frames.
struct Encoding {
  torch::Tensor keypoints;  // [T, K, 2], normalized image coordinates
  torch::Tensor heatmaps;   // [T, K, H, W], spatial-softmax probabilities
};

class KeycldModelImpl : public torch::nn::Module {
 public:
  explicit KeycldModelImpl(const ModelSpec& spec);

  const ModelSpec& spec() const { return spec_; }

  /// Images float [T, 3, H, W] in [0, 1] → keypoints and heatmaps (KEYCLD.md §3). With
  /// `transform_ids` int64 [T] each frame gets its dihedral transform (§6 augmentation).
  Encoding Encode(const torch::Tensor& images, const torch::Tensor& transform_ids = {});
  /// Keypoints [T, K, 2] → images [T, 3, H, W] in (0, 1).
  torch::Tensor Render(const torch::Tensor& keypoints);

  /// The variant (KEYCLD.md §9).
  ModelKind kind() const { return spec_.model; }
  /// True for the Lagrangian variants (keycld, keycld-nc), which have a mass matrix, a potential
  /// energy and an input matrix; false for node2.
  bool HasEnergy() const { return spec_.model != ModelKind::kNode2; }
  /// The device of the model's parameters.
  torch::Device device() const;
  /// Precision of Encode and Render (default float32). Throws InputError for bf16 where
  /// HasNativeBf16(device()) is false.
  void SetPrecision(Precision precision);
  Precision precision() const { return precision_; }

  /// Mass matrix diagonal [2K] (M = diag(m₁², m₁², …)). Throws InputError for node2 (as do the
  /// three methods below): see HasEnergy().
  torch::Tensor MassDiagonal();
  /// Potential energy V(x): x [B, 2K] → [B].
  torch::Tensor Potential(const torch::Tensor& x);
  /// ∇V(x): [B, 2K] → [B, 2K].
  torch::Tensor PotentialGradient(const torch::Tensor& x);
  /// Input matrix B(x): [B, 2K] → [B, 2K, A].
  torch::Tensor InputMatrix(const torch::Tensor& x);
  /// ẍ = g(x, ẋ, u) of the model's dynamics (constrained for keycld, M⁻¹ f for keycld-nc, the
  /// network for node2): x, ẋ [B, 2K], u [A] or [B, A] → [B, 2K].
  torch::Tensor Acceleration(const torch::Tensor& x, const torch::Tensor& xdot,
                             const torch::Tensor& u);
  /// ẋ ← ẋ − D⁺ D ẋ for keycld; the identity for keycld-nc and node2. [B, 2K].
  torch::Tensor ProjectVelocity(const torch::Tensor& x, const torch::Tensor& xdot);
  /// Integrates the learned dynamics from (x₀, ẋ₀) [B, 2K] with constant u [A] or [B, A] to
  /// `times` (s, times[0] = start). Returns x, ẋ [B, T, 2K] and step counts.
  Trajectory Rollout(const torch::Tensor& x0, const torch::Tensor& xdot0, const torch::Tensor& u,
                     const std::vector<double>& times, IntegratorMethod method,
                     const IntegratorOptions& options = {});

  /// Estimator and renderer parameters (learning rate lr).
  std::vector<torch::Tensor> PerceptionParameters();
  /// The dynamics parameters (learning rate lr · dynamics_lr_scale): mass, potential and input
  /// matrix, or node2's network.
  std::vector<torch::Tensor> DynamicsParameters();
  /// The modules holding DynamicsParameters().
  std::vector<std::shared_ptr<torch::nn::Module>> DynamicsModules();

  /// The model's dynamics (valid as long as the model).
  Dynamics& dynamics() { return *dynamics_; }

  KeypointEstimator estimator{nullptr};
  Renderer renderer{nullptr};
  // keycld and keycld-nc (null for node2):
  PotentialEnergy potential{nullptr};
  keycld::InputMatrix input_matrix{nullptr};
  MassMatrix mass{nullptr};
  // node2 (null otherwise):
  SecondOrderOde ode{nullptr};

 private:
  void RequireEnergy(const char* what) const;

  ModelSpec spec_;
  std::shared_ptr<Dynamics> dynamics_;
  Precision precision_ = Precision::kFloat32;
};
TORCH_MODULE(KeycldModel);

/// While alive, the dynamics modules of `model` (potential, input matrix and mass, or node2's
/// network) are float64, so that Dormand–Prince can meet tolerances near 1e-8 (evaluation).
/// Restores float32 exactly (float32 → float64 → float32 is lossless).
class DoublePrecisionDynamics {
 public:
  explicit DoublePrecisionDynamics(KeycldModel model);
  ~DoublePrecisionDynamics();

 private:
  KeycldModel model_;
};

}  // namespace keycld
