// The nChw16c kernels of the fused U-Net (src/model/blocked_kernels.h), each against the
// LibTorch operator it replaces, on random data, forward and backward: GroupNorm + ReLU, 2×2
// max pooling, nearest ×2 upsampling, the few-channel head convolution, and the layout copies.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/autograd.h>

#include <vector>

#include "model/blocked_kernels.h"

namespace keycld {
namespace {

namespace bk = blocked;

// A plain [N, C, H, W] tensor in a blocked buffer of `parent_c` channels at channel `first`.
struct Blocked {
  at::Tensor buffer;
  bk::View view;
};

Blocked ToBlocked(const at::Tensor& plain, int64_t parent_c = -1, int64_t first = 0) {
  const int64_t n = plain.size(0), c = plain.size(1), h = plain.size(2), w = plain.size(3);
  if (parent_c < 0) parent_c = c;
  at::Tensor buffer = at::zeros({bk::BufferSize(n, parent_c, h, w)});
  bk::View parent = bk::Whole(buffer.data_ptr<float>(), n, parent_c, h, w);
  bk::View view = bk::Channels(parent, first, c);
  at::Tensor contiguous = plain.contiguous();
  bk::FromPlain(contiguous.data_ptr<float>(), view);
  return {buffer, view};
}

at::Tensor ToTorch(const bk::View& v) {
  at::Tensor out = at::empty({v.n, v.c, v.h, v.w});
  bk::ToPlain(v, out.data_ptr<float>());
  return out;
}

double RelativeError(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().max().item<double>() / std::max(1e-30, b.abs().max().item<double>());
}

// Every test runs with the AVX-512 inner loops (where the CPU has them) and with the baseline.
class BlockedKernels : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    if (GetParam() && !bk::UseAvx512(true)) GTEST_SKIP() << "no AVX-512 on this CPU";
    if (!GetParam()) bk::UseAvx512(false);
  }
  void TearDown() override { bk::UseAvx512(true); }
};

TEST_P(BlockedKernels, LayoutRoundTripKeepsValuesAndZeroesPadding) {
  const at::Tensor x = at::randn({2, 20, 3, 5});
  Blocked b = ToBlocked(x, 52, 32);  // channels 32..51 of a 52-channel buffer
  EXPECT_TRUE(at::equal(ToTorch(b.view), x));
  // Channel 20 of the view (lane 4 of its second block) is padding of the parent: zero.
  EXPECT_EQ(b.view.data[b.view.block_stride() + 4], 0.f);
}

TEST_P(BlockedKernels, GroupNormReluMatchesLibTorch) {
  at::manual_seed(1);
  for (int64_t c : {8, 16, 24, 64}) {
    const int64_t n = 3, h = 6, w = 4, groups = 8;
    const at::Tensor x = at::randn({n, c, h, w}) * 2 + 0.5;
    const at::Tensor gamma = at::randn({c}), beta = at::randn({c});
    const at::Tensor dy = at::randn({n, c, h, w});
    at::Tensor xr = x.clone().requires_grad_(true), gr = gamma.clone().requires_grad_(true),
               br = beta.clone().requires_grad_(true);
    at::Tensor yr = at::relu(at::group_norm(xr, groups, gr, br, 1e-5));
    auto g = torch::autograd::grad({(yr * dy).sum()}, {xr, gr, br});

    Blocked xb = ToBlocked(x), yb = ToBlocked(at::zeros_like(x), c + 16, 16);
    std::vector<float> mean(n * groups), rstd(n * groups);
    bk::GroupNormReluForward(xb.view, gamma.data_ptr<float>(), beta.data_ptr<float>(), groups, 1e-5,
                             yb.view, mean.data(), rstd.data());
    EXPECT_LT(RelativeError(ToTorch(yb.view), yr), 1e-5) << c << " channels";
    Blocked dyb = ToBlocked(dy, c + 16, 16), dxb = ToBlocked(at::zeros_like(x));
    at::Tensor dgamma = at::empty({c}), dbeta = at::empty({c});
    bk::GroupNormReluBackward(dyb.view, xb.view, gamma.data_ptr<float>(), beta.data_ptr<float>(),
                              groups, mean.data(), rstd.data(), dxb.view, dgamma.data_ptr<float>(),
                              dbeta.data_ptr<float>());
    EXPECT_LT(RelativeError(ToTorch(dxb.view), g[0]), 1e-5) << c << " channels";
    EXPECT_LT(RelativeError(dgamma, g[1]), 1e-5) << c << " channels";
    EXPECT_LT(RelativeError(dbeta, g[2]), 1e-5) << c << " channels";
  }
}

TEST_P(BlockedKernels, MaxPoolAndUpsampleMatchLibTorch) {
  at::manual_seed(2);
  for (int64_t c : {8, 32}) {
    const at::Tensor x = at::randn({2, c, 8, 6});
    at::Tensor xr = x.clone().requires_grad_(true);
    at::Tensor yr = at::max_pool2d(xr, {2, 2});
    const at::Tensor dy = at::randn_like(yr);
    const at::Tensor skip = at::randn_like(x);  // gradient already in dx (accumulation)
    at::Tensor gr = torch::autograd::grad({(yr * dy).sum()}, {xr})[0] + skip;

    Blocked xb = ToBlocked(x, c + 16, 16), yb = ToBlocked(at::zeros_like(yr));
    bk::MaxPool2Forward(xb.view, yb.view);
    EXPECT_TRUE(at::equal(ToTorch(yb.view), yr.detach()));
    Blocked dyb = ToBlocked(dy), dxb = ToBlocked(skip, c + 16, 16);
    bk::MaxPool2BackwardAccumulate(dyb.view, xb.view, dxb.view);
    EXPECT_LT(RelativeError(ToTorch(dxb.view), gr), 1e-6);

    const at::Tensor s = at::randn({2, c, 4, 3});
    at::Tensor sr = s.clone().requires_grad_(true);
    at::Tensor ur = at::upsample_nearest2d(sr, {8, 6});
    const at::Tensor du = at::randn_like(ur);
    at::Tensor gs = torch::autograd::grad({(ur * du).sum()}, {sr})[0];
    Blocked sb = ToBlocked(s), ub = ToBlocked(at::zeros_like(ur), c + 16, 0);
    bk::Upsample2Forward(sb.view, ub.view);
    EXPECT_TRUE(at::equal(ToTorch(ub.view), ur.detach()));
    Blocked dub = ToBlocked(du, c + 16, 0), dsb = ToBlocked(at::zeros_like(s));
    bk::Upsample2Backward(dub.view, dsb.view);
    EXPECT_LT(RelativeError(ToTorch(dsb.view), gs), 1e-6);
  }
}

TEST_P(BlockedKernels, FewChannelConvolutionMatchesLibTorch) {
  at::manual_seed(3);
  for (int64_t out : {1, 3}) {
    const int64_t c = 24;
    const at::Tensor x = at::randn({2, c, 7, 21});  // 21 columns: a full group of 16 and 5 more
    const at::Tensor w = at::randn({out, c, 3, 3}), b = at::randn({out});
    at::Tensor wr = w.clone().requires_grad_(true), brr = b.clone().requires_grad_(true);
    at::Tensor yr = at::conv2d(x, wr, brr, 1, 1);
    const at::Tensor dy = at::randn_like(yr);
    auto g = torch::autograd::grad({(yr * dy).sum()}, {wr, brr});

    Blocked xb = ToBlocked(x);
    at::Tensor y = at::empty_like(yr);
    bk::ConvToPlainForward(xb.view, w.data_ptr<float>(), b.data_ptr<float>(), out,
                           y.data_ptr<float>());
    EXPECT_LT(RelativeError(y, yr.detach()), 1e-5);
    at::Tensor dw = at::empty_like(w), db = at::empty_like(b);
    at::Tensor dyc = dy.contiguous();
    bk::ConvToPlainBackwardWeights(xb.view, dyc.data_ptr<float>(), out, dw.data_ptr<float>(),
                                   db.data_ptr<float>());
    EXPECT_LT(RelativeError(dw, g[0]), 1e-5);
    EXPECT_LT(RelativeError(db, g[1]), 1e-5);
  }
}

TEST_P(BlockedKernels, BatchSumAndBroadcastAdd) {
  const at::Tensor x = at::randn({4, 20, 3, 3}), one = at::randn({1, 20, 3, 3});
  Blocked xb = ToBlocked(x), ob = ToBlocked(one), sb = ToBlocked(at::zeros_like(one));
  bk::SumOverBatch(xb.view, sb.view);
  EXPECT_LT(RelativeError(ToTorch(sb.view), x.sum(0, true)), 1e-6);
  bk::AddToEverySample(xb.view, ob.view);
  EXPECT_LT(RelativeError(ToTorch(xb.view), x + one), 1e-6);
}

INSTANTIATE_TEST_SUITE_P(Simd, BlockedKernels, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "avx512" : "baseline";
                         });

}  // namespace
}  // namespace keycld
