#include "keycld/model/coordinate_vae.h"

#include <string>

#include "keycld/util/error.h"

namespace keycld {

namespace {

void CheckCoordinates(const torch::Tensor& t, int64_t n, const char* what) {
  if (t.dim() != 2 || t.size(1) != n) {
    throw InputError(std::string(what) + ": expected [B, " + std::to_string(n) + "], got " +
                     c10::str(t.sizes()));
  }
}

}  // namespace

torch::Tensor GaussianKl(const torch::Tensor& mean, const torch::Tensor& log_variance) {
  return 0.5 * (mean.square() + log_variance.exp() - 1 - log_variance);
}

torch::Tensor RotationMatrices(const torch::Tensor& cos_sin) {
  CheckCoordinates(cos_sin, 2, "RotationMatrices");
  const torch::Tensor c = cos_sin.select(1, 0), s = cos_sin.select(1, 1);
  return torch::stack({torch::stack({c, -s}, 1), torch::stack({s, c}, 1)}, 1);
}

torch::Tensor AffineSample(const torch::Tensor& image, const torch::Tensor& A,
                           const torch::Tensor& t) {
  if (A.dim() != 3 || A.size(1) != 2 || A.size(2) != 2) {
    throw InputError("AffineSample: A must be [B, 2, 2], got " + c10::str(A.sizes()));
  }
  const int64_t B = A.size(0);
  if (t.dim() != 2 || t.size(0) != B || t.size(1) != 2) {
    throw InputError("AffineSample: t must be [" + std::to_string(B) + ", 2], got " +
                     c10::str(t.sizes()));
  }
  if (image.dim() != 4 || (image.size(0) != 1 && image.size(0) != B)) {
    throw InputError("AffineSample: image must be [1 or " + std::to_string(B) +
                     ", C, H, W], got " + c10::str(image.sizes()));
  }
  const int64_t C = image.size(1), H = image.size(2), W = image.size(3);
  torch::Tensor theta = torch::cat({A, t.unsqueeze(2)}, 2).to(image.scalar_type());  // [B, 2, 3]
  namespace F = torch::nn::functional;
  torch::Tensor grid = F::affine_grid(theta, {B, C, H, W}, /*align_corners=*/false);
  torch::Tensor src = image.size(0) == B ? image : image.expand({B, C, H, W});
  return F::grid_sample(
      src, grid,
      F::GridSampleFuncOptions().mode(torch::kBilinear).padding_mode(torch::kZeros).align_corners(
          false));
}

GeneralisedLagrangianImpl::GeneralisedLagrangianImpl(std::vector<CoordinateKind> kinds,
                                                     int64_t action_dim, int64_t width)
    : kinds_(std::move(kinds)), action_dim_(action_dim) {
  if (kinds_.empty() || action_dim < 1 || width < 1) {
    throw InputError("GeneralisedLagrangian: need at least one coordinate, A ≥ 1 and width ≥ 1");
  }
  int64_t features = 0;
  for (CoordinateKind k : kinds_) features += k == CoordinateKind::kAngle ? 2 : 1;
  const int64_t n = coordinates();
  mass = register_module("mass", TanhMlp(features, width, n * (n + 1) / 2));
  potential = register_module("potential", TanhMlp(features, width, 1));
  input_gain = register_module("input_gain", TanhMlp(features, width, n * action_dim));
}

torch::Tensor GeneralisedLagrangianImpl::Features(const torch::Tensor& q) const {
  CheckCoordinates(q, coordinates(), "GeneralisedLagrangian");
  std::vector<torch::Tensor> parts;
  for (size_t i = 0; i < kinds_.size(); ++i) {
    torch::Tensor qi = q.select(1, int64_t(i));
    if (kinds_[i] == CoordinateKind::kAngle) {
      parts.push_back(torch::cos(qi));
      parts.push_back(torch::sin(qi));
    } else {
      parts.push_back(qi);
    }
  }
  return torch::stack(parts, 1);
}

torch::Tensor GeneralisedLagrangianImpl::MassOfFeatures(const torch::Tensor& features) {
  const int64_t n = coordinates(), B = features.size(0);
  torch::Tensor entries = mass->forward(features);  // [B, n(n+1)/2]
  torch::Tensor rows =
      torch::tril_indices(n, n, 0, torch::TensorOptions().device(features.device()));
  torch::Tensor L = torch::zeros({B, n, n}, entries.options());
  L.index_put_({torch::indexing::Slice(), rows[0], rows[1]}, entries);
  return torch::matmul(L, L.transpose(1, 2)) +
         0.1 * torch::eye(n, entries.options()).unsqueeze(0);
}

torch::Tensor GeneralisedLagrangianImpl::Mass(const torch::Tensor& q) {
  return MassOfFeatures(Features(q));
}

torch::Tensor GeneralisedLagrangianImpl::PotentialOfFeatures(const torch::Tensor& features) {
  return potential->forward(features).squeeze(1);
}

torch::Tensor GeneralisedLagrangianImpl::Potential(const torch::Tensor& q) {
  return PotentialOfFeatures(Features(q));
}

torch::Tensor GeneralisedLagrangianImpl::InputGainOfFeatures(const torch::Tensor& features) {
  return input_gain->forward(features).reshape({features.size(0), coordinates(), action_dim_});
}

torch::Tensor GeneralisedLagrangianImpl::InputGain(const torch::Tensor& q) {
  return InputGainOfFeatures(Features(q));
}

torch::Tensor GeneralisedLagrangianImpl::Acceleration(const torch::Tensor& q,
                                                      const torch::Tensor& qdot,
                                                      const torch::Tensor& u) {
  const int64_t n = coordinates();
  CheckCoordinates(q, n, "GeneralisedLagrangian::Acceleration");
  CheckCoordinates(qdot, n, "GeneralisedLagrangian::Acceleration");
  const int64_t B = q.size(0);
  if (qdot.size(0) != B) {
    throw InputError("GeneralisedLagrangian::Acceleration: q and qdot differ in batch size");
  }
  const bool keep_graph = at::GradMode::is_enabled();
  at::AutoGradMode enable_grad(true);
  torch::Tensor qi = (keep_graph && q.requires_grad()) ? q : q.detach().requires_grad_(true);
  torch::Tensor qd = keep_graph ? qdot : qdot.detach();
  auto d_dq = [&](const torch::Tensor& scalar_per_row) {
    return torch::autograd::grad({scalar_per_row.sum()}, {qi}, {}, /*retain_graph=*/true,
                                 /*create_graph=*/keep_graph)[0];
  };
  const torch::Tensor features = Features(qi);  // once for M, V and g
  torch::Tensor M = MassOfFeatures(features);
  torch::Tensor Mqd = torch::matmul(M, qd.unsqueeze(2)).squeeze(2);  // [B, n]
  // ∂T/∂q − ∂V/∂q in one pass: ∂(T − V)/∂q with T = ½ q̇ᵀ M q̇.
  torch::Tensor dL = d_dq(0.5 * (qd * Mqd).sum(1) - PotentialOfFeatures(features));
  std::vector<torch::Tensor> mdot_qd;  // (Ṁ q̇)ᵢ = Σₖ ∂(M q̇)ᵢ/∂qₖ q̇ₖ
  for (int64_t i = 0; i < n; ++i) mdot_qd.push_back((d_dq(Mqd.select(1, i)) * qd).sum(1));
  torch::Tensor force =
      (InputGainOfFeatures(features) * BatchAction(u, B, action_dim_, qi.options()).unsqueeze(1))
          .sum(2);
  torch::Tensor rhs = force + dL - torch::stack(mdot_qd, 1);
  torch::Tensor qdd = at::linalg_solve(M, rhs.unsqueeze(2)).squeeze(2);
  return keep_graph ? qdd : qdd.detach();
}

std::pair<torch::Tensor, torch::Tensor> CoordinatesOfPairs(const std::vector<CoordinateKind>& kinds,
                                                           const torch::Tensor& x,
                                                           const torch::Tensor& xdot) {
  const int64_t n = int64_t(kinds.size());
  CheckCoordinates(x, 2 * n, "generalised coordinates of state pairs");
  CheckCoordinates(xdot, 2 * n, "generalised coordinates of state pairs");
  std::vector<torch::Tensor> q, qd;
  for (int64_t i = 0; i < n; ++i) {
    const torch::Tensor x1 = x.select(1, 2 * i), x2 = x.select(1, 2 * i + 1);
    const torch::Tensor v1 = xdot.select(1, 2 * i), v2 = xdot.select(1, 2 * i + 1);
    if (kinds[size_t(i)] == CoordinateKind::kAngle) {
      q.push_back(torch::atan2(x2, x1));
      qd.push_back((x1 * v2 - x2 * v1) / (x1.square() + x2.square()));
    } else {
      q.push_back(x1);
      qd.push_back(v1);
    }
  }
  return {torch::stack(q, 1), torch::stack(qd, 1)};
}

torch::Tensor CoordinateEmbeddingDynamics::Acceleration(const torch::Tensor& x,
                                                        const torch::Tensor& xdot,
                                                        const torch::Tensor& u) {
  const std::vector<CoordinateKind>& kinds = lagrangian_->kinds();
  auto [q, qd] = CoordinatesOfPairs(kinds, x, xdot);
  torch::Tensor qdd = lagrangian_->Acceleration(q, qd, u);
  std::vector<torch::Tensor> out;
  for (size_t i = 0; i < kinds.size(); ++i) {
    const int64_t k = int64_t(i);
    torch::Tensor a = qdd.select(1, k);
    if (kinds[i] == CoordinateKind::kAngle) {
      torch::Tensor pair = x.slice(1, 2 * k, 2 * k + 2);
      torch::Tensor r = pair.norm(2, 1);
      torch::Tensor c = pair.select(1, 0) / r, s = pair.select(1, 1) / r;
      torch::Tensor w2 = qd.select(1, k).square();
      out.push_back(r * (-s * a - c * w2));
      out.push_back(r * (c * a - s * w2));
    } else {
      out.push_back(a);
      out.push_back(torch::zeros_like(a));
    }
  }
  return torch::stack(out, 1);
}

torch::Tensor CoordinateEmbeddingDynamics::ProjectVelocity(const torch::Tensor& x,
                                                           const torch::Tensor& xdot) {
  const std::vector<CoordinateKind>& kinds = lagrangian_->kinds();
  const int64_t n = int64_t(kinds.size());
  CheckCoordinates(x, 2 * n, "CoordinateEmbeddingDynamics");
  CheckCoordinates(xdot, 2 * n, "CoordinateEmbeddingDynamics");
  std::vector<torch::Tensor> out;
  for (int64_t k = 0; k < n; ++k) {
    torch::Tensor v = xdot.slice(1, 2 * k, 2 * k + 2);
    if (kinds[size_t(k)] == CoordinateKind::kAngle) {
      torch::Tensor dir = x.slice(1, 2 * k, 2 * k + 2);
      dir = dir / dir.norm(2, 1, /*keepdim=*/true);
      out.push_back(v - (v * dir).sum(1, /*keepdim=*/true) * dir);
    } else {
      out.push_back(torch::stack({v.select(1, 0), torch::zeros_like(v.select(1, 0))}, 1));
    }
  }
  return torch::cat(out, 1);
}

}  // namespace keycld
