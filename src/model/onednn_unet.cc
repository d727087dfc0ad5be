// The fused U-Net on oneDNN (onednn_unet.h). Layout of one trunk + head (h = hidden width):
//   conv1: input (plain NCHW, few channels) → x1 [N, h, H]        oneDNN, direct (plain source)
//          (renderer: + conv of the seed, batch 1, broadcast)       oneDNN, direct or Winograd
//   a1 = GNReLU(x1)        written into cat5[2h, 3h)               blocked_kernels
//   p1 = pool(a1);  x2 = conv2(p1);  a2 = GNReLU(x2) → cat4[4h, 6h)
//   p2 = pool(a2);  x3 = conv3(p2);  a3 = GNReLU(x3);  up(a3) → cat4[0, 4h)
//   x4 = conv4(cat4);  a4 = GNReLU(x4);  up(a4) → cat5[0, 2h)
//   x5 = conv5(cat5);  a5 = GNReLU(x5);  out = head(a5) (plain NCHW, few channels)  own kernel
// Every activation is nChw16c (blocked_kernels.h). The backward pass walks the same graph in
// reverse; the skip connections' gradients are the channel ranges of the concatenation
// buffers' gradients, to which the pooling gradients are added in place.
#include "keycld/model/onednn_unet.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>

#include "blocked_kernels.h"
#include "keycld/model/autocast.h"
#include "keycld/util/error.h"

// KEYCLD_WITH_ONEDNN: set by CMake when it found oneDNN's headers and library (libdnnl-dev).
#if defined(KEYCLD_WITH_ONEDNN)
#include <oneapi/dnnl/dnnl.hpp>
#if DNNL_VERSION_MAJOR == 2
#define KEYCLD_HAVE_ONEDNN 1
#endif
#endif

namespace keycld {

#ifndef KEYCLD_HAVE_ONEDNN

bool OneDnnUNetBuilt() { return false; }
void SetUNetProfiling(bool) {}
std::vector<UNetProfileEntry> UNetProfile() { return {}; }
bool UseOneDnnUNet(TrunkKernels, const torch::Tensor&) { return false; }
torch::Tensor OneDnnUNetForward(UNetTrunkImpl&, torch::nn::Conv2dImpl&, const torch::Tensor&,
                                const torch::Tensor&, bool) {
  throw std::runtime_error(
      "this keycld was built without oneDNN (libdnnl-dev): use --kernels libtorch");
}

#else

namespace {

using dnnl::memory;
using Tag = memory::format_tag;
namespace bk = blocked;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

dnnl::engine& Engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// The optional profile (SetUNetProfiling): wall time per part, summed over calls.
std::atomic<bool> profiling{false};
std::mutex profile_mutex;
std::map<std::string, std::pair<double, int64_t>> profile;

class ScopedPart {
 public:
  explicit ScopedPart(const char* part) : part_(profiling.load() ? part : nullptr) {
    if (part_) start_ = std::chrono::steady_clock::now();
  }
  ~ScopedPart() {
    if (!part_) return;
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    std::lock_guard<std::mutex> lock(profile_mutex);
    auto& entry = profile[part_];
    entry.first += s;
    entry.second += 1;
  }
  ScopedPart(const ScopedPart&) = delete;
  ScopedPart& operator=(const ScopedPart&) = delete;

 private:
  const char* part_;
  std::chrono::steady_clock::time_point start_;
};

template <class F>
void Timed(const char* part, F&& f) {
  ScopedPart scoped(part);
  f();
}

// A float32 buffer for `floats` values (the caching allocator keeps them across steps).
torch::Tensor Buffer(int64_t floats, bool zero) {
  auto options = torch::TensorOptions().dtype(torch::kFloat32);
  return zero ? torch::zeros({floats}, options) : torch::empty({floats}, options);
}

torch::Tensor BlockedBuffer(int64_t n, int64_t c, int64_t h, int64_t w) {
  // Zeroed when the channels are padded: oneDNN reads the padding lanes.
  return Buffer(bk::BufferSize(n, c, h, w), c % bk::kLanes != 0);
}

bk::View ViewOf(const torch::Tensor& buffer, int64_t n, int64_t c, int64_t h, int64_t w) {
  return bk::Whole(buffer.data_ptr<float>(), n, c, h, w);
}

// One 3×3, stride-1, padding-1 convolution's primitives for one shape.
struct ConvPrimitives {
  dnnl::convolution_forward::primitive_desc fwd_pd;
  dnnl::convolution_forward fwd;
  dnnl::convolution_backward_data::primitive_desc bwd_data_pd;
  dnnl::convolution_backward_data bwd_data;
  dnnl::convolution_backward_weights::primitive_desc bwd_weights_pd;
  dnnl::convolution_backward_weights bwd_weights;
  bool has_bwd_data = false;
};

struct ConvKey {
  int64_t n, ic, oc, h, w;
  bool plain_src, bias, winograd;
  auto tie() const { return std::tie(n, ic, oc, h, w, plain_src, bias, winograd); }
  bool operator<(const ConvKey& o) const { return tie() < o.tie(); }
};

ConvPrimitives MakeConv(const ConvKey& k, dnnl::algorithm alg) {
  const memory::dims src{k.n, k.ic, k.h, k.w}, wei{k.oc, k.ic, 3, 3}, dst{k.n, k.oc, k.h, k.w},
      bias{k.oc}, strides{1, 1}, pad{1, 1};
  const auto f32 = memory::data_type::f32;
  const memory::desc src_md(src, f32, k.plain_src ? Tag::nchw : Tag::nChw16c);
  const memory::desc wei_md(wei, f32, Tag::any);
  const memory::desc dst_md(dst, f32, Tag::nChw16c);
  const memory::desc bias_md = k.bias ? memory::desc(bias, f32, Tag::x) : memory::desc();
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  ConvPrimitives p;
  auto fd = k.bias ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, alg, src_md,
                                                     wei_md, bias_md, dst_md, strides, pad, pad)
                   : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, alg, src_md,
                                                     wei_md, dst_md, strides, pad, pad);
  p.fwd_pd = dnnl::convolution_forward::primitive_desc(fd, attr, Engine());
  p.fwd = dnnl::convolution_forward(p.fwd_pd);
  if (!k.plain_src) {  // a plain source is the network's input: its gradient is our own kernel
    auto bd = dnnl::convolution_backward_data::desc(alg, src_md, wei_md, dst_md, strides, pad, pad);
    p.bwd_data_pd = dnnl::convolution_backward_data::primitive_desc(bd, attr, Engine(), p.fwd_pd);
    p.bwd_data = dnnl::convolution_backward_data(p.bwd_data_pd);
    p.has_bwd_data = true;
  }
  auto wd = k.bias ? dnnl::convolution_backward_weights::desc(alg, src_md, wei_md, bias_md, dst_md,
                                                              strides, pad, pad)
                   : dnnl::convolution_backward_weights::desc(alg, src_md, wei_md, dst_md, strides,
                                                              pad, pad);
  p.bwd_weights_pd =
      dnnl::convolution_backward_weights::primitive_desc(wd, attr, Engine(), p.fwd_pd);
  p.bwd_weights = dnnl::convolution_backward_weights(p.bwd_weights_pd);
  return p;
}

int64_t Round16(int64_t c) { return (c + bk::kLanes - 1) / bk::kLanes * bk::kLanes; }

// The key with the blocked sides' channel counts rounded up to whole 16-channel blocks: oneDNN's
// optimised kernels want them (with 15 channels it fell back to its reference code, 100 times
// slower); the padding lanes of the activations are zero, and so are the weights added for them.
ConvKey Padded(ConvKey k) {
  if (!k.plain_src) k.ic = Round16(k.ic);
  k.oc = Round16(k.oc);
  return k;
}

// w [O, I, 3, 3] zero-padded to the padded key's channel counts (w itself when it fits).
torch::Tensor PadWeights(const torch::Tensor& w, const ConvKey& padded) {
  if (w.size(0) == padded.oc && w.size(1) == padded.ic) return w;
  torch::Tensor out = torch::zeros({padded.oc, padded.ic, 3, 3});
  out.narrow(0, 0, w.size(0)).narrow(1, 0, w.size(1)).copy_(w);
  return out;
}

torch::Tensor PadBias(const torch::Tensor& b, const ConvKey& padded) {
  if (!b.defined() || b.size(0) == padded.oc) return b;
  torch::Tensor out = torch::zeros({padded.oc});
  out.narrow(0, 0, b.size(0)).copy_(b);
  return out;
}

// Primitives are created once per shape (creation costs milliseconds) and kept; Winograd falls
// back to direct where oneDNN has no Winograd implementation for the shape.
const ConvPrimitives& Conv(const ConvKey& key) {
  static std::mutex mutex;
  static std::map<ConvKey, ConvPrimitives> cache;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  if (cache.size() > 256) cache.clear();  // many batch sizes: start over rather than grow
  ConvPrimitives p;
  bool made = false;
  if (key.winograd && !key.plain_src) {
    try {
      p = MakeConv(key, dnnl::algorithm::convolution_winograd);
      made = true;
    } catch (const dnnl::error&) {
    }
  }
  if (!made) p = MakeConv(key, dnnl::algorithm::convolution_direct);
  return cache.emplace(key, std::move(p)).first->second;
}

memory Wrap(const memory::desc& md, void* data) { return memory(md, Engine(), data); }

torch::Tensor Scratchpad(const memory::desc& md) {
  return torch::empty({int64_t(md.get_size()) + 64}, torch::TensorOptions().dtype(torch::kUInt8));
}

// Weights [O, I, 3, 3] (contiguous float) in the format `md` asks for: the tensor itself when
// that is plain, else a reordered copy (kept alive by `holder`).
memory WeightsFor(const memory::desc& md, const torch::Tensor& weight, dnnl::stream& s,
                  torch::Tensor& holder) {
  const memory::dims dims(weight.sizes().begin(), weight.sizes().end());
  const memory::desc plain(dims, memory::data_type::f32, Tag::oihw);
  memory user = Wrap(plain, weight.data_ptr<float>());
  if (md == plain) return user;
  holder = torch::empty({int64_t(md.get_size()) + 64}, torch::TensorOptions().dtype(torch::kUInt8));
  memory out = Wrap(md, holder.data_ptr());
  dnnl::reorder(user, out).execute(s, user, out);
  return out;
}

// y = conv(x) + b. x: blocked (or plain NCHW when key.plain_src), y: blocked.
void ConvForward(const ConvKey& real, void* x, const torch::Tensor& real_weight,
                 const torch::Tensor& real_bias, float* y) {
  ScopedPart part("convolutions (oneDNN), forward");
  const ConvKey key = Padded(real);
  const torch::Tensor weight = PadWeights(real_weight, key), bias = PadBias(real_bias, key);
  const ConvPrimitives& p = Conv(key);
  dnnl::stream s(Engine());
  torch::Tensor holder, pad = Scratchpad(p.fwd_pd.scratchpad_desc());
  memory w = WeightsFor(p.fwd_pd.weights_desc(), weight, s, holder);
  std::unordered_map<int, memory> args{
      {DNNL_ARG_SRC, Wrap(p.fwd_pd.src_desc(), x)},
      {DNNL_ARG_WEIGHTS, w},
      {DNNL_ARG_DST, Wrap(p.fwd_pd.dst_desc(), y)},
      {DNNL_ARG_SCRATCHPAD, Wrap(p.fwd_pd.scratchpad_desc(), pad.data_ptr())}};
  if (key.bias) args.emplace(DNNL_ARG_BIAS, Wrap(p.fwd_pd.bias_desc(), bias.data_ptr<float>()));
  p.fwd.execute(s, args);
  s.wait();
}

// dx = conv's input gradient for dy (both blocked).
void ConvBackwardData(const ConvKey& real, const float* dy, const torch::Tensor& real_weight,
                      float* dx) {
  ScopedPart part("convolutions (oneDNN), input gradient");
  const ConvKey key = Padded(real);
  const torch::Tensor weight = PadWeights(real_weight, key);
  const ConvPrimitives& p = Conv(key);
  dnnl::stream s(Engine());
  torch::Tensor holder, pad = Scratchpad(p.bwd_data_pd.scratchpad_desc());
  memory w = WeightsFor(p.bwd_data_pd.weights_desc(), weight, s, holder);
  p.bwd_data.execute(
      s, {{DNNL_ARG_DIFF_DST, Wrap(p.bwd_data_pd.diff_dst_desc(), const_cast<float*>(dy))},
          {DNNL_ARG_WEIGHTS, w},
          {DNNL_ARG_DIFF_SRC, Wrap(p.bwd_data_pd.diff_src_desc(), dx)},
          {DNNL_ARG_SCRATCHPAD, Wrap(p.bwd_data_pd.scratchpad_desc(), pad.data_ptr())}});
  s.wait();
}

// dw [O, I, 3, 3] (plain, new tensor) and db [O] (when key.bias) from x and dy.
std::pair<torch::Tensor, torch::Tensor> ConvBackwardWeights(const ConvKey& real, const void* x,
                                                            const float* dy) {
  ScopedPart part("convolutions (oneDNN), weight gradient");
  const ConvKey key = Padded(real);
  const ConvPrimitives& p = Conv(key);
  dnnl::stream s(Engine());
  torch::Tensor pad = Scratchpad(p.bwd_weights_pd.scratchpad_desc());
  torch::Tensor dw = torch::empty({key.oc, key.ic, 3, 3});
  // The bias gradient as oneDNN lays it out (its padded size), then the real channels.
  torch::Tensor db_padded =
      key.bias ? torch::empty({int64_t(p.bwd_weights_pd.diff_bias_desc().get_size() / 4) + 16})
               : torch::Tensor();
  const memory::desc plain({key.oc, key.ic, 3, 3}, memory::data_type::f32, Tag::oihw);
  const memory::desc& md = p.bwd_weights_pd.diff_weights_desc();
  torch::Tensor holder;
  memory dw_mem = md == plain ? Wrap(plain, dw.data_ptr<float>())
                              : (holder = torch::empty({int64_t(md.get_size()) + 64},
                                                       torch::TensorOptions().dtype(torch::kUInt8)),
                                 Wrap(md, holder.data_ptr()));
  std::unordered_map<int, memory> args{
      {DNNL_ARG_SRC, Wrap(p.bwd_weights_pd.src_desc(), const_cast<void*>(x))},
      {DNNL_ARG_DIFF_DST, Wrap(p.bwd_weights_pd.diff_dst_desc(), const_cast<float*>(dy))},
      {DNNL_ARG_DIFF_WEIGHTS, dw_mem},
      {DNNL_ARG_SCRATCHPAD, Wrap(p.bwd_weights_pd.scratchpad_desc(), pad.data_ptr())}};
  if (key.bias) {
    args.emplace(DNNL_ARG_DIFF_BIAS,
                 Wrap(p.bwd_weights_pd.diff_bias_desc(), db_padded.data_ptr<float>()));
  }
  p.bwd_weights.execute(s, args);
  if (!(md == plain)) {
    memory out = Wrap(plain, dw.data_ptr<float>());
    dnnl::reorder(dw_mem, out).execute(s, dw_mem, out);
  }
  s.wait();
  if (key.oc != real.oc || key.ic != real.ic) {
    dw = dw.narrow(0, 0, real.oc).narrow(1, 0, real.ic).contiguous();
  }
  return {dw, key.bias ? db_padded.narrow(0, 0, real.oc).clone() : torch::Tensor()};
}

// w [O, I, 3, 3] → w' [I, O, 3, 3] with the taps flipped: the weights of the convolution that
// maps an output gradient to the input gradient.
torch::Tensor FlipTranspose(const torch::Tensor& w) {
  return w.flip({2, 3}).transpose(0, 1).contiguous();
}

torch::Tensor Contiguous(const torch::Tensor& t) { return t.detach().contiguous(); }

// Parameters of one Block in the order passed to the node: conv weight, conv bias, GN gamma,
// GN beta.
constexpr int kBlocks = 5;
constexpr int kParams = 4 * kBlocks + 2;  // + head weight, head bias

struct Sizes {
  int64_t n, cx, s, h, H, W;  // batch, input channels, seed channels (0: none), width, image
};

class UNetFunction : public torch::autograd::Function<UNetFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, c10::optional<torch::Tensor> seed_arg,
                               torch::Tensor x, at::TensorList params, bool winograd, double eps) {
    ScopedPart whole("the whole U-Net node, forward");
    const torch::Tensor seed = seed_arg.has_value() ? *seed_arg : torch::Tensor();
    const bool has_seed = seed.defined() && seed.numel() > 0;
    const Sizes z{x.size(0),         x.size(1), has_seed ? seed.size(0) : 0,
                  params[0].size(0), x.size(2), x.size(3)};
    const int64_t N = z.n, h = z.h, H = z.H, W = z.W, H2 = H / 2, W2 = W / 2, H4 = H / 4,
                  W4 = W / 4;
    std::vector<torch::Tensor> p;
    for (const auto& t : params) p.push_back(Contiguous(t));
    const torch::Tensor xc = Contiguous(x);

    // Layer 1: x1 = conv(seed part) + conv(x part) + b.
    torch::Tensor x1 = BlockedBuffer(N, h, H, W);
    torch::Tensor w1x = has_seed ? Contiguous(p[0].narrow(1, z.s, z.cx)) : p[0];
    ConvForward({N, z.cx, h, H, W, true, true, false}, xc.data_ptr<float>(), w1x, p[1],
                x1.data_ptr<float>());
    torch::Tensor seed_blocked;
    if (has_seed) {
      seed_blocked = BlockedBuffer(1, z.s, H, W);
      Timed("layout copies, seed sum and broadcast", [&] {
        bk::FromPlain(Contiguous(seed).data_ptr<float>(), ViewOf(seed_blocked, 1, z.s, H, W));
      });
      torch::Tensor seed_out = BlockedBuffer(1, h, H, W);
      ConvForward({1, z.s, h, H, W, false, false, winograd}, seed_blocked.data_ptr<float>(),
                  Contiguous(p[0].narrow(1, 0, z.s)), {}, seed_out.data_ptr<float>());
      Timed("layout copies, seed sum and broadcast",
            [&] { bk::AddToEverySample(ViewOf(x1, N, h, H, W), ViewOf(seed_out, 1, h, H, W)); });
    }
    torch::Tensor stats = Buffer(kBlocks * 2 * N * bk::kLanes, false);  // mean, rstd per block
    auto mean = [&](int b) { return stats.data_ptr<float>() + (2 * b) * N * 8; };
    auto rstd = [&](int b) { return stats.data_ptr<float>() + (2 * b + 1) * N * 8; };
    auto gn = [&](int b, const bk::View& in, const bk::View& out) {
      Timed("GroupNorm + ReLU, forward", [&] {
        bk::GroupNormReluForward(in, p[4 * b + 2].data_ptr<float>(), p[4 * b + 3].data_ptr<float>(),
                                 kBlockGroups, eps, out, mean(b), rstd(b));
      });
    };
    torch::Tensor cat5 = BlockedBuffer(N, 3 * h, H, W);
    const bk::View cat5_v = ViewOf(cat5, N, 3 * h, H, W);
    const bk::View a1 = bk::Channels(cat5_v, 2 * h, h);
    gn(0, ViewOf(x1, N, h, H, W), a1);

    torch::Tensor p1 = BlockedBuffer(N, h, H2, W2);
    Timed("max pooling, forward", [&] { bk::MaxPool2Forward(a1, ViewOf(p1, N, h, H2, W2)); });
    torch::Tensor x2 = BlockedBuffer(N, 2 * h, H2, W2);
    ConvForward({N, h, 2 * h, H2, W2, false, true, winograd}, p1.data_ptr<float>(), p[4], p[5],
                x2.data_ptr<float>());
    torch::Tensor cat4 = BlockedBuffer(N, 6 * h, H2, W2);
    const bk::View cat4_v = ViewOf(cat4, N, 6 * h, H2, W2);
    const bk::View a2 = bk::Channels(cat4_v, 4 * h, 2 * h);
    gn(1, ViewOf(x2, N, 2 * h, H2, W2), a2);

    torch::Tensor p2 = BlockedBuffer(N, 2 * h, H4, W4);
    Timed("max pooling, forward", [&] { bk::MaxPool2Forward(a2, ViewOf(p2, N, 2 * h, H4, W4)); });
    torch::Tensor x3 = BlockedBuffer(N, 4 * h, H4, W4);
    ConvForward({N, 2 * h, 4 * h, H4, W4, false, true, winograd}, p2.data_ptr<float>(), p[8], p[9],
                x3.data_ptr<float>());
    {
      torch::Tensor a3 = BlockedBuffer(N, 4 * h, H4, W4);
      gn(2, ViewOf(x3, N, 4 * h, H4, W4), ViewOf(a3, N, 4 * h, H4, W4));
      Timed("upsampling, forward", [&] {
        bk::Upsample2Forward(ViewOf(a3, N, 4 * h, H4, W4), bk::Channels(cat4_v, 0, 4 * h));
      });
    }
    torch::Tensor x4 = BlockedBuffer(N, 2 * h, H2, W2);
    ConvForward({N, 6 * h, 2 * h, H2, W2, false, true, winograd}, cat4.data_ptr<float>(), p[12],
                p[13], x4.data_ptr<float>());
    {
      torch::Tensor a4 = BlockedBuffer(N, 2 * h, H2, W2);
      gn(3, ViewOf(x4, N, 2 * h, H2, W2), ViewOf(a4, N, 2 * h, H2, W2));
      Timed("upsampling, forward", [&] {
        bk::Upsample2Forward(ViewOf(a4, N, 2 * h, H2, W2), bk::Channels(cat5_v, 0, 2 * h));
      });
    }
    torch::Tensor x5 = BlockedBuffer(N, h, H, W);
    ConvForward({N, 3 * h, h, H, W, false, true, winograd}, cat5.data_ptr<float>(), p[16], p[17],
                x5.data_ptr<float>());
    torch::Tensor a5 = BlockedBuffer(N, h, H, W);
    gn(4, ViewOf(x5, N, h, H, W), ViewOf(a5, N, h, H, W));

    const int64_t O = p[20].size(0);
    torch::Tensor out = torch::empty({N, O, H, W});
    Timed("head / input-gradient convolution (own kernel)", [&] {
      bk::ConvToPlainForward(ViewOf(a5, N, h, H, W), p[20].data_ptr<float>(),
                             p[21].data_ptr<float>(), O, out.data_ptr<float>());
    });

    std::vector<torch::Tensor> saved{seed, x};
    saved.insert(saved.end(), params.begin(), params.end());
    ctx->save_for_backward(saved);
    ctx->saved_data["buffers"] =
        std::vector<torch::Tensor>{seed_blocked.defined() ? seed_blocked : torch::empty({0}),
                                   x1,
                                   cat5,
                                   p1,
                                   x2,
                                   cat4,
                                   p2,
                                   x3,
                                   x4,
                                   x5,
                                   a5,
                                   stats};
    ctx->saved_data["sizes"] = std::vector<int64_t>{z.n, z.cx, z.s, z.h, z.H, z.W};
    ctx->saved_data["winograd"] = winograd;
    return {out};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    ScopedPart whole("the whole U-Net node, backward");
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor seed = saved[0], x = saved[1];
    std::vector<torch::Tensor> p;
    for (size_t i = 2; i < saved.size(); ++i) p.push_back(Contiguous(saved[i]));
    const auto buffers = ctx->saved_data["buffers"].toTensorVector();
    const auto v = ctx->saved_data["sizes"].toIntVector();
    const bool winograd = ctx->saved_data["winograd"].toBool();
    const Sizes z{v[0], v[1], v[2], v[3], v[4], v[5]};
    const int64_t N = z.n, h = z.h, H = z.H, W = z.W, H2 = H / 2, W2 = W / 2, H4 = H / 4,
                  W4 = W / 4;
    const torch::Tensor &seed_blocked = buffers[0], &x1 = buffers[1], &cat5 = buffers[2],
                        &p1 = buffers[3], &x2 = buffers[4], &cat4 = buffers[5], &p2 = buffers[6],
                        &x3 = buffers[7], &x4 = buffers[8], &x5 = buffers[9], &a5 = buffers[10],
                        &stats = buffers[11];
    auto mean = [&](int b) { return stats.data_ptr<float>() + (2 * b) * N * 8; };
    auto rstd = [&](int b) { return stats.data_ptr<float>() + (2 * b + 1) * N * 8; };
    std::vector<torch::Tensor> grads(kParams);
    // dx = GNReLU backward of block b; grads of gamma and beta.
    auto gn_back = [&](int b, const bk::View& dy, const bk::View& xin, const bk::View& dx) {
      grads[4 * b + 2] = torch::empty_like(p[4 * b + 2]);
      grads[4 * b + 3] = torch::empty_like(p[4 * b + 3]);
      Timed("GroupNorm + ReLU, backward", [&] {
        bk::GroupNormReluBackward(dy, xin, p[4 * b + 2].data_ptr<float>(),
                                  p[4 * b + 3].data_ptr<float>(), kBlockGroups, mean(b), rstd(b),
                                  dx, grads[4 * b + 2].data_ptr<float>(),
                                  grads[4 * b + 3].data_ptr<float>());
      });
    };
    auto conv_back = [&](int b, const ConvKey& key, const torch::Tensor& in, const float* dy,
                         float* din) {
      auto [dw, db] = ConvBackwardWeights(key, in.data_ptr(), dy);
      grads[4 * b] = dw;
      grads[4 * b + 1] = db;
      if (din) ConvBackwardData(key, dy, p[4 * b], din);
    };

    const int64_t O = p[20].size(0);
    torch::Tensor dout = grad_outputs[0].contiguous();
    // Head: weights by our kernel, input gradient as a convolution of dout (plain source).
    grads[20] = torch::empty_like(p[20]);
    grads[21] = torch::empty_like(p[21]);
    Timed("head weight gradient (own kernel)", [&] {
      bk::ConvToPlainBackwardWeights(ViewOf(a5, N, h, H, W), dout.data_ptr<float>(), O,
                                     grads[20].data_ptr<float>(), grads[21].data_ptr<float>());
    });
    torch::Tensor da5 = BlockedBuffer(N, h, H, W);
    ConvForward({N, O, h, H, W, true, false, false}, dout.data_ptr<float>(), FlipTranspose(p[20]),
                {}, da5.data_ptr<float>());
    // Block 5.
    torch::Tensor dx5 = BlockedBuffer(N, h, H, W);
    gn_back(4, ViewOf(da5, N, h, H, W), ViewOf(x5, N, h, H, W), ViewOf(dx5, N, h, H, W));
    torch::Tensor dcat5 = BlockedBuffer(N, 3 * h, H, W);
    conv_back(4, {N, 3 * h, h, H, W, false, true, winograd}, cat5, dx5.data_ptr<float>(),
              dcat5.data_ptr<float>());
    const bk::View dcat5_v = ViewOf(dcat5, N, 3 * h, H, W);
    // Blocks 4 and 3 (b = 3, 2): their output of c channels at hb × wb was upsampled into the
    // first c channels of the next block's input, whose gradient is dnext; returns the gradient
    // of the block's input `in` (cin channels).
    auto up_block_back = [&](int b, const bk::View& dnext, int64_t c, int64_t hb, int64_t wb,
                             const torch::Tensor& xb, const torch::Tensor& in, int64_t cin) {
      torch::Tensor da = BlockedBuffer(N, c, hb, wb);
      Timed("upsampling, backward",
            [&] { bk::Upsample2Backward(bk::Channels(dnext, 0, c), ViewOf(da, N, c, hb, wb)); });
      torch::Tensor dx = BlockedBuffer(N, c, hb, wb);
      gn_back(b, ViewOf(da, N, c, hb, wb), ViewOf(xb, N, c, hb, wb), ViewOf(dx, N, c, hb, wb));
      torch::Tensor din = BlockedBuffer(N, cin, hb, wb);
      conv_back(b, {N, cin, c, hb, wb, false, true, winograd}, in, dx.data_ptr<float>(),
                din.data_ptr<float>());
      return din;
    };
    torch::Tensor dcat4 = up_block_back(3, dcat5_v, 2 * h, H2, W2, x4, cat4, 6 * h);
    const bk::View dcat4_v = ViewOf(dcat4, N, 6 * h, H2, W2);
    torch::Tensor dp2 = up_block_back(2, dcat4_v, 4 * h, H4, W4, x3, p2, 2 * h);
    // Block 2: its output's gradient is the skip part of dcat4 plus the pooling's.
    const bk::View cat4_v = ViewOf(cat4, N, 6 * h, H2, W2);
    const bk::View da2 = bk::Channels(dcat4_v, 4 * h, 2 * h);
    Timed("max pooling, backward", [&] {
      bk::MaxPool2BackwardAccumulate(ViewOf(dp2, N, 2 * h, H4, W4),
                                     bk::Channels(cat4_v, 4 * h, 2 * h), da2);
    });
    torch::Tensor dx2 = BlockedBuffer(N, 2 * h, H2, W2);
    gn_back(1, da2, ViewOf(x2, N, 2 * h, H2, W2), ViewOf(dx2, N, 2 * h, H2, W2));
    torch::Tensor dp1 = BlockedBuffer(N, h, H2, W2);
    conv_back(1, {N, h, 2 * h, H2, W2, false, true, winograd}, p1, dx2.data_ptr<float>(),
              dp1.data_ptr<float>());
    // Block 1.
    const bk::View cat5_v = ViewOf(cat5, N, 3 * h, H, W);
    const bk::View da1 = bk::Channels(dcat5_v, 2 * h, h);
    Timed("max pooling, backward", [&] {
      bk::MaxPool2BackwardAccumulate(ViewOf(dp1, N, h, H2, W2), bk::Channels(cat5_v, 2 * h, h),
                                     da1);
    });
    torch::Tensor dx1 = BlockedBuffer(N, h, H, W);
    gn_back(0, da1, ViewOf(x1, N, h, H, W), ViewOf(dx1, N, h, H, W));
    // Layer 1: the input part (plain source), then the seed part (batch 1, summed gradient).
    const bool has_seed = z.s > 0;
    const torch::Tensor xc = Contiguous(x);
    auto [dw1x, db1] = ConvBackwardWeights({N, z.cx, h, H, W, true, true, false},
                                           xc.data_ptr<float>(), dx1.data_ptr<float>());
    grads[1] = db1;
    torch::Tensor dx;
    // needs_input_grad counts the node's edges: one per defined tensor input, so x is edge 1
    // after a seed and edge 0 without one (the estimator, whose images need no gradient).
    if (ctx->needs_input_grad(has_seed ? 1 : 0)) {
      dx = torch::empty({N, z.cx, H, W});
      const torch::Tensor w1x = has_seed ? p[0].narrow(1, z.s, z.cx) : p[0];
      Timed("head / input-gradient convolution (own kernel)", [&] {
        bk::ConvToPlainForward(ViewOf(dx1, N, h, H, W), FlipTranspose(w1x).data_ptr<float>(),
                               nullptr, z.cx, dx.data_ptr<float>());
      });
    }
    torch::Tensor dseed;
    if (has_seed) {
      torch::Tensor sum = BlockedBuffer(1, h, H, W);
      Timed("layout copies, seed sum and broadcast",
            [&] { bk::SumOverBatch(ViewOf(dx1, N, h, H, W), ViewOf(sum, 1, h, H, W)); });
      const ConvKey key{1, z.s, h, H, W, false, false, winograd};
      torch::Tensor dw1s =
          ConvBackwardWeights(key, seed_blocked.data_ptr(), sum.data_ptr<float>()).first;
      grads[0] = torch::cat({dw1s, dw1x}, 1);
      if (ctx->needs_input_grad(0)) {
        torch::Tensor dseed_blocked = BlockedBuffer(1, z.s, H, W);
        ConvBackwardData(key, sum.data_ptr<float>(), Contiguous(p[0].narrow(1, 0, z.s)),
                         dseed_blocked.data_ptr<float>());
        dseed = torch::empty({z.s, H, W});
        Timed("layout copies, seed sum and broadcast",
              [&] { bk::ToPlain(ViewOf(dseed_blocked, 1, z.s, H, W), dseed.data_ptr<float>()); });
      }
    } else {
      grads[0] = dw1x;
    }
    variable_list out{dseed, dx};
    out.insert(out.end(), grads.begin(), grads.end());
    out.emplace_back();  // winograd
    out.emplace_back();  // eps
    return out;
  }
};

}  // namespace

bool OneDnnUNetBuilt() { return true; }

void SetUNetProfiling(bool on) {
  std::lock_guard<std::mutex> lock(profile_mutex);
  profile.clear();
  profiling.store(on);
}

std::vector<UNetProfileEntry> UNetProfile() {
  std::lock_guard<std::mutex> lock(profile_mutex);
  std::vector<UNetProfileEntry> out;
  for (const auto& [part, v] : profile) out.push_back({part, v.first, v.second});
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return a.seconds > b.seconds; });
  return out;
}

bool UseOneDnnUNet(TrunkKernels kernels, const torch::Tensor& x) {
  if (kernels == TrunkKernels::kLibTorch || !at::GradMode::is_enabled()) return false;
  return x.defined() && x.is_cpu() && x.scalar_type() == at::kFloat && x.dim() == 4 &&
         !AutocastEnabled(x.device());
}

torch::Tensor OneDnnUNetForward(UNetTrunkImpl& trunk, torch::nn::Conv2dImpl& head,
                                const torch::Tensor& seed, const torch::Tensor& x, bool winograd) {
  const int64_t seed_channels = seed.defined() ? seed.size(0) : 0;
  if (!x.defined() || x.dim() != 4 || x.size(1) + seed_channels != trunk.in_channels() ||
      (seed.defined() &&
       (seed.dim() != 3 || seed.size(1) != x.size(2) || seed.size(2) != x.size(3)))) {
    throw InputError("OneDnnUNetForward: input must be [N, C, H, W] with C + seed channels = " +
                     std::to_string(trunk.in_channels()));
  }
  if (x.size(2) % 4 != 0 || x.size(3) % 4 != 0 || x.size(2) == 0 || x.size(3) == 0) {
    throw InputError("OneDnnUNetForward: image height and width must be positive multiples of 4");
  }
  variable_list params;
  for (int b = 0; b < kBlocks; ++b) {
    BlockImpl& block = trunk.block(b);
    params.push_back(block.conv()->weight);
    params.push_back(block.conv()->bias);
    params.push_back(block.norm()->weight);
    params.push_back(block.norm()->bias);
  }
  params.push_back(head.weight);
  params.push_back(head.bias);
  for (const auto& t : params) {
    if (!t.defined() || !t.is_cpu() || t.scalar_type() != at::kFloat) {
      throw InputError("OneDnnUNetForward: every parameter must be a float32 CPU tensor");
    }
  }
  const double eps = trunk.block(0).norm()->options.eps();
  const c10::optional<torch::Tensor> seed_arg =
      seed.defined() ? c10::optional<torch::Tensor>(seed) : c10::nullopt;
  return UNetFunction::apply(seed_arg, x, at::TensorList(params), winograd, eps)[0];
}

#endif  // KEYCLD_HAVE_ONEDNN

}  // namespace keycld
