// The HGN baseline's parts (models/hgn_model.h) against independent truths: the published
// shapes, the Hamiltonian vector field against finite differences of H, the conservation of H
// along its own Dormand–Prince flow, the windowed objective written out by hand, and the three
// training integrators converging to the same flow.
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "keycld/models/hgn_model.h"
#include "keycld/models/registry.h"
#include "keycld/util/error.h"
#include "tiny_fixtures.h"

namespace keycld {
namespace {

// dt: the frame interval; the flow of a freshly initialised H is slow, so the integrator tests
// take long intervals to make its differences visible.
ModelSpec HgnSpec(int size = 32, int width = 16, double dt = 0.02) {
  ModelSpec s = testing::TinyModelSpec(EnvName::kPendulum, "hgn");
  s.image_size = size;
  s.hidden = width;
  s.dt = dt;
  return s;
}

HgnModelImpl& Hgn(Model& m) {
  auto* h = dynamic_cast<HgnModelImpl*>(m.get());
  if (h == nullptr) throw std::logic_error("not an HGN");
  return *h;
}

TEST(Hgn, PublishedShapesAndStates) {
  torch::manual_seed(0);
  Model model = CreateModel(HgnSpec());
  auto p = model->named_parameters();
  // Eight valid 3×3 convolutions from the 5 stacked RGB frames to mean and log variance.
  EXPECT_EQ(p["encoder.0.weight"].sizes(), (std::vector<int64_t>{8, 15, 3, 3}));
  EXPECT_EQ(p["encoder.14.weight"].sizes(), (std::vector<int64_t>{48, 16, 3, 3}));
  EXPECT_EQ(p["transformer.0.weight"].sizes(), (std::vector<int64_t>{16, 24, 5, 5}));
  EXPECT_EQ(p["transformer.4.weight"].sizes(), (std::vector<int64_t>{32, 16, 5, 5}));
  EXPECT_EQ(p["hamiltonian.0.weight"].sizes(), (std::vector<int64_t>{16, 32, 3, 3}));
  EXPECT_EQ(p["decoder_in.weight"].sizes(), (std::vector<int64_t>{16, 16, 1, 1}));
  EXPECT_EQ(p["decoder_out.weight"].sizes(), (std::vector<int64_t>{3, 16, 1, 1}));
  EXPECT_EQ(model->PerceptionParameters().size() + model->DynamicsParameters().size(),
            model->parameters().size());
  EXPECT_FALSE(model->HasEnergy());
  EXPECT_FALSE(model->StatesAreImageKeypoints());
  EXPECT_EQ(model->StatePoints(), 128);
  EXPECT_EQ(model->EncoderFrames(), 5);
  HgnModelImpl& hgn = Hgn(model);
  torch::NoGradGuard no_grad;
  torch::Tensor images = torch::rand({7, 3, 32, 32});
  HgnModelImpl::Posterior post = hgn.Infer(HgnModelImpl::Stacks(images));
  EXPECT_EQ(post.mean.sizes(), (std::vector<int64_t>{7, 24, 16, 16}));
  EXPECT_EQ(hgn.Transform(post.mean).sizes(), (std::vector<int64_t>{7, 32, 4, 4}));
  // Frame t's stack is t … t+4, the indices past the end repeating the last frame.
  torch::Tensor stacks = HgnModelImpl::Stacks(images);
  EXPECT_TRUE(torch::equal(stacks[2][4], images[6]));
  EXPECT_TRUE(torch::equal(stacks[5][1], images[6]));
  EXPECT_TRUE(torch::equal(stacks[6][0], images[6]));
  Encoding e = model->Encode(images);
  EXPECT_EQ(e.keypoints.sizes(), (std::vector<int64_t>{7, 128, 2}));
  EXPECT_FALSE(e.heatmaps.defined());
  // The states are q: the first 16 channels of the transformed posterior mean.
  EXPECT_TRUE(torch::allclose(e.keypoints.reshape({7, 16, 4, 4}),
                              hgn.Transform(post.mean).slice(1, 0, 16)));
  torch::Tensor r = model->Render(e.keypoints);
  EXPECT_EQ(r.sizes(), (std::vector<int64_t>{7, 3, 32, 32}));
  EXPECT_GT(r.min().item<double>(), 0.0);
  EXPECT_LT(r.max().item<double>(), 1.0);
  // 64-px frames: pooled to 32 for the encoder, one more decoder stage.
  Model big = CreateModel(HgnSpec(64));
  EXPECT_EQ(big->Render(big->Encode(torch::rand({2, 3, 64, 64})).keypoints).sizes(),
            (std::vector<int64_t>{2, 3, 64, 64}));
  // Refused: sizes the encoder cannot read, a second-order acceleration, bad shapes.
  EXPECT_THROW(CreateModel(HgnSpec(48)), InputError);
  EXPECT_THROW(CreateModel(HgnSpec(16)), InputError);
  EXPECT_THROW(model->Acceleration(torch::zeros({1, 2}), torch::zeros({1, 2}), {}), InputError);
  EXPECT_THROW(model->Render(torch::zeros({2, 1, 2})), InputError);
  EXPECT_THROW(model->Encode(torch::zeros({2, 3, 16, 16})), InputError);
  EXPECT_FALSE(ModelSupportsControl("hgn", ControlMode::kFull));
  EXPECT_TRUE(ModelSupportsControl("hgn", ControlMode::kNone));
  EXPECT_TRUE(ModelSupportsSystem("hgn", EnvName::kAcrobot));
}

// The adaptation to scenes with a background: the encoder reads frames minus the mean frame, and
// the decoder draws the mean frame where its network adds nothing.
TEST(Hgn, TheMeanFrameIsSubtractedFromTheInputAndStartsTheBackground) {
  torch::manual_seed(6);
  Model plain = CreateModel(HgnSpec(32, 8));
  torch::manual_seed(6);
  Model adapted = CreateModel(HgnSpec(32, 8));
  const torch::Tensor mean = 0.2 + 0.6 * torch::rand({3, 32, 32});
  Hgn(adapted).InitialiseFromData(mean);
  EXPECT_THROW(Hgn(adapted).InitialiseFromData(torch::rand({3, 16, 16})), InputError);
  torch::NoGradGuard no_grad;
  const torch::Tensor stacks = torch::rand({2, 5, 3, 32, 32});
  EXPECT_TRUE(torch::allclose(Hgn(adapted).Infer(stacks).mean,
                              Hgn(plain).Infer(stacks - mean.view({1, 1, 3, 32, 32})).mean, 1e-5,
                              1e-5));
  auto params = adapted->named_parameters();
  params["decoder_out.weight"].zero_();
  params["decoder_out.bias"].zero_();
  EXPECT_TRUE(torch::allclose(Hgn(adapted).Decode(torch::randn({2, 16, 4, 4})),
                              mean.unsqueeze(0).expand({2, 3, 32, 32}), 1e-5, 1e-5));
  // The mean frame travels with the checkpoint (a buffer), the background is trained.
  EXPECT_TRUE(adapted->named_buffers().contains("input_mean"));
  EXPECT_TRUE(params.contains("background"));
}

// ṡ = (∂H/∂p, −∂H/∂q) against central differences of H, in float64.
TEST(Hgn, VectorFieldIsTheSymplecticGradientOfH) {
  torch::manual_seed(1);
  Model model = CreateModel(HgnSpec(32, 8));
  model->to(torch::kFloat64);
  HgnModelImpl& hgn = Hgn(model);
  torch::Tensor s = torch::randn({2, 32, 4, 4}, torch::kFloat64);
  torch::Tensor f = hgn.VectorField(s);
  ASSERT_EQ(f.sizes(), s.sizes());
  torch::NoGradGuard no_grad;
  const double h = 1e-6;
  torch::Tensor flat = s.reshape({2, 512});
  for (int64_t i : {0, 17, 100, 255, 256, 300, 511}) {
    torch::Tensor e = torch::zeros({1, 512}, torch::kFloat64);
    e[0][i] = h;
    torch::Tensor dH = (hgn.Hamiltonian((flat + e).reshape({2, 32, 4, 4})) -
                        hgn.Hamiltonian((flat - e).reshape({2, 32, 4, 4}))) /
                       (2 * h);  // ∂H/∂s_i [2]
    // s_i in q (i < 256) drives ṗ_i = −∂H/∂q_i; in p, q̇_i = ∂H/∂p_i.
    const int64_t out = i < 256 ? i + 256 : i - 256;
    const double sign = i < 256 ? -1.0 : 1.0;
    for (int b = 0; b < 2; ++b) {
      const double want = sign * dH[b].item<double>();
      EXPECT_NEAR(f.reshape({2, 512})[b][out].item<double>(), want, 1e-6 * (1 + std::abs(want)))
          << "entry " << i;
    }
  }
}

// H is constant along its own flow: Dormand–Prince at tight tolerances keeps it to 1e-7, and
// frame 0 of a prediction is the encoder's state of the first stack.
TEST(Hgn, PredictionConservesTheHamiltonianAndStartsFromTheFirstStack) {
  torch::manual_seed(2);
  Model model = CreateModel(HgnSpec(32, 8, 0.5));
  HgnModelImpl& hgn = Hgn(model);
  torch::Tensor frames = torch::rand({3, 5, 3, 32, 32});
  torch::NoGradGuard no_grad;
  // The dynamics modules in float64, as PredictKeypoints runs them.
  for (auto& m : model->DynamicsModules()) m->to(torch::kFloat64);
  IntegratorOptions io;
  io.rtol = io.atol = 1e-10;
  StatePrediction p = hgn.PredictFromFrames(frames, torch::zeros({3, 1}, torch::kFloat64), 20,
                                            IntegratorMethod::kDopri5, io);
  ASSERT_EQ(p.states.sizes(), (std::vector<int64_t>{3, 20, 128, 2}));
  EXPECT_GT(p.accepted_steps, 0);
  torch::Tensor q0 = hgn.Transform(hgn.Infer(frames).mean).slice(1, 0, 16);
  EXPECT_TRUE(torch::allclose(p.states.select(1, 0).reshape({3, 16, 4, 4}).to(torch::kFloat32), q0,
                              1e-6, 1e-6));
  // The full state along the flow: integrate again and read H from (q, p) by the same route.
  torch::Tensor s0 = hgn.Transform(hgn.Infer(frames).mean).to(torch::kFloat64).reshape({3, 512});
  AccelerationFn flow = [&](const torch::Tensor&, const torch::Tensor& v) {
    return hgn.VectorField(v.reshape({3, 32, 4, 4})).reshape({3, 512});
  };
  std::vector<double> times;
  for (int t = 0; t < 20; ++t) times.push_back(0.5 * t);
  Trajectory traj = Rollout(flow, torch::zeros_like(s0), s0, times, IntegratorMethod::kDopri5, io);
  torch::Tensor H = hgn.Hamiltonian(traj.xdot.reshape({60, 32, 4, 4})).reshape({3, 20});
  torch::Tensor drift = (H - H.select(1, 0).unsqueeze(1)).abs().max();
  EXPECT_LT(drift.item<double>(), 1e-7 * (1 + H.abs().max().item<double>()));
  // The states move (a frozen flow would pass the conservation check trivially).
  EXPECT_GT((traj.xdot.select(1, 19) - traj.xdot.select(1, 0)).abs().max().item<double>(), 1e-4);
  EXPECT_TRUE(torch::allclose(traj.xdot.slice(2, 0, 256).reshape({3, 20, 128, 2}), p.states));
}

TEST(Hgn, TheWindowedObjectiveIsTheOneWrittenOutByHand) {
  torch::manual_seed(3);
  Model model = CreateModel(HgnSpec(32, 8));
  HgnModelImpl& hgn = Hgn(model);
  torch::NoGradGuard no_grad;
  const int64_t N = 17, P = 4, L = P + 1;
  torch::Tensor images = torch::rand({N, 3, 32, 32});
  LossOptions lo;
  lo.horizon = int(P);
  lo.noise_seed = 11;
  lo.w_kl = 0.3;
  lo.w_rec = 1.0;
  LossTerms got = hgn.SequenceLoss(images, torch::zeros({1}), lo);
  // By hand: the same draws (the offset, then the latent noise), Euler on s.
  auto gen = at::make_generator<at::CPUGeneratorImpl>(11);
  const int64_t offset = torch::randint(P + 1, {1}, gen, torch::kInt64).item<int64_t>();
  const int64_t W = (N - offset) / L;
  double sse = 0, kl_sum = 0;
  int64_t kl_count = 0;
  std::vector<torch::Tensor> means, logvars;
  for (int64_t w = 0; w < W; ++w) {
    auto post = hgn.Infer(images.slice(0, offset + w * L, offset + w * L + 5).unsqueeze(0));
    means.push_back(post.mean);
    logvars.push_back(post.log_variance);
  }
  torch::Tensor mean = torch::cat(means), logvar = torch::cat(logvars);
  torch::Tensor eps = torch::randn(mean.sizes(), gen, torch::kFloat32);
  torch::Tensor s = hgn.Transform(mean + torch::exp(0.5 * logvar) * eps);
  for (int64_t j = 0; j <= P; ++j) {
    for (int64_t w = 0; w < W; ++w) {
      torch::Tensor frame = images[offset + w * L + j];
      sse += (hgn.Decode(s.slice(0, w, w + 1).slice(1, 0, 16))[0] - frame)
                 .square()
                 .sum()
                 .item<double>();
    }
    s = s + model->spec().dt * hgn.VectorField(s);
  }
  kl_sum = (0.5 * (mean.square() + logvar.exp() - 1 - logvar)).sum().item<double>();
  kl_count = mean.numel();
  const double rec = sse / double(W), kl = kl_sum / double(kl_count);
  EXPECT_NEAR(got.reconstruction.item<double>(), rec, 1e-4 * rec);
  EXPECT_NEAR(got.kl.item<double>(), kl, 1e-5 * (1 + kl));
  EXPECT_NEAR(got.total.item<double>(), rec + 0.3 * kl, 1e-4 * (1 + rec));
  // Refused: a horizon shorter than the encoder's stack, too short a sequence, dopri5.
  LossOptions bad = lo;
  bad.horizon = 3;
  EXPECT_THROW(hgn.SequenceLoss(images, {}, bad), InputError);
  EXPECT_THROW(hgn.SequenceLoss(images.slice(0, 0, 4), {}, lo), InputError);
  bad = lo;
  bad.integrator = IntegratorMethod::kDopri5;
  EXPECT_THROW(hgn.SequenceLoss(images, {}, bad), InputError);
}

// Euler, RK4 and leapfrog with many substeps all approach the same exact flow, each at its
// order: Euler's error falls as 1/substeps; RK4's is far below both at one step per frame; the
// published leapfrog (Toth et al.) is second order only for a separable H(q, p) = T(p) + V(q),
// and for HGN's general H(q, p) its explicit half steps make it first order, which the test
// pins (16 substeps: 1/16 of the error).
TEST(Hgn, TheTrainingIntegratorsConvergeToTheSameFlow) {
  torch::manual_seed(4);
  Model model = CreateModel(HgnSpec(32, 8, 0.5));
  model->to(torch::kFloat64);
  HgnModelImpl& hgn = Hgn(model);
  torch::NoGradGuard no_grad;
  // A freshly initialised H is nearly flat; a steeper one (its read-out scaled) moves the
  // states far enough within a frame for the integrators to disagree.
  model->named_parameters()["hamiltonian.13.weight"].mul_(3000.0);
  torch::Tensor images = torch::rand({5, 3, 32, 32}, torch::kFloat64);
  auto rec = [&](IntegratorMethod m, int substeps) {
    LossOptions lo;
    lo.integrator = m;
    lo.substeps = substeps;
    lo.noise_seed = 5;
    return hgn.SequenceLoss(images, {}, lo).reconstruction.item<double>();
  };
  const double exact = rec(IntegratorMethod::kRk4, 8);
  const double euler = std::abs(rec(IntegratorMethod::kEuler, 1) - exact);
  const double leapfrog = std::abs(rec(IntegratorMethod::kVerlet, 1) - exact);
  // One step per frame: visibly different losses (float64 round-off is near 1e-13 · exact).
  ASSERT_GT(euler, 1e-8 * exact);
  ASSERT_GT(leapfrog, 1e-8 * exact);
  EXPECT_LT(std::abs(rec(IntegratorMethod::kRk4, 1) - exact), 1e-2 * std::min(euler, leapfrog));
  const double euler_fine = std::abs(rec(IntegratorMethod::kEuler, 64) - exact);
  EXPECT_NEAR(euler_fine / euler, 1.0 / 64, 0.3 / 64);
  const double leapfrog_fine = std::abs(rec(IntegratorMethod::kVerlet, 16) - exact);
  EXPECT_NEAR(leapfrog_fine / leapfrog, 1.0 / 16, 0.3 / 16);
}

}  // namespace
}  // namespace keycld
