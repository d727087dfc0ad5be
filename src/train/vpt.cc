#include "keycld/train/vpt.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "keycld/model/dihedral.h"
#include "keycld/util/error.h"
#include "keycld/util/stats.h"

namespace keycld {

torch::Tensor ImagesToFloat(const torch::Tensor& images, const torch::Device& device) {
  const int64_t d = images.dim();
  if (d < 3 || images.size(d - 1) != 3) throw InputError("images must be [..., H, W, 3]");
  // contiguous(): a channels-last view would carry its memory format through every
  // convolution and GroupNorm of the networks, which is slower on CPU.
  return images.to(device).movedim(d - 1, d - 3).contiguous().to(torch::kFloat32).div_(255.0);
}

namespace {
void CheckImages(const ModelSpec& spec, const torch::Tensor& images, int64_t min_frames,
                 const char* what) {
  if (images.dim() != 5 || images.size(1) < min_frames || images.size(2) != spec.image_size ||
      images.size(3) != spec.image_size || images.size(4) != 3 ||
      images.scalar_type() != torch::kUInt8) {
    throw InputError(std::string(what) + ": images must be uint8 [R, N ≥ " +
                     std::to_string(min_frames) + ", " + std::to_string(spec.image_size) + ", " +
                     std::to_string(spec.image_size) + ", 3]");
  }
}
void CheckActions(const ModelSpec& spec, const torch::Tensor& actions, int64_t R,
                  const char* what) {
  if (actions.dim() != 2 || actions.size(0) != R || actions.size(1) != spec.action_dim) {
    throw InputError(std::string(what) + ": actions must be [" + std::to_string(R) + ", " +
                     std::to_string(spec.action_dim) + "]");
  }
}
}  // namespace

int64_t PredictionInputFrames(Model& model) {
  if (auto* own = dynamic_cast<OwnPrediction*>(model.get())) return own->PredictionInputFrames();
  return 3;
}

torch::Tensor EstimateKeypoints(Model& model, const torch::Tensor& frames, bool dihedral_average) {
  const ModelSpec& spec = model->spec();
  if (frames.dim() != 5 || frames.size(2) != 3 || frames.size(3) != spec.image_size ||
      frames.size(4) != spec.image_size) {
    throw InputError("EstimateKeypoints: frames must be [R, F, 3, " +
                     std::to_string(spec.image_size) + ", " + std::to_string(spec.image_size) +
                     "]");
  }
  const int64_t R = frames.size(0), F = frames.size(1), K2 = 2 * model->StatePoints();
  torch::Tensor flat = frames.reshape({R * F, 3, spec.image_size, spec.image_size});
  if (!dihedral_average) return model->Encode(flat).keypoints.reshape({R, F, K2});
  // One transform at a time (the memory of a plain estimate); Encode maps each back.
  const auto ids_options = torch::TensorOptions().dtype(torch::kInt64).device(frames.device());
  torch::Tensor sum;
  for (int64_t t = 0; t < kDihedralCount; ++t) {
    torch::Tensor k = model->Encode(flat, torch::full({R * F}, t, ids_options)).keypoints;
    sum = sum.defined() ? sum + k : k;
  }
  return (sum / double(kDihedralCount)).reshape({R, F, K2});
}

KeypointPrediction PredictKeypoints(Model& model, const torch::Tensor& first3,
                                    const torch::Tensor& actions, int64_t frames,
                                    IntegratorMethod method, const IntegratorOptions& options,
                                    const StartEstimate& start_estimate) {
  const ModelSpec& spec = model->spec();
  const int64_t F0 = PredictionInputFrames(model);
  CheckImages(spec, first3, F0, "PredictKeypoints");
  const int64_t R = first3.size(0), K = model->StatePoints();
  CheckActions(spec, actions, R, "PredictKeypoints");
  if (frames < 2)
    throw InputError("PredictKeypoints: at least 2 frames, got " + std::to_string(frames));
  const torch::Device device = model->device();
  torch::NoGradGuard no_grad;
  const bool was_training = model->is_training();
  model->eval();
  KeypointPrediction out;
  CheckStartEstimate(start_estimate);
  if (!start_estimate.IsPaper() &&
      (dynamic_cast<OwnPrediction*>(model.get()) != nullptr || !model->StatesAreImageKeypoints())) {
    throw InputError(
        "the dihedral average and the start refinement need a model whose states are image "
        "keypoints (" +
        spec.model + " has its own state)");
  }
  if (auto* own = dynamic_cast<OwnPrediction*>(model.get())) {
    torch::Tensor first = ImagesToFloat(first3.slice(1, 0, F0), device);  // [R, F0, 3, H, W]
    DoublePrecisionDynamics fp64(model);
    StatePrediction p =
        own->PredictFromFrames(first, actions.to(device, torch::kFloat64), frames, method, options);
    out.keypoints = p.states.to(torch::kFloat32).reshape({R, frames, K, 2});
    out.accepted_steps = p.accepted_steps;
    out.rejected_steps = p.rejected_steps;
    if (was_training) model->train();
    return out;
  }
  torch::Tensor first = ImagesToFloat(first3.slice(1, 0, 3), device);  // [R, 3, 3, H, W]
  torch::Tensor x = EstimateKeypoints(model, first, start_estimate.dihedral_average);
  std::optional<PhaseState> refined;
  if (start_estimate.refine_steps > 0) {
    PhaseState estimate{x.select(1, 1), (x.select(1, 2) - x.select(1, 0)) / (2.0 * spec.dt)};
    torch::Tensor x0;
    refined = RefineStartState(model, first, estimate, actions, start_estimate, &x0);
    x = x.clone();
    x.select(1, 0).copy_(x0);
  }
  {
    DoublePrecisionDynamics fp64(model);
    const PhaseState start = refined ? *refined : InitialStateFromEstimates(model, x);
    std::vector<double> times;
    for (int64_t t = 0; t < frames - 1; ++t) times.push_back(double(t) * spec.dt);
    Trajectory traj = model->Rollout(start.x, start.xdot, actions.to(device, torch::kFloat64),
                                     times, method, options);
    out.accepted_steps = traj.accepted_steps;
    out.rejected_steps = traj.rejected_steps;
    out.keypoints = torch::cat({x.select(1, 0).unsqueeze(1), traj.x.to(torch::kFloat32)}, 1)
                        .reshape({R, frames, K, 2});
  }
  if (was_training) model->train();
  return out;
}

void CheckStartEstimate(const StartEstimate& start_estimate) {
  if (start_estimate.refine_steps < 0 || start_estimate.refine_steps > 100000) {
    throw InputError("start refinement: steps must be in [0, 100000], got " +
                     std::to_string(start_estimate.refine_steps));
  }
  if (!(start_estimate.refine_lr > 0) || !std::isfinite(start_estimate.refine_lr)) {
    throw InputError("start refinement: the learning rate must be a positive number");
  }
}

PhaseState RefineStartState(Model& model, const torch::Tensor& frames, const PhaseState& start,
                            const torch::Tensor& actions, const StartEstimate& start_estimate,
                            torch::Tensor* x0_out, double* loss_before, double* loss_after) {
  const ModelSpec& spec = model->spec();
  const int64_t K2 = 2 * model->StatePoints();
  CheckStartEstimate(start_estimate);
  if (frames.dim() != 5 || frames.size(1) != 3 || frames.size(2) != 3 ||
      frames.size(3) != spec.image_size || frames.size(4) != spec.image_size) {
    throw InputError("RefineStartState: frames must be [R, 3, 3, " +
                     std::to_string(spec.image_size) + ", " + std::to_string(spec.image_size) +
                     "]");
  }
  const int64_t R = frames.size(0);
  if (start.x.dim() != 2 || start.x.size(0) != R || start.x.size(1) != K2 ||
      !start.xdot.defined() || start.xdot.sizes() != start.x.sizes()) {
    throw InputError("RefineStartState: x₁ and ẋ₁ must be [" + std::to_string(R) + ", " +
                     std::to_string(K2) + "]");
  }
  CheckActions(spec, actions, R, "RefineStartState");
  const torch::Device device = model->device();
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat32).device(device);
  const double dt = spec.dt;
  torch::Tensor target = frames.to(f32).reshape({R * 3, 3, spec.image_size, spec.image_size});
  // The parameters: x₁ and the displacement d = ẋ₁Δt, both in image units, so that one
  // learning rate suits both.
  torch::Tensor x1 = start.x.detach().to(f32).clone();
  torch::Tensor d = (start.xdot.detach().to(f32) * dt).clone();
  torch::Tensor half_a_dt2;
  {
    torch::NoGradGuard no_grad;
    DoublePrecisionDynamics fp64(model);
    const auto f64 = torch::TensorOptions().dtype(torch::kFloat64).device(device);
    half_a_dt2 =
        (0.5 * dt * dt * model->Acceleration(start.x.to(f64), start.xdot.to(f64), actions.to(f64)))
            .to(f32);
  }
  auto objective = [&](const torch::Tensor& p1, const torch::Tensor& pd) {
    torch::Tensor xs = torch::stack({p1 - pd + half_a_dt2, p1, p1 + pd + half_a_dt2}, 1);
    torch::Tensor rendered = model->Render(xs.reshape({R * 3, -1, 2}));
    return (rendered - target).square().mean({1, 2, 3}).reshape({R, 3}).sum(1);  // [R]
  };
  if (loss_before) {
    torch::NoGradGuard no_grad;
    *loss_before = objective(x1, d).mean().item<double>();
  }
  torch::AutoGradMode grad_mode(true);
  x1.requires_grad_(true);
  d.requires_grad_(true);
  torch::optim::Adam adam({x1, d}, torch::optim::AdamOptions(start_estimate.refine_lr));
  for (int64_t k = 0; k < start_estimate.refine_steps; ++k) {
    for (auto& group : adam.param_groups()) {
      group.options().set_lr(start_estimate.refine_lr *
                             (1.0 - double(k) / double(start_estimate.refine_steps)));
    }
    torch::Tensor loss = objective(x1, d);
    // The gradient of the start state only: the model's parameters get none.
    std::vector<torch::Tensor> g = torch::autograd::grad({loss.sum()}, {x1, d});
    x1.mutable_grad() = g[0];
    d.mutable_grad() = g[1];
    adam.step();
  }
  torch::NoGradGuard no_grad;
  x1 = x1.detach();
  d = d.detach();
  if (loss_after) *loss_after = objective(x1, d).mean().item<double>();
  if (!torch::isfinite(x1).all().item<bool>() || !torch::isfinite(d).all().item<bool>()) {
    throw NumericalError("start refinement diverged (non-finite start state)");
  }
  if (x0_out) *x0_out = x1 - d + half_a_dt2;
  torch::Tensor x1d = x1.to(torch::kFloat64);
  DoublePrecisionDynamics fp64(model);
  return {x1d, model->ProjectVelocity(x1d, (d / dt).to(torch::kFloat64))};
}

PhaseState InitialStateFromEstimates(Model& model, const torch::Tensor& x) {
  if (x.dim() != 3 || x.size(1) != 3 || x.size(2) != 2 * model->spec().num_keypoints) {
    throw InputError("InitialStateFromEstimates: x must be [R, 3, 2K]");
  }
  torch::Tensor xd = x.to(torch::kFloat64);
  torch::Tensor x1 = xd.select(1, 1);
  torch::Tensor v1 = (xd.select(1, 2) - xd.select(1, 0)) / (2.0 * model->spec().dt);
  return {x1, model->ProjectVelocity(x1, v1)};
}

VptResult VptFromMse(const torch::Tensor& mse, double epsilon) {
  if (mse.dim() != 2 || mse.size(0) < 1 || mse.size(1) < 1) {
    throw InputError("VptFromMse: mse must be [R ≥ 1, N ≥ 1]");
  }
  VptResult result;
  result.mse = mse.to(torch::kCPU, torch::kFloat64).contiguous();
  const int64_t R = mse.size(0), N = mse.size(1);
  auto acc = result.mse.accessor<double, 2>();
  for (int64_t r = 0; r < R; ++r) {
    int v = int(N - 1);
    for (int64_t t = 0; t < N; ++t) {
      if (!(acc[r][t] <= epsilon)) {  // NaN counts as invalid
        v = int(t);
        break;
      }
    }
    result.vpt.push_back(v);
  }
  const Summary summary = Summarize(result.vpt);
  result.mean = summary.mean;
  result.std = summary.std;
  result.median = summary.median;
  return result;
}

torch::Tensor PredictionMse(Model& model, const torch::Tensor& keypoints,
                            const torch::Tensor& images, int64_t render_chunk) {
  const ModelSpec& spec = model->spec();
  CheckImages(spec, images, 1, "PredictionMse");
  const int64_t R = images.size(0), N = images.size(1), K = model->StatePoints();
  if (keypoints.dim() != 4 || keypoints.size(0) != R || keypoints.size(1) != N ||
      keypoints.size(2) != K || keypoints.size(3) != 2) {
    throw InputError("PredictionMse: keypoints must be [" + std::to_string(R) + ", " +
                     std::to_string(N) + ", " + std::to_string(K) + ", 2] like the images");
  }
  if (render_chunk < 1) throw InputError("PredictionMse: render_chunk must be ≥ 1");
  const torch::Device device = model->device();
  torch::NoGradGuard no_grad;
  const bool was_training = model->is_training();
  model->eval();
  torch::Tensor flat = keypoints.to(device, torch::kFloat32).reshape({R * N, K, 2});
  torch::Tensor truth_all = images.reshape({R * N, spec.image_size, spec.image_size, 3});
  std::vector<torch::Tensor> mse_chunks;
  for (int64_t s = 0; s < R * N; s += render_chunk) {
    const int64_t e = std::min(R * N, s + render_chunk);
    torch::Tensor rendered = model->Render(flat.slice(0, s, e));
    torch::Tensor truth = ImagesToFloat(truth_all.slice(0, s, e), device);
    mse_chunks.push_back((rendered - truth).square().mean({1, 2, 3}));
  }
  if (was_training) model->train();
  return torch::cat(mse_chunks).reshape({R, N}).to(torch::kCPU, torch::kFloat64);
}

VptResult ValidPredictionTime(Model& model, const torch::Tensor& images,
                              const torch::Tensor& actions, const VptOptions& options) {
  const ModelSpec& spec = model->spec();
  CheckImages(spec, images, std::max<int64_t>(3, PredictionInputFrames(model)),
              "ValidPredictionTime");
  const int64_t R = images.size(0), N = images.size(1);
  CheckActions(spec, actions, R, "ValidPredictionTime");
  IntegratorOptions io;
  io.rtol = options.rtol;
  io.atol = options.atol;
  io.max_steps = options.max_steps;
  KeypointPrediction p = PredictKeypoints(model, images.slice(1, 0, PredictionInputFrames(model)),
                                          actions, N, options.method, io, options.start_estimate);
  VptResult result =
      VptFromMse(PredictionMse(model, p.keypoints, images, options.render_chunk), options.epsilon);
  result.predicted = p.keypoints;
  result.accepted_steps = p.accepted_steps;
  result.rejected_steps = p.rejected_steps;
  return result;
}

}  // namespace keycld
