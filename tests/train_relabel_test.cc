// The keypoint order check and relabelling (train/relabel.h, docs/training.md "Keypoint order").
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "keycld/dynamics/constraints.h"
#include "keycld/eval/evaluate.h"
#include "keycld/models/keypoint_model.h"
#include "keycld/train/metrics.h"
#include "keycld/train/relabel.h"
#include "keycld/train/trainer.h"
#include "keycld/util/error.h"
#include "test_util.h"
#include "tiny_fixtures.h"

namespace keycld {
namespace {

constexpr double kPi = 3.14159265358979323846;

// Cartpole keypoints [N, 2, 2] of random states, drawn as the camera draws them: the cart on the
// rail y = 0, the pole's end at 0.35 from it (the constraint says 0.5: the spread does not see
// the level, only its change along the data).
torch::Tensor CartpoleKeypoints(int64_t n) {
  torch::manual_seed(11);
  torch::Tensor cart = torch::rand({n}, torch::kFloat64) - 0.5;
  torch::Tensor angle = (torch::rand({n}, torch::kFloat64) * 2 - 1) * kPi;
  torch::Tensor k = torch::zeros({n, 2, 2}, torch::kFloat64);
  k.select(1, 0).select(1, 0).copy_(cart);
  k.select(1, 1).select(1, 0).copy_(cart + 0.35 * torch::sin(angle));
  k.select(1, 1).select(1, 1).copy_(0.35 * torch::cos(angle));
  return k;
}

TEST(Relabel, TheCartIsTheKeypointOnTheRail) {
  const HolonomicConstraints c = HolonomicConstraints::ForEnvironment(EnvName::kCartpole);
  const torch::Tensor right = CartpoleKeypoints(200);
  const KeypointOrderChoice keep = ChooseKeypointOrder(c, right, 0.5);
  EXPECT_EQ(keep.order, (std::vector<int64_t>{0, 1}));
  EXPECT_FALSE(keep.relabel);
  EXPECT_LT(keep.current, 1e-20);  // the rail and the link hold exactly
  // Labels swapped: the first keypoint is the pole's end, off the rail.
  const torch::Tensor swapped = right.flip({1});
  const KeypointOrderChoice fix = ChooseKeypointOrder(c, swapped, 0.5);
  EXPECT_EQ(fix.order, (std::vector<int64_t>{1, 0}));
  EXPECT_TRUE(fix.relabel);
  EXPECT_LT(fix.best, 1e-20);
  // Σ Var Φ of the swapped labels, written out: Var(y_end) + Var(‖p_end − p_cart‖) = Var(y_end).
  EXPECT_NEAR(fix.current, swapped.select(1, 0).select(1, 1).var(0, false).item<double>(), 1e-12);
  // Noise on the estimates raises both spreads; a ratio of 1e-3 asks for more than it gives.
  const torch::Tensor noisy = swapped + 0.02 * torch::randn_like(swapped);
  EXPECT_TRUE(ChooseKeypointOrder(c, noisy, 0.5).relabel);
  EXPECT_FALSE(ChooseKeypointOrder(c, noisy, 1e-3).relabel);
}

TEST(Relabel, EveryOrderOfAThreeLinkChainIsFound) {
  // A chain pivot – p0 – p1 – p2 of links 0.3, 0.25, 0.2, in random configurations.
  const HolonomicConstraints chain(3, {ConstraintTerm::FixedDistanceToOrigin(0, 0.3),
                                      ConstraintTerm::FixedDistance(0, 1, 0.25),
                                      ConstraintTerm::FixedDistance(1, 2, 0.2)});
  torch::manual_seed(5);
  const int64_t n = 100;
  torch::Tensor k = torch::zeros({n, 3, 2}, torch::kFloat64);
  torch::Tensor base = torch::zeros({n, 2}, torch::kFloat64);
  const double lengths[3] = {0.3, 0.25, 0.2};
  for (int64_t j = 0; j < 3; ++j) {
    torch::Tensor a = (torch::rand({n}, torch::kFloat64) * 2 - 1) * kPi;
    base = base + lengths[j] * torch::stack({torch::sin(a), torch::cos(a)}, 1);
    k.select(1, j).copy_(base);
  }
  std::vector<int64_t> labels = {0, 1, 2};  // estimated keypoint i is chain point labels[i]
  do {
    torch::Tensor estimates = torch::zeros_like(k);
    for (int64_t i = 0; i < 3; ++i) estimates.select(1, i).copy_(k.select(1, labels[size_t(i)]));
    const KeypointOrderChoice c = ChooseKeypointOrder(chain, estimates, 0.5);
    // The new keypoint j must be chain point j: labels[order[j]] == j.
    for (int64_t j = 0; j < 3; ++j) EXPECT_EQ(labels[size_t(c.order[size_t(j)])], j);
    EXPECT_EQ(c.relabel, labels != std::vector<int64_t>({0, 1, 2}));
  } while (std::next_permutation(labels.begin(), labels.end()));
  EXPECT_THROW(ChooseKeypointOrder(chain, k, 0.0), InputError);
  EXPECT_THROW(ChooseKeypointOrder(chain, k.slice(0, 0, 1), 0.5), InputError);
  EXPECT_THROW(ChooseKeypointOrder(chain, torch::zeros({4, 7, 2}), 0.5), InputError);
}

// The relabelled model computes what the old one did, up to the order of the keypoints: the
// estimates, the images, the masses, V and B (the old model's outputs are the truth).
TEST(Relabel, TheRelabelledModelComputesTheSameUpToTheOrder) {
  ModelSpec spec = testing::TinyModelSpec(EnvName::kCartpole);
  spec.dense_init = DenseInit::kFanIn;  // V and B far from 0
  torch::manual_seed(2);
  Model m = CreateModel(spec);
  {
    torch::NoGradGuard g;
    m->MassScalars().copy_(torch::tensor({0.7, 1.3}));
  }
  torch::manual_seed(3);
  const torch::Tensor images = torch::rand({4, 3, 16, 16});
  const torch::Tensor x = torch::rand({4, 2, 2}) - 0.5;
  const torch::Tensor xs = x.reshape({4, 4});
  torch::NoGradGuard g;
  const torch::Tensor keypoints = m->Encode(images).keypoints, rendered = m->Render(x);
  const torch::Tensor masses = m->MassScalars().clone(), v = m->Potential(xs),
                      b = m->InputMatrix(xs);  // [4, 4, 2]
  EXPECT_GT(b.abs().max().item<double>(), 1e-3);
  const std::vector<int64_t> order = {1, 0};
  RelabelKeypoints(m, order, nullptr);
  const torch::Tensor swapped = x.flip({1});
  const torch::Tensor swapped_state = swapped.reshape({4, 4});
  EXPECT_TRUE(torch::allclose(m->Encode(images).keypoints, keypoints.flip({1}), 1e-6, 1e-6));
  EXPECT_TRUE(torch::allclose(m->Render(swapped), rendered, 1e-5, 1e-6));
  EXPECT_TRUE(torch::allclose(m->MassScalars(), masses.flip({0})));
  EXPECT_TRUE(torch::allclose(m->Potential(swapped_state), v, 1e-5, 1e-6));
  // B's rows are the state entries (x₁, y₁, x₂, y₂): the swapped model's rows 0, 1 are the old
  // rows 2, 3.
  const torch::Tensor b_new = m->InputMatrix(swapped_state);
  EXPECT_TRUE(torch::allclose(b_new.slice(1, 0, 2), b.slice(1, 2, 4), 1e-5, 1e-6));
  EXPECT_TRUE(torch::allclose(b_new.slice(1, 2, 4), b.slice(1, 0, 2), 1e-5, 1e-6));
  EXPECT_THROW(RelabelKeypoints(m, {0, 0}, nullptr), InputError);
  EXPECT_THROW(RelabelKeypoints(m, {0}, nullptr), InputError);
  Model node2 = CreateModel(testing::TinyModelSpec(EnvName::kCartpole, "node2"));
  EXPECT_THROW(RelabelKeypoints(node2, order, nullptr), InputError);
}

// Adam's moments follow the parameters: after a step, a relabelling and a second step on the
// relabelled inputs, the model equals the relabelled copy of one that took both steps unchanged.
TEST(Relabel, AdamsMomentsFollowTheParameters) {
  ModelSpec spec = testing::TinyModelSpec(EnvName::kAcrobot);
  spec.dense_init = DenseInit::kFanIn;
  torch::manual_seed(7);
  Model a = CreateModel(spec);
  torch::manual_seed(7);
  Model b = CreateModel(spec);
  torch::optim::Adam adam_a(a->parameters(), torch::optim::AdamOptions(1e-2));
  torch::optim::Adam adam_b(b->parameters(), torch::optim::AdamOptions(1e-2));
  torch::manual_seed(8);
  const torch::Tensor images = torch::rand({3, 3, 16, 16});
  const torch::Tensor x = torch::rand({3, 2, 2}) - 0.5;
  const torch::Tensor w = torch::rand({3, 3, 16, 16});
  const torch::Tensor u = torch::rand({2});
  // A loss through every relabelled part; `order` relabels its inputs (the estimates are used
  // through their squares' sum, which does not see the order).
  auto loss = [&](Model& m, const std::vector<int64_t>& order) {
    torch::Tensor xi = x.index_select(1, torch::tensor(order, torch::kInt64));
    torch::Tensor s = xi.reshape({3, 4});
    return (m->Render(xi) * w).sum() + m->Encode(images).keypoints.square().sum() +
           m->Potential(s).sum() + m->InputMatrix(s).matmul(u).square().sum() +
           m->MassScalars().prod();
  };
  auto step = [&](Model& m, torch::optim::Adam& adam, const std::vector<int64_t>& order) {
    adam.zero_grad();
    loss(m, order).backward();
    adam.step();
  };
  step(a, adam_a, {0, 1});
  step(b, adam_b, {0, 1});
  RelabelKeypoints(a, {1, 0}, &adam_a);
  step(a, adam_a, {1, 0});
  step(b, adam_b, {0, 1});
  RelabelKeypoints(b, {1, 0}, nullptr);
  const auto pa = a->named_parameters(), pb = b->named_parameters();
  for (const auto& item : pa) {
    // A U-Net block's convolution bias comes before GroupNorm, which removes it: its gradient is
    // rounding noise, and Adam's normalised step of noise differs between the two runs.
    const std::string& name = item.key();
    if (name.size() > 9 && name.compare(name.size() - 9, 9, "conv.bias") == 0) continue;
    EXPECT_TRUE(torch::allclose(item.value(), pb[item.key()], 1e-5, 1e-6)) << item.key();
  }
}

// Training with the check records each epoch's spreads (and any relabelling) and refuses the
// check for a model without the constraints to decide it.
TEST(Relabel, TrainingRecordsTheKeypointOrderCheck) {
  testing::TempDir dir;
  auto opt = testing::TinyTrainOptions(testing::TinyData(dir.path(), EnvName::kCartpole),
                                       dir / "run");
  opt.config.keypoint_relabel_epochs = 1;
  Train(opt);
  const MetricsHistory h = ReadMetrics(opt.run_dir / "metrics.jsonl");
  ASSERT_EQ(h.epochs.size(), 2u);
  ASSERT_TRUE(h.epochs[0].constraint_spread.has_value());
  EXPECT_GT(*h.epochs[0].constraint_spread, 0.0);
  EXPECT_LE(*h.epochs[0].best_constraint_spread, *h.epochs[0].constraint_spread);
  if (!h.epochs[0].relabelled.empty()) {
    EXPECT_LT(*h.epochs[0].best_constraint_spread, 0.5 * *h.epochs[0].constraint_spread);
  }
  EXPECT_FALSE(h.epochs[1].constraint_spread.has_value());  // only the first epoch checks
  EXPECT_EQ(TrainConfig::FromToml(opt.run_dir / "config.toml").keypoint_relabel_epochs, 1);
  // `keycld evaluate` makes the same check on the state grid's estimates.
  EvaluateOptions eo;
  eo.run_dir = opt.run_dir;
  eo.energy_frames = 20;
  eo.threads = 2;
  eo.plots = false;
  const EvaluationReport r = Evaluate(eo);
  ASSERT_EQ(r.best_keypoint_order.size(), 2u);
  EXPECT_GT(r.constraint_spread, 0.0);
  EXPECT_LE(r.best_constraint_spread, r.constraint_spread);
  const std::string md = testing::ReadText(opt.run_dir / "report" / "evaluation.md");
  EXPECT_NE(md.find("| keypoint order:"), std::string::npos);
  TrainConfig bad;
  bad.model = "keycld-nc";
  bad.keypoint_relabel_epochs = 2;
  EXPECT_THROW(bad.Validate(), InputError);
  bad.model = "keycld";
  bad.keypoint_relabel_epochs = -1;
  EXPECT_THROW(bad.Validate(), InputError);
  // A preset with the check and another model swapped in (--model, the benchmark's ablation
  // cells) trains that model without it.
  TrainConfig preset;
  preset.keypoint_relabel_epochs = 10;
  preset.UseModel("node2");
  EXPECT_NO_THROW(preset.Validate());
  EXPECT_EQ(preset.keypoint_relabel_epochs, 0);
  preset.keypoint_relabel_epochs = 10;
  preset.UseModel("keycld");
  EXPECT_EQ(preset.keypoint_relabel_epochs, 10);
}

}  // namespace
}  // namespace keycld
