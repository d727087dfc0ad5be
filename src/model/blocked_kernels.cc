// Kernels on the nChw16c layout (blocked_kernels.h). Each loops over samples (or rows) in
// parallel (at::parallel_for) and over the 16 lanes of a channel block innermost; those inner
// loops (blocked_kernels_simd.inc) are compiled for AVX-512 and for the baseline, and the CPU
// picks one at run time. Reductions run in a fixed order, so results do not depend on the
// thread count.
#include "blocked_kernels.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <vector>

// GCC notes that 64-byte vectors passed by value change the ABI without AVX-512; the SIMD
// functions are internal and called only from code of the same target.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace keycld::blocked {

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define KEYCLD_HAVE_AVX512_KERNELS 1
namespace avx512 {
#pragma GCC push_options
#pragma GCC target("arch=x86-64-v4")
#include "blocked_kernels_simd.inc"
#pragma GCC pop_options
}  // namespace avx512
#endif

namespace baseline {
#include "blocked_kernels_simd.inc"
}  // namespace baseline

namespace {

constexpr int64_t L = kLanes;

// The inner loops for this CPU: AVX-512 (x86-64-v4: F, BW, DQ, VL, CD) where it has it.
struct Simd {
  decltype(&baseline::LaneSums) LaneSums;
  decltype(&baseline::LaneSquaredDeviations) LaneSquaredDeviations;
  decltype(&baseline::ScaleShiftRelu) ScaleShiftRelu;
  decltype(&baseline::BackwardSums) BackwardSums;
  decltype(&baseline::BackwardApply) BackwardApply;
  decltype(&baseline::PoolRow) PoolRow;
  decltype(&baseline::PoolBackwardRow) PoolBackwardRow;
  decltype(&baseline::UpsampleRow) UpsampleRow;
  decltype(&baseline::UpsampleBackwardRow) UpsampleBackwardRow;
  decltype(&baseline::ConvToPlainRow) ConvToPlainRow;
  decltype(&baseline::ConvToPlainWeightsRow) ConvToPlainWeightsRow;
};

#define KEYCLD_SIMD_TABLE(ns)                                                          \
  Simd {                                                                               \
    &ns::LaneSums, &ns::LaneSquaredDeviations, &ns::ScaleShiftRelu, &ns::BackwardSums, \
        &ns::BackwardApply, &ns::PoolRow, &ns::PoolBackwardRow, &ns::UpsampleRow,      \
        &ns::UpsampleBackwardRow, &ns::ConvToPlainRow, &ns::ConvToPlainWeightsRow      \
  }

bool CpuHasAvx512() {
#ifdef KEYCLD_HAVE_AVX512_KERNELS
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512cd");
#else
  return false;
#endif
}

std::atomic<bool> use_avx512{CpuHasAvx512()};

const Simd& Kernels() {
#ifdef KEYCLD_HAVE_AVX512_KERNELS
  static const Simd avx512 = KEYCLD_SIMD_TABLE(avx512);
  if (use_avx512.load(std::memory_order_relaxed)) return avx512;
#endif
  static const Simd base = KEYCLD_SIMD_TABLE(baseline);
  return base;
}

// Per-lane values of a per-group quantity (padding lanes 0).
void GroupLanes(const double* per_group, int64_t channels, int64_t groups, int64_t blocks,
                double* lanes) {
  const int64_t cg = channels / groups;
  for (int64_t c = 0; c < blocks * L; ++c) lanes[c] = c < channels ? per_group[c / cg] : 0.0;
}

void CheckPoolShapes(const View& big, const View& small, const char* who) {
  if (big.n != small.n || big.c != small.c || big.h != 2 * small.h || big.w != 2 * small.w) {
    throw std::logic_error(std::string(who) + ": shapes do not match a 2x resampling");
  }
}

}  // namespace

bool UseAvx512(bool on) {
  if (on && !CpuHasAvx512()) return false;
  use_avx512.store(on);
  return true;
}

bool UsingAvx512() { return use_avx512.load(); }

View Channels(const View& parent, int64_t first, int64_t count) {
  if (first % L != 0 || first < 0 || count < 1 || first + count > parent.blocks() * L) {
    throw std::logic_error("blocked::Channels: channel range not on a 16-channel block");
  }
  View v = parent;
  v.data = parent.data + (first / L) * parent.block_stride();
  v.c = count;
  return v;
}

void GroupNormReluForward(const View& x, const float* gamma, const float* beta, int64_t groups,
                          double eps, const View& y, float* mean, float* rstd) {
  const int64_t C = x.c, B = x.blocks(), HW = x.h * x.w, bs = x.block_stride();
  if (C % groups != 0) throw std::logic_error("GroupNormReluForward: channels % groups != 0");
  const double count = double(C / groups) * double(HW);
  at::parallel_for(0, x.n, 1, [&](int64_t begin, int64_t end) {
    std::vector<double> sums(B * L), group(groups), lanes(B * L);
    std::vector<float> a(B * L), b(B * L);
    for (int64_t i = begin; i < end; ++i) {
      const float* xs = x.sample(i);
      for (int64_t cb = 0; cb < B; ++cb) Kernels().LaneSums(xs + cb * bs, HW, &sums[cb * L]);
      std::fill(group.begin(), group.end(), 0.0);
      for (int64_t c = 0; c < C; ++c) group[c / (C / groups)] += sums[c];
      for (auto& g : group) g /= count;
      std::vector<double> mu = group;
      GroupLanes(mu.data(), C, groups, B, lanes.data());
      for (int64_t cb = 0; cb < B; ++cb) {
        Kernels().LaneSquaredDeviations(xs + cb * bs, HW, &lanes[cb * L], &sums[cb * L]);
      }
      std::fill(group.begin(), group.end(), 0.0);
      for (int64_t c = 0; c < C; ++c) group[c / (C / groups)] += sums[c];
      for (int64_t g = 0; g < groups; ++g) {
        const double r = 1.0 / std::sqrt(group[g] / count + eps);
        mean[i * groups + g] = float(mu[g]);
        rstd[i * groups + g] = float(r);
      }
      for (int64_t c = 0; c < B * L; ++c) {
        if (c < C) {
          const int64_t g = c / (C / groups);
          const float r = rstd[i * groups + g], m = mean[i * groups + g];
          a[c] = r * gamma[c];
          b[c] = beta[c] - m * a[c];
        } else {
          a[c] = b[c] = 0.f;
        }
      }
      float* ys = y.sample(i);
      for (int64_t cb = 0; cb < B; ++cb) {
        Kernels().ScaleShiftRelu(xs + cb * bs, HW, &a[cb * L], &b[cb * L],
                                 ys + cb * y.block_stride());
      }
    }
  });
}

void GroupNormReluBackward(const View& dy, const View& x, const float* gamma, const float* beta,
                           int64_t groups, const float* mean, const float* rstd, const View& dx,
                           float* dgamma, float* dbeta) {
  const int64_t C = x.c, B = x.blocks(), HW = x.h * x.w, bs = x.block_stride();
  const int64_t cg = C / groups;
  const double count = double(cg) * double(HW);
  std::vector<double> s1_all(x.n * C), s2_all(x.n * C);
  at::parallel_for(0, x.n, 1, [&](int64_t begin, int64_t end) {
    std::vector<double> s1(B * L), s2(B * L), A(groups), Bg(groups);
    std::vector<float> a(B * L), b(B * L), mu(B * L), r(B * L), P(B * L), Q(B * L), R(B * L);
    for (int64_t i = begin; i < end; ++i) {
      for (int64_t c = 0; c < B * L; ++c) {
        if (c < C) {
          const int64_t g = c / cg;
          mu[c] = mean[i * groups + g];
          r[c] = rstd[i * groups + g];
          a[c] = r[c] * gamma[c];
          b[c] = beta[c] - mu[c] * a[c];
        } else {
          mu[c] = r[c] = a[c] = b[c] = 0.f;
        }
      }
      const float* xs = x.sample(i);
      const float* gs = dy.sample(i);
      for (int64_t cb = 0; cb < B; ++cb) {
        Kernels().BackwardSums(gs + cb * dy.block_stride(), xs + cb * bs, HW, &a[cb * L],
                               &b[cb * L], &mu[cb * L], &r[cb * L], &s1[cb * L], &s2[cb * L]);
      }
      std::fill(A.begin(), A.end(), 0.0);
      std::fill(Bg.begin(), Bg.end(), 0.0);
      for (int64_t c = 0; c < C; ++c) {
        A[c / cg] += gamma[c] * s1[c];
        Bg[c / cg] += gamma[c] * s2[c];
        s1_all[i * C + c] = s1[c];
        s2_all[i * C + c] = s2[c];
      }
      for (int64_t c = 0; c < B * L; ++c) {
        if (c < C) {
          const int64_t g = c / cg;
          const double rg = rstd[i * groups + g], mg = mean[i * groups + g];
          const double Ag = A[g] / count, Bv = Bg[g] / count;
          P[c] = float(rg * gamma[c]);
          Q[c] = float(-rg * rg * Bv);
          R[c] = float(rg * rg * Bv * mg - rg * Ag);
        } else {
          P[c] = Q[c] = R[c] = 0.f;
        }
      }
      float* ds = dx.sample(i);
      for (int64_t cb = 0; cb < B; ++cb) {
        Kernels().BackwardApply(gs + cb * dy.block_stride(), xs + cb * bs, HW, &a[cb * L],
                                &b[cb * L], &P[cb * L], &Q[cb * L], &R[cb * L],
                                ds + cb * dx.block_stride());
      }
    }
  });
  for (int64_t c = 0; c < C; ++c) {
    double g = 0, bsum = 0;
    for (int64_t i = 0; i < x.n; ++i) {
      g += s2_all[i * C + c];
      bsum += s1_all[i * C + c];
    }
    dgamma[c] = float(g);
    dbeta[c] = float(bsum);
  }
}

// Runs fn(i, cb) for every sample i < n and channel block cb < blocks, in parallel.
template <typename Fn>
void ForEachSampleBlock(int64_t n, int64_t blocks, const Fn& fn) {
  at::parallel_for(0, n * blocks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) fn(k / blocks, k % blocks);
  });
}

void MaxPool2Forward(const View& x, const View& y) {
  CheckPoolShapes(x, y, "MaxPool2Forward");
  ForEachSampleBlock(x.n, x.blocks(), [&](int64_t i, int64_t cb) {
    const float* xs = x.sample(i) + cb * x.block_stride();
    float* ys = y.sample(i) + cb * y.block_stride();
    for (int64_t oy = 0; oy < y.h; ++oy) {
      Kernels().PoolRow(xs + 2 * oy * x.w * L, xs + (2 * oy + 1) * x.w * L, y.w,
                        ys + oy * y.w * L);
    }
  });
}

void MaxPool2BackwardAccumulate(const View& dy, const View& x, const View& dx) {
  CheckPoolShapes(x, dy, "MaxPool2BackwardAccumulate");
  ForEachSampleBlock(x.n, x.blocks(), [&](int64_t i, int64_t cb) {
    const float* xs = x.sample(i) + cb * x.block_stride();
    const float* gs = dy.sample(i) + cb * dy.block_stride();
    float* ds = dx.sample(i) + cb * dx.block_stride();
    for (int64_t oy = 0; oy < dy.h; ++oy) {
      Kernels().PoolBackwardRow(xs + 2 * oy * x.w * L, xs + (2 * oy + 1) * x.w * L,
                                gs + oy * dy.w * L, dy.w, ds + 2 * oy * x.w * L,
                                ds + (2 * oy + 1) * x.w * L);
    }
  });
}

void Upsample2Forward(const View& x, const View& y) {
  CheckPoolShapes(y, x, "Upsample2Forward");
  ForEachSampleBlock(x.n, x.blocks(), [&](int64_t i, int64_t cb) {
    const float* xs = x.sample(i) + cb * x.block_stride();
    float* ys = y.sample(i) + cb * y.block_stride();
    for (int64_t iy = 0; iy < x.h; ++iy) {
      Kernels().UpsampleRow(xs + iy * x.w * L, x.w, ys + 2 * iy * y.w * L,
                            ys + (2 * iy + 1) * y.w * L);
    }
  });
}

void Upsample2Backward(const View& dy, const View& dx) {
  CheckPoolShapes(dy, dx, "Upsample2Backward");
  ForEachSampleBlock(dx.n, dx.blocks(), [&](int64_t i, int64_t cb) {
    const float* gs = dy.sample(i) + cb * dy.block_stride();
    float* ds = dx.sample(i) + cb * dx.block_stride();
    for (int64_t iy = 0; iy < dx.h; ++iy) {
      Kernels().UpsampleBackwardRow(gs + 2 * iy * dy.w * L, gs + (2 * iy + 1) * dy.w * L, dx.w,
                                    ds + iy * dx.w * L);
    }
  });
}

void ConvToPlainForward(const View& x, const float* w, const float* bias, int64_t out_channels,
                        float* y) {
  const int64_t B = x.blocks(), C = x.c, H = x.h, W = x.w;
  std::vector<float> wp(out_channels * 9 * B * L, 0.f);  // [o][ky][kx][cb][16]
  for (int64_t o = 0; o < out_channels; ++o) {
    for (int64_t c = 0; c < C; ++c) {
      for (int64_t t = 0; t < 9; ++t) wp[(o * 9 + t) * B * L + c] = w[(o * C + c) * 9 + t];
    }
  }
  at::parallel_for(0, x.n * H, 1, [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) {
      const int64_t n = k / H, row = k % H;
      Kernels().ConvToPlainRow(x, n, row, wp.data(), bias, out_channels,
                               y + (n * out_channels * H + row) * W, H * W);
    }
  });
}

void ConvToPlainBackwardWeights(const View& x, const float* dy, int64_t out_channels, float* dw,
                                float* db) {
  const int64_t B = x.blocks(), C = x.c, H = x.h, W = x.w;
  const int64_t size = out_channels * 9 * B * L;
  std::vector<double> per_sample(x.n * size), bias_sums(x.n * out_channels);
  at::parallel_for(0, x.n, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> row_acc(size);
    for (int64_t n = begin; n < end; ++n) {
      double* total = &per_sample[n * size];
      const float* g = dy + n * out_channels * H * W;
      for (int64_t row = 0; row < H; ++row) {
        std::fill(row_acc.begin(), row_acc.end(), 0.f);
        Kernels().ConvToPlainWeightsRow(x, n, row, g, out_channels, row_acc.data());
        for (int64_t j = 0; j < size; ++j) total[j] += row_acc[j];
      }
      for (int64_t o = 0; o < out_channels; ++o) {
        double s = 0;
        for (int64_t j = 0; j < H * W; ++j) s += g[o * H * W + j];
        bias_sums[n * out_channels + o] = s;
      }
    }
  });
  for (int64_t o = 0; o < out_channels; ++o) {
    for (int64_t c = 0; c < C; ++c) {
      for (int64_t t = 0; t < 9; ++t) {
        double s = 0;
        for (int64_t n = 0; n < x.n; ++n) s += per_sample[n * size + (o * 9 + t) * B * L + c];
        dw[(o * C + c) * 9 + t] = float(s);
      }
    }
    if (db) {
      double s = 0;
      for (int64_t n = 0; n < x.n; ++n) s += bias_sums[n * out_channels + o];
      db[o] = float(s);
    }
  }
}

void AddToEverySample(const View& x, const View& one) {
  const int64_t per_block = x.h * x.w * L, B = x.blocks();
  at::parallel_for(0, x.n * B, 1, [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) {
      const int64_t i = k / B, cb = k % B;
      float* xs = x.sample(i) + cb * x.block_stride();
      const float* os = one.sample(0) + cb * one.block_stride();
      for (int64_t j = 0; j < per_block; ++j) xs[j] += os[j];
    }
  });
}

void SumOverBatch(const View& x, const View& out) {
  const int64_t per_block = x.h * x.w * L, B = x.blocks();
  at::parallel_for(0, B * x.h, 1, [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) {
      const int64_t cb = k / x.h, row = k % x.h;
      const int64_t offset = cb * x.block_stride() + row * x.w * L;
      float* o = out.sample(0) + cb * out.block_stride() + row * x.w * L;
      for (int64_t j = 0; j < x.w * L; ++j) o[j] = 0.f;
      for (int64_t i = 0; i < x.n; ++i) {
        const float* xs = x.sample(i) + offset;
        for (int64_t j = 0; j < x.w * L; ++j) o[j] += xs[j];
      }
    }
  });
  (void)per_block;
}

void ToPlain(const View& x, float* y) {
  const int64_t HW = x.h * x.w;
  at::parallel_for(0, x.n * x.c, 1, [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) {
      const int64_t i = k / x.c, c = k % x.c;
      const float* src = x.sample(i) + (c / L) * x.block_stride() + c % L;
      float* dst = y + k * HW;
      for (int64_t q = 0; q < HW; ++q) dst[q] = src[q * L];
    }
  });
}

void FromPlain(const float* x, const View& y) {
  const int64_t HW = y.h * y.w, B = y.blocks();
  at::parallel_for(0, y.n * B, 1, [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) {
      const int64_t i = k / B, cb = k % B;
      float* dst = y.sample(i) + cb * y.block_stride();
      for (int64_t q = 0; q < HW; ++q) {
        for (int64_t l = 0; l < L; ++l) {
          const int64_t c = cb * L + l;
          dst[q * L + l] = c < y.c ? x[(i * y.c + c) * HW + q] : 0.f;
        }
      }
    }
  });
}

}  // namespace keycld::blocked
