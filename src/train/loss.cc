#include "keycld/train/loss.h"

#include "keycld/model/keypoints.h"
#include "keycld/util/error.h"

namespace keycld {

namespace {

// Throws InputError unless a sequence of N frames and the options suit the dynamics loss.
void CheckDynamicsLoss(const char* who, int64_t N, const LossOptions& options) {
  const int64_t P = options.horizon;
  if (N < P + 2) {
    throw InputError(std::string(who) + ": a sequence of " + std::to_string(N) +
                     " frames is too short for horizon " + std::to_string(P) + " (need ≥ P + 2)");
  }
  if (!IsFixedStep(options.integrator) || options.substeps < 1 ||
      !(options.max_acceleration >= 0)) {
    throw InputError(std::string(who) + ": integrator " +
                     IntegratorMethodString(options.integrator) + " with " +
                     std::to_string(options.substeps) + " substeps, max_acceleration " +
                     std::to_string(options.max_acceleration) +
                     " (expected euler, rk4 or verlet, substeps ≥ 1, max_acceleration ≥ 0)");
  }
}

}  // namespace

torch::Tensor DynamicsLoss(Model& model, const torch::Tensor& x, const torch::Tensor& u,
                           const LossOptions& options) {
  const ModelSpec& spec = model->spec();
  const int64_t P = options.horizon;
  const int64_t K = spec.num_keypoints;
  if (x.dim() != 2 || x.size(1) != 2 * K) {
    throw InputError("DynamicsLoss: keypoints must be [N, " + std::to_string(2 * K) + "]");
  }
  const int64_t N = x.size(0);
  CheckDynamicsLoss("DynamicsLoss", N, options);
  const double dt = spec.dt;

  // Starts t = 1 … N−1−P (S of them), as one batch.
  const int64_t S = N - 1 - P;
  torch::Tensor x0 = x.slice(0, 1, 1 + S);
  torch::Tensor v0 = (x.slice(0, 2, 2 + S) - x.slice(0, 0, S)) / (2.0 * dt);
  v0 = model->ProjectVelocity(x0, v0);
  std::vector<torch::Tensor> predicted{x0}, target{x0};
  auto acc = [&](const torch::Tensor& xs, const torch::Tensor& vs) {
    torch::Tensor a = model->Acceleration(xs, vs, u);
    if (options.max_acceleration > 0) {
      // Per keypoint: a · min(1, a_max / ‖a_k‖), exact below the bound.
      const torch::Tensor norm = a.reshape({a.size(0), K, 2}).norm(2, 2, /*keepdim=*/true);
      const torch::Tensor factor =
          (options.max_acceleration / norm.clamp_min(1e-30)).clamp_max(1.0);
      a = (a.reshape({a.size(0), K, 2}) * factor).reshape_as(a);
    }
    return a;
  };
  PhaseState state{x0, v0};
  const double h = dt / options.substeps;
  for (int64_t j = 1; j <= P; ++j) {
    for (int s = 0; s < options.substeps; ++s) {
      state = FixedStep(options.integrator, acc, state.x, state.xdot, h);
    }
    predicted.push_back(state.x);
    target.push_back(x.slice(0, 1 + j, 1 + j + S));
  }
  return (torch::stack(predicted, 1) - torch::stack(target, 1)).square().sum();
}

LossTerms SequenceLoss(Model& model, const torch::Tensor& images, const torch::Tensor& u,
                       const torch::Tensor& transform_ids, const LossOptions& options) {
  const ModelSpec& spec = model->spec();
  if (images.dim() != 4 || images.size(1) != 3 || images.size(2) != spec.image_size ||
      images.size(3) != spec.image_size) {
    throw InputError("SequenceLoss: images must be [N, 3, " + std::to_string(spec.image_size) +
                     ", " + std::to_string(spec.image_size) + "]");
  }
  if (auto* own = dynamic_cast<OwnObjective*>(model.get())) {
    return own->SequenceLoss(images, u, options);
  }
  const int64_t N = images.size(0);
  CheckDynamicsLoss("SequenceLoss", N, options);
  Encoding enc = model->Encode(images, transform_ids);
  torch::Tensor l_dyn =
      DynamicsLoss(model, enc.keypoints.reshape({N, 2 * spec.num_keypoints}), u, options);

  torch::Tensor rendered = model->Render(enc.keypoints);
  torch::Tensor l_rec = (images - rendered).square().sum() / double(N);
  torch::Tensor l_bce = HeatmapBce(enc.heatmaps, enc.keypoints, spec.sigma);

  torch::Tensor phi_sq =
      model->dynamics().ConstraintValues(enc.keypoints.reshape({N, 2 * spec.num_keypoints}))
          .square();  // [N, C]
  if (!options.con_weights.empty()) {
    if (int64_t(options.con_weights.size()) != phi_sq.size(1)) {
      throw InputError("con_weights has " + std::to_string(options.con_weights.size()) +
                       " weights, the model has " + std::to_string(phi_sq.size(1)) +
                       " constraints");
    }
    phi_sq = phi_sq * torch::tensor(options.con_weights, phi_sq.options());
  }
  torch::Tensor l_con = phi_sq.sum();

  LossTerms out;
  out.reconstruction = l_rec;
  out.dynamics = l_dyn;
  out.heatmap = l_bce;
  out.constraint = l_con;
  out.total = options.w_rec * l_rec + options.w_dyn * l_dyn + options.w_bce * l_bce;
  if (options.w_con > 0) out.total = out.total + options.w_con * l_con;
  return out;
}

}  // namespace keycld
