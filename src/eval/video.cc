#include "keycld/eval/video.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <string>

#include "keycld/util/error.h"
#include "keycld/util/image_io.h"

namespace keycld {

namespace {

constexpr int kMaxSide = 16384;

// Bright colours that stand out on the blue-grey scenes and on black heatmaps.
constexpr std::array<Rgb, 6> kKeypointColors = {
    {{255, 60, 60}, {40, 220, 255}, {255, 220, 0}, {60, 255, 90}, {255, 80, 255}, {255, 150, 30}}};

void CheckSize(int width, int height, const char* what) {
  if (width < 1 || height < 1 || width > kMaxSide || height > kMaxSide) {
    throw InputError(std::string(what) + ": size " + std::to_string(width) + "x" +
                     std::to_string(height) + " is outside [1, " + std::to_string(kMaxSide) +
                     "] pixels");
  }
}

}  // namespace

Rgb KeypointColor(int k) { return kKeypointColors[size_t(std::abs(k)) % kKeypointColors.size()]; }

Canvas::Canvas(int width, int height, Rgb fill)
    : width_(width), height_(height), grid_width_(width), grid_height_(height) {
  CheckSize(width, height, "Canvas");
  rgb_.resize(size_t(width) * height * 3);
  for (size_t p = 0; p < rgb_.size(); p += 3) {
    rgb_[p] = fill[0];
    rgb_[p + 1] = fill[1];
    rgb_[p + 2] = fill[2];
  }
}

Canvas Canvas::FromPixels(std::vector<uint8_t> rgb, int width, int height) {
  CheckSize(width, height, "Canvas::FromPixels");
  if (rgb.size() != size_t(width) * height * 3) {
    throw InputError("Canvas::FromPixels: " + std::to_string(rgb.size()) + " bytes are not " +
                     std::to_string(width) + "x" + std::to_string(height) + "x3");
  }
  Canvas c;
  c.width_ = c.grid_width_ = width;
  c.height_ = c.grid_height_ = height;
  c.rgb_ = std::move(rgb);
  return c;
}

Canvas Canvas::FromTensor(const torch::Tensor& image) {
  torch::Tensor hwc;
  if (image.dim() == 3 && image.scalar_type() == torch::kUInt8 && image.size(2) == 3) {
    hwc = image;
  } else if (image.dim() == 3 && image.is_floating_point() && image.size(0) == 3) {
    hwc = (image.detach().to(torch::kFloat32).clamp(0, 1) * 255.0f)
              .round()
              .to(torch::kUInt8)
              .permute({1, 2, 0});
  } else {
    throw InputError("Canvas::FromTensor: expected float [3, H, W] or uint8 [H, W, 3], got " +
                     std::string(image.sizes().vec().size() ? "" : "a scalar") +
                     c10::str(image.sizes()) + " " +
                     std::string(c10::toString(image.scalar_type())));
  }
  hwc = hwc.to(torch::kCPU).contiguous();
  const int h = int(hwc.size(0)), w = int(hwc.size(1));
  const uint8_t* p = hwc.data_ptr<uint8_t>();
  return FromPixels(std::vector<uint8_t>(p, p + size_t(h) * w * 3), w, h);
}

Rgb Canvas::At(int x, int y) const {
  assert(x >= 0 && x < width_ && y >= 0 && y < height_);
  const uint8_t* p = &rgb_[(size_t(y) * width_ + x) * 3];
  return {p[0], p[1], p[2]};
}

void Canvas::Set(int x, int y, Rgb colour) {
  assert(x >= 0 && x < width_ && y >= 0 && y < height_);
  uint8_t* p = &rgb_[(size_t(y) * width_ + x) * 3];
  p[0] = colour[0];
  p[1] = colour[1];
  p[2] = colour[2];
}

Canvas Canvas::Upscaled(int factor) const {
  if (factor < 1) throw InputError("Canvas::Upscaled: factor must be ≥ 1");
  if (int64_t(width_) * factor > kMaxSide || int64_t(height_) * factor > kMaxSide) {
    throw InputError("Canvas::Upscaled: " + std::to_string(width_) + "x" + std::to_string(height_) +
                     " times " + std::to_string(factor) + " exceeds " + std::to_string(kMaxSide) +
                     " pixels");
  }
  Canvas out(width_ * factor, height_ * factor);
  out.grid_width_ = grid_width_;
  out.grid_height_ = grid_height_;
  out.scale_ = scale_ * factor;
  for (int y = 0; y < out.height_; ++y) {
    const uint8_t* src = &rgb_[size_t(y / factor) * width_ * 3];
    uint8_t* dst = &out.rgb_[size_t(y) * out.width_ * 3];
    for (int x = 0; x < out.width_; ++x) std::copy_n(src + (x / factor) * 3, 3, dst + x * 3);
  }
  return out;
}

std::array<double, 2> Canvas::ToPixel(double x, double y) const {
  // Pixel c of the grid has its centre at x = −1 + 2c / (W − 1) (linspace(−1, 1, W)); on a
  // canvas upscaled s times that centre is the middle of block c: s·(c + ½) − ½.
  const double c = grid_width_ > 1 ? (x + 1) / 2 * (grid_width_ - 1) : 0;
  const double r = grid_height_ > 1 ? (1 - y) / 2 * (grid_height_ - 1) : 0;
  return {scale_ * (c + 0.5) - 0.5, scale_ * (r + 0.5) - 0.5};
}

void Canvas::StampSegment(double px0, double py0, double px1, double py1, double radius,
                          Rgb colour) {
  if (!std::isfinite(px0) || !std::isfinite(py0) || !std::isfinite(px1) || !std::isfinite(py1) ||
      !std::isfinite(radius)) {
    return;  // nothing sensible to draw (a diverged keypoint)
  }
  radius = std::max(radius, 0.0);
  const double x_lo = std::min(px0, px1) - radius, x_hi = std::max(px0, px1) + radius;
  const double y_lo = std::min(py0, py1) - radius, y_hi = std::max(py0, py1) + radius;
  const int ix0 = std::max(0, int(std::floor(x_lo))),
            ix1 = std::min(width_ - 1, int(std::ceil(x_hi)));
  const int iy0 = std::max(0, int(std::floor(y_lo))),
            iy1 = std::min(height_ - 1, int(std::ceil(y_hi)));
  const double dx = px1 - px0, dy = py1 - py0, len2 = dx * dx + dy * dy;
  for (int y = iy0; y <= iy1; ++y) {
    for (int x = ix0; x <= ix1; ++x) {
      // Distance from the pixel centre to the segment.
      double t = len2 > 0 ? std::clamp(((x - px0) * dx + (y - py0) * dy) / len2, 0.0, 1.0) : 0;
      double ex = x - (px0 + t * dx), ey = y - (py0 + t * dy);
      if (ex * ex + ey * ey <= radius * radius) Set(x, y, colour);
    }
  }
  // Always mark the pixel under each end point, so that tiny shapes stay visible.
  for (auto [px, py] : {std::pair{px0, py0}, std::pair{px1, py1}}) {
    int x = int(std::lround(px)), y = int(std::lround(py));
    if (x >= 0 && x < width_ && y >= 0 && y < height_) Set(x, y, colour);
  }
}

void Canvas::FillDisc(double x, double y, double radius, Rgb colour) {
  auto [px, py] = ToPixel(x, y);
  StampSegment(px, py, px, py, radius, colour);
}

void Canvas::DrawRing(double x, double y, double radius, double thickness, Rgb colour) {
  auto [px, py] = ToPixel(x, y);
  if (!std::isfinite(px) || !std::isfinite(py)) return;
  const double outer = radius + thickness / 2, inner = std::max(0.0, radius - thickness / 2);
  const int ix0 = std::max(0, int(std::floor(px - outer))),
            ix1 = std::min(width_ - 1, int(std::ceil(px + outer)));
  const int iy0 = std::max(0, int(std::floor(py - outer))),
            iy1 = std::min(height_ - 1, int(std::ceil(py + outer)));
  for (int iy = iy0; iy <= iy1; ++iy) {
    for (int ix = ix0; ix <= ix1; ++ix) {
      double d2 = (ix - px) * (ix - px) + (iy - py) * (iy - py);
      if (d2 <= outer * outer && d2 >= inner * inner) Set(ix, iy, colour);
    }
  }
}

void Canvas::DrawCross(double x, double y, double half_size, double thickness, Rgb colour) {
  auto [px, py] = ToPixel(x, y);
  const double r = thickness / 2;
  StampSegment(px - half_size, py - half_size, px + half_size, py + half_size, r, colour);
  StampSegment(px - half_size, py + half_size, px + half_size, py - half_size, r, colour);
}

void Canvas::DrawLine(double x0, double y0, double x1, double y1, double thickness, Rgb colour) {
  auto [px0, py0] = ToPixel(x0, y0);
  auto [px1, py1] = ToPixel(x1, y1);
  StampSegment(px0, py0, px1, py1, thickness / 2, colour);
}

void Canvas::FillRect(int x0, int y0, int x1, int y1, Rgb colour) {
  for (int y = std::max(0, y0); y < std::min(height_, y1); ++y) {
    for (int x = std::max(0, x0); x < std::min(width_, x1); ++x) Set(x, y, colour);
  }
}

void Canvas::Blit(const Canvas& src, int x, int y) {
  const int x0 = std::max(0, x), x1 = std::min(width_, x + src.width_);
  if (x1 <= x0) return;
  for (int row = std::max(0, y); row < std::min(height_, y + src.height_); ++row) {
    std::copy_n(&src.rgb_[(size_t(row - y) * src.width_ + (x0 - x)) * 3], (x1 - x0) * 3,
                &rgb_[(size_t(row) * width_ + x0) * 3]);
  }
}

Canvas HStack(const std::vector<Canvas>& panels, int gap, Rgb background) {
  if (panels.empty()) throw InputError("HStack: no panels");
  if (gap < 0) throw InputError("HStack: gap must be ≥ 0, got " + std::to_string(gap));
  int width = gap * int(panels.size() - 1), height = 0;
  for (const Canvas& p : panels) {
    if (p.width() < 1) throw InputError("HStack: an empty panel");
    width += p.width();
    height = std::max(height, p.height());
  }
  Canvas out(width, height, background);
  int x = 0;
  for (const Canvas& p : panels) {
    out.Blit(p, x, 0);
    x += p.width() + gap;
  }
  return out;
}

Canvas ColorizeHeatmaps(const torch::Tensor& heatmaps) {
  if (heatmaps.dim() != 3 || heatmaps.size(0) < 1 || heatmaps.size(1) < 1 || heatmaps.size(2) < 1) {
    throw InputError("ColorizeHeatmaps: expected heatmaps [K, H, W], got " +
                     c10::str(heatmaps.sizes()));
  }
  const int K = int(heatmaps.size(0)), H = int(heatmaps.size(1)), W = int(heatmaps.size(2));
  torch::Tensor p = heatmaps.detach().to(torch::kCPU, torch::kFloat32).nan_to_num(0, 0, 0);
  torch::Tensor peak = std::get<0>(p.reshape({K, -1}).max(1)).clamp_min(1e-30).reshape({K, 1, 1});
  torch::Tensor scaled = (p / peak).clamp(0, 1).contiguous();
  const float* s = scaled.data_ptr<float>();
  Canvas out(W, H);
  for (int k = 0; k < K; ++k) {
    const Rgb c = KeypointColor(k);
    for (int y = 0; y < H; ++y) {
      for (int x = 0; x < W; ++x) {
        const float v = s[(size_t(k) * H + y) * W + x];
        Rgb now = out.At(x, y);
        for (int ch = 0; ch < 3; ++ch) {
          now[ch] = std::max(now[ch], uint8_t(std::lround(v * c[ch])));
        }
        out.Set(x, y, now);
      }
    }
  }
  return out;
}

Canvas ErrorImage(const Canvas& truth, const Canvas& predicted, double gain) {
  if (truth.width() != predicted.width() || truth.height() != predicted.height()) {
    throw InputError("ErrorImage: truth is " + std::to_string(truth.width()) + "x" +
                     std::to_string(truth.height()) + ", prediction " +
                     std::to_string(predicted.width()) + "x" + std::to_string(predicted.height()));
  }
  if (!(gain > 0) || !std::isfinite(gain)) throw InputError("ErrorImage: gain must be > 0");
  std::vector<uint8_t> rgb(truth.pixels().size());
  for (size_t i = 0; i < rgb.size(); ++i) {
    double d = std::abs(int(truth.pixels()[i]) - int(predicted.pixels()[i])) * gain;
    rgb[i] = uint8_t(std::min(255.0, std::round(d)));
  }
  Canvas out = Canvas::FromPixels(std::move(rgb), truth.width(), truth.height());
  return out;
}

void WriteGifAnimation(const std::filesystem::path& gif, const std::vector<Canvas>& frames,
                       int delay_cs) {
  if (frames.empty()) throw InputError("GIF '" + gif.string() + "': no frames");
  std::vector<std::span<const uint8_t>> data;
  data.reserve(frames.size());
  for (size_t i = 0; i < frames.size(); ++i) {
    if (frames[i].width() != frames[0].width() || frames[i].height() != frames[0].height()) {
      throw InputError("GIF '" + gif.string() + "': frame " + std::to_string(i) + " is " +
                       std::to_string(frames[i].width()) + "x" +
                       std::to_string(frames[i].height()) + ", frame 0 " +
                       std::to_string(frames[0].width()) + "x" +
                       std::to_string(frames[0].height()));
    }
    data.push_back(frames[i].pixels());
  }
  WriteGif(gif, data, frames[0].width(), frames[0].height(), delay_cs);
}

}  // namespace keycld
