#include "keycld/models/chain_vae_model.h"

#include <ATen/CPUGeneratorImpl.h>

#include <string>

#include "keycld/models/mean_image.h"
#include "keycld/util/error.h"

namespace keycld {

namespace {

// The published widths: encoders 300, decoders 100, Lagrangian networks 50.
constexpr int64_t kEncoderWidth = 300, kDecoderWidth = 100, kLagrangianWidth = 50;

std::vector<CoordinateKind> ChainKinds(const ModelSpec& spec) {
  if (spec.env == EnvName::kCartpole) return {CoordinateKind::kTranslation, CoordinateKind::kAngle};
  if (spec.env == EnvName::kAcrobot) return {CoordinateKind::kAngle, CoordinateKind::kAngle};
  throw InputError("model '" + spec.model + "' for two bodies is built for the cartpole and the " +
                   "acrobot; got '" + spec.SystemName() + "'");
}

int64_t EncoderOutputs(CoordinateKind kind) { return kind == CoordinateKind::kAngle ? 3 : 2; }

// Batched 2-vectors: v [2] → [B, 2].
torch::Tensor Rows(const torch::Tensor& v, int64_t B) { return v.unsqueeze(0).expand({B, 2}); }

// R [B, 2, 2] applied to v [B, 2].
torch::Tensor Apply(const torch::Tensor& R, const torch::Tensor& v) {
  return torch::matmul(R, v.unsqueeze(2)).squeeze(2);
}

}  // namespace

ChainLagVaeModelImpl::ChainLagVaeModelImpl(const ModelSpec& spec, bool coordinate_aware)
    : ModelImpl(spec), coordinate_aware_(coordinate_aware), kinds_(ChainKinds(spec)) {
  const int64_t S = spec.image_size;
  for (size_t i = 0; i < kinds_.size(); ++i) {
    encoders_.push_back(register_module("encoder" + std::to_string(i),
                                        EluMlp(3 * S * S, kEncoderWidth, EncoderOutputs(kinds_[i]))));
  }
  input_mean_ = register_buffer("input_mean", torch::zeros({3, S, S}));
  if (spec.env == EnvName::kAcrobot) {
    attention_pivot_ = register_parameter("attention_pivot", torch::zeros({2}));
    attention_elbow_ = register_parameter("attention_elbow", torch::zeros({2}));
  }
  if (coordinate_aware_) {
    for (size_t i = 0; i < kinds_.size(); ++i) {
      torch::nn::Sequential sprite = EluMlp(1, kDecoderWidth, 4 * S * S);
      // Opacity logits at −3 (opacity ≈ 0.05): every sprite starts nearly transparent.
      torch::NoGradGuard no_grad;
      sprite->ptr<torch::nn::LinearImpl>(4)->bias.slice(0, 3 * S * S, 4 * S * S).fill_(-3.0);
      sprites_.push_back(register_module("sprite" + std::to_string(i), sprite));
    }
    background_ = register_parameter("background", torch::zeros({3, S, S}));
    // cartpole: joint_a = the hinge relative to the cart's placement; acrobot: joint_a = the
    // pivot, joint_b = the elbow in the upper link's sprite frame.
    joint_a_ = register_parameter(spec.env == EnvName::kCartpole ? "hinge" : "pivot",
                                  torch::zeros({2}));
    if (spec.env == EnvName::kAcrobot) joint_b_ = register_parameter("elbow", torch::zeros({2}));
  } else {
    int64_t features = 0;
    for (CoordinateKind k : kinds_) features += k == CoordinateKind::kAngle ? 2 : 1;
    decoder_ = register_module("decoder", EluMlp(features, kDecoderWidth, 3 * S * S));
  }
  lagrangian_ = register_module("lagrangian",
                                GeneralisedLagrangian(kinds_, spec.action_dim, kLagrangianWidth));
  dynamics_ = std::make_shared<CoordinateEmbeddingDynamics>(lagrangian_);
}

void ChainLagVaeModelImpl::InitialiseFromData(const torch::Tensor& mean_image) {
  StartAtMeanImage(spec(), mean_image, input_mean_, background_, decoder_);
}

torch::Tensor ChainLagVaeModelImpl::AttentionCrop(const torch::Tensor& centred,
                                                  const torch::Tensor& first) {
  const int64_t T = centred.size(0);
  if (kinds_[0] == CoordinateKind::kTranslation) {
    // crop(p) = frame(p + (x, 0)): the cart at its x = 0 place.
    torch::Tensor I = torch::eye(2, first.options()).unsqueeze(0).expand({T, 2, 2});
    return AffineSample(centred, I, first);
  }
  // crop(s) = frame(pivot + R(θ₁)ᵀ(s + elbow)): the frame in the upper link's frame, the elbow at
  // the centre.
  torch::Tensor Rt = RotationMatrices(first).transpose(1, 2);
  torch::Tensor t = Rows(attention_pivot_, T) + Apply(Rt, Rows(attention_elbow_, T));
  return AffineSample(centred, Rt, t);
}

std::vector<CoordinatePosterior> ChainLagVaeModelImpl::Posterior(const torch::Tensor& images) {
  const int64_t S = spec().image_size;
  if (images.dim() != 4 || images.size(1) != 3 || images.size(2) != S || images.size(3) != S) {
    throw InputError("model '" + spec().model + "': images must be [T, 3, " + std::to_string(S) +
                     ", " + std::to_string(S) + "], got " + c10::str(images.sizes()));
  }
  const int64_t T = images.size(0);
  torch::Tensor centred = images - input_mean_.unsqueeze(0);
  std::vector<CoordinatePosterior> out;
  torch::Tensor input = centred;
  for (size_t i = 0; i < kinds_.size(); ++i) {
    torch::Tensor o = encoders_[i]->forward(input.reshape({T, 3 * S * S}));
    if (kinds_[i] == CoordinateKind::kAngle) {
      out.push_back({kinds_[i], o.slice(1, 0, 2),
                     torch::nn::functional::softplus(o.select(1, 2)) + 1.0});
    } else {
      out.push_back({kinds_[i], o.select(1, 0), o.select(1, 1)});
    }
    if (i + 1 < kinds_.size()) {
      torch::Tensor first = kinds_[i] == CoordinateKind::kAngle
                                ? out.back().mean / out.back().mean.norm(2, 1, /*keepdim=*/true)
                                : torch::stack({out.back().mean, torch::zeros_like(out.back().mean)}, 1);
      input = AttentionCrop(centred, first);
    }
  }
  return out;
}

Encoding ChainLagVaeModelImpl::Encode(const torch::Tensor& images, const torch::Tensor&) {
  std::vector<torch::Tensor> pairs;
  for (const CoordinatePosterior& p : Posterior(images)) {
    pairs.push_back(p.kind == CoordinateKind::kAngle
                        ? p.mean / p.mean.norm(2, 1, /*keepdim=*/true)
                        : torch::stack({p.mean, torch::zeros_like(p.mean)}, 1));
  }
  Encoding e;
  e.keypoints = torch::stack(pairs, 1);
  return e;
}

torch::Tensor ChainLagVaeModelImpl::Render(const torch::Tensor& keypoints) {
  const int64_t n = int64_t(kinds_.size()), S = spec().image_size;
  if (keypoints.dim() != 3 || keypoints.size(1) != n || keypoints.size(2) != 2) {
    throw InputError("model '" + spec().model + "': states must be [T, " + std::to_string(n) +
                     ", 2] (one pair per coordinate), got " + c10::str(keypoints.sizes()));
  }
  const int64_t T = keypoints.size(0);
  if (T == 0) return torch::empty({0, 3, S, S}, keypoints.options().dtype(torch::kFloat32));
  torch::Tensor x = keypoints.to(input_mean_.scalar_type());
  if (!coordinate_aware_) {
    std::vector<torch::Tensor> features;
    for (int64_t i = 0; i < n; ++i) {
      if (kinds_[size_t(i)] == CoordinateKind::kAngle) {
        features.push_back(x.select(1, i));
      } else {
        features.push_back(x.select(1, i).slice(1, 0, 1));
      }
    }
    return torch::sigmoid(decoder_->forward(torch::cat(features, 1))).reshape({T, 3, S, S});
  }
  // Each body's placement: output(p) = sprite(A·p + t).
  std::vector<std::pair<torch::Tensor, torch::Tensor>> placements;
  if (kinds_[0] == CoordinateKind::kTranslation) {
    torch::Tensor shift = torch::stack({x.select(1, 0).select(1, 0),
                                        torch::zeros({T}, x.options())}, 1);  // (x, 0)
    torch::Tensor I = torch::eye(2, x.options()).unsqueeze(0).expand({T, 2, 2});
    placements.push_back({I, -shift});
    torch::Tensor R = RotationMatrices(x.select(1, 1));
    placements.push_back({R, -Apply(R, Rows(joint_a_, T) + shift)});
  } else {
    torch::Tensor R1 = RotationMatrices(x.select(1, 0));
    torch::Tensor R12 = torch::matmul(R1, RotationMatrices(x.select(1, 1)));
    torch::Tensor pivot = Rows(joint_a_, T);
    torch::Tensor elbow = pivot + Apply(R1.transpose(1, 2), Rows(joint_b_, T));
    placements.push_back({R1, -Apply(R1, pivot)});
    placements.push_back({R12, -Apply(R12, elbow)});
  }
  torch::Tensor image = torch::sigmoid(background_).unsqueeze(0).expand({T, 3, S, S});
  torch::Tensor one = torch::ones({1, 1}, x.options());
  for (int64_t i = 0; i < n; ++i) {
    torch::Tensor sprite = torch::sigmoid(sprites_[size_t(i)]->forward(one)).reshape({1, 4, S, S});
    torch::Tensor placed = AffineSample(sprite, placements[size_t(i)].first,
                                        placements[size_t(i)].second);  // [T, 4, S, S]
    torch::Tensor alpha = placed.slice(1, 3, 4);
    image = alpha * placed.slice(1, 0, 3) + (1 - alpha) * image;
  }
  return image;
}

std::vector<torch::Tensor> ChainLagVaeModelImpl::PerceptionParameters() {
  std::vector<torch::Tensor> p;
  for (auto& e : encoders_) {
    for (auto& t : e->parameters()) p.push_back(t);
  }
  for (auto& s : sprites_) {
    for (auto& t : s->parameters()) p.push_back(t);
  }
  if (decoder_) {
    for (auto& t : decoder_->parameters()) p.push_back(t);
  }
  for (const torch::Tensor& t :
       {attention_pivot_, attention_elbow_, background_, joint_a_, joint_b_}) {
    if (t.defined()) p.push_back(t);
  }
  return p;
}

std::vector<std::shared_ptr<torch::nn::Module>> ChainLagVaeModelImpl::DynamicsModules() {
  return {lagrangian_.ptr()};
}

LossTerms ChainLagVaeModelImpl::SequenceLoss(const torch::Tensor& images, const torch::Tensor& u,
                                             const LossOptions& options) {
  const int64_t P = options.horizon, n = int64_t(kinds_.size());
  const int64_t W = WindowCount(images, P, spec().model);
  const double dt = spec().dt;
  std::vector<CoordinatePosterior> post = Posterior(images);
  auto generator = at::make_generator<at::CPUGeneratorImpl>(options.noise_seed);
  std::vector<torch::Tensor> start, velocity;
  torch::Tensor kl = torch::zeros({}, images.options());
  torch::Tensor norm = torch::zeros({}, images.options());
  for (const CoordinatePosterior& p : post) {
    if (p.kind == CoordinateKind::kAngle) {
      torch::Tensor mean_n = p.mean / p.mean.norm(2, 1, /*keepdim=*/true);
      torch::Tensor m0 = mean_n.slice(0, 0, W), m1 = mean_n.slice(0, 1, W + 1);
      start.push_back(SampleVonMisesFisher(m0, p.spread.slice(0, 0, W), generator));
      // The rotation from m0 to m1 per frame interval (the published difference formula).
      velocity.push_back(((m1.select(1, 1) - m0.select(1, 1)) * m0.select(1, 0) -
                          (m1.select(1, 0) - m0.select(1, 0)) * m0.select(1, 1)) /
                         dt);
      kl = kl + VonMisesFisherKl(p.spread.slice(0, 0, W)).mean();
      norm = norm + (p.mean.slice(0, 0, W).norm(2, 1).mean() - 1).square();
    } else {
      torch::Tensor mu = p.mean.slice(0, 0, W), log_var = p.spread.slice(0, 0, W);
      torch::Tensor eps = torch::randn({W}, generator, torch::kFloat64).to(mu.options());
      torch::Tensor x = mu + (0.5 * log_var).exp() * eps;
      start.push_back(torch::stack({x, torch::zeros_like(x)}, 1));
      velocity.push_back((p.mean.slice(0, 1, W + 1) - mu) / dt);
      kl = kl + GaussianKl(mu, log_var).mean();
    }
  }
  // The first-order state: the pairs [W, n, 2] ((cos q, sin q) or (x, 0)) and q̇ [W, n].
  auto f = [&](const torch::Tensor& pairs, const torch::Tensor& qd) {
    std::vector<torch::Tensor> q, dpairs;
    for (int64_t i = 0; i < n; ++i) {
      torch::Tensor pair = pairs.select(1, i), w = qd.select(1, i);
      if (kinds_[size_t(i)] == CoordinateKind::kAngle) {
        q.push_back(torch::atan2(pair.select(1, 1), pair.select(1, 0)));
        dpairs.push_back(torch::stack({-pair.select(1, 1) * w, pair.select(1, 0) * w}, 1));
      } else {
        q.push_back(pair.select(1, 0));
        dpairs.push_back(torch::stack({w, torch::zeros_like(w)}, 1));
      }
    }
    return std::make_pair(torch::stack(dpairs, 1),
                          lagrangian_->Acceleration(torch::stack(q, 1), qd, u));
  };
  std::vector<torch::Tensor> states =
      IntegrateWindows(torch::stack(start, 1), torch::stack(velocity, 1), f, P, dt,
                       options.integrator, options.substeps, spec().model);
  torch::Tensor rendered = Render(torch::stack(states, 0).reshape({(P + 1) * W, n, 2}));
  LossTerms out;
  out.reconstruction = (rendered - WindowTargets(images, P, W)).square().sum() / double(W);
  out.kl = kl;
  out.dynamics = torch::zeros({}, images.options());
  out.heatmap = torch::zeros({}, images.options());
  out.total = options.w_rec * out.reconstruction + options.w_kl * out.kl + options.w_norm * norm;
  return out;
}

}  // namespace keycld
