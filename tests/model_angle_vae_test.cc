// The parts of the Lagrangian VAE baselines (model/angle_vae.h, docs/baselines.md) against
// independent truths: the von Mises–Fisher KL and moments against numerical integrals of the
// density, the sprite placement against the geometry of a rotation about a pivot, the
// Euler–Lagrange equation against finite differences of M and V, and the embedding dynamics
// against a fine RK4 integration of the angle ODE.
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <vector>

#include "keycld/dynamics/integrators.h"
#include "keycld/model/angle_vae.h"
#include "image_geometry.h"
#include "keycld/util/error.h"

namespace keycld {
namespace {

// ∫₀^{2π} f(θ) dθ by the trapezoid rule on a periodic grid (spectrally accurate).
template <typename F>
double Circle(F f, int n = 20000) {
  double s = 0;
  for (int i = 0; i < n; ++i) s += f(2 * M_PI * i / n);
  return s * 2 * M_PI / n;
}

// The vMF density on S¹ relative to its mode, normalised numerically (no Bessel functions).
struct Density {
  double kappa, z;
  explicit Density(double k) : kappa(k) {
    z = Circle([&](double t) { return std::exp(kappa * (std::cos(t) - 1)); });
  }
  double operator()(double t) const { return std::exp(kappa * (std::cos(t) - 1)) / z; }
};

TEST(AngleVae, KlOfTheVonMisesFisherPosteriorMatchesANumericalIntegral) {
  for (double kappa : {0.05, 0.7, 3.0, 20.0, 300.0}) {
    const Density f(kappa);
    // KL(q ‖ uniform) = ∫ q log(q / (1/2π)).
    const double truth = Circle([&](double t) { return f(t) * std::log(2 * M_PI * f(t)); });
    const double kl = VonMisesFisherKl(torch::tensor({kappa}, torch::kFloat64)).item<double>();
    EXPECT_NEAR(kl, truth, 1e-9 + 1e-7 * truth) << "kappa " << kappa;
  }
  // Large κ stays finite (exponentially scaled Bessel functions), with the Gaussian limit
  // KL ≈ ½ log(κ / 2π) + log 2π − ½ = ½ log(2πκ) − ½.
  const double kl = VonMisesFisherKl(torch::tensor({1e6}, torch::kFloat64)).item<double>();
  EXPECT_NEAR(kl, 0.5 * std::log(2 * M_PI * 1e6) - 0.5, 1e-5);
  EXPECT_THROW(VonMisesFisherKl(torch::tensor({0.0})), InputError);
}

TEST(AngleVae, SamplesHaveTheMomentsOfTheVonMisesFisherDistribution) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
  const int64_t n = 40000;
  for (double kappa : {0.5, 4.0, 60.0}) {
    const Density f(kappa);
    const double m1 = Circle([&](double t) { return std::cos(t) * f(t); });
    const double m2 = Circle([&](double t) { return std::cos(t) * std::cos(t) * f(t); });
    EXPECT_NEAR(VonMisesFisherMeanCosine(torch::tensor({kappa}, torch::kFloat64)).item<double>(),
                m1, 1e-9);
    // Mean direction at angle 1.1 rad.
    torch::Tensor mu = torch::tensor({std::cos(1.1), std::sin(1.1)}, torch::kFloat64)
                           .unsqueeze(0)
                           .expand({n, 2})
                           .contiguous();
    torch::Tensor z = SampleVonMisesFisher(mu, torch::full({n}, kappa, torch::kFloat64), gen);
    ASSERT_EQ(z.sizes(), (std::vector<int64_t>{n, 2}));
    EXPECT_LT((z.norm(2, 1) - 1).abs().max().item<double>(), 1e-12);
    torch::Tensor w = (z * mu).sum(1);  // cos of the offset
    torch::Tensor side = z.select(1, 1) * mu.select(1, 0) - z.select(1, 0) * mu.select(1, 1);
    const double se = std::sqrt((m2 - m1 * m1) / double(n));
    EXPECT_NEAR(w.mean().item<double>(), m1, 5 * se + 1e-12) << "kappa " << kappa;
    EXPECT_NEAR(w.square().mean().item<double>(), m2, 5 * std::sqrt(1.0 / n) + 1e-9);
    EXPECT_NEAR(side.mean().item<double>(), 0.0, 5 * std::sqrt((1 - m2) / double(n)) + 1e-9);
  }
  // The same generator state gives the same samples; κ carries a gradient through w.
  auto g1 = at::make_generator<at::CPUGeneratorImpl>(3),
       g2 = at::make_generator<at::CPUGeneratorImpl>(3);
  torch::Tensor mu = torch::tensor({{1.0, 0.0}, {0.0, 1.0}});
  torch::Tensor k = torch::tensor({2.0, 9.0}, torch::requires_grad());
  torch::Tensor a = SampleVonMisesFisher(mu, k, g1), b = SampleVonMisesFisher(mu, k, g2);
  EXPECT_TRUE(torch::equal(a, b));
  (a * mu).sum().backward();
  EXPECT_TRUE(k.grad().defined());
  EXPECT_GT(k.grad().abs().min().item<double>(), 0.0);
  EXPECT_THROW(SampleVonMisesFisher(mu, torch::tensor({1.0}), g1), InputError);
  EXPECT_THROW(SampleVonMisesFisher(mu, torch::tensor({1.0, -1.0}), g1), InputError);
}

TEST(AngleVae, APlacedSpriteLandsWhereTheRotationAboutThePivotPutsIt) {
  const int64_t S = 64;
  // A small Gaussian spot at sprite point s = (0, −0.5) (above the centre).
  const double sx = 0.0, sy = -0.5;
  torch::Tensor spot = testing::Spot(S, sx, sy);
  torch::Tensor sprite = spot.reshape({1, 1, S, S}).to(torch::kFloat32);
  const std::vector<double> angles = {0.0, 0.7, -2.0, 3.0};
  std::vector<double> cs;
  for (double q : angles) cs.insert(cs.end(), {std::cos(q), std::sin(q)});
  torch::Tensor cos_sin = torch::tensor(cs).reshape({4, 2}).to(torch::kFloat32);
  const double px = 0.15, py = -0.1;
  torch::Tensor placed = PlaceSprite(sprite, cos_sin, torch::tensor({px, py}).to(torch::kFloat32));
  ASSERT_EQ(placed.sizes(), (std::vector<int64_t>{4, 1, S, S}));
  for (size_t i = 0; i < angles.size(); ++i) {
    const double c = std::cos(angles[i]), s = std::sin(angles[i]);
    // pivot + R(q)ᵀ s.
    const double want_x = px + c * sx + s * sy, want_y = py - s * sx + c * sy;
    auto [x, y] = testing::Centroid(placed[int64_t(i)][0]);
    EXPECT_NEAR(x, want_x, 0.01) << "angle " << angles[i];
    EXPECT_NEAR(y, want_y, 0.01) << "angle " << angles[i];
    // The spot keeps its mass (it stays inside the image).
    EXPECT_NEAR(placed[int64_t(i)].sum().item<double>(), sprite.sum().item<double>(),
                0.01 * sprite.sum().item<double>());
  }
  EXPECT_THROW(PlaceSprite(sprite, cos_sin, torch::zeros({3})), InputError);
  EXPECT_THROW(PlaceSprite(sprite.expand({2, 1, S, S}), cos_sin, torch::zeros({2})), InputError);
}

AngleLagrangian PerturbedLagrangian(uint64_t seed) {
  torch::manual_seed(seed);
  AngleLagrangian L(1, 16);
  torch::NoGradGuard no_grad;
  for (auto& p : L->parameters()) p.normal_(0.0, 0.6);
  L->to(torch::kFloat64);
  return L;
}

torch::Tensor CosSin(const torch::Tensor& q) { return torch::stack({q.cos(), q.sin()}, 1); }

TEST(AngleVae, AngleAccelerationSolvesTheEulerLagrangeEquation) {
  AngleLagrangian L = PerturbedLagrangian(4);
  torch::NoGradGuard no_grad;
  const int64_t B = 8;
  torch::Tensor q = torch::linspace(-3.0, 3.0, B, torch::kFloat64);
  torch::Tensor qd = torch::linspace(-2.0, 1.5, B, torch::kFloat64);
  torch::Tensor u = torch::tensor({0.8}, torch::kFloat64);
  torch::Tensor qdd = L->AngleAcceleration(CosSin(q), qd, u);
  // M q̈ + ½ M′ q̇² + V′ = g u with M′, V′ by central differences in q.
  const double h = 1e-6;
  torch::Tensor dm = (L->Mass(CosSin(q + h)) - L->Mass(CosSin(q - h))) / (2 * h);
  torch::Tensor dv = (L->Potential(CosSin(q + h)) - L->Potential(CosSin(q - h))) / (2 * h);
  torch::Tensor g = L->input_gain->forward(CosSin(q)).squeeze(1);
  torch::Tensor residual = L->Mass(CosSin(q)) * qdd + 0.5 * dm * qd * qd + dv - g * u;
  EXPECT_GT(qdd.abs().max().item<double>(), 0.1);  // a real force
  EXPECT_LT(residual.abs().max().item<double>(), 1e-7) << residual;
  // The mass is positive definite: M ≥ 0.1 everywhere (here on random inputs).
  torch::Tensor m = L->Mass(torch::randn({1000, 2}, torch::kFloat64) * 3);
  EXPECT_GE(m.min().item<double>(), 0.1);
  // No action is u = 0; a batch of actions broadcasts.
  EXPECT_TRUE(
      torch::allclose(L->AngleAcceleration(CosSin(q), qd, {}),
                      L->AngleAcceleration(CosSin(q), qd, torch::zeros({B, 1}, torch::kFloat64))));
  EXPECT_THROW(L->AngleAcceleration(CosSin(q), qd.slice(0, 0, 3), u), InputError);
}

TEST(AngleVae, EmbeddingDynamicsIntegratesTheAngleOde) {
  AngleLagrangian L = PerturbedLagrangian(5);
  AngleEmbeddingDynamics dyn(L);
  torch::NoGradGuard no_grad;
  const double q0 = 0.4, w0 = 1.3, dt = 0.02;
  torch::Tensor u = torch::tensor({0.5}, torch::kFloat64);
  // Truth: RK4 of (q, q̇) with 2000 steps per frame.
  double q = q0, w = w0;
  auto qdd = [&](double qq, double ww) {
    return L
        ->AngleAcceleration(CosSin(torch::tensor({qq}, torch::kFloat64)),
                            torch::tensor({ww}, torch::kFloat64), u)
        .item<double>();
  };
  std::vector<double> truth{q};
  const int sub = 200;
  for (int t = 0; t < 20; ++t) {
    for (int s = 0; s < sub; ++s) {
      const double h = dt / sub;
      const double k1q = w, k1w = qdd(q, w);
      const double k2q = w + 0.5 * h * k1w, k2w = qdd(q + 0.5 * h * k1q, w + 0.5 * h * k1w);
      const double k3q = w + 0.5 * h * k2w, k3w = qdd(q + 0.5 * h * k2q, w + 0.5 * h * k2w);
      const double k4q = w + h * k3w, k4w = qdd(q + h * k3q, w + h * k3w);
      q += h / 6 * (k1q + 2 * k2q + 2 * k3q + k4q);
      w += h / 6 * (k1w + 2 * k2w + 2 * k3w + k4w);
    }
    truth.push_back(q);
  }
  // The embedding, from a velocity with a radial part that the projection removes.
  torch::Tensor x0 = CosSin(torch::tensor({q0}, torch::kFloat64));
  torch::Tensor v0 =
      w0 * torch::tensor({{-std::sin(q0), std::cos(q0)}}, torch::kFloat64) + 0.7 * x0;
  v0 = dyn.ProjectVelocity(x0, v0);
  EXPECT_NEAR((v0 * x0).sum().item<double>(), 0.0, 1e-14);
  std::vector<double> times;
  for (int t = 0; t <= 20; ++t) times.push_back(dt * t);
  IntegratorOptions tight;
  tight.rtol = tight.atol = 1e-11;
  Trajectory traj = Rollout(dyn.WithAction(u), x0, v0, times, IntegratorMethod::kDopri5, tight);
  for (int t = 0; t <= 20; ++t) {
    torch::Tensor x = traj.x[0][t];
    const double angle = std::atan2(x[1].item<double>(), x[0].item<double>());
    EXPECT_NEAR(std::remainder(angle - truth[size_t(t)], 2 * M_PI), 0.0, 1e-8) << "frame " << t;
    EXPECT_NEAR(x.norm().item<double>(), 1.0, 1e-8);
  }
  EXPECT_GT(std::abs(truth.back() - q0), 0.2);  // it moved
}

}  // namespace
}  // namespace keycld
