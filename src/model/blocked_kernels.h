// Element-wise and small-convolution kernels on oneDNN's blocked activation layout nChw16c
// (private to src/model/; used by onednn_unet.cc). A tensor [N, C, H, W] is stored as
// [N][⌈C/16⌉][H][W][16]: channel c of pixel (y, x) of sample n is at
// n·sample_stride + (c / 16)·H·W·16 + (y·W + x)·16 + c % 16. Lanes beyond C in the last block
// are padding and must hold zeros (oneDNN reads them). A BlockedView may be a channel range of
// a larger buffer (a skip connection inside a concatenation buffer): its first channel is at a
// multiple of 16 of the parent, and sample_stride is the parent's.
#pragma once

#include <cstdint>

namespace keycld::blocked {

inline constexpr int64_t kLanes = 16;

struct View {
  float* data = nullptr;  ///< channel block 0, pixel 0 of sample 0 of this view
  int64_t n = 0, c = 0, h = 0, w = 0;
  int64_t sample_stride = 0;  ///< floats from one sample to the next

  int64_t blocks() const { return (c + kLanes - 1) / kLanes; }
  int64_t block_stride() const { return h * w * kLanes; }
  float* sample(int64_t i) const { return data + i * sample_stride; }
};

/// Floats of a standalone blocked buffer [n, c, h, w] (channels padded to 16).
inline int64_t BufferSize(int64_t n, int64_t c, int64_t h, int64_t w) {
  return n * ((c + kLanes - 1) / kLanes) * h * w * kLanes;
}

/// The standalone buffer at `data` as a view.
inline View Whole(float* data, int64_t n, int64_t c, int64_t h, int64_t w) {
  return {data, n, c, h, w, ((c + kLanes - 1) / kLanes) * h * w * kLanes};
}

/// Whether the kernels run their AVX-512 inner loops (the default where the CPU has them) or the
/// baseline ones. UseAvx512(false) selects the baseline (tests compare both); UseAvx512(true)
/// returns false, changing nothing, on a CPU or build without them.
bool UseAvx512(bool on);
bool UsingAvx512();

/// Channels [first, first + count) of `parent`; first must be a multiple of 16.
View Channels(const View& parent, int64_t first, int64_t count);

/// y = ReLU(GroupNorm(x)) with `groups` groups, affine gamma/beta [C], biased variance and
/// `eps` as torch::nn::GroupNorm; per-sample group mean and 1/sqrt(var + eps) go to
/// mean/rstd [N, groups]. Statistics accumulate in double. y's padding lanes are zeroed.
void GroupNormReluForward(const View& x, const float* gamma, const float* beta, int64_t groups,
                          double eps, const View& y, float* mean, float* rstd);

/// Gradient of GroupNormReluForward: dx (standalone or view) from dy and the saved x, mean and
/// rstd; dgamma and dbeta [C] are overwritten (summed over the batch in a fixed order).
void GroupNormReluBackward(const View& dy, const View& x, const float* gamma, const float* beta,
                           int64_t groups, const float* mean, const float* rstd, const View& dx,
                           float* dgamma, float* dbeta);

/// 2×2 max pooling with stride 2 (H, W even): y[n, c, i, j] = max of x's 2×2 window.
void MaxPool2Forward(const View& x, const View& y);

/// dx += the gradient of MaxPool2Forward: each window's dy goes to its first maximum in
/// row-major order (LibTorch's choice), lane by lane.
void MaxPool2BackwardAccumulate(const View& dy, const View& x, const View& dx);

/// Nearest-neighbour ×2 upsampling: y[n, c, 2i + a, 2j + b] = x[n, c, i, j].
void Upsample2Forward(const View& x, const View& y);

/// dx[n, c, i, j] = sum of dy over the 2×2 block it was copied to (overwrites dx).
void Upsample2Backward(const View& dy, const View& dx);

/// A 3×3 convolution with zero padding 1 from a blocked input to a plain NCHW output with few
/// channels (a network's head): y[n, o] = b[o] + Σ_i Σ_taps w[o, i, ky, kx]·x[n, i, y+ky−1,
/// x+kx−1]. w is [O, C, 3, 3] contiguous, bias [O] or null. y is contiguous [N, O, H, W].
void ConvToPlainForward(const View& x, const float* w, const float* bias, int64_t out_channels,
                        float* y);

/// The weight and bias gradients of ConvToPlainForward: dw [O, C, 3, 3] and db [O]
/// (overwritten; db may be null) from x and dy [N, O, H, W] contiguous.
void ConvToPlainBackwardWeights(const View& x, const float* dy, int64_t out_channels, float* dw,
                                float* db);

/// x[n] += one[0] for every sample n (one is a single-sample view of x's shape).
void AddToEverySample(const View& x, const View& one);

/// Sum over the batch of a blocked tensor: out (one sample, standalone) = Σ_n x[n].
void SumOverBatch(const View& x, const View& out);

/// A blocked view's channels copied to a plain NCHW tensor [N, C, H, W] (contiguous).
void ToPlain(const View& x, float* y);

/// A plain NCHW tensor [N, C, H, W] copied into a blocked view (padding lanes zeroed).
void FromPlain(const float* x, const View& y);

}  // namespace keycld::blocked
