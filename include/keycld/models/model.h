// The one interface of a trained model (docs/architecture.md, "Models"): what training,
// evaluation, prediction and control ask of every variant. A variant lives in its own files
// (models/*_model.h) and is listed in the registry (models/registry.h), the only place that knows
// the variants by name.
//
//   ModelImpl (abstract): encode images → states, render states → images, the dynamics
//   ẍ = g(x, ẋ, u) and its rollouts, the parameter groups of the optimiser, and optionally the
//   energy terms (M, V, ∇V, B) of a Lagrangian (EnergyModel, dynamics/lagrangian.h) that
//   energy-shaping control needs.
//   KeypointModelImpl (keypoint_model.h): the keypoint estimator and renderer that KeyCLD and
//   its ablations share (docs/method.md §3).
//
// States are keypoints in normalized image coordinates (docs/method.md §2): [T, K, 2] from
// Encode, [B, 2K] for the dynamics. The VAE baselines (lag_vae_model.h) carry their generalised
// coordinate (cos q, sin q) in the same shapes instead (StatesAreImageKeypoints() is false).
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "keycld/dynamics/constraints.h"
#include "keycld/dynamics/dynamics.h"
#include "keycld/dynamics/integrators.h"
#include "keycld/dynamics/lagrangian.h"
#include "keycld/model/mechanics.h"
#include "keycld/model/onednn_unet.h"
#include "keycld/sim/env_name.h"

namespace keycld {

/// What fixes the shapes of a model; stored in every checkpoint.
struct ModelSpec {
  EnvName env = EnvName::kPendulum;  // kCustom: a description file's system (docs/systems.md)
  /// The system's name: the built-in's ("" is read as EnvNameString(env)) or the description's.
  std::string system;
  /// A custom system's holonomic constraints (from its data set's description); empty for the
  /// built-ins, whose terms are HolonomicConstraints::ForEnvironment(env).
  std::vector<ConstraintTerm> constraints;
  int num_keypoints = 1;         // K: pendulum 1, cartpole 2, acrobot 2 (docs/method.md §4)
  int action_dim = 1;            // A: the system's actuators
  int hidden = 32;               // h
  int image_size = 64;           // H = W
  double sigma = 0.1;            // Gaussian map width
  double dt = 0.02;              // frame interval (s)
  std::string model = "keycld";  // the variant's name in the registry (models/registry.h)
  /// How the dynamics networks' dense weights start (V, B, NODE2's g). Only construction reads
  /// it: checkpoints hold the trained weights, so it is not stored with them.
  DenseInit dense_init = DenseInit::kPaper;

  /// Throws InputError for inconsistent values (size not a multiple of 4, h not a multiple of
  /// 8 or smaller than K, an unknown variant, a constraint outside the K keypoints, ...).
  void Validate() const;
  /// The system's name (system, or the built-in's name when empty).
  std::string SystemName() const;
  /// The system's holonomic constraints (docs/method.md §4): the built-in's or `constraints`.
  HolonomicConstraints Constraints() const;
};

/// Number of keypoints of a built-in system (docs/method.md §4); InputError for kCustom.
int KeypointCount(EnvName env);

/// Arithmetic of the estimator's and renderer's convolutions (`--precision`). bf16 is autocast
/// (convolutions in bfloat16, GroupNorm, spatial softmax, keypoints, rendered images, dynamics
/// and losses in float32); it is a choice of speed, not part of the model (checkpoints hold
/// float32 weights either way).
enum class Precision { kFloat32, kBfloat16 };
template <>
struct NameTable<Precision> {
  static constexpr const char* kWhat = "precision";
  static constexpr std::pair<Precision, const char*> kEntries[] = {{Precision::kFloat32, "fp32"},
                                                                   {Precision::kBfloat16, "bf16"}};
};
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

/// What a variant's own prediction gives (OwnPrediction).
struct StatePrediction {
  torch::Tensor states;  // [R, F, StatePoints(), 2]: frames 0 … F−1, frame 0 included
  int64_t accepted_steps = 0, rejected_steps = 0;
};

/// A variant whose prediction does not start from (x₁, ẋ₁) of three estimated frames
/// (docs/method.md §8): HGN infers its phase-space state (q, p) from a stack of frames and
/// integrates a first-order Hamiltonian flow (docs/baselines.md). PredictKeypoints
/// (train/vpt.h) hands such a variant the first frames instead.
class OwnPrediction {
 public:
  virtual ~OwnPrediction() = default;
  /// How many leading frames of a run the prediction reads.
  virtual int64_t PredictionInputFrames() const = 0;
  /// frames float [R, PredictionInputFrames(), 3, H, W] in [0, 1], actions float64 [R, A],
  /// count ≥ 2 → the states of frames 0 … count − 1 (frame t at t·Δt from the first frame),
  /// integrated by `method` (dopri5 with options' tolerances, or a fixed-step method with
  /// options.substeps). Called under no-grad with the dynamics modules in float64
  /// (DoublePrecisionDynamics). InputError for bad shapes, NumericalError if it diverges.
  virtual StatePrediction PredictFromFrames(const torch::Tensor& frames,
                                            const torch::Tensor& actions, int64_t count,
                                            IntegratorMethod method,
                                            const IntegratorOptions& options) = 0;
};

/// A parameter that a relabelling of the keypoints changes (ModelImpl::KeypointRelabelling) and
/// the map from a tensor of its shape to the relabelled tensor, so that an optimizer's moments of
/// the parameter can follow it (train/relabel.h).
struct RelabelledParameter {
  torch::Tensor parameter;
  std::function<torch::Tensor(const torch::Tensor&)> relabel;
};

class ModelImpl : public torch::nn::Module {
 public:
  /// Validates `spec` (InputError).
  explicit ModelImpl(const ModelSpec& spec);
  ~ModelImpl() override = default;

  const ModelSpec& spec() const { return spec_; }
  /// The device of the model's parameters.
  torch::Device device() const;

  /// Images float [T, 3, H, W] in [0, 1] → keypoints and heatmaps (docs/method.md §3). With
  /// `transform_ids` int64 [T] each frame gets its dihedral transform (§6 augmentation).
  virtual Encoding Encode(const torch::Tensor& images, const torch::Tensor& transform_ids = {}) = 0;
  /// Keypoints [T, K, 2] → images [T, 3, H, W] in (0, 1).
  virtual torch::Tensor Render(const torch::Tensor& keypoints) = 0;

  /// The variant's dynamics ẍ = g(x, ẋ, u) (valid as long as the model).
  virtual Dynamics& dynamics() = 0;
  /// ẍ of the dynamics: x, ẋ [B, 2K], u [A] or [B, A] → [B, 2K].
  torch::Tensor Acceleration(const torch::Tensor& x, const torch::Tensor& xdot,
                             const torch::Tensor& u);
  /// The dynamics' velocity projection (onto the constraint tangent space for KeyCLD, the
  /// identity otherwise). [B, 2K].
  torch::Tensor ProjectVelocity(const torch::Tensor& x, const torch::Tensor& xdot);
  /// Integrates the dynamics from (x₀, ẋ₀) [B, 2K] with constant u [A] or [B, A] to `times`
  /// (s, times[0] = start). Returns x, ẋ [B, T, 2K] and step counts.
  Trajectory Rollout(const torch::Tensor& x0, const torch::Tensor& xdot0, const torch::Tensor& u,
                     const std::vector<double>& times, IntegratorMethod method,
                     const IntegratorOptions& options = {});

  /// The Lagrangian's terms (mass scalars, V, ∇V, B), or null for a variant without energy.
  virtual EnergyModel* energy() { return nullptr; }
  /// Whether the variant provides energy() (from the registry).
  bool HasEnergy() const;
  /// Whether Encode's keypoints are positions in the image (KeyCLD and its ablations) rather
  /// than a baseline's generalised coordinates (from the registry, ModelVariant::image_keypoints).
  bool StatesAreImageKeypoints() const;
  /// Points per state: the K of Encode's keypoints [T, K, 2] and of Render's input.
  /// spec().num_keypoints for KeyCLD, its ablations and the angle baselines; HGN's 128 (its
  /// position q of 16×4×4 values carried as 128 pairs, hgn_model.h).
  virtual int64_t StatePoints() const { return spec_.num_keypoints; }
  /// Consecutive frames Encode reads for one state: 1 (every frame on its own); HGN 5 (the state
  /// of frame t from frames t … t+4, so its input must be consecutive frames of one run).
  virtual int64_t EncoderFrames() const { return 1; }
  /// energy(), or InputError saying that `purpose` needs a variant with a learned Lagrangian.
  EnergyModel& RequireEnergy(const std::string& purpose);
  // The energy terms through RequireEnergy (InputError for a variant without energy):
  /// Mass scalars m [K] (M = diag(m₁², m₁², …)).
  torch::Tensor MassScalars();
  /// Diagonal of the mass matrix [2K] (docs/method.md §3).
  torch::Tensor MassDiagonal();
  /// Potential energy V(x): x [B, 2K] → [B].
  torch::Tensor Potential(const torch::Tensor& x);
  /// ∇V(x): [B, 2K] → [B, 2K].
  torch::Tensor PotentialGradient(const torch::Tensor& x);
  /// Input matrix B(x): [B, 2K] → [B, 2K, A].
  torch::Tensor InputMatrix(const torch::Tensor& x);

  /// Parameters trained with the learning rate lr (estimator, renderer, encoders, decoders).
  virtual std::vector<torch::Tensor> PerceptionParameters() = 0;
  /// The parameters to change, and how, so that keypoint k of the model becomes its old
  /// keypoint order[k] and nothing else changes: Encode's keypoints come out in the new order,
  /// Render, the masses, V and B read them in it, so images → keypoints → images and the
  /// Lagrangian's terms compute what they did, up to the order; only the holonomic constraints,
  /// which name their keypoints, now act on other points (docs/training.md, "Keypoint order").
  /// `order` is a permutation of 0 … K − 1. The caller applies the maps (train/relabel.h).
  /// InputError for a variant without such a relabelling (every one but keycld and keycld-nc)
  /// or an order that is not a permutation of the keypoints.
  virtual std::vector<RelabelledParameter> KeypointRelabelling(const std::vector<int64_t>& order);

  /// The modules trained with lr · dynamics_lr_scale (mass, potential, input matrix; NODE2's
  /// network); DoublePrecisionDynamics casts them for evaluation.
  virtual std::vector<std::shared_ptr<torch::nn::Module>> DynamicsModules() = 0;
  /// The parameters of DynamicsModules().
  std::vector<torch::Tensor> DynamicsParameters();

  /// Precision of Encode and Render (default float32). Throws InputError for bf16 where
  /// HasNativeBf16(device()) is false.
  void SetPrecision(Precision precision);
  Precision precision() const { return precision_; }

  /// How Encode and Render compute the estimator's and renderer's U-Nets while gradients are
  /// recorded (model/onednn_unet.h; default LibTorch's modules). A choice of speed, not part of
  /// the model. Variants with their own encoder and decoder ignore it.
  void SetTrunkKernels(TrunkKernels kernels) { kernels_ = kernels; }
  TrunkKernels trunk_kernels() const { return kernels_; }

 private:
  ModelSpec spec_;
  Precision precision_ = Precision::kFloat32;
  TrunkKernels kernels_ = TrunkKernels::kLibTorch;
};

/// A shared handle on a model of any variant (as torch::nn's module holders): `model->Encode(…)`.
class Model : public torch::nn::ModuleHolder<ModelImpl> {
 public:
  Model() : ModuleHolder(nullptr) {}
  Model(std::nullptr_t) : ModuleHolder(nullptr) {}  // NOLINT: like torch::nn's holders
  template <typename T, typename = std::enable_if_t<std::is_base_of_v<ModelImpl, T>>>
  Model(std::shared_ptr<T> impl)  // NOLINT: a variant converts to the interface
      : ModuleHolder(std::shared_ptr<ModelImpl>(std::move(impl))) {}
};

/// While alive, the dynamics modules of `model` (potential, input matrix and mass, or NODE2's
/// network) are float64, so that Dormand–Prince can meet tolerances near 1e-8 (evaluation).
/// Restores float32 exactly (float32 → float64 → float32 is lossless).
class DoublePrecisionDynamics {
 public:
  explicit DoublePrecisionDynamics(Model model);
  ~DoublePrecisionDynamics();

 private:
  Model model_;
};

}  // namespace keycld
