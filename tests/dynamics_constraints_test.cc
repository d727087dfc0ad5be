// Holonomic constraints (docs/method.md §4): analytic D and h against autograd and central finite
// differences, values at known states, the empty set of KeyCLD-NC, and finiteness at
// degenerate states.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "keycld/dynamics/constraints.h"
#include "keycld/util/error.h"

namespace keycld {
namespace {

const torch::TensorOptions kF64 = torch::TensorOptions().dtype(torch::kFloat64);

// Random states spread over the image, float64.
torch::Tensor RandomStates(int64_t batch, int state_dim, uint64_t seed) {
  torch::manual_seed(seed);
  return 0.6 * torch::randn({batch, state_dim}, kF64);
}

// Jacobian of Φ by autograd: [B, C, 2K].
torch::Tensor AutogradJacobian(const HolonomicConstraints& c, const torch::Tensor& x0) {
  torch::Tensor x = x0.detach().clone().requires_grad_(true);
  torch::Tensor phi = c.Phi(x);
  std::vector<torch::Tensor> rows;
  for (int i = 0; i < c.num_constraints(); ++i) {
    rows.push_back(torch::autograd::grad({phi.select(1, i).sum()}, {x}, {}, true)[0]);
  }
  return torch::stack(rows, 1);
}

// h_c = ẋᵀ ∇²Φ_c ẋ by double autograd: [B, C].
torch::Tensor AutogradCurvature(const HolonomicConstraints& c, const torch::Tensor& x0,
                                const torch::Tensor& v) {
  torch::Tensor x = x0.detach().clone().requires_grad_(true);
  torch::Tensor phi = c.Phi(x);
  std::vector<torch::Tensor> hs;
  for (int i = 0; i < c.num_constraints(); ++i) {
    torch::Tensor g = torch::autograd::grad({phi.select(1, i).sum()}, {x}, {}, true, true)[0];
    torch::Tensor hv = torch::autograd::grad({(g * v).sum()}, {x}, {}, true)[0];  // H v
    hs.push_back((hv * v).sum(1));
  }
  return torch::stack(hs, 1);
}

// The built-in sets and sets of the other primitives that description files can list
// (docs/systems.md): a pivot off the image centre, a slanted rail, a keypoint fixed in place.
struct ConstraintCase {
  std::string name;
  HolonomicConstraints constraints;
};

std::vector<ConstraintCase> ConstraintCases() {
  using T = ConstraintTerm;
  return {
      {"pendulum", HolonomicConstraints::ForEnvironment(EnvName::kPendulum)},
      {"cartpole", HolonomicConstraints::ForEnvironment(EnvName::kCartpole)},
      {"acrobot", HolonomicConstraints::ForEnvironment(EnvName::kAcrobot)},
      {"double_pendulum_off_centre",
       HolonomicConstraints(
           2, {T::FixedDistanceToPoint(0, 0.1, -0.2, 0.3), T::FixedDistance(0, 1, 0.25)})},
      {"slanted_rail",
       HolonomicConstraints(2, {T::OnLine(0, 1.0, 2.0, 0.1), T::FixedDistance(0, 1, 0.4)})},
      {"fixed_point_and_links",
       HolonomicConstraints(
           3, {T::FixedCoordinate(0, 0.2), T::FixedCoordinate(1, -0.1), T::FixedDistance(0, 1, 0.3),
               T::FixedDistanceToPoint(2, -0.3, 0.2, 0.2)})},
  };
}

class HolonomicConstraintTest : public ::testing::TestWithParam<ConstraintCase> {};

TEST_P(HolonomicConstraintTest, JacobianMatchesAutogradAndFiniteDifferences) {
  const HolonomicConstraints& c = GetParam().constraints;
  const torch::Tensor x = RandomStates(16, c.state_dim(), 1);
  const torch::Tensor d = c.Jacobian(x);
  ASSERT_EQ(d.sizes(), (std::vector<int64_t>{16, c.num_constraints(), c.state_dim()}));
  EXPECT_LT((d - AutogradJacobian(c, x)).abs().max().item<double>(), 1e-14);

  const double step = 1e-6;
  for (int j = 0; j < c.state_dim(); ++j) {
    torch::Tensor e = torch::zeros({1, c.state_dim()}, kF64);
    e[0][j] = step;
    const torch::Tensor fd = (c.Phi(x + e) - c.Phi(x - e)) / (2 * step);  // [B, C]
    EXPECT_LT((d.select(2, j) - fd).abs().max().item<double>(), 1e-8) << "column " << j;
  }
}

TEST_P(HolonomicConstraintTest, CurvatureMatchesAutogradAndFiniteDifferences) {
  const HolonomicConstraints& c = GetParam().constraints;
  const torch::Tensor x = RandomStates(16, c.state_dim(), 2);
  torch::manual_seed(3);
  const torch::Tensor v = torch::randn({16, c.state_dim()}, kF64);
  const torch::Tensor h = c.Curvature(x, v);
  ASSERT_EQ(h.sizes(), (std::vector<int64_t>{16, c.num_constraints()}));
  const torch::Tensor h_autograd = AutogradCurvature(c, x, v);
  EXPECT_LT((h - h_autograd).abs().max().item<double>(),
            1e-12 * (1.0 + h_autograd.abs().max().item<double>()));

  // Second central difference along ẋ: (Φ(x + s ẋ) − 2Φ(x) + Φ(x − s ẋ)) / s² = ẋᵀ∇²Φ ẋ + O(s²).
  const double s = 1e-4;
  const torch::Tensor fd = (c.Phi(x + s * v) - 2 * c.Phi(x) + c.Phi(x - s * v)) / (s * s);
  EXPECT_LT((h - fd).abs().max().item<double>(), 1e-5 * (1.0 + h.abs().max().item<double>()));
}

TEST_P(HolonomicConstraintTest, FiniteAtDegenerateStates) {
  const HolonomicConstraints& c = GetParam().constraints;
  // All points on the pivot (and hence on each other): every norm is zero.
  torch::Tensor x = torch::zeros({2, c.state_dim()}, kF64).requires_grad_(true);
  const torch::Tensor v = torch::ones({2, c.state_dim()}, kF64);
  const torch::Tensor phi = c.Phi(x);
  const torch::Tensor d = c.Jacobian(x);
  const torch::Tensor h = c.Curvature(x, v);
  EXPECT_TRUE(torch::isfinite(phi).all().item<bool>());
  EXPECT_TRUE(torch::isfinite(d).all().item<bool>());
  EXPECT_TRUE(torch::isfinite(h).all().item<bool>());
  const torch::Tensor g =
      torch::autograd::grad({phi.sum() + d.sum() + h.sum()}, {x}, {}, false, false, true)[0];
  EXPECT_TRUE(torch::isfinite(g).all().item<bool>());
}

INSTANTIATE_TEST_SUITE_P(Primitives, HolonomicConstraintTest,
                         ::testing::ValuesIn(ConstraintCases()),
                         [](const auto& info) { return info.param.name; });

TEST(HolonomicConstraintValues, NewPrimitivesAtKnownStates) {
  using T = ConstraintTerm;
  // p1 = (0.4, 0.2): distance to (0.1, −0.2) is 0.5; n = (3, 4)/5 gives n·p1 = 0.4.
  const HolonomicConstraints c(
      1, {T::FixedDistanceToPoint(0, 0.1, -0.2, 0.5), T::OnLine(0, 3.0, 4.0, 0.4)});
  const torch::Tensor x = torch::tensor({{0.4, 0.2}}, kF64);
  EXPECT_LT(c.Phi(x).abs().max().item<double>(), 1e-12);
  const torch::Tensor d = c.Jacobian(x);
  // (p − c)/‖p − c‖_ε = (0.3, 0.4)/0.5, up to the regularisation ε²/(2‖p − c‖²) = 2e-12.
  EXPECT_NEAR(d[0][0][0].item<double>(), 0.6, 1e-11);
  EXPECT_NEAR(d[0][0][1].item<double>(), 0.8, 1e-11);
  EXPECT_NEAR(d[0][1][0].item<double>(), 0.6, 1e-12);  // the unit normal
  EXPECT_NEAR(d[0][1][1].item<double>(), 0.8, 1e-12);
  EXPECT_EQ(c.Describe(), "|p1 - (0.1, -0.2)| - 0.5; 0.6*x1 + 0.8*y1 - 0.4");
  EXPECT_THROW(T::OnLine(0, 0.0, 0.0, 1.0), InputError);
  EXPECT_THROW(HolonomicConstraints(1, {T::OnLine(1, 0.0, 1.0, 0.0)}), InputError);
}

TEST(HolonomicConstraintValues, MatchTheTableOfKeyCLD) {
  const auto pendulum = HolonomicConstraints::ForEnvironment(EnvName::kPendulum);
  const auto cartpole = HolonomicConstraints::ForEnvironment(EnvName::kCartpole);
  const auto acrobot = HolonomicConstraints::ForEnvironment(EnvName::kAcrobot);
  EXPECT_EQ(pendulum.num_keypoints(), 1);
  EXPECT_EQ(pendulum.num_constraints(), 1);
  EXPECT_EQ(cartpole.num_keypoints(), 2);
  EXPECT_EQ(cartpole.num_constraints(), 2);
  EXPECT_EQ(acrobot.num_keypoints(), 2);
  EXPECT_EQ(acrobot.num_constraints(), 2);

  // A 3-4-5 triangle scaled to 0.5: ‖(0.3, 0.4)‖ = 0.5.
  const torch::Tensor p = torch::tensor({{0.3, 0.4}}, kF64);
  EXPECT_NEAR(pendulum.Phi(p).item<double>(), 0.0, 1e-11);
  EXPECT_NEAR(pendulum.Phi(2 * p).item<double>(), 0.5, 1e-11);

  // Cartpole: cart at (0.2, 0.1), pole tip 0.5 away.
  const torch::Tensor xc = torch::tensor({{0.2, 0.1, 0.5, 0.5}}, kF64);
  const torch::Tensor phic = cartpole.Phi(xc);
  EXPECT_NEAR(phic[0][0].item<double>(), 0.1, 1e-15);
  EXPECT_NEAR(phic[0][1].item<double>(), 0.0, 1e-11);
  const torch::Tensor dc = cartpole.Jacobian(xc);
  EXPECT_TRUE(torch::allclose(dc[0][0], torch::tensor({0.0, 1.0, 0.0, 0.0}, kF64)));
  EXPECT_TRUE(torch::allclose(dc[0][1], torch::tensor({-0.6, -0.8, 0.6, 0.8}, kF64), 0, 1e-10));

  // Acrobot: elbow (0, −0.3), tip (0.3, −0.3).
  const torch::Tensor xa = torch::tensor({{0.0, -0.3, 0.3, -0.3}}, kF64);
  EXPECT_LT(acrobot.Phi(xa).abs().max().item<double>(), 1e-11);
  EXPECT_EQ(acrobot.Describe(), "|p1| - 0.3; |p1 - p2| - 0.3");
}

TEST(HolonomicConstraintValues, NoConstraintsGiveEmptyTensors) {
  const auto none = HolonomicConstraints::None(3);
  EXPECT_EQ(none.num_constraints(), 0);
  const torch::Tensor x = torch::randn({4, 6}, kF64);
  EXPECT_EQ(none.Phi(x).sizes(), (std::vector<int64_t>{4, 0}));
  EXPECT_EQ(none.Jacobian(x).sizes(), (std::vector<int64_t>{4, 0, 6}));
  EXPECT_EQ(none.Curvature(x, x).sizes(), (std::vector<int64_t>{4, 0}));
  EXPECT_EQ(none.Describe(), "none");
}

TEST(HolonomicConstraintValues, FollowDtypeOfTheInput) {
  const auto c = HolonomicConstraints::ForEnvironment(EnvName::kAcrobot);
  const torch::Tensor x = torch::randn({3, 4});
  EXPECT_EQ(c.Phi(x).scalar_type(), torch::kFloat32);
  EXPECT_EQ(c.Jacobian(x).scalar_type(), torch::kFloat32);
  EXPECT_EQ(c.Curvature(x, x).scalar_type(), torch::kFloat32);
}

TEST(HolonomicConstraintValues, RejectMalformedInput) {
  const auto c = HolonomicConstraints::ForEnvironment(EnvName::kCartpole);
  EXPECT_THROW(c.Phi(torch::zeros({3, 2}, kF64)), InputError);
  EXPECT_THROW(c.Jacobian(torch::zeros({4}, kF64)), InputError);
  EXPECT_THROW(c.Curvature(torch::zeros({3, 4}, kF64), torch::zeros({2, 4}, kF64)), InputError);
  EXPECT_THROW(c.Phi(torch::zeros({3, 4}, torch::kInt64)), InputError);
  EXPECT_THROW(HolonomicConstraints(2, {ConstraintTerm::FixedDistance(0, 2, 0.5)}), InputError);
  EXPECT_THROW(HolonomicConstraints(1, {ConstraintTerm::FixedCoordinate(2, 0.0)}), InputError);
  EXPECT_THROW(HolonomicConstraints::None(0), InputError);
}

}  // namespace
}  // namespace keycld
