#include "keycld/train/vpt.h"

#include <algorithm>
#include <cmath>

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

KeypointPrediction PredictKeypoints(Model& model, const torch::Tensor& first3,
                                    const torch::Tensor& actions, int64_t frames,
                                    IntegratorMethod method, const IntegratorOptions& options) {
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
  torch::Tensor first = ImagesToFloat(first3.slice(1, 0, 3), device)
                            .reshape({R * 3, 3, spec.image_size, spec.image_size});
  torch::Tensor x = model->Encode(first).keypoints.reshape({R, 3, 2 * K});
  {
    DoublePrecisionDynamics fp64(model);
    const PhaseState start = InitialStateFromEstimates(model, x);
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
                                          actions, N, options.method, io);
  VptResult result =
      VptFromMse(PredictionMse(model, p.keypoints, images, options.render_chunk), options.epsilon);
  result.predicted = p.keypoints;
  result.accepted_steps = p.accepted_steps;
  result.rejected_steps = p.rejected_steps;
  return result;
}

}  // namespace keycld
