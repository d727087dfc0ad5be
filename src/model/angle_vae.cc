#include "keycld/model/angle_vae.h"

#include <cmath>
#include <string>

#include "keycld/model/coordinate_vae.h"
#include "keycld/util/error.h"

namespace keycld {

namespace {

void CheckRows2(const torch::Tensor& t, const char* what) {
  if (t.dim() != 2 || t.size(1) != 2) {
    throw InputError(std::string(what) + ": expected [B, 2], got " + c10::str(t.sizes()));
  }
}

// d/dq of f(cos q, sin q) from its gradient with respect to (cos q, sin q).
torch::Tensor AlongAngle(const torch::Tensor& grad, const torch::Tensor& cos_sin) {
  return -cos_sin.select(1, 1) * grad.select(1, 0) + cos_sin.select(1, 0) * grad.select(1, 1);
}

}  // namespace

torch::Tensor BatchAction(const torch::Tensor& u, int64_t B, int64_t A,
                          const torch::TensorOptions& options) {
  if (!u.defined() || u.numel() == 0) return torch::zeros({B, A}, options);
  torch::Tensor v = u.to(options.dtype());
  if (v.dim() == 1 && v.size(0) == A) return v.unsqueeze(0).expand({B, A});
  if (v.dim() == 2 && v.size(1) == A && (v.size(0) == B || v.size(0) == 1)) {
    return v.expand({B, A});
  }
  throw InputError("baseline dynamics: the action must be [" + std::to_string(A) + "] or [B, " +
                   std::to_string(A) + "], got " + c10::str(u.sizes()));
}

torch::Tensor VonMisesFisherMeanCosine(const torch::Tensor& kappa) {
  return torch::special::i1e(kappa) / torch::special::i0e(kappa);
}

torch::Tensor VonMisesFisherKl(const torch::Tensor& kappa) {
  if (kappa.numel() > 0 && !(kappa.min().item<double>() > 0)) {
    throw InputError("VonMisesFisherKl: concentrations must be > 0");
  }
  // log I₀(κ) = log(i0e(κ)) + κ.
  return kappa * VonMisesFisherMeanCosine(kappa) - (torch::log(torch::special::i0e(kappa)) + kappa);
}

torch::Tensor SampleVonMisesFisher(const torch::Tensor& mean, const torch::Tensor& kappa,
                                   torch::Generator generator) {
  CheckRows2(mean, "SampleVonMisesFisher");
  const int64_t B = mean.size(0);
  if (kappa.dim() != 1 || kappa.size(0) != B) {
    throw InputError("SampleVonMisesFisher: kappa must be [" + std::to_string(B) + "], got " +
                     c10::str(kappa.sizes()));
  }
  if (B == 0) return mean.clone();
  if (!(kappa.min().item<double>() > 0)) {
    throw InputError("SampleVonMisesFisher: concentrations must be > 0");
  }
  // Wood (1994) for dimension m = 2: b = (m − 1)/(2κ + √(4κ² + (m − 1)²)) (the stable form),
  // a = ((m − 1) + 2κ + √(4κ² + (m − 1)²))/4, d = 4ab/(1 + b) − (m − 1) log(m − 1).
  const auto cpu64 = torch::TensorOptions().dtype(torch::kFloat64);
  torch::Tensor k = kappa.detach().to(torch::kCPU, torch::kFloat64);
  torch::Tensor root = torch::sqrt(4 * k.square() + 1);
  torch::Tensor b = 1 / (2 * k + root);
  torch::Tensor a = (1 + 2 * k + root) / 4;
  torch::Tensor d = 4 * a * b / (1 + b);
  torch::Tensor eps = torch::empty({B}, cpu64);
  torch::Tensor pending = torch::ones({B}, torch::kBool);
  for (int round = 0; pending.any().item<bool>(); ++round) {
    if (round > 1000) throw NumericalError("SampleVonMisesFisher: the rejection sampler stalled");
    // ε ~ Beta(½, ½): sin²(πU/2) for U uniform.
    torch::Tensor e = torch::sin(M_PI / 2 * torch::rand({B}, generator, cpu64)).square();
    torch::Tensor t = 2 * a * b / (1 - (1 - b) * e);
    torch::Tensor accept =
        (torch::log(t) - t + d) >= torch::log(torch::rand({B}, generator, cpu64));
    torch::Tensor take = pending & accept;
    eps = torch::where(take, e, eps);
    pending = pending & ~accept;
  }
  torch::Tensor sign = torch::where(torch::rand({B}, generator, cpu64) < 0.5,
                                    -torch::ones({B}, cpu64), torch::ones({B}, cpu64));
  // w as a function of κ (differentiable), the draws held fixed.
  const auto opts = kappa.options();
  torch::Tensor e = eps.to(opts);
  torch::Tensor kb = 1 / (2 * kappa + torch::sqrt(4 * kappa.square() + 1));
  torch::Tensor w = (1 - (1 + kb) * e) / (1 - (1 - kb) * e);
  torch::Tensor side = sign.to(opts) * torch::sqrt((1 - w.square()).clamp_min(1e-12));
  torch::Tensor perp = torch::stack({-mean.select(1, 1), mean.select(1, 0)}, 1);
  return w.unsqueeze(1) * mean + side.unsqueeze(1) * perp;
}

torch::Tensor PlaceSprite(const torch::Tensor& sprite, const torch::Tensor& cos_sin,
                          const torch::Tensor& pivot) {
  CheckRows2(cos_sin, "PlaceSprite");
  const int64_t B = cos_sin.size(0);
  if (sprite.dim() != 4 || (sprite.size(0) != 1 && sprite.size(0) != B)) {
    throw InputError("PlaceSprite: sprite must be [1 or " + std::to_string(B) + ", C, H, W], got " +
                     c10::str(sprite.sizes()));
  }
  if (pivot.dim() != 1 || pivot.size(0) != 2) {
    throw InputError("PlaceSprite: pivot must be [2], got " + c10::str(pivot.sizes()));
  }
  // Sprite coordinates of an output point p: R(q)·(p − pivot).
  torch::Tensor R = RotationMatrices(cos_sin).to(sprite.scalar_type());
  torch::Tensor t = -torch::matmul(R, pivot.to(sprite.scalar_type()));  // [B, 2]
  return AffineSample(sprite, R, t);
}

torch::nn::Sequential EluMlp(int64_t in, int64_t width, int64_t out) {
  return torch::nn::Sequential(torch::nn::Linear(in, width), torch::nn::ELU(),
                               torch::nn::Linear(width, width), torch::nn::ELU(),
                               torch::nn::Linear(width, out));
}

std::vector<torch::Tensor> IntegrateWindows(torch::Tensor position, torch::Tensor velocity,
                                            const WindowDerivative& f, int64_t intervals,
                                            double dt, IntegratorMethod method, int substeps,
                                            const std::string& model) {
  if ((method != IntegratorMethod::kEuler && method != IntegratorMethod::kRk4) || substeps < 1) {
    throw InputError("model '" + model + "' trains with euler (published) or rk4, substeps ≥ 1; " +
                     "got " + IntegratorMethodString(method));
  }
  const double h = dt / substeps;
  std::vector<torch::Tensor> out{position};
  for (int64_t j = 0; j < intervals; ++j) {
    for (int s = 0; s < substeps; ++s) {
      auto [k1p, k1v] = f(position, velocity);
      if (method == IntegratorMethod::kEuler) {
        position = position + h * k1p;
        velocity = velocity + h * k1v;
        continue;
      }
      auto [k2p, k2v] = f(position + 0.5 * h * k1p, velocity + 0.5 * h * k1v);
      auto [k3p, k3v] = f(position + 0.5 * h * k2p, velocity + 0.5 * h * k2v);
      auto [k4p, k4v] = f(position + h * k3p, velocity + h * k3v);
      position = position + h / 6 * (k1p + 2 * k2p + 2 * k3p + k4p);
      velocity = velocity + h / 6 * (k1v + 2 * k2v + 2 * k3v + k4v);
    }
    out.push_back(position);
  }
  return out;
}

int64_t WindowCount(const torch::Tensor& images, int64_t P, const std::string& model) {
  const int64_t N = images.dim() == 4 ? images.size(0) : 0;
  if (P < 1 || N < P + 1) {
    throw InputError("model '" + model + "': a sequence of " + std::to_string(N) +
                     " frames is too short for windows of horizon " + std::to_string(P) +
                     " (need N ≥ P + 1, P ≥ 1)");
  }
  return N - P;
}

torch::Tensor WindowTargets(const torch::Tensor& images, int64_t P, int64_t W) {
  torch::Tensor index = (torch::arange(P + 1, torch::kInt64).unsqueeze(1) +
                         torch::arange(W, torch::kInt64).unsqueeze(0))
                            .reshape({-1})
                            .to(images.device());
  return images.index_select(0, index);
}

TanhMlpImpl::TanhMlpImpl(int64_t in, int64_t width, int64_t out, bool tanh_output)
    : tanh_output_(tanh_output) {
  l1_ = register_module("l1", torch::nn::Linear(in, width));
  l2_ = register_module("l2", torch::nn::Linear(width, width));
  l3_ = register_module("l3", torch::nn::Linear(width, out));
  torch::NoGradGuard no_grad;
  for (auto* l : {&l1_, &l2_, &l3_}) torch::nn::init::orthogonal_((*l)->weight);
}

torch::Tensor TanhMlpImpl::forward(const torch::Tensor& x) {
  torch::Tensor y = l3_(torch::tanh(l2_(torch::tanh(l1_(x)))));
  return tanh_output_ ? torch::tanh(y) : y;
}

AngleLagrangianImpl::AngleLagrangianImpl(int64_t action_dim, int64_t width)
    : action_dim_(action_dim) {
  if (action_dim < 1 || width < 1) {
    throw InputError("AngleLagrangian: need A ≥ 1 and width ≥ 1");
  }
  mass = register_module("mass", TanhMlp(2, width, 1, /*tanh_output=*/true));
  potential = register_module("potential", TanhMlp(2, width, 1));
  input_gain = register_module("input_gain", TanhMlp(2, width, action_dim));
}

torch::Tensor AngleLagrangianImpl::Mass(const torch::Tensor& cos_sin) {
  CheckRows2(cos_sin, "AngleLagrangian::Mass");
  return mass->forward(cos_sin).squeeze(1).square() + 0.1;
}

torch::Tensor AngleLagrangianImpl::Potential(const torch::Tensor& cos_sin) {
  CheckRows2(cos_sin, "AngleLagrangian::Potential");
  return potential->forward(cos_sin).squeeze(1);
}

torch::Tensor AngleLagrangianImpl::AngleAcceleration(const torch::Tensor& cos_sin,
                                                     const torch::Tensor& qdot,
                                                     const torch::Tensor& u) {
  CheckRows2(cos_sin, "AngleLagrangian::AngleAcceleration");
  const int64_t B = cos_sin.size(0);
  if (qdot.dim() != 1 || qdot.size(0) != B) {
    throw InputError("AngleLagrangian::AngleAcceleration: qdot must be [" + std::to_string(B) +
                     "], got " + c10::str(qdot.sizes()));
  }
  const bool keep_graph = at::GradMode::is_enabled();
  at::AutoGradMode enable_grad(true);
  torch::Tensor input =
      (keep_graph && cos_sin.requires_grad()) ? cos_sin : cos_sin.detach().requires_grad_(true);
  torch::Tensor m = Mass(input), v = Potential(input);
  torch::Tensor dv = torch::autograd::grad({v.sum()}, {input}, {}, /*retain_graph=*/true,
                                           /*create_graph=*/keep_graph)[0];
  torch::Tensor dm = torch::autograd::grad({m.sum()}, {input}, {}, /*retain_graph=*/true,
                                           /*create_graph=*/keep_graph)[0];
  torch::Tensor gain = input_gain->forward(input);  // [B, A]
  torch::Tensor force = (gain * BatchAction(u, B, action_dim_, input.options())).sum(1);
  torch::Tensor qdd =
      (force - AlongAngle(dv, input) - 0.5 * qdot * qdot * AlongAngle(dm, input)) / m;
  return keep_graph ? qdd : qdd.detach();
}

torch::Tensor AngleEmbeddingDynamics::Acceleration(const torch::Tensor& x,
                                                   const torch::Tensor& xdot,
                                                   const torch::Tensor& u) {
  CheckRows2(x, "AngleEmbeddingDynamics");
  CheckRows2(xdot, "AngleEmbeddingDynamics");
  torch::Tensor r2 = x.square().sum(1);
  torch::Tensor r = r2.sqrt();
  torch::Tensor cs = x / r.unsqueeze(1);
  torch::Tensor qdot =
      (x.select(1, 0) * xdot.select(1, 1) - x.select(1, 1) * xdot.select(1, 0)) / r2;
  torch::Tensor qdd = lagrangian_->AngleAcceleration(cs, qdot, u);
  const torch::Tensor c = cs.select(1, 0), s = cs.select(1, 1);
  torch::Tensor w2 = qdot.square();
  return r.unsqueeze(1) * torch::stack({-s * qdd - c * w2, c * qdd - s * w2}, 1);
}

torch::Tensor AngleEmbeddingDynamics::ProjectVelocity(const torch::Tensor& x,
                                                      const torch::Tensor& xdot) {
  CheckRows2(x, "AngleEmbeddingDynamics");
  CheckRows2(xdot, "AngleEmbeddingDynamics");
  torch::Tensor n = x / x.norm(2, 1, /*keepdim=*/true);
  return xdot - (xdot * n).sum(1, /*keepdim=*/true) * n;
}

}  // namespace keycld
