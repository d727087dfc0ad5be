// The training path of the U-Nets on oneDNN (docs/benchmarks.md, "The fused U-Net"): the
// estimator's and the renderer's trunk and head (KeyCLD §3) as one autograd node whose
// activations stay in oneDNN's blocked layout nChw16c from the first convolution to the head,
// with GroupNorm + ReLU, pooling, upsampling and the skip connections as kernels of our own on
// that layout (no concatenation copies, no layout reorders), and optionally Winograd
// F(4×4, 3×3) convolutions.
#pragma once

#include <torch/nn/modules/conv.h>
#include <torch/types.h>

#include <string>
#include <utility>
#include <vector>

#include "keycld/model/unet.h"
#include "keycld/util/names.h"

namespace keycld {

/// How the estimator's and renderer's U-Nets are computed while gradients are recorded
/// (`[train] kernels`, `--kernels`). Outside training (no grad mode) and wherever the fused
/// path does not apply, LibTorch's modules run.
enum class TrunkKernels {
  kLibTorch,  ///< LibTorch's modules, NCHW: any device, dtype and autocast; the reference
  kOneDnn,    ///< the fused oneDNN node, direct convolutions (CPU, float32)
  kWinograd,  ///< the fused oneDNN node, Winograd F(4×4, 3×3) where oneDNN has it for the CPU
};

template <>
struct NameTable<TrunkKernels> {
  static constexpr const char* kWhat = "kernels";
  static constexpr std::pair<TrunkKernels, const char*> kEntries[] = {
      {TrunkKernels::kLibTorch, "libtorch"},
      {TrunkKernels::kOneDnn, "onednn"},
      {TrunkKernels::kWinograd, "winograd"}};
};

/// Whether this build has the fused path (compiled against oneDNN 2.x, libdnnl-dev).
bool OneDnnUNetBuilt();

/// One part of the fused U-Net's time (SetUNetProfiling): the oneDNN convolutions by pass, our
/// kernels by operator.
struct UNetProfileEntry {
  std::string part;
  double seconds = 0;  ///< wall time summed over calls
  int64_t calls = 0;
};

/// Starts (on = true) or stops recording the fused U-Net's time per part, clearing what was
/// recorded (build/train_bench with KEYCLD_UNET_PROFILE=1; docs/benchmarks.md). Off by default:
/// then a part costs one atomic load.
void SetUNetProfiling(bool on);
/// The recorded parts, longest first.
std::vector<UNetProfileEntry> UNetProfile();

/// Whether OneDnnUNetForward runs for this call: kernels is kOneDnn or kWinograd, the build has
/// it, grad mode is on, autocast is off, and x and every parameter are float32 CPU tensors.
bool UseOneDnnUNet(TrunkKernels kernels, const torch::Tensor& x);

/// head(trunk(input)) of KeyCLD §3 as one autograd node, where input = x for the estimator
/// (seed undefined) and input = concat(seed broadcast over the batch, x) along the channels for
/// the renderer (seed [S, H, W], S + C_x = the trunk's in_channels). x: float32 CPU [N, C_x, H,
/// W] (images, or the renderer's Gaussian maps); returns the head's output [N, O, H, W]
/// (contiguous NCHW, before any sigmoid). The renderer's first convolution is split: the seed's
/// part is computed once per batch instead of once per frame (the same sum, other rounding).
/// Gradients flow to x, seed and every parameter of trunk and head (not differentiable twice).
/// Same values as UNetTrunk + head in LibTorch up to float rounding (direct convolutions) or
/// Winograd's rounding (relative differences about 1e-5; tests/model_onednn_unet_test.cc).
/// Throws InputError for shapes the trunk refuses, and std::runtime_error when this build has no
/// oneDNN (check OneDnnUNetBuilt).
torch::Tensor OneDnnUNetForward(UNetTrunkImpl& trunk, torch::nn::Conv2dImpl& head,
                                const torch::Tensor& seed, const torch::Tensor& x, bool winograd);

}  // namespace keycld
