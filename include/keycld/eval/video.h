// Video panels: an RGB canvas with nearest-neighbour upscaling, side-by-side panels, discs,
// crosses and lines at normalized image coordinates (KeyCLD §2), coloured heatmaps, error
// images, and animated GIFs of canvases.
#pragma once

#include <torch/torch.h>

#include <array>
#include <cstdint>
#include <filesystem>
#include <vector>

namespace keycld {

using Rgb = std::array<uint8_t, 3>;

/// The colour of keypoint k in every panel (bright, distinct on the benchmark scenes; repeats
/// after 6).
Rgb KeypointColor(int k);

/// An RGB image uint8 [height, width, 3], row 0 = top.
///
/// Drawing takes normalized image coordinates (KeyCLD §2, MakeCoordinateGrid in
/// keycld/model/keypoints.h): x = −1 at the centre of the left column and +1 at the right
/// one, y = +1 at the centre of the top row and −1 at the bottom one, of the canvas's *grid*:
/// the image it was made from. Upscaled() keeps the grid, so a keypoint lands on the centre
/// of the upscaled block of the pixel it names. Sizes in drawing calls are in pixels of this
/// canvas.
class Canvas {
 public:
  Canvas() = default;
  /// A width × height canvas filled with `fill`. Throws InputError unless both are in
  /// [1, 16384].
  Canvas(int width, int height, Rgb fill = {0, 0, 0});
  /// From pixels uint8 [height, width, 3]. Throws InputError on a size mismatch.
  static Canvas FromPixels(std::vector<uint8_t> rgb, int width, int height);
  /// From an image tensor: float [3, H, W] in [0, 1] (a network image; clamped and rounded)
  /// or uint8 [H, W, 3] (a data-set frame), on any device. Throws InputError otherwise.
  static Canvas FromTensor(const torch::Tensor& image);

  int width() const { return width_; }
  int height() const { return height_; }
  /// The resolution whose pixel centres are ±1 (the canvas's own size unless upscaled).
  int grid_width() const { return grid_width_; }
  int grid_height() const { return grid_height_; }
  const std::vector<uint8_t>& pixels() const { return rgb_; }

  /// Pixel (column, row); no bounds check beyond an assertion in debug builds.
  Rgb At(int x, int y) const;
  void Set(int x, int y, Rgb colour);

  /// Nearest-neighbour upscaling: every pixel becomes a factor × factor block. Throws
  /// InputError for factor < 1 or a result larger than 16384 pixels a side.
  Canvas Upscaled(int factor) const;

  /// Continuous pixel position (column, row; integer = pixel centre) of normalized image
  /// coordinates (x, y), for this canvas's grid and scale.
  std::array<double, 2> ToPixel(double x, double y) const;

  /// Filled disc of `radius` pixels centred at normalized (x, y); clipped at the borders.
  void FillDisc(double x, double y, double radius, Rgb colour);
  /// Ring (outline of a disc) of the given thickness in pixels.
  void DrawRing(double x, double y, double radius, double thickness, Rgb colour);
  /// "×"-shaped cross with arms of `half_size` pixels and the given thickness.
  void DrawCross(double x, double y, double half_size, double thickness, Rgb colour);
  /// Line segment between normalized points, `thickness` pixels wide (round caps).
  void DrawLine(double x0, double y0, double x1, double y1, double thickness, Rgb colour);
  /// Axis-aligned filled rectangle in pixels [x0, x1) × [y0, y1), clipped.
  void FillRect(int x0, int y0, int x1, int y1, Rgb colour);
  /// Copies `src` with its top-left corner at pixel (x, y), clipped.
  void Blit(const Canvas& src, int x, int y);

 private:
  // Disc-shaped stamp along a segment in pixel coordinates.
  void StampSegment(double px0, double py0, double px1, double py1, double radius, Rgb colour);

  int width_ = 0, height_ = 0;
  int grid_width_ = 0, grid_height_ = 0;
  int scale_ = 1;
  std::vector<uint8_t> rgb_;
};

/// Panels side by side, top-aligned, `gap` pixels of `background` between them; the result
/// is as high as the highest panel. Throws InputError for no panels or gap < 0.
Canvas HStack(const std::vector<Canvas>& panels, int gap, Rgb background = {255, 255, 255});

/// Heatmaps [K, H, W] (spatial-softmax probabilities, any device) as one image: each map
/// scaled by its maximum (p / max p, as the heatmap loss of KeyCLD §6) and tinted with
/// KeypointColor(k) over black; overlapping maps take the brighter value per channel.
/// Throws InputError for a tensor that is not [K ≥ 1, H ≥ 1, W ≥ 1].
Canvas ColorizeHeatmaps(const torch::Tensor& heatmaps);

/// |truth − predicted| per pixel and channel, times `gain` (clipped to 255): black where the
/// prediction is exact. Throws InputError for canvases of different sizes or gain ≤ 0.
Canvas ErrorImage(const Canvas& truth, const Canvas& predicted, double gain = 1.0);

/// Writes canvases (all of one size) as a looping animated GIF, `delay_cs` hundredths of a
/// second per frame (browsers slow delays below 2 to 10, so use ≥ 2). One global palette is
/// fitted to the frames (keycld/util/image_io.h WriteGif). Throws InputError for no frames or
/// frames of different sizes, IoError if the file cannot be written.
void WriteGifAnimation(const std::filesystem::path& gif, const std::vector<Canvas>& frames,
                       int delay_cs);

}  // namespace keycld
