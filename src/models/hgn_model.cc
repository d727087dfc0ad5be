#include "keycld/models/hgn_model.h"

#include <ATen/CPUGeneratorImpl.h>

#include <string>
#include <vector>

#include "keycld/models/mean_image.h"
#include "keycld/util/error.h"

namespace keycld {

namespace {

namespace nn = torch::nn;
namespace F = torch::nn::functional;

constexpr int64_t kStateSize = 2 * HgnModelImpl::kStateChannels * 16;  // s flattened: 512

const ModelSpec& CheckHgnSpec(const ModelSpec& spec) {
  const int64_t S = spec.image_size;
  int64_t r = S / 32;
  while (r > 1 && r % 2 == 0) r /= 2;
  if (S < 32 || S % 32 != 0 || r != 1) {
    throw InputError("model 'hgn' reads 32×32 frames (larger ones average-pooled to 32): the " +
                     std::string("image size must be 32 · 2^k, got ") + std::to_string(S));
  }
  return spec;
}

nn::Conv2d Conv(int64_t in, int64_t out, int64_t kernel, int64_t padding = 0) {
  return nn::Conv2d(nn::Conv2dOptions(in, out, kernel).padding(padding));
}

torch::Tensor Upsample2(const torch::Tensor& x) {
  return F::interpolate(x, F::InterpolateFuncOptions()
                               .scale_factor(std::vector<double>{2.0, 2.0})
                               .mode(torch::kNearest));
}

void CheckFrames(const torch::Tensor& t, int64_t dims, int64_t S, const std::string& what,
                 const std::string& shape) {
  if (t.dim() != dims || t.size(dims - 3) != 3 || t.size(dims - 2) != S || t.size(dims - 1) != S) {
    throw InputError("model 'hgn': " + what + " must be " + shape + ", got " + c10::str(t.sizes()));
  }
}

}  // namespace

HgnModelImpl::HgnModelImpl(const ModelSpec& spec)
    : ModelImpl(CheckHgnSpec(spec)), pool_(spec.image_size / 32) {
  const int64_t c = spec.hidden;
  // 32 → 16 by eight valid 3×3 convolutions.
  nn::Sequential encoder(Conv(3 * kStackFrames, c / 2, 3), nn::ReLU(), Conv(c / 2, c, 3),
                         nn::ReLU());
  for (int i = 0; i < 5; ++i) {
    encoder->push_back(Conv(c, c, 3));
    encoder->push_back(nn::ReLU());
  }
  encoder->push_back(Conv(c, 2 * kLatentChannels, 3));
  encoder_ = register_module("encoder", encoder);
  // 16 → 12 → 8 → 4 by three valid 5×5 convolutions.
  transformer_ = register_module(
      "transformer", nn::Sequential(Conv(kLatentChannels, c, 5), nn::ReLU(), Conv(c, c, 5),
                                    nn::ReLU(), Conv(c, 2 * kStateChannels, 5)));
  // 4×4 kept by four padded 3×3 convolutions, then 4 → 2 → 1 and a linear read-out. Softplus:
  // the flow is the gradient of H, and ReLU's piecewise-linear H gives it no curvature.
  nn::Sequential h(Conv(2 * kStateChannels, c, 3, 1), nn::Softplus());
  for (int i = 0; i < 3; ++i) {
    h->push_back(Conv(c, c, 3, 1));
    h->push_back(nn::Softplus());
  }
  h->push_back(Conv(c, c, 3));
  h->push_back(nn::Softplus());
  h->push_back(Conv(c, c, 2));
  h->push_back(nn::Softplus());
  h->push_back(nn::Flatten());
  h->push_back(nn::Linear(c, 1));
  hamiltonian_ = register_module("hamiltonian", h);
  decoder_in_ = register_module("decoder_in", Conv(kStateChannels, c, 1));
  decoder_blocks_ = register_module("decoder_blocks", nn::ModuleList());
  for (int64_t size = 8; size <= spec.image_size; size *= 2) {
    decoder_blocks_->push_back(nn::Sequential(Conv(c, c, 3, 1), nn::LeakyReLU(), Conv(c, c, 3, 1)));
  }
  decoder_out_ = register_module("decoder_out", Conv(c, 3, 1));
  const int64_t S = spec.image_size;
  input_mean_ = register_buffer("input_mean", torch::zeros({3, S, S}));
  background_ = register_parameter("background", torch::zeros({3, S, S}));
  dynamics_ = std::make_shared<FunctionDynamics>(
      [](const torch::Tensor&, const torch::Tensor&, const torch::Tensor&) -> torch::Tensor {
        throw InputError(
            "model 'hgn' has a first-order Hamiltonian flow in (q, p), not an acceleration "
            "ẍ(x, ẋ): its predictions start from a stack of frames (PredictFromFrames)");
      });
}

torch::Tensor HgnModelImpl::Stacks(const torch::Tensor& images) {
  const int64_t T = images.size(0);
  torch::Tensor index = (torch::arange(T, torch::kInt64).unsqueeze(1) +
                         torch::arange(kStackFrames, torch::kInt64).unsqueeze(0))
                            .clamp_max(std::max<int64_t>(T - 1, 0))
                            .reshape({-1})
                            .to(images.device());
  std::vector<int64_t> shape{T, kStackFrames};
  for (int64_t d = 1; d < images.dim(); ++d) shape.push_back(images.size(d));
  return images.index_select(0, index).reshape(shape);
}

HgnModelImpl::Posterior HgnModelImpl::Infer(const torch::Tensor& stacks) {
  const int64_t S = spec().image_size;
  CheckFrames(stacks, 5, S, "stacks",
              "[B, 5, 3, " + std::to_string(S) + ", " + std::to_string(S) + "]");
  if (stacks.size(1) != kStackFrames) {
    throw InputError("model 'hgn': a stack has 5 frames, got " + std::to_string(stacks.size(1)));
  }
  torch::Tensor x = (stacks - input_mean_.view({1, 1, 3, S, S}))
                        .reshape({stacks.size(0), 3 * kStackFrames, S, S});
  if (pool_ > 1) x = F::avg_pool2d(x, F::AvgPool2dFuncOptions(pool_));
  torch::Tensor out = encoder_->forward(x);
  return {out.slice(1, 0, kLatentChannels), out.slice(1, kLatentChannels, 2 * kLatentChannels)};
}

torch::Tensor HgnModelImpl::Transform(const torch::Tensor& z) { return transformer_->forward(z); }

torch::Tensor HgnModelImpl::Hamiltonian(const torch::Tensor& s) {
  return hamiltonian_->forward(s).reshape({s.size(0)});
}

torch::Tensor HgnModelImpl::VectorField(const torch::Tensor& s) {
  if (s.dim() != 4 || s.size(1) != 2 * kStateChannels || s.size(2) != 4 || s.size(3) != 4) {
    throw InputError("model 'hgn': states s must be [B, 32, 4, 4], got " + c10::str(s.sizes()));
  }
  const bool graph = torch::GradMode::is_enabled();
  torch::AutoGradMode on(true);
  torch::Tensor x = s.requires_grad() ? s : s.detach().requires_grad_(true);
  torch::Tensor H = Hamiltonian(x).sum();
  torch::Tensor g = torch::autograd::grad({H}, {x}, {}, /*retain_graph=*/graph,
                                          /*create_graph=*/graph)[0];
  if (!graph) g = g.detach();
  return torch::cat({g.slice(1, kStateChannels), -g.slice(1, 0, kStateChannels)}, 1);
}

torch::Tensor HgnModelImpl::Decode(const torch::Tensor& q) {
  torch::Tensor x = decoder_in_->forward(Upsample2(q));
  bool first = true;
  for (const auto& block : *decoder_blocks_) {
    if (!first) x = Upsample2(x);
    first = false;
    x = F::leaky_relu(x + block->as<nn::Sequential>()->forward(x));
  }
  return torch::sigmoid(decoder_out_->forward(x) + background_.unsqueeze(0));
}

void HgnModelImpl::InitialiseFromData(const torch::Tensor& mean_image) {
  const torch::Tensor logits = MeanImageLogits(spec(), mean_image);
  torch::NoGradGuard no_grad;
  input_mean_.copy_(mean_image);
  background_.copy_(logits);
}

Encoding HgnModelImpl::Encode(const torch::Tensor& images, const torch::Tensor&) {
  const int64_t S = spec().image_size;
  CheckFrames(images, 4, S, "images",
              "[T, 3, " + std::to_string(S) + ", " + std::to_string(S) + "]");
  Encoding e;
  const int64_t T = images.size(0);
  if (T == 0) {
    e.keypoints = torch::empty({0, StatePoints(), 2}, images.options());
    return e;
  }
  torch::Tensor s = Transform(Infer(Stacks(images)).mean);
  e.keypoints = s.slice(1, 0, kStateChannels).reshape({T, StatePoints(), 2});
  return e;
}

torch::Tensor HgnModelImpl::Render(const torch::Tensor& keypoints) {
  if (keypoints.dim() != 3 || keypoints.size(1) != StatePoints() || keypoints.size(2) != 2) {
    throw InputError("model 'hgn': states must be [T, 128, 2] (q, 16×4×4 values), got " +
                     c10::str(keypoints.sizes()));
  }
  const int64_t T = keypoints.size(0);
  const torch::ScalarType dtype = decoder_out_->weight.scalar_type();
  if (T == 0) {
    const int64_t S = spec().image_size;
    return torch::empty({0, 3, S, S}, keypoints.options().dtype(dtype));
  }
  return Decode(keypoints.to(dtype).reshape({T, kStateChannels, 4, 4}));
}

std::vector<torch::Tensor> HgnModelImpl::PerceptionParameters() {
  std::vector<torch::Tensor> p;
  const std::vector<std::shared_ptr<torch::nn::Module>> modules{
      encoder_.ptr(), transformer_.ptr(), decoder_in_.ptr(), decoder_blocks_.ptr(),
      decoder_out_.ptr()};
  for (const auto& m : modules) {
    for (auto& t : m->parameters()) p.push_back(t);
  }
  p.push_back(background_);
  return p;
}

std::vector<std::shared_ptr<torch::nn::Module>> HgnModelImpl::DynamicsModules() {
  return {hamiltonian_.ptr()};
}

StatePrediction HgnModelImpl::PredictFromFrames(const torch::Tensor& frames, const torch::Tensor&,
                                                int64_t count, IntegratorMethod method,
                                                const IntegratorOptions& options) {
  const int64_t S = spec().image_size;
  CheckFrames(frames, 5, S, "the first frames",
              "[R, 5, 3, " + std::to_string(S) + ", " + std::to_string(S) + "]");
  if (count < 2) throw InputError("model 'hgn': predict at least 2 frames");
  const int64_t R = frames.size(0);
  torch::Tensor s0 = Transform(Infer(frames.to(torch::kFloat32)).mean);
  const torch::ScalarType dtype = hamiltonian_->parameters().front().scalar_type();
  torch::Tensor v0 = s0.to(dtype).reshape({R, kStateSize});
  // ẍ = f(ẋ): the velocity slot carries s, the position slot its (unused) time integral.
  AccelerationFn flow = [this](const torch::Tensor&, const torch::Tensor& v) {
    return VectorField(v.reshape({v.size(0), 2 * kStateChannels, 4, 4})).reshape(v.sizes());
  };
  std::vector<double> times;
  for (int64_t t = 0; t < count; ++t) times.push_back(double(t) * spec().dt);
  Trajectory traj = keycld::Rollout(flow, torch::zeros_like(v0), v0, times, method, options);
  StatePrediction out;
  out.states = traj.xdot.slice(2, 0, kStateSize / 2).reshape({R, count, StatePoints(), 2});
  out.accepted_steps = traj.accepted_steps;
  out.rejected_steps = traj.rejected_steps;
  return out;
}

LossTerms HgnModelImpl::SequenceLoss(const torch::Tensor& images, const torch::Tensor&,
                                     const LossOptions& options) {
  const int64_t S = spec().image_size, P = options.horizon, L = P + 1;
  const int64_t N = images.dim() == 4 ? images.size(0) : 0;
  CheckFrames(images, 4, S, "a sequence",
              "[N, 3, " + std::to_string(S) + ", " + std::to_string(S) + "]");
  if (P < kStackFrames - 1 || N < L) {
    throw InputError(
        "model 'hgn': windows of horizon + 1 frames need horizon ≥ 4 (its encoder "
        "reads 5 frames) and a sequence of at least horizon + 1 frames; got horizon " +
        std::to_string(P) + ", " + std::to_string(N) + " frames");
  }
  if (!IsFixedStep(options.integrator) || options.substeps < 1) {
    throw InputError(
        "model 'hgn' trains with euler, rk4 or verlet (leapfrog), substeps ≥ 1; "
        "got " +
        IntegratorMethodString(options.integrator));
  }
  auto generator = at::make_generator<at::CPUGeneratorImpl>(options.noise_seed);
  const int64_t offset =
      torch::randint(std::min(P, N - L) + 1, {1}, generator, torch::kInt64).item<int64_t>();
  const int64_t W = (N - offset) / L;
  torch::Tensor index = (offset + L * torch::arange(W, torch::kInt64).unsqueeze(1) +
                         torch::arange(L, torch::kInt64).unsqueeze(0))
                            .reshape({-1})
                            .to(images.device());
  torch::Tensor windows = images.index_select(0, index).reshape({W, L, 3, S, S});
  Posterior post = Infer(windows.slice(1, 0, kStackFrames));
  torch::Tensor eps = torch::randn(post.mean.sizes(), generator, torch::kFloat32)
                          .to(post.mean.device(), post.mean.scalar_type());
  torch::Tensor s = Transform(post.mean + torch::exp(0.5 * post.log_variance) * eps);
  const double h = spec().dt / options.substeps;
  const int64_t C = kStateChannels;
  auto q_of = [C](const torch::Tensor& t) { return t.slice(1, 0, C); };
  auto p_of = [C](const torch::Tensor& t) { return t.slice(1, C); };
  std::vector<torch::Tensor> states{s};
  for (int64_t j = 0; j < P; ++j) {
    for (int k = 0; k < options.substeps; ++k) {
      switch (options.integrator) {
        case IntegratorMethod::kEuler:
          s = s + h * VectorField(s);
          break;
        case IntegratorMethod::kRk4: {
          torch::Tensor k1 = VectorField(s), k2 = VectorField(s + 0.5 * h * k1),
                        k3 = VectorField(s + 0.5 * h * k2), k4 = VectorField(s + h * k3);
          s = s + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4);
          break;
        }
        default: {  // leapfrog: half a step of p, a step of q, half a step of p
          torch::Tensor q = q_of(s);
          torch::Tensor p_half = p_of(s) + 0.5 * h * p_of(VectorField(s));
          q = q + h * q_of(VectorField(torch::cat({q, p_half}, 1)));
          torch::Tensor p = p_half + 0.5 * h * p_of(VectorField(torch::cat({q, p_half}, 1)));
          s = torch::cat({q, p}, 1);
        }
      }
    }
    states.push_back(s);
  }
  torch::Tensor q_all = q_of(torch::stack(states, 1).reshape({W * L, 2 * C, 4, 4}));
  torch::Tensor rendered = Decode(q_all).reshape({W, L, 3, S, S});
  LossTerms out;
  out.reconstruction = (rendered - windows).square().sum() / double(W);
  out.kl = 0.5 * (post.mean.square() + post.log_variance.exp() - 1 - post.log_variance).mean();
  out.dynamics = torch::zeros({}, images.options());
  out.heatmap = torch::zeros({}, images.options());
  out.total = options.w_rec * out.reconstruction + options.w_kl * out.kl;
  return out;
}

}  // namespace keycld
