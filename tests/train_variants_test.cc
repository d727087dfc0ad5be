// The model variants keycld, keycld-nc and node2 (docs/method.md §5, §9): they share estimator,
// renderer and losses and differ only in the dynamics. Checked against independent truths: the
// unconstrained Euler–Lagrange equation with finite-difference ∇V, the constraint equation
// D ẍ + h = 0, a hand-written MLP, finite-difference Jacobians, fine RK4 rollouts and checkpoints
// written in the version-1 layout by hand.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <set>
#include <string>

#include "keycld/data/dataset.h"
#include "keycld/data/generate.h"
#include "keycld/dynamics/constraints.h"
#include "keycld/train/checkpoint.h"
#include "keycld/train/loss.h"
#include "keycld/train/trainer.h"
#include "keycld/train/vpt.h"
#include "keycld/util/error.h"
#include "test_util.h"
#include "tiny_fixtures.h"

namespace keycld {
namespace {

ModelSpec Spec(std::string kind, EnvName env = EnvName::kCartpole) {
  return testing::TinyModelSpec(env, kind);
}

// The variants that share KeyCLD's keypoint estimator and renderer (the baselines have their
// own encoders and decoders: baselines_test.cc).
std::vector<std::string> KeypointVariants() {
  std::vector<std::string> names;
  for (const ModelVariant& v : ModelVariants()) {
    if (v.image_keypoints) names.push_back(v.name);
  }
  return names;
}

// Gives the dynamics parameters non-trivial values (the N(0, 0.01²) initialisation makes the
// forces nearly zero), the same for every model of one kind and seed.
void PerturbDynamics(Model& model, uint64_t seed, double std = 0.5) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(seed);
  for (auto& p : model->DynamicsParameters()) p.normal_(0.0, std);
  if (model->HasEnergy()) {
    model->MassScalars().copy_(torch::linspace(0.7, 1.3, model->MassScalars().numel()));
  }
}

// Cartpole states near the constraint manifold (docs/method.md §4): cart (c, 0), pole tip 0.5 away.
torch::Tensor CartpoleStates(int64_t B, uint64_t seed) {
  torch::manual_seed(seed);
  auto opt = torch::TensorOptions().dtype(torch::kFloat64);
  torch::Tensor c = torch::rand({B}, opt) - 0.5, th = (torch::rand({B}, opt) - 0.5) * 6.0;
  return torch::stack({c, torch::zeros({B}, opt), c + 0.5 * th.sin(), 0.5 * th.cos()}, 1);
}

TEST(Variants, OneSeedGivesTheSameEstimatorAndRendererInEveryVariant) {
  torch::manual_seed(5);
  torch::Tensor images = torch::rand({3, 3, 16, 16});
  torch::Tensor keypoints = torch::rand({3, 2, 2}) - 0.5;
  std::vector<Encoding> enc;
  std::vector<torch::Tensor> rendered;
  for (const std::string& kind : KeypointVariants()) {
    torch::manual_seed(11);
    Model model = CreateModel(Spec(kind));
    model->eval();
    torch::NoGradGuard no_grad;
    enc.push_back(model->Encode(images));
    rendered.push_back(model->Render(keypoints));
  }
  for (size_t i = 1; i < enc.size(); ++i) {
    EXPECT_TRUE(torch::equal(enc[i].keypoints, enc[0].keypoints)) << i;
    EXPECT_TRUE(torch::equal(enc[i].heatmaps, enc[0].heatmaps)) << i;
    EXPECT_TRUE(torch::equal(rendered[i], rendered[0])) << i;
  }
  // Another seed gives another estimator (the comparison above can fail).
  torch::manual_seed(12);
  Model other = CreateModel(Spec("keycld"));
  other->eval();
  torch::NoGradGuard no_grad;
  EXPECT_FALSE(torch::equal(other->Encode(images).keypoints, enc[0].keypoints));
}

TEST(Variants, ParametersSplitIntoPerceptionAndDynamicsWithTheDocumentedShapes) {
  for (const std::string& kind : KeypointVariants()) {
    Model model = CreateModel(Spec(kind));  // cartpole: K = 2, A = 2, h = 8
    std::set<const void*> perception, dynamics, all;
    for (auto& p : model->PerceptionParameters()) perception.insert(p.data_ptr());
    for (auto& p : model->DynamicsParameters()) dynamics.insert(p.data_ptr());
    for (auto& p : model->parameters()) all.insert(p.data_ptr());
    for (const void* p : dynamics) EXPECT_FALSE(perception.count(p)) << kind;
    EXPECT_EQ(perception.size() + dynamics.size(), all.size()) << kind;
    std::set<std::string> dynamics_modules;
    for (auto& item : model->named_parameters()) {
      const std::string top = item.key().substr(0, item.key().find('.'));
      if (top != "estimator" && top != "renderer") dynamics_modules.insert(top);
    }
    if (kind == "node2") {
      EXPECT_EQ(dynamics_modules, (std::set<std::string>{"ode"}));
      // [x, ẋ, u] (4K + A = 10) → 2h → 2h → 2h → 2K (docs/method.md §9), and nothing else.
      auto p = model->named_parameters();
      EXPECT_EQ(p["ode.mlp.linear1.weight"].sizes(), (std::vector<int64_t>{16, 10}));
      EXPECT_EQ(p["ode.mlp.linear2.weight"].sizes(), (std::vector<int64_t>{16, 16}));
      EXPECT_EQ(p["ode.mlp.linear3.weight"].sizes(), (std::vector<int64_t>{16, 16}));
      EXPECT_EQ(p["ode.mlp.linear4.weight"].sizes(), (std::vector<int64_t>{4, 16}));
      EXPECT_EQ(p.find("ode.mlp.linear5.weight"), nullptr);
      EXPECT_FALSE(model->HasEnergy());
    } else {
      EXPECT_EQ(dynamics_modules, (std::set<std::string>{"potential", "input_matrix", "mass"}));
      EXPECT_TRUE(model->HasEnergy());
    }
  }
}

TEST(Variants, NcAccelerationIsTheUnconstrainedEulerLagrangeEquation) {
  Model model = CreateModel(Spec("keycld-nc"));
  PerturbDynamics(model, 3);
  DoublePrecisionDynamics fp64(model);
  torch::NoGradGuard no_grad;
  const int64_t B = 6;
  torch::Tensor x = CartpoleStates(B, 4);
  torch::Tensor xdot = torch::randn({B, 4}, torch::kFloat64);
  torch::Tensor u = torch::randn({B, 2}, torch::kFloat64);
  // ∇V by central differences of V, B(x) u, M = diag(m₁², m₁², m₂², m₂²) from the scalars.
  const double h = 1e-6;
  torch::Tensor grad_v = torch::zeros({B, 4}, torch::kFloat64);
  for (int j = 0; j < 4; ++j) {
    torch::Tensor e = torch::zeros({4}, torch::kFloat64);
    e[j] = h;
    grad_v.select(1, j).copy_((model->Potential(x + e) - model->Potential(x - e)) / (2 * h));
  }
  torch::Tensor m = model->MassScalars();
  torch::Tensor mass = torch::stack({m[0], m[0], m[1], m[1]}).square();
  torch::Tensor bu = torch::einsum("bia,ba->bi", {model->InputMatrix(x), u});
  torch::Tensor expected = (-grad_v + bu) / mass;
  torch::Tensor a = model->Acceleration(x, xdot, u);
  EXPECT_GT(expected.abs().max().item<double>(), 0.1);  // a real force, not zero
  EXPECT_TRUE(torch::allclose(a, expected, 1e-7, 1e-8)) << a << expected;
  // No constraint forces: ẍ does not depend on ẋ, and velocities are not projected.
  EXPECT_TRUE(torch::allclose(model->Acceleration(x, 3.0 * xdot + 1.0, u), a, 1e-12, 1e-12));
  EXPECT_TRUE(torch::equal(model->ProjectVelocity(x, xdot), xdot));
}

TEST(Variants, KeycldAddsOnlyConstraintForcesAndKeepsTheConstraints) {
  // The same seed gives keycld and keycld-nc the same weights (same parameter names).
  Model nc = CreateModel(Spec("keycld-nc")), kc = CreateModel(Spec("keycld"));
  PerturbDynamics(nc, 3);
  PerturbDynamics(kc, 3);
  DoublePrecisionDynamics fp64_nc(nc), fp64_kc(kc);
  torch::NoGradGuard no_grad;
  const int64_t B = 6;
  torch::Tensor x = CartpoleStates(B, 5);
  torch::Tensor xdot = torch::randn({B, 4}, torch::kFloat64);
  torch::Tensor u = torch::randn({B, 2}, torch::kFloat64);
  torch::Tensor a_nc = nc->Acceleration(x, xdot, u), a_kc = kc->Acceleration(x, xdot, u);
  HolonomicConstraints phi = HolonomicConstraints::ForEnvironment(EnvName::kCartpole);
  torch::Tensor D = phi.Jacobian(x), hc = phi.Curvature(x, xdot);  // [B, 2, 4], [B, 2]
  auto residual = [&](const torch::Tensor& a) {
    return (torch::einsum("bci,bi->bc", {D, a}) + hc).abs().max().item<double>();
  };
  EXPECT_LT(residual(a_kc), 1e-7);  // Φ̈ = D ẍ + h = 0 (Tikhonov ε = 1e-10)
  EXPECT_GT(residual(a_nc), 1e-2);  // the unconstrained model does not keep Φ
  // M (ẍ_keycld − ẍ_nc) = −Dᵀ λ lies in the span of the constraint gradients.
  torch::Tensor mass = kc->MassDiagonal();
  torch::Tensor r = (a_kc - a_nc) * mass;  // [B, 4]
  torch::Tensor Dt = D.transpose(1, 2);    // [B, 4, 2]
  torch::Tensor lambda = torch::linalg_solve(D.bmm(Dt), D.bmm(r.unsqueeze(2)));
  torch::Tensor off_span = r - Dt.bmm(lambda).squeeze(2);
  EXPECT_GT(r.abs().max().item<double>(), 1e-2);
  EXPECT_LT(off_span.abs().max().item<double>(), 1e-9 * (1 + r.abs().max().item<double>()));
  // The projection removes the velocity along D.
  torch::Tensor v = kc->ProjectVelocity(x, xdot);
  EXPECT_LT(torch::einsum("bci,bi->bc", {D, v}).abs().max().item<double>(), 1e-8);
}

TEST(Variants, Node2IsAThreeLayerCeluNetworkOfPositionVelocityAndAction) {
  Model model = CreateModel(Spec("node2"));
  const int64_t B = 5;
  torch::Tensor x = CartpoleStates(B, 6).to(torch::kFloat32);
  torch::Tensor xdot = torch::randn({B, 4});
  torch::Tensor u = torch::randn({B, 2});
  // At the initialisation (weights N(0, 0.01²)) the acceleration already depends on ẋ and u.
  {
    torch::Tensor v = xdot.clone().requires_grad_(true), w = u.clone().requires_grad_(true);
    torch::Tensor a = model->Acceleration(x, v, w);
    auto g = torch::autograd::grad({a.sum()}, {v, w});
    EXPECT_GT(g[0].abs().max().item<double>(), 0.0);
    EXPECT_GT(g[1].abs().max().item<double>(), 0.0);
  }
  PerturbDynamics(model, 7, 0.3);
  // The network by hand: three hidden CELU layers, linear output.
  auto p = model->named_parameters();
  auto layer = [&](int i, const torch::Tensor& in) {
    const std::string n = "ode.mlp.linear" + std::to_string(i);
    return in.matmul(p[n + ".weight"].t()) + p[n + ".bias"];
  };
  torch::NoGradGuard no_grad;
  torch::Tensor hid = torch::cat({x, xdot, u}, 1);
  for (int i = 1; i <= 3; ++i) hid = torch::celu(layer(i, hid));
  torch::Tensor expected = layer(4, hid);
  torch::Tensor a = model->Acceleration(x, xdot, u);
  EXPECT_TRUE(torch::allclose(a, expected, 1e-5, 1e-6));
  // A shared action [A] is broadcast; no action is u = 0.
  EXPECT_TRUE(torch::allclose(model->Acceleration(x, xdot, u[0]),
                              model->Acceleration(x, xdot, u[0].expand({B, 2})), 0, 0));
  EXPECT_TRUE(torch::equal(model->Acceleration(x, xdot, {}),
                           model->Acceleration(x, xdot, torch::zeros({B, 2}))));
  EXPECT_THROW(model->Acceleration(x, xdot, torch::zeros({3})), InputError);
  // No constraints: velocities are not projected. No energy: M, V, ∇V, B are refused.
  EXPECT_TRUE(torch::equal(model->ProjectVelocity(x, xdot), xdot));
  EXPECT_THROW(model->MassDiagonal(), InputError);
  EXPECT_THROW(model->Potential(x), InputError);
  EXPECT_THROW(model->PotentialGradient(x), InputError);
  EXPECT_THROW(model->InputMatrix(x), InputError);
}

TEST(Variants, Node2JacobiansByAutogradMatchFiniteDifferences) {
  Model model = CreateModel(Spec("node2"));
  PerturbDynamics(model, 8, 0.3);
  DoublePrecisionDynamics fp64(model);
  const int64_t B = 3;
  torch::Tensor x = CartpoleStates(B, 9);
  torch::Tensor xdot = torch::randn({B, 4}, torch::kFloat64);
  torch::Tensor u = torch::randn({B, 2}, torch::kFloat64);
  for (int which = 0; which < 2; ++which) {  // 0: ∂ẍ/∂ẋ [B, 4, 4], 1: ∂ẍ/∂u [B, 4, 2]
    torch::Tensor in = (which == 0 ? xdot : u).clone().requires_grad_(true);
    torch::Tensor a = which == 0 ? model->Acceleration(x, in, u) : model->Acceleration(x, xdot, in);
    const int64_t n = in.size(1);
    torch::Tensor jac = torch::zeros({B, 4, n}, torch::kFloat64);
    for (int i = 0; i < 4; ++i) {
      jac.select(1, i).copy_(
          torch::autograd::grad({a.select(1, i).sum()}, {in}, {}, /*retain_graph=*/true)[0]);
    }
    torch::NoGradGuard no_grad;
    torch::Tensor fd = torch::zeros_like(jac);
    const double h = 1e-6;
    for (int j = 0; j < n; ++j) {
      torch::Tensor e = torch::zeros({n}, torch::kFloat64);
      e[j] = h;
      torch::Tensor base = in.detach();
      auto acc = [&](const torch::Tensor& v) {
        return which == 0 ? model->Acceleration(x, v, u) : model->Acceleration(x, xdot, v);
      };
      fd.select(2, j).copy_((acc(base + e) - acc(base - e)) / (2 * h));
    }
    EXPECT_GT(jac.abs().min().item<double>(), 1e-8) << which;  // every entry non-zero
    EXPECT_TRUE(torch::allclose(jac, fd, 1e-6, 1e-9)) << which;
  }
}

TEST(Variants, EveryVariantRollsOutInFloat64WithDormandPrince) {
  for (const std::string& kind : ModelVariantNames()) {
    ModelSpec spec = Spec(kind, EnvName::kPendulum);
    spec.image_size = 32;  // HGN's encoder reads 32 × 32
    Model model = CreateModel(spec);
    if (dynamic_cast<OwnPrediction*>(model.get()) != nullptr) {
      // HGN's flow is first order in (q, p): no second-order rollout, said clearly (its
      // Dormand–Prince prediction is tested in model_hgn_test.cc).
      EXPECT_THROW(model->Rollout(
                       torch::zeros({1, 2}, torch::kFloat64), torch::zeros({1, 2}, torch::kFloat64),
                       torch::zeros({1}, torch::kFloat64), {0.0, 0.02}, IntegratorMethod::kDopri5),
                   InputError)
          << kind;
      continue;
    }
    PerturbDynamics(model, 10, 0.3);
    torch::Tensor x0 = torch::tensor({{0.5 * std::sin(1.0), 0.5 * std::cos(1.0)}}, torch::kFloat64);
    torch::Tensor v0 = torch::tensor({{0.4 * std::cos(1.0), -0.4 * std::sin(1.0)}},
                                     torch::kFloat64);  // tangent to the circle
    torch::Tensor u = torch::tensor({0.7}, torch::kFloat64);
    std::vector<double> times;
    for (int t = 0; t <= 10; ++t) times.push_back(0.02 * t);
    {
      DoublePrecisionDynamics fp64(model);
      torch::NoGradGuard no_grad;
      IntegratorOptions tight;
      tight.rtol = tight.atol = 1e-11;
      Trajectory dp = model->Rollout(x0, v0, u, times, IntegratorMethod::kDopri5, tight);
      IntegratorOptions fine;
      fine.substeps = 100;
      Trajectory rk = model->Rollout(x0, v0, u, times, IntegratorMethod::kRk4, fine);
      EXPECT_EQ(dp.x.scalar_type(), torch::kFloat64);
      EXPECT_GT((dp.x[0][10] - x0[0]).abs().max().item<double>(), 1e-3) << kind;
      EXPECT_TRUE(torch::allclose(dp.x, rk.x, 0, 1e-9)) << kind;
      if (kind == "keycld") {  // the point stays on its circle of radius 0.5
        torch::Tensor radius = dp.x[0].norm(2, 1);
        EXPECT_LT((radius - 0.5).abs().max().item<double>(), 1e-8);
      }
    }
    // The dynamics modules are float32 again.
    for (auto& p : model->DynamicsParameters()) EXPECT_EQ(p.scalar_type(), torch::kFloat32);
  }
}

// Writes `model` in the checkpoint layout of version 1 (before model variants), as the
// keycld of that time did: "dynamics" = constrained | unconstrained.
void SaveVersion1(const std::filesystem::path& file, Model& model, const std::string& dynamics) {
  auto text = [](const std::string& s) {
    auto t = torch::empty({int64_t(s.size())}, torch::kUInt8);
    std::memcpy(t.data_ptr(), s.data(), s.size());
    return t;
  };
  const ModelSpec& s = model->spec();
  torch::serialize::OutputArchive root, m;
  root.write("format", text("keycld-checkpoint"));
  root.write("version", torch::tensor(int64_t(1)));
  root.write("env", text(EnvNameString(s.env)));
  root.write("dynamics", text(dynamics));
  root.write("shape", torch::tensor(std::vector<int64_t>{s.num_keypoints, s.action_dim, s.hidden,
                                                         s.image_size}));
  root.write("sigma_dt", torch::tensor({s.sigma, s.dt}, torch::kFloat64));
  model->save(m);
  root.write("model", m);
  root.write("position", torch::tensor(std::vector<int64_t>{7, 1, 2}));
  root.write("order", torch::tensor(std::vector<int64_t>{1, 0}));
  root.write("rng", text("0"));
  root.save_to(file.string());
}

TEST(Variants, Version1CheckpointsAndOldConfigsStillLoad) {
  testing::TempDir dir;
  for (auto [dynamics, kind] :
       {std::pair{"constrained", "keycld"}, std::pair{"unconstrained", "keycld-nc"}}) {
    torch::manual_seed(2);
    Model old = CreateModel(Spec(kind));
    PerturbDynamics(old, 4);
    const auto file = dir / (std::string(dynamics) + ".pt");
    SaveVersion1(file, old, dynamics);
    EXPECT_EQ(ReadCheckpointSpec(file).model, kind);
    Model loaded = LoadModel(file, torch::kCPU);
    EXPECT_EQ(loaded->spec().model, kind);
    auto a = old->named_parameters(), b = loaded->named_parameters();
    ASSERT_EQ(a.size(), b.size());
    for (auto& item : a) EXPECT_TRUE(torch::equal(item.value(), b[item.key()])) << item.key();
    TrainPosition pos;
    LoadCheckpoint(file, loaded, nullptr, &pos);
    EXPECT_EQ(pos.step, 7);
  }
  // The current layout names the variant; an unknown version is refused.
  Model node2 = CreateModel(Spec("node2"));
  SaveCheckpoint(dir / "node2.pt", node2, nullptr, {});
  EXPECT_EQ(ReadCheckpointSpec(dir / "node2.pt").model, "node2");
  EXPECT_EQ(LoadModel(dir / "node2.pt", torch::kCPU)->spec().model, "node2");
  // A node2 checkpoint does not resume into a keycld model.
  Model keycld = CreateModel(Spec("keycld"));
  EXPECT_THROW(LoadCheckpoint(dir / "node2.pt", keycld, nullptr, nullptr), FormatError);
  {
    torch::serialize::OutputArchive future;
    auto text = std::string("keycld-checkpoint");
    auto t = torch::empty({int64_t(text.size())}, torch::kUInt8);
    std::memcpy(t.data_ptr(), text.data(), text.size());
    future.write("format", t);
    future.write("version", torch::tensor(int64_t(3)));
    future.save_to((dir / "v3.pt").string());
  }
  EXPECT_THROW(ReadCheckpointSpec(dir / "v3.pt"), FormatError);

  // Configurations: the old key maps onto the variants; the new one is written.
  TrainConfig c;
  c.MergeToml("[model]\ndynamics = \"unconstrained\"\n", "old.toml");
  EXPECT_EQ(c.model, "keycld-nc");
  EXPECT_NE(c.ToToml().find("model = 'keycld-nc'"), std::string::npos) << c.ToToml();
  EXPECT_EQ(c.ToToml().find("dynamics ="), std::string::npos);
  c.MergeToml("[model]\nmodel = \"node2\"\n", "new.toml");
  EXPECT_EQ(c.model, "node2");
  TrainConfig d;
  d.MergeToml(c.ToToml(), "roundtrip");
  EXPECT_EQ(d.model, "node2");
  EXPECT_THROW(d.MergeToml("[model]\nmodel = \"node3\"\n", "t"), InputError);
  EXPECT_THROW(d.MergeToml("[model]\ndynamics = \"constrained\"\nmodel = \"node2\"\n", "t"),
               InputError);
  EXPECT_EQ(FindModelVariant("keycld-nc").name, "keycld-nc");
  EXPECT_THROW(FindModelVariant("unconstrained").name, InputError);
}

// A tiny pendulum data set: 6 runs (5 train, 1 validation) of 10 frames at 16×16.
std::filesystem::path TinyData(const std::filesystem::path& dir) {
  return testing::TinyPendulumData(dir);
}

class VariantTraining : public ::testing::TestWithParam<std::string> {};

TEST_P(VariantTraining, ATinyRunLowersTheLossAndValidates) {
  testing::TempDir dir;
  const auto data = TinyData(dir.path());
  TrainOptions t;
  t.config.data = data;
  t.config.model = GetParam();
  t.config.hidden = 8;
  t.config.epochs = 2;
  t.config.lr = 3e-3;
  t.config.threads = 2;
  t.config.val_runs = 1;
  t.config.rtol = t.config.atol = 1e-6;
  t.run_dir = dir / "run";
  t.progress = false;
  t.quiet = true;
  Dataset d = Dataset::Open(data);
  torch::Tensor images = ImagesToFloat(
      torch::from_blob(d.ReadImages(0).data(), {10, 16, 16, 3}, torch::kUInt8).clone(),
      torch::kCPU);
  auto loss_of = [&](Model model) {
    torch::NoGradGuard g;
    return SequenceLoss(model, images, torch::zeros({1}), {}, {}).total.item<double>();
  };
  torch::manual_seed(t.config.seed);
  Model initial = CreateModel(Spec(GetParam(), EnvName::kPendulum));
  const double before = loss_of(initial);
  TrainSummary s = Train(t);
  EXPECT_EQ(s.steps, 2 * 5);
  Model trained = LoadModel(s.checkpoint, torch::kCPU);
  EXPECT_EQ(trained->spec().model, GetParam());
  const double after = loss_of(trained);
  EXPECT_LT(after, 0.8 * before) << "before " << before << ", after " << after;
  EXPECT_GE(s.val_vpt_mean, 0.0);  // the validation rollout (Dormand–Prince, float64) ran
  // The dynamics parameters were trained too.
  auto init_dyn = initial->DynamicsParameters(), trained_dyn = trained->DynamicsParameters();
  ASSERT_EQ(init_dyn.size(), trained_dyn.size());
  EXPECT_FALSE(torch::equal(init_dyn[0], trained_dyn[0]));
  // The run folder records the variant.
  EXPECT_EQ(TrainConfig::FromToml(dir / "run/config.toml").model, GetParam());
}

INSTANTIATE_TEST_SUITE_P(Models, VariantTraining, ::testing::Values("keycld-nc", "node2"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n)
                             if (c == '-') c = '_';
                           return n;
                         });

TEST(Variants, TrainCommandTakesTheModel) {
  testing::TempDir dir;
  const auto data = TinyData(dir.path());
  std::string out;
  ASSERT_EQ(testing::RunCli("train --data " + data.string() + " --out " + (dir / "run").string() +
                                " --hidden 8 --steps 2 --threads 1 --model node2",
                            &out),
            0)
      << out;
  EXPECT_NE(out.find("node2 (black-box second-order ODE)"), std::string::npos) << out;
  EXPECT_EQ(ReadCheckpointSpec(dir / "run/checkpoints/last.pt").model, "node2");
  EXPECT_EQ(testing::RunCli("train --data " + data.string() + " --out " + (dir / "other").string() +
                                " --model node3",
                            &out),
            2)
      << out;
  EXPECT_EQ(
      testing::RunCli("train --out " + (dir / "run").string() + " --resume --model keycld", &out),
      1)
      << out;
}

}  // namespace
}  // namespace keycld

namespace keycld {
namespace {

// --precision bf16: the convolutions run under bf16 autocast, everything the model returns is
// float32 and close to the float32 model's; the autocast ends with the call; a training step
// gets finite gradients. On a CPU without native bf16 the setting is refused.
TEST(TrainPrecision, Bf16ConvolutionsAgreeWithFloat32OrAreRefused) {
  EXPECT_EQ(ParsePrecision("fp32"), Precision::kFloat32);
  EXPECT_EQ(ParsePrecision("bf16"), Precision::kBfloat16);
  EXPECT_THROW(ParsePrecision("fp16"), InputError);
  EXPECT_EQ(PrecisionName(ParsePrecision("bf16")), "bf16");
  const ModelSpec spec = testing::TinyModelSpec(EnvName::kCartpole);
  torch::manual_seed(5);
  Model model = CreateModel(spec);
  torch::manual_seed(6);
  const torch::Tensor images = torch::rand({12, 3, spec.image_size, spec.image_size});
  torch::Tensor ref_keypoints, ref_images;
  {
    torch::NoGradGuard no_grad;
    ref_keypoints = model->Encode(images).keypoints;
    ref_images = model->Render(ref_keypoints);
  }
  if (!HasNativeBf16(torch::kCPU)) {
    EXPECT_THROW(model->SetPrecision(Precision::kBfloat16), InputError);
    GTEST_SKIP() << "this CPU has no native bf16 (avx512_bf16 / amx_bf16)";
  }
  model->SetPrecision(Precision::kBfloat16);
  EXPECT_EQ(model->precision(), Precision::kBfloat16);
  {
    torch::NoGradGuard no_grad;
    Encoding e = model->Encode(images);
    torch::Tensor rendered = model->Render(ref_keypoints);
    EXPECT_EQ(e.keypoints.scalar_type(), torch::kFloat32);
    EXPECT_EQ(e.heatmaps.scalar_type(), torch::kFloat32);
    EXPECT_EQ(rendered.scalar_type(), torch::kFloat32);
    const double dk = (e.keypoints - ref_keypoints).abs().max().item<double>();
    const double di = (rendered - ref_images).abs().max().item<double>();
    EXPECT_GT(dk, 0.0) << "bf16 gave exactly the float32 keypoints: autocast did not apply";
    EXPECT_LT(dk, 0.02) << "keypoints (normalized units)";
    EXPECT_GT(di, 0.0);
    EXPECT_LT(di, 0.02) << "rendered pixels in [0, 1]";
    // The autocast ended with the call: back in float32 the estimates are the reference again.
    model->SetPrecision(Precision::kFloat32);
    EXPECT_TRUE(torch::equal(model->Encode(images).keypoints, ref_keypoints));
    model->SetPrecision(Precision::kBfloat16);
  }
  LossTerms loss = SequenceLoss(model, images, torch::zeros({spec.action_dim}), {}, {});
  loss.total.backward();
  for (const torch::Tensor& p : model->PerceptionParameters()) {
    ASSERT_TRUE(p.grad().defined()) << "an estimator or renderer parameter got no gradient";
  }
  // Every gradient float32 and finite (V's last bias has none: only ∇V enters the dynamics).
  for (const auto& p : model->named_parameters()) {
    if (!p.value().grad().defined()) continue;
    EXPECT_EQ(p.value().grad().scalar_type(), torch::kFloat32) << p.key();
    EXPECT_TRUE(torch::isfinite(p.value().grad()).all().item<bool>()) << p.key();
  }
}

}  // namespace
}  // namespace keycld
