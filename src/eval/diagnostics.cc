#include "keycld/eval/diagnostics.h"

#include <algorithm>
#include <cmath>

#include "keycld/util/error.h"
#include "keycld/util/tensor_values.h"

namespace keycld {

namespace {

torch::Tensor Wrap(const torch::Tensor& angle) { return torch::atan2(angle.sin(), angle.cos()); }

// The joint anchor of joint `j` in normalized image coordinates at the environment's state.
std::array<double, 2> AnchorInImage(const Environment& env, int j, int image_size) {
  const double* a = env.data()->xanchor + 3 * j;
  return env.ProjectToImage({a[0], a[1], a[2]}, image_size);
}

}  // namespace

std::vector<CoordinateSpec> CoordinateSpecs(const Environment& env, int image_size) {
  // Projections are taken at the reference state (all joints zero).
  Environment scratch(env);
  std::vector<double> zero_q(size_t(scratch.nq()), 0.0), zero_v(size_t(scratch.nv()), 0.0);
  scratch.Reset(zero_q, zero_v);
  using K = CoordinateSpec::Kind;
  std::vector<CoordinateSpec> specs;
  switch (env.name()) {
    case EnvName::kPendulum:
      specs.push_back(
          {K::kAngle, "pole angle", 0, 0, -1, AnchorInImage(scratch, 0, image_size), -1, 1});
      break;
    case EnvName::kCartpole: {
      const double* p = scratch.data()->xanchor;  // the slider's anchor: the cart centre
      const auto a = scratch.ProjectToImage({p[0], p[1], p[2]}, image_size);
      const auto b = scratch.ProjectToImage({p[0] + 1.0, p[1], p[2]}, image_size);
      specs.push_back({K::kSlide, "cart position", 0, 0, -1, {0, 0}, -1, b[0] - a[0]});
      specs.push_back({K::kAngle, "pole angle", 1, 1, 0, {0, 0}, -1, 1});
      break;
    }
    case EnvName::kAcrobot:
      specs.push_back(
          {K::kAngle, "shoulder angle", 0, 0, -1, AnchorInImage(scratch, 0, image_size), -1, 1});
      specs.push_back({K::kAngle, "elbow angle", 1, 1, 0, {0, 0}, 0, 1});
      break;
    case EnvName::kCustom:
      throw InputError(
          "CoordinateSpecs: the map from keypoints to a custom system's joints is "
          "not known");
  }
  return specs;
}

torch::Tensor KeypointCoordinates(const std::vector<CoordinateSpec>& specs, const torch::Tensor& x,
                                  int nq) {
  if (x.dim() != 2 || x.size(1) % 2 != 0) {
    throw InputError("KeypointCoordinates: x must be [B, 2K]");
  }
  const int64_t K = x.size(1) / 2;
  auto point = [&](int k) {
    if (k < 0 || k >= K) {
      throw InputError("KeypointCoordinates: keypoint " + std::to_string(k + 1) +
                       " does not exist (the states have " + std::to_string(K) + ")");
    }
    return x.slice(1, 2 * k, 2 * k + 2);
  };
  std::vector<torch::Tensor> absolute(specs.size());
  std::vector<torch::Tensor> q(static_cast<size_t>(nq));
  for (size_t i = 0; i < specs.size(); ++i) {
    const CoordinateSpec& s = specs[i];
    if (s.qpos < 0 || s.qpos >= nq) {
      throw InputError("KeypointCoordinates: qpos index " + std::to_string(s.qpos) +
                       " outside [0, " + std::to_string(nq) + ")");
    }
    const torch::Tensor p = point(s.keypoint);
    if (s.kind == CoordinateSpec::Kind::kSlide) {
      absolute[i] = p.select(1, 0) / s.scale;
      q[size_t(s.qpos)] = absolute[i];
      continue;
    }
    torch::Tensor start = s.parent < 0
                              ? torch::tensor({s.pivot[0], s.pivot[1]}, x.options()).unsqueeze(0)
                              : point(s.parent);
    const torch::Tensor d = p - start;
    absolute[i] = torch::atan2(d.select(1, 0), d.select(1, 1));
    if (s.relative_to >= 0) {
      if (size_t(s.relative_to) >= i) {
        throw InputError("KeypointCoordinates: coordinate " + s.name +
                         " is relative to a later coordinate");
      }
      q[size_t(s.qpos)] = Wrap(absolute[i] - absolute[size_t(s.relative_to)]);
    } else {
      q[size_t(s.qpos)] = absolute[i];
    }
  }
  for (int i = 0; i < nq; ++i) {
    if (!q[size_t(i)].defined()) {
      throw InputError("KeypointCoordinates: no coordinate reads qpos " + std::to_string(i));
    }
  }
  return torch::stack(q, 1);
}

ScaleFit FitScale(const std::vector<double>& x, const std::vector<double>& y) {
  if (x.size() != y.size()) throw InputError("FitScale: x and y differ in length");
  ScaleFit f;
  f.samples = int64_t(x.size());
  double sxy = 0, sxx = 0, my = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    sxy += x[i] * y[i];
    sxx += x[i] * x[i];
    my += y[i];
  }
  if (x.empty() || sxx <= 0) return f;
  my /= double(x.size());
  f.scale = sxy / sxx;
  double res = 0, tot = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    res += (y[i] - f.scale * x[i]) * (y[i] - f.scale * x[i]);
    tot += (y[i] - my) * (y[i] - my);
  }
  f.r2 = tot > 0 ? 1.0 - res / tot : 0.0;
  return f;
}

DynamicsDiagnostics DiagnoseDynamics(Model& model, Environment& env, const torch::Tensor& grid_x,
                                     const std::vector<double>& grid_qpos, bool actuated) {
  const ModelSpec& spec = model->spec();
  if (grid_x.dim() != 2 || grid_x.size(1) != 2 * spec.num_keypoints) {
    throw InputError("DiagnoseDynamics: grid_x must be [G, " +
                     std::to_string(2 * spec.num_keypoints) + "] for this model");
  }
  const torch::Tensor x = grid_x.detach().to(model->device(), torch::kFloat32);
  return DiagnoseDynamics(
      [&model](const torch::Tensor& xs, const torch::Tensor& vs, const torch::Tensor& u) {
        return model->Acceleration(xs, vs, u);
      },
      spec.image_size, spec.action_dim, env, x, grid_qpos, actuated);
}

DynamicsDiagnostics DiagnoseDynamics(const KeypointAcceleration& acceleration, int image_size,
                                     int action_dim, Environment& env, const torch::Tensor& grid_x,
                                     const std::vector<double>& grid_qpos, bool actuated) {
  const int nq = env.nq(), nu = env.nu();
  const int64_t G = grid_x.dim() == 2 ? grid_x.size(0) : 0;
  if (grid_x.dim() != 2 || grid_x.size(1) % 2 != 0 || int64_t(grid_qpos.size()) != G * nq ||
      G < 1) {
    throw InputError("DiagnoseDynamics: grid_x must be [G ≥ 1, 2K] with G × nq grid positions");
  }
  if (nu != action_dim) {
    throw InputError("DiagnoseDynamics: the dynamics have " + std::to_string(action_dim) +
                     " actuators, the environment " + std::to_string(nu));
  }
  const std::vector<CoordinateSpec> specs = CoordinateSpecs(env, image_size);
  const torch::Tensor x = grid_x.detach();

  // Jacobian rows ∂q_i/∂x [G, 2K] of the coordinate map (each q_i depends on its own row only).
  std::vector<torch::Tensor> jac;
  torch::Tensor q_est;
  {
    torch::AutoGradMode grad(true);
    torch::Tensor xg = x.clone().requires_grad_(true);
    torch::Tensor q = KeypointCoordinates(specs, xg, nq);
    q_est = q.detach();
    for (int i = 0; i < nq; ++i) {
      jac.push_back(torch::autograd::grad({q.select(1, i).sum()}, {xg}, {}, true)[0].detach());
    }
  }
  // Learned joint accelerations at zero velocity for an action u [A].
  auto learned_qacc = [&](const torch::Tensor& u) {
    torch::AutoGradMode grad(true);  // the Lagrangian differentiates its potential
    const torch::Tensor a = acceleration(x, torch::zeros_like(x), u).detach();
    std::vector<torch::Tensor> cols;
    for (int i = 0; i < nq; ++i) cols.push_back((jac[size_t(i)] * a).sum(1));
    return torch::stack(cols, 1).to(torch::kCPU, torch::kFloat64);  // [G, nq]
  };
  // MuJoCo's joint accelerations at zero velocity for an action u.
  auto true_qacc = [&](const std::vector<double>& u) {
    torch::Tensor out = torch::empty({G, nq}, torch::kFloat64);
    const std::vector<double> zero_v(size_t(env.nv()), 0.0);
    for (int64_t g = 0; g < G; ++g) {
      env.Reset(std::span<const double>(grid_qpos.data() + size_t(g * nq), size_t(nq)), zero_v);
      env.SetAction(u);
      mj_forward(env.model(), env.data());
      for (int i = 0; i < nq; ++i) out[g][i] = env.data()->qacc[i];
    }
    return out;
  };

  DynamicsDiagnostics d;
  // Levers and the keypoints-vs-state errors.
  torch::Tensor q_true =
      torch::from_blob(const_cast<double*>(grid_qpos.data()), {G, nq}, torch::kFloat64).clone();
  torch::Tensor xc = x.to(torch::kCPU, torch::kFloat64);
  std::vector<double> levers(size_t(nq), 1.0);
  for (const CoordinateSpec& s : specs) {
    CoordinateDiagnostics c;
    c.name = s.name;
    torch::Tensor err =
        q_est.to(torch::kCPU, torch::kFloat64).select(1, s.qpos) - q_true.select(1, s.qpos);
    if (s.kind == CoordinateSpec::Kind::kAngle) {
      c.unit = "deg";
      err = Wrap(err) * (180.0 / M_PI);
      torch::Tensor start =
          s.parent < 0 ? torch::tensor({s.pivot[0], s.pivot[1]}, torch::kFloat64).unsqueeze(0)
                       : xc.slice(1, 2 * s.parent, 2 * s.parent + 2);
      torch::Tensor len = (xc.slice(1, 2 * s.keypoint, 2 * s.keypoint + 2) - start).norm(2, 1);
      c.link_length_mean = len.mean().item<double>();
      c.link_length_std = len.std(/*unbiased=*/false).item<double>();
      c.lever = c.link_length_mean;
    } else {
      c.unit = "m";
      c.lever = s.scale;
    }
    c.error_rms = err.square().mean().sqrt().item<double>();
    c.error_mean = err.mean().item<double>();
    c.error_max = err.abs().max().item<double>();
    levers[size_t(s.qpos)] = c.lever;
    d.coordinates.push_back(c);
  }
  torch::Tensor lever = torch::tensor(levers, torch::kFloat64).unsqueeze(0);

  const torch::Tensor u0 = torch::zeros({nu}, x.options());
  const torch::Tensor learned0 = learned_qacc(u0) * lever;
  const torch::Tensor true0 = true_qacc(std::vector<double>(size_t(nu), 0.0)) * lever;
  d.acceleration = FitScale(TensorValues(true0), TensorValues(learned0));
  for (size_t c = 0; c < d.coordinates.size(); ++c) {
    const int i = specs[c].qpos;
    CoordinateDiagnostics& cd = d.coordinates[c];
    cd.true_acceleration = TensorValues(true0.select(1, i));
    cd.learned_acceleration = TensorValues(learned0.select(1, i));
    cd.acceleration = FitScale(cd.true_acceleration, cd.learned_acceleration);
  }
  if (actuated) {
    for (int a = 0; a < nu; ++a) {
      std::vector<double> u(size_t(nu), 0.0);
      u[size_t(a)] = 1.0;
      torch::Tensor ut = torch::zeros({nu}, x.options());
      ut[a] = 1.0;
      const torch::Tensor dl = learned_qacc(ut) * lever - learned0;
      const torch::Tensor dt = true_qacc(u) * lever - true0;
      d.input.push_back(FitScale(TensorValues(dt), TensorValues(dl)));
    }
  }
  return d;
}

StateGridEstimates EncodeStateGrid(Model& model, const Dataset& data) {
  const DatasetInfo& info = data.info();
  if (!info.has_state()) {
    throw FormatError("'" + data.path().string() + "' has no state grid (its source is " +
                      info.source + ", not a simulation)");
  }
  torch::NoGradGuard no_grad;
  StateGridEstimates g;
  g.qpos = data.ReadGridQpos(&g.count);
  std::vector<uint8_t> bytes = data.ReadGridImages();
  const torch::Tensor images =
      torch::from_blob(bytes.data(), {g.count, info.size, info.size, 3}, torch::kUInt8);
  const bool was_training = model->is_training();
  model->eval();
  g.x = model->Encode(ImagesToFloat(images, model->device())).keypoints.reshape({g.count, -1});
  if (was_training) model->train();
  return g;
}

DynamicsDiagnostics DiagnoseOnStateGrid(Model& model, const Dataset& data) {
  const StateGridEstimates g = EncodeStateGrid(model, data);
  Environment env(DatasetSystem(data.info()));
  return DiagnoseDynamics(model, env, g.x, g.qpos, data.info().control != ControlMode::kNone);
}

RolloutDiagnostics DiagnoseRollouts(Model& model, const torch::Tensor& images, const VptResult& vpt,
                                    double epsilon) {
  const ModelSpec& spec = model->spec();
  if (images.dim() != 5 || !vpt.predicted.defined() || vpt.predicted.size(0) != images.size(0) ||
      vpt.predicted.size(1) != images.size(1)) {
    throw InputError(
        "DiagnoseRollouts: images [R, N, H, W, 3] and the VPT's predicted "
        "keypoints [R, N, K, 2] must match");
  }
  const int64_t R = images.size(0), N = images.size(1), K = model->StatePoints();
  const torch::Device device = model->device();
  torch::NoGradGuard no_grad;
  const bool was_training = model->is_training();
  model->eval();
  std::vector<torch::Tensor> chunks;
  if (model->EncoderFrames() > 1) {
    // An encoder of stacked frames (HGN) reads consecutive frames of one run.
    for (int64_t r = 0; r < R; ++r) {
      chunks.push_back(model->Encode(ImagesToFloat(images[r], device)).keypoints);
    }
  } else {
    const torch::Tensor flat = images.reshape({R * N, spec.image_size, spec.image_size, 3});
    for (int64_t s = 0; s < R * N; s += 256) {
      const int64_t e = std::min(R * N, s + 256);
      chunks.push_back(model->Encode(ImagesToFloat(flat.slice(0, s, e), device)).keypoints);
    }
  }
  if (was_training) model->train();
  const torch::Tensor estimated = torch::cat(chunks).reshape({R, N, K, 2});
  const torch::Tensor kp_err = (vpt.predicted.to(estimated.device()) - estimated)
                                   .norm(2, 3)
                                   .mean(2)
                                   .to(torch::kCPU, torch::kFloat64);     // [R, N]
  const torch::Tensor rec_mse = PredictionMse(model, estimated, images);  // [R, N]

  RolloutDiagnostics out;
  out.keypoint_error_mean = TensorValues(kp_err.mean(0));
  out.reconstruction_mse_mean = TensorValues(rec_mse.mean(0));
  out.reconstruction_vpt = VptFromMse(rec_mse, epsilon);
  auto rec = rec_mse.accessor<double, 2>();
  auto ke = kp_err.accessor<double, 2>();
  double err_sum = 0;
  for (int64_t r = 0; r < R; ++r) {
    const int t = vpt.vpt[size_t(r)];
    const bool failed = t < N - 1 || !(vpt.mse[r][N - 1].item<double>() <= epsilon);
    if (!failed) continue;
    ++out.failed_runs;
    err_sum += ke[r][t];
    if (!(rec[r][t] <= epsilon)) {
      ++out.failures_rendering;
    } else {
      ++out.failures_dynamics;
    }
  }
  out.keypoint_error_at_failure = out.failed_runs ? err_sum / out.failed_runs : 0.0;
  return out;
}

}  // namespace keycld
