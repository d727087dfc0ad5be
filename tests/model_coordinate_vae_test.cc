// The parts of the Lagrangian VAE baselines for two bodies (model/coordinate_vae.h,
// docs/baselines.md, "Several bodies") against independent truths: the Gaussian KL against a
// numerical integral, the mass network's definiteness, the Euler–Lagrange accelerations against
// finite differences of M and V, energy conservation of the embedding dynamics, and the affine
// sampling against the geometry of a shift.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <vector>

#include "keycld/dynamics/integrators.h"
#include "keycld/model/coordinate_vae.h"
#include "image_geometry.h"
#include "keycld/util/error.h"

namespace keycld {
namespace {

using Kinds = std::vector<CoordinateKind>;
const Kinds kCartpole{CoordinateKind::kTranslation, CoordinateKind::kAngle};
const Kinds kAcrobot{CoordinateKind::kAngle, CoordinateKind::kAngle};

TEST(CoordinateVae, GaussianKlMatchesANumericalIntegral) {
  for (auto [mu, var] : std::vector<std::pair<double, double>>{{0.0, 1.0}, {0.7, 0.2}, {-1.5, 3.0}}) {
    // ∫ q log(q/p) by the trapezoid rule over ±12 standard deviations.
    const int n = 200000;
    const double sd = std::sqrt(var), lo = mu - 12 * sd, hi = mu + 12 * sd, h = (hi - lo) / n;
    double kl = 0;
    for (int i = 0; i <= n; ++i) {
      const double z = lo + i * h;
      const double logq = -0.5 * std::log(2 * M_PI * var) - (z - mu) * (z - mu) / (2 * var);
      const double logp = -0.5 * std::log(2 * M_PI) - z * z / 2;
      kl += (i == 0 || i == n ? 0.5 : 1.0) * std::exp(logq) * (logq - logp) * h;
    }
    const double got = GaussianKl(torch::tensor({mu}, torch::kFloat64),
                                  torch::tensor({std::log(var)}, torch::kFloat64))
                           .item<double>();
    EXPECT_NEAR(got, kl, 1e-8) << "mu " << mu << " var " << var;
  }
}

GeneralisedLagrangian Perturbed(const Kinds& kinds, uint64_t seed) {
  torch::manual_seed(seed);
  GeneralisedLagrangian L(kinds, 2, 16);
  torch::NoGradGuard no_grad;
  for (auto& p : L->parameters()) p.normal_(0.0, 0.5);
  L->to(torch::kFloat64);
  return L;
}

TEST(CoordinateVae, TheMassIsPositiveDefinite) {
  for (const Kinds& kinds : {kCartpole, kAcrobot}) {
    GeneralisedLagrangian L = Perturbed(kinds, 3);
    torch::NoGradGuard no_grad;
    torch::Tensor M = L->Mass(torch::randn({2000, 2}, torch::kFloat64) * 3);
    ASSERT_EQ(M.sizes(), (std::vector<int64_t>{2000, 2, 2}));
    EXPECT_LT((M - M.transpose(1, 2)).abs().max().item<double>(), 1e-12);
    torch::Tensor eig = at::linalg_eigvalsh(M);
    EXPECT_GE(eig.min().item<double>(), 0.1 - 1e-9);
    EXPECT_GT(eig.max().item<double>(), 0.2);  // the learned part is not zero
  }
}

TEST(CoordinateVae, AccelerationSolvesTheEulerLagrangeEquation) {
  for (const Kinds& kinds : {kCartpole, kAcrobot}) {
    GeneralisedLagrangian L = Perturbed(kinds, 4);
    torch::NoGradGuard no_grad;
    const int64_t B = 6, n = 2;
    torch::Tensor q = torch::randn({B, n}, torch::kFloat64) * 1.5;
    torch::Tensor qd = torch::randn({B, n}, torch::kFloat64);
    torch::Tensor u = torch::tensor({0.8, -0.3}, torch::kFloat64);
    torch::Tensor qdd = L->Acceleration(q, qd, u);
    // M q̈ + Σₖ ∂M/∂qₖ q̇ₖ q̇ − ½ (q̇ᵀ ∂M/∂qᵢ q̇)ᵢ + ∂V/∂q = g u, with ∂M/∂qₖ, ∂V/∂qₖ by central
    // differences.
    const double h = 1e-6;
    torch::Tensor residual = torch::matmul(L->Mass(q), qdd.unsqueeze(2)).squeeze(2) -
                             torch::matmul(L->InputGain(q), u);
    for (int64_t k = 0; k < n; ++k) {
      torch::Tensor e = torch::zeros({1, n}, torch::kFloat64);
      e[0][k] = h;
      torch::Tensor dM = (L->Mass(q + e) - L->Mass(q - e)) / (2 * h);  // [B, n, n]
      torch::Tensor dV = (L->Potential(q + e) - L->Potential(q - e)) / (2 * h);
      residual = residual +
                 torch::matmul(dM, qd.unsqueeze(2)).squeeze(2) * qd.select(1, k).unsqueeze(1);
      torch::Tensor quad = (qd.unsqueeze(1).matmul(dM).squeeze(1) * qd).sum(1);
      residual.select(1, k) += dV - 0.5 * quad;
    }
    EXPECT_GT(qdd.abs().max().item<double>(), 0.1);  // a real acceleration
    EXPECT_LT(residual.abs().max().item<double>(), 1e-7) << residual;
    // No action is u = 0; shapes are checked.
    EXPECT_TRUE(torch::allclose(L->Acceleration(q, qd, {}),
                                L->Acceleration(q, qd, torch::zeros({B, 2}, torch::kFloat64))));
    EXPECT_THROW(L->Acceleration(q, qd.slice(1, 0, 1), u), InputError);
    EXPECT_THROW(L->Acceleration(q, qd, torch::zeros({3}, torch::kFloat64)), InputError);
  }
}

// The pairs of coordinates q [n] and velocities.
torch::Tensor Pairs(const Kinds& kinds, const std::vector<double>& q, const std::vector<double>& v,
                    bool velocity) {
  std::vector<double> out;
  for (size_t i = 0; i < kinds.size(); ++i) {
    if (kinds[i] == CoordinateKind::kTranslation) {
      out.insert(out.end(), {velocity ? v[i] : q[i], 0.0});
    } else if (velocity) {
      out.insert(out.end(), {-std::sin(q[i]) * v[i], std::cos(q[i]) * v[i]});
    } else {
      out.insert(out.end(), {std::cos(q[i]), std::sin(q[i])});
    }
  }
  return torch::tensor(out, torch::kFloat64).unsqueeze(0);
}

TEST(CoordinateVae, EmbeddingDynamicsConserveTheLagrangiansEnergy) {
  for (const Kinds& kinds : {kCartpole, kAcrobot}) {
    GeneralisedLagrangian L = Perturbed(kinds, 5);
    CoordinateEmbeddingDynamics dyn(L);
    torch::NoGradGuard no_grad;
    const std::vector<double> q0{0.3, -0.8}, v0{0.9, 1.4};
    torch::Tensor x0 = Pairs(kinds, q0, v0, false), xd0 = Pairs(kinds, q0, v0, true);
    // A velocity off the tangent (radial part, a translation's second axis) is projected away.
    torch::Tensor projected = dyn.ProjectVelocity(x0, xd0 + 0.4 * x0);
    for (size_t i = 0; i < kinds.size(); ++i) {
      if (kinds[i] == CoordinateKind::kAngle) continue;
      EXPECT_NEAR(projected[0][int64_t(2 * i + 1)].item<double>(), 0.0, 1e-15);
    }
    auto [q, qd] = CoordinatesOfPairs(kinds, x0, xd0);
    EXPECT_NEAR(q[0][1].item<double>(), q0[1], 1e-12);
    EXPECT_NEAR(qd[0][0].item<double>(), v0[0], 1e-12);
    auto energy = [&](const torch::Tensor& x, const torch::Tensor& xd) {
      auto [qq, vv] = CoordinatesOfPairs(kinds, x, xd);
      torch::Tensor Mv = torch::matmul(L->Mass(qq), vv.unsqueeze(2)).squeeze(2);
      return (0.5 * (vv * Mv).sum(1) + L->Potential(qq)).item<double>();
    };
    std::vector<double> times;
    for (int t = 0; t <= 40; ++t) times.push_back(0.02 * t);
    IntegratorOptions tight;
    tight.rtol = tight.atol = 1e-11;
    Trajectory traj = Rollout(dyn.WithAction({}), x0, xd0, times, IntegratorMethod::kDopri5, tight);
    const double e0 = energy(x0, xd0);
    double moved = 0;
    for (int t = 1; t <= 40; ++t) {
      torch::Tensor x = traj.x.select(1, t), xd = traj.xdot.select(1, t);
      EXPECT_NEAR(energy(x, xd), e0, 1e-7 * (1 + std::abs(e0))) << "frame " << t;
      moved = std::max(moved, (x - x0).abs().max().item<double>());
    }
    EXPECT_GT(moved, 0.05);  // it moved
    // With a force the energy changes.
    Trajectory forced = Rollout(dyn.WithAction(torch::tensor({3.0, 3.0}, torch::kFloat64)), x0, xd0,
                                times, IntegratorMethod::kDopri5, tight);
    EXPECT_GT(std::abs(energy(forced.x.select(1, 40), forced.xdot.select(1, 40)) - e0), 1e-3);
  }
}

TEST(CoordinateVae, AffineSampleFollowsTheMap) {
  // A spot at (0.2, −0.1); output(p) = image(A p + t) with A = I, t = (0.3, 0) shows it at
  // (−0.1, −0.1); A = a rotation by 90° maps p = R⁻¹(spot − t).
  const int64_t S = 32;
  torch::Tensor image = testing::Spot(S, 0.2, -0.1, 0.05).reshape({1, 1, S, S});
  torch::Tensor A = torch::stack({torch::eye(2, torch::kFloat64),
                                  torch::tensor({{0.0, -1.0}, {1.0, 0.0}}, torch::kFloat64)});
  torch::Tensor t = torch::tensor({{0.3, 0.0}, {0.0, 0.0}}, torch::kFloat64);
  torch::Tensor out = AffineSample(image, A, t);
  auto [x0, y0] = testing::Centroid(out[0][0]);
  EXPECT_NEAR(x0, -0.1, 0.01);
  EXPECT_NEAR(y0, -0.1, 0.01);
  // A p = (−p_y, p_x) = (0.2, −0.1) → p = (−0.1, −0.2).
  auto [x1, y1] = testing::Centroid(out[1][0]);
  EXPECT_NEAR(x1, -0.1, 0.01);
  EXPECT_NEAR(y1, -0.2, 0.01);
  EXPECT_THROW(AffineSample(image, torch::eye(2).unsqueeze(0), torch::zeros({2, 2})), InputError);
  EXPECT_THROW(AffineSample(image.expand({3, 1, S, S}), A, t), InputError);
}

}  // namespace
}  // namespace keycld
