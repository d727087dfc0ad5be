#include "keycld/models/lag_vae_model.h"

#include <ATen/CPUGeneratorImpl.h>

#include <string>

#include "keycld/models/mean_image.h"
#include "keycld/util/error.h"

namespace keycld {

namespace {

// The published widths: encoder 300, decoders 100, Lagrangian networks 50.
constexpr int64_t kEncoderWidth = 300, kDecoderWidth = 100, kLagrangianWidth = 50;

const ModelSpec& CheckAngleSystem(const ModelSpec& spec) {
  if (spec.env != EnvName::kPendulum) {
    throw InputError("this form of model '" + spec.model + "' is the pendulum's (one angle); '" +
                     spec.SystemName() + "' takes the two-coordinate form (chain_vae_model.h)");
  }
  return spec;
}

}  // namespace

LagVaeModelImpl::LagVaeModelImpl(const ModelSpec& spec, bool coordinate_aware)
    : ModelImpl(CheckAngleSystem(spec)), coordinate_aware_(coordinate_aware) {
  const int64_t S = spec.image_size;
  encoder_ = register_module("encoder", EluMlp(3 * S * S, kEncoderWidth, 3));
  input_mean_ = register_buffer("input_mean", torch::zeros({3, S, S}));
  if (coordinate_aware_) {
    decoder_ = register_module("sprite", EluMlp(1, kDecoderWidth, 4 * S * S));
    // The opacity logits start at −3 (opacity ≈ 0.05): the sprite starts nearly transparent
    // over the background.
    torch::NoGradGuard no_grad;
    decoder_->ptr<torch::nn::LinearImpl>(4)->bias.slice(0, 3 * S * S, 4 * S * S).fill_(-3.0);
    background_ = register_parameter("background", torch::zeros({3, S, S}));
    pivot_ = register_parameter("pivot", torch::zeros({2}));
  } else {
    decoder_ = register_module("decoder", EluMlp(2, kDecoderWidth, 3 * S * S));
  }
  lagrangian_ = register_module("lagrangian", AngleLagrangian(spec.action_dim, kLagrangianWidth));
  dynamics_ = std::make_shared<AngleEmbeddingDynamics>(lagrangian_);
}

void LagVaeModelImpl::InitialiseFromData(const torch::Tensor& mean_image) {
  StartAtMeanImage(spec(), mean_image, input_mean_, background_, decoder_);
}

AnglePosterior LagVaeModelImpl::Posterior(const torch::Tensor& images) {
  const int64_t S = spec().image_size;
  if (images.dim() != 4 || images.size(1) != 3 || images.size(2) != S || images.size(3) != S) {
    throw InputError("model '" + spec().model + "': images must be [T, 3, " + std::to_string(S) +
                     ", " + std::to_string(S) + "], got " + c10::str(images.sizes()));
  }
  torch::Tensor out =
      encoder_->forward((images - input_mean_.unsqueeze(0)).reshape({images.size(0), 3 * S * S}));
  return {out.slice(1, 0, 2), torch::nn::functional::softplus(out.select(1, 2)) + 1.0};
}

Encoding LagVaeModelImpl::Encode(const torch::Tensor& images, const torch::Tensor&) {
  AnglePosterior p = Posterior(images);
  Encoding e;
  e.keypoints = (p.mean / p.mean.norm(2, 1, /*keepdim=*/true)).unsqueeze(1);
  return e;
}

torch::Tensor LagVaeModelImpl::Render(const torch::Tensor& keypoints) {
  if (keypoints.dim() != 3 || keypoints.size(1) != 1 || keypoints.size(2) != 2) {
    throw InputError("model '" + spec().model + "': states must be [T, 1, 2] (cos q, sin q), got " +
                     c10::str(keypoints.sizes()));
  }
  const int64_t T = keypoints.size(0), S = spec().image_size;
  if (T == 0) return torch::empty({0, 3, S, S}, keypoints.options().dtype(torch::kFloat32));
  torch::Tensor q = keypoints.select(1, 0).to(input_mean_.scalar_type());
  if (!coordinate_aware_) return torch::sigmoid(decoder_->forward(q)).reshape({T, 3, S, S});
  torch::Tensor sprite = decoder_->forward(torch::ones({1, 1}, q.options())).reshape({1, 4, S, S});
  // Colour and opacity in (0, 1), placed together; outside the sprite the opacity is 0 (zero
  // padding), so the background shows.
  torch::Tensor placed = PlaceSprite(torch::sigmoid(sprite), q, pivot_);  // [T, 4, S, S]
  torch::Tensor colour = placed.slice(1, 0, 3), alpha = placed.slice(1, 3, 4);
  return alpha * colour + (1 - alpha) * torch::sigmoid(background_).unsqueeze(0);
}

std::vector<torch::Tensor> LagVaeModelImpl::PerceptionParameters() {
  std::vector<torch::Tensor> p = encoder_->parameters();
  for (auto& t : decoder_->parameters()) p.push_back(t);
  if (coordinate_aware_) {
    p.push_back(background_);
    p.push_back(pivot_);
  }
  return p;
}

std::vector<std::shared_ptr<torch::nn::Module>> LagVaeModelImpl::DynamicsModules() {
  return {lagrangian_.ptr()};
}

LossTerms LagVaeModelImpl::SequenceLoss(const torch::Tensor& images, const torch::Tensor& u,
                                        const LossOptions& options) {
  const int64_t P = options.horizon;
  const int64_t W = WindowCount(images, P, spec().model);
  const double dt = spec().dt;
  AnglePosterior post = Posterior(images);
  torch::Tensor mean_n = post.mean / post.mean.norm(2, 1, /*keepdim=*/true);
  torch::Tensor m0 = mean_n.slice(0, 0, W), m1 = mean_n.slice(0, 1, W + 1);
  auto generator = at::make_generator<at::CPUGeneratorImpl>(options.noise_seed);
  torch::Tensor cs = SampleVonMisesFisher(m0, post.kappa.slice(0, 0, W), generator);
  // q̇₀ from the first two means: the rotation from m0 to m1 per frame interval.
  torch::Tensor w = ((m1.select(1, 1) - m0.select(1, 1)) * m0.select(1, 0) -
                     (m1.select(1, 0) - m0.select(1, 0)) * m0.select(1, 1)) /
                    dt;
  // The first-order state (cos q, sin q, q̇) of the published ODE.
  auto f = [&](const torch::Tensor& c, const torch::Tensor& qd) {
    torch::Tensor dc = torch::stack({-c.select(1, 1) * qd, c.select(1, 0) * qd}, 1);
    return std::make_pair(dc, lagrangian_->AngleAcceleration(c, qd, u));
  };
  std::vector<torch::Tensor> states = IntegrateWindows(cs, w, f, P, dt, options.integrator,
                                                       options.substeps, spec().model);
  // [P + 1, W, 2] → frames [(P + 1)·W, 3, S, S], target frame t + j for window t, step j.
  torch::Tensor rendered = Render(torch::stack(states, 0).reshape({(P + 1) * W, 1, 2}));
  torch::Tensor target = WindowTargets(images, P, W);
  LossTerms out;
  out.reconstruction = (rendered - target).square().sum() / double(W);
  out.kl = VonMisesFisherKl(post.kappa.slice(0, 0, W)).mean();
  torch::Tensor norm = (post.mean.slice(0, 0, W).norm(2, 1).mean() - 1).square();
  out.dynamics = torch::zeros({}, images.options());
  out.heatmap = torch::zeros({}, images.options());
  out.total = options.w_rec * out.reconstruction + options.w_kl * out.kl + options.w_norm * norm;
  return out;
}

}  // namespace keycld
