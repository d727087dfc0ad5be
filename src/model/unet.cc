// Block and the U-Net trunk, KeyCLD §3.
#include "keycld/model/unet.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <torch/version.h>

#include <string>

#include "keycld/model/autocast.h"
#include "keycld/util/error.h"

namespace keycld {
namespace {

torch::Tensor Up2(const torch::Tensor& x) {  // nearest-neighbour ×2
  const int64_t size[2] = {2 * x.size(2), 2 * x.size(3)};
  return at::upsample_nearest2d(x, at::IntArrayRef(size, 2));
}

torch::Tensor Pool2(const torch::Tensor& x) {  // 2×2 max pooling, stride 2
  const int64_t kernel[2] = {2, 2};
  return at::max_pool2d(x, at::IntArrayRef(kernel, 2));
}

// LibTorch 1.x keeps option variants in c10::variant, 2.x in std::variant.
#if TORCH_VERSION_MAJOR >= 2
template <class T, class V>
bool Holds(const V& v) { return std::holds_alternative<T>(v); }
template <class T, class V>
const T& Get(const V& v) { return std::get<T>(v); }
#else
template <class T, class V>
bool Holds(const V& v) { return c10::holds_alternative<T>(v); }
template <class T, class V>
const T& Get(const V& v) { return c10::get<T>(v); }
#endif

}  // namespace

torch::Tensor Conv2dForward(torch::nn::Conv2d& conv, const torch::Tensor& x) {
  const auto& o = conv->options;
  const bool plain = Holds<torch::ExpandingArray<2>>(o.padding()) &&
                     Holds<torch::enumtype::kZeros>(o.padding_mode()) && !o.transposed();
  if (plain && x.is_cpu() && x.scalar_type() == at::kFloat && x.dim() == 4 &&
      conv->weight.scalar_type() == at::kFloat && conv->weight.is_cpu() && at::hasMKLDNN() &&
      at::globalContext().userEnabledMkldnn() && !AutocastEnabled(x.device())) {
    const auto& pad = Get<torch::ExpandingArray<2>>(o.padding());
    return at::mkldnn_convolution(x, conv->weight, conv->bias, *pad, *o.stride(), *o.dilation(),
                                  o.groups());
  }
  return conv->forward(x);
}

torch::Tensor OutputConv2dForward(torch::nn::Conv2d& conv, const torch::Tensor& features) {
  AutocastGuard float32(features.device(), false);
  return Conv2dForward(conv, features.to(conv->weight.scalar_type())).contiguous();
}

BlockImpl::BlockImpl(int64_t in_channels, int64_t out_channels) {
  if (in_channels < 1 || out_channels < 1 || out_channels % kBlockGroups != 0) {
    throw InputError("Block: need in_channels ≥ 1 and out_channels a positive multiple of " +
                     std::to_string(kBlockGroups) +
                     " (GroupNorm groups), got in_channels = " + std::to_string(in_channels) +
                     ", out_channels = " + std::to_string(out_channels));
  }
  conv_ = register_module(
      "conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(in_channels, out_channels, 3).padding(1)));
  norm_ = register_module(
      "norm", torch::nn::GroupNorm(torch::nn::GroupNormOptions(kBlockGroups, out_channels)));
}

torch::Tensor BlockImpl::forward(const torch::Tensor& x) {
  // Under bf16 autocast the convolution returns bf16; GroupNorm runs in its parameters' dtype
  // (float32), as autocast keeps normalisations (LibTorch 1.13's CPU kernel also needs it).
  return at::relu(norm_->forward(Conv2dForward(conv_, x).to(norm_->weight.scalar_type())));
}

UNetTrunkImpl::UNetTrunkImpl(int64_t in_channels, int64_t hidden)
    : in_channels_(in_channels), hidden_(hidden) {
  if (in_channels < 1 || hidden < 1 || hidden % kBlockGroups != 0) {
    throw InputError("UNetTrunk: need in_channels ≥ 1 and hidden width h a positive multiple of " +
                     std::to_string(kBlockGroups) + ", got in_channels = " +
                     std::to_string(in_channels) + ", h = " + std::to_string(hidden));
  }
  const int64_t h = hidden;
  block1_ = register_module("block1", Block(in_channels, h));
  block2_ = register_module("block2", Block(h, 2 * h));
  block3_ = register_module("block3", Block(2 * h, 4 * h));
  block4_ = register_module("block4", Block(4 * h + 2 * h, 2 * h));
  block5_ = register_module("block5", Block(2 * h + h, h));
}

torch::Tensor UNetTrunkImpl::forward(const torch::Tensor& x) {
  if (!x.defined() || x.dim() != 4 || x.size(1) != in_channels_) {
    throw InputError("UNetTrunk: input must be [B, " + std::to_string(in_channels_) + ", H, W]");
  }
  if (x.size(2) % 4 != 0 || x.size(3) % 4 != 0 || x.size(2) == 0 || x.size(3) == 0) {
    throw InputError(
        "UNetTrunk: image height and width must be positive multiples of 4 (two "
        "2× poolings), got " +
        std::to_string(x.size(2)) + "×" + std::to_string(x.size(3)));
  }
  // Inference on the CPU in channels-last layout, oneDNN's native one (no reorders around each
  // convolution). Training stays NCHW: LibTorch 1.13's GroupNorm backward has no channels-last
  // kernel and copies (measured: paper step 0.78 s channels-last vs 0.75 s NCHW).
  const torch::Tensor in = !at::GradMode::is_enabled() && x.is_cpu() && x.scalar_type() == at::kFloat
                                ? x.contiguous(at::MemoryFormat::ChannelsLast)
                                : x;
  torch::Tensor a1 = block1_->forward(in);
  torch::Tensor a2 = block2_->forward(Pool2(a1));
  torch::Tensor a3 = block3_->forward(Pool2(a2));
  torch::Tensor a4 = block4_->forward(at::cat({Up2(a3), a2}, 1));
  return block5_->forward(at::cat({Up2(a4), a1}, 1));
}

BlockImpl& UNetTrunkImpl::block(int b) {
  Block* blocks[] = {&block1_, &block2_, &block3_, &block4_, &block5_};
  if (b < 0 || b >= 5) throw InputError("UNetTrunk::block: index must be in [0, 5)");
  return **blocks[b];
}

double ConvLayerShape::ForwardFlops() const {
  return 2.0 * double(in_channels) * double(out_channels) * double(kernel * kernel) *
         double(out_height) * double(out_width);
}

std::vector<ConvLayerShape> UNetConvLayers(int64_t in_channels, int64_t hidden,
                                           int64_t head_channels, int64_t size) {
  const int64_t h = hidden, s1 = size, s2 = size / 2, s4 = size / 4;
  return {{in_channels, h, 3, s1, s1},  {h, 2 * h, 3, s2, s2},     {2 * h, 4 * h, 3, s4, s4},
          {6 * h, 2 * h, 3, s2, s2},    {3 * h, h, 3, s1, s1},     {h, head_channels, 3, s1, s1}};
}

double ForwardFlops(const std::vector<ConvLayerShape>& layers) {
  double total = 0;
  for (const ConvLayerShape& l : layers) total += l.ForwardFlops();
  return total;
}

}  // namespace keycld
