// Video panels: coordinates against the model's coordinate grid, drawing, layout, GIFs read
// back with giflib.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>

#include "gif_test_util.h"
#include "keycld/eval/video.h"
#include "keycld/model/keypoints.h"
#include "keycld/util/error.h"
#include "keycld/util/image_io.h"
#include "test_util.h"

namespace keycld {
namespace {

constexpr Rgb kBlack = {0, 0, 0}, kWhite = {255, 255, 255}, kRed = {255, 0, 0};

int CountColour(const Canvas& c, Rgb colour) {
  int n = 0;
  for (int y = 0; y < c.height(); ++y) {
    for (int x = 0; x < c.width(); ++x) n += c.At(x, y) == colour;
  }
  return n;
}

TEST(Video, ToPixelInvertsTheModelsCoordinateGrid) {
  // A non-square grid, 12 wide and 7 high: the grid coordinates of pixel (c, r) map back to
  // (c, r); on a 4x upscaled canvas to the centre of its 4x4 block, 4c + 1.5.
  auto grid = MakeCoordinateGrid(7, 12, torch::TensorOptions().dtype(torch::kFloat64));
  Canvas c(12, 7);
  Canvas up = c.Upscaled(4);
  EXPECT_EQ(up.width(), 48);
  EXPECT_EQ(up.grid_width(), 12);
  for (int r = 0; r < 7; ++r) {
    for (int col = 0; col < 12; ++col) {
      double x = grid.x[r][col].item<double>(), y = grid.y[r][col].item<double>();
      auto p = c.ToPixel(x, y);
      EXPECT_NEAR(p[0], col, 1e-9);
      EXPECT_NEAR(p[1], r, 1e-9);
      auto q = up.ToPixel(x, y);
      EXPECT_NEAR(q[0], 4 * col + 1.5, 1e-9);
      EXPECT_NEAR(q[1], 4 * r + 1.5, 1e-9);
    }
  }
  // Corners: (−1, +1) is the top-left pixel, (+1, −1) the bottom-right one.
  EXPECT_NEAR(c.ToPixel(-1, 1)[0], 0, 1e-12);
  EXPECT_NEAR(c.ToPixel(1, -1)[1], 6, 1e-12);
}

TEST(Video, DiscAtAKeypointLandsOnItsPixel) {
  // Keypoint at the centre of pixel (3, 12) of a 16x16 image: x = −1 + 2·3/15, y = 1 − 2·12/15.
  const double x = -1 + 2.0 * 3 / 15, y = 1 - 2.0 * 12 / 15;
  Canvas c(16, 16);
  c.FillDisc(x, y, 0.6, kRed);
  EXPECT_EQ(c.At(3, 12), kRed);
  EXPECT_EQ(CountColour(c, kRed), 1);
  // Upscaled 4x: a disc of radius 1 covers the 2x2 pixels around the block centre (13.5, 49.5).
  Canvas up = Canvas(16, 16).Upscaled(4);
  up.FillDisc(x, y, 1.0, kRed);
  for (int px : {13, 14}) {
    for (int py : {49, 50}) EXPECT_EQ(up.At(px, py), kRed) << px << "," << py;
  }
  EXPECT_EQ(CountColour(up, kRed), 4);
  // A larger disc: pixel count close to the area π r².
  Canvas big(64, 64);
  big.FillDisc(0, 0, 10, kRed);
  EXPECT_NEAR(CountColour(big, kRed), M_PI * 100, 20);
  // Off-canvas and non-finite keypoints draw nothing and do not crash.
  Canvas off(8, 8);
  off.FillDisc(5, 5, 2, kRed);
  off.FillDisc(NAN, 0, 2, kRed);
  off.DrawCross(INFINITY, 0, 2, 1, kRed);
  EXPECT_EQ(CountColour(off, kRed), 0);
}

TEST(Video, LinesCrossesAndRingsCoverTheExpectedPixels) {
  Canvas c(16, 16);
  const double row5 = 1 - 2.0 * 5 / 15;
  c.DrawLine(-1, row5, 1, row5, 1.0, kRed);
  for (int x = 0; x < 16; ++x) EXPECT_EQ(c.At(x, 5), kRed) << x;
  EXPECT_EQ(CountColour(c, kRed), 16);
  Canvas cross(16, 16);
  const double x8 = -1 + 2.0 * 8 / 15, y8 = 1 - 2.0 * 8 / 15;
  cross.DrawCross(x8, y8, 3, 1, kRed);
  for (int d = -3; d <= 3; ++d) {
    EXPECT_EQ(cross.At(8 + d, 8 + d), kRed);
    EXPECT_EQ(cross.At(8 + d, 8 - d), kRed);
  }
  EXPECT_EQ(cross.At(8, 5), kBlack);
  EXPECT_EQ(CountColour(cross, kRed), 13);
  Canvas ring(32, 32);
  ring.DrawRing(0, 0, 6, 1, kRed);
  EXPECT_EQ(ring.At(16, 16), kBlack);  // hollow
  EXPECT_NEAR(CountColour(ring, kRed), 2 * M_PI * 6, 8);
}

TEST(Video, UpscaleAndSideBySidePanelsHaveTheExpectedLayout) {
  Canvas a = Canvas::FromPixels({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, 2, 2);
  Canvas up = a.Upscaled(3);
  ASSERT_EQ(up.width(), 6);
  ASSERT_EQ(up.height(), 6);
  EXPECT_EQ(up.At(2, 2), (Rgb{1, 2, 3}));
  EXPECT_EQ(up.At(3, 2), (Rgb{4, 5, 6}));
  EXPECT_EQ(up.At(0, 5), (Rgb{7, 8, 9}));
  EXPECT_EQ(up.At(5, 5), (Rgb{10, 11, 12}));
  Canvas stacked =
      HStack({Canvas(16, 16, kRed), Canvas(8, 10, kBlack), Canvas(4, 20, kRed)}, 2, kWhite);
  EXPECT_EQ(stacked.width(), 16 + 2 + 8 + 2 + 4);
  EXPECT_EQ(stacked.height(), 20);
  EXPECT_EQ(stacked.At(16, 0), kWhite);   // gap
  EXPECT_EQ(stacked.At(18, 9), kBlack);   // panel 2
  EXPECT_EQ(stacked.At(18, 10), kWhite);  // below the shorter panel
  EXPECT_EQ(stacked.At(28, 19), kRed);    // panel 3 starts at 28
  EXPECT_EQ(stacked.At(27, 0), kWhite);
  EXPECT_THROW(HStack({}, 2), InputError);
  EXPECT_THROW(HStack({a}, -1), InputError);
  EXPECT_THROW(a.Upscaled(0), InputError);
  EXPECT_THROW(Canvas::FromPixels({1, 2, 3}, 2, 2), InputError);
}

TEST(Video, TensorsBecomeCanvasesWithRowZeroAtTheTop) {
  torch::Tensor f = torch::zeros({3, 4, 5});
  f[0][1][2] = 1.0;  // red at column 2, row 1
  f[2][3][4] = 0.5;  // half blue at the bottom-right pixel
  Canvas c = Canvas::FromTensor(f);
  EXPECT_EQ(c.width(), 5);
  EXPECT_EQ(c.height(), 4);
  EXPECT_EQ(c.At(2, 1), kRed);
  EXPECT_EQ(c.At(4, 3), (Rgb{0, 0, 128}));
  torch::Tensor u = torch::zeros({4, 5, 3}, torch::kUInt8);
  u[1][2][1] = 200;
  EXPECT_EQ(Canvas::FromTensor(u).At(2, 1), (Rgb{0, 200, 0}));
  EXPECT_THROW(Canvas::FromTensor(torch::zeros({4, 5})), InputError);
  EXPECT_THROW(Canvas::FromTensor(torch::zeros({4, 5, 3})), InputError);  // float HWC
}

TEST(Video, HeatmapsAreTintedPerKeypointAndScaledByTheirPeak) {
  torch::Tensor h = torch::zeros({2, 4, 4});
  h[0][1][1] = 0.5;   // peak of map 0 at column 1, row 1
  h[0][1][2] = 0.25;  // half the peak
  h[1][3][2] = 0.9;   // peak of map 1 at column 2, row 3
  Canvas c = ColorizeHeatmaps(h);
  EXPECT_EQ(c.At(1, 1), KeypointColor(0));
  EXPECT_EQ(c.At(2, 3), KeypointColor(1));
  EXPECT_EQ(c.At(0, 0), kBlack);
  Rgb half = c.At(2, 1);
  for (int ch = 0; ch < 3; ++ch) EXPECT_NEAR(half[ch], KeypointColor(0)[ch] / 2.0, 1.0);
  EXPECT_NE(KeypointColor(0), KeypointColor(1));
  EXPECT_THROW(ColorizeHeatmaps(torch::zeros({4, 4})), InputError);
}

TEST(Video, ErrorImageIsTheAbsoluteDifference) {
  Canvas a = Canvas::FromPixels({10, 200, 0, 50, 50, 50}, 2, 1);
  Canvas b = Canvas::FromPixels({30, 100, 0, 50, 50, 50}, 2, 1);
  Canvas e = ErrorImage(a, b);
  EXPECT_EQ(e.At(0, 0), (Rgb{20, 100, 0}));
  EXPECT_EQ(e.At(1, 0), kBlack);
  EXPECT_EQ(ErrorImage(a, b, 4).At(0, 0), (Rgb{80, 255, 0}));
  EXPECT_THROW(ErrorImage(a, Canvas(1, 1)), InputError);
  EXPECT_THROW(ErrorImage(a, b, 0), InputError);
}

TEST(Video, GifReadsBackWithItsFramesSizeDelayAndColours) {
  testing::TempDir dir;
  // Frames 20x12: a moving red disc on a smooth gradient, a white gap column.
  std::vector<Canvas> frames;
  for (int t = 0; t < 5; ++t) {
    Canvas c(20, 12);
    for (int y = 0; y < 12; ++y) {
      for (int x = 0; x < 20; ++x) c.Set(x, y, {uint8_t(x * 12), uint8_t(y * 20), 90});
    }
    c.FillRect(10, 0, 11, 12, kWhite);
    c.FillDisc(-0.8 + 0.3 * t, 0, 2, KeypointColor(0));
    frames.push_back(c);
  }
  WriteGifAnimation(dir / "a.gif", frames, 3);
  testing::DecodedGif g = testing::ReadGif(dir / "a.gif");
  EXPECT_EQ(g.width, 20);
  EXPECT_EQ(g.height, 12);
  ASSERT_EQ(g.frames.size(), 5u);
  for (size_t t = 0; t < 5; ++t) {
    EXPECT_EQ(g.delays_cs[t], 3);
    EXPECT_EQ(g.frame_width[t], 20);
    int max_err = 0;
    for (size_t i = 0; i < g.frames[t].size(); ++i) {
      max_err = std::max(max_err, std::abs(int(g.frames[t][i]) - int(frames[t].pixels()[i])));
    }
    EXPECT_LE(max_err, 24) << "frame " << t;  // a 256-colour palette of a smooth gradient
    // Flat colours are kept exactly.
    auto [px, py] = frames[t].ToPixel(-0.8 + 0.3 * t, 0);
    const uint8_t* p = &g.frames[t][(size_t(std::lround(py)) * 20 + size_t(std::lround(px))) * 3];
    EXPECT_EQ((Rgb{p[0], p[1], p[2]}), KeypointColor(0));
    const uint8_t* w = &g.frames[t][(size_t(0) * 20 + 10) * 3];  // above the disc
    EXPECT_EQ((Rgb{w[0], w[1], w[2]}), kWhite);
  }
  // Bad input: nothing written.
  EXPECT_THROW(WriteGifAnimation(dir / "b.gif", {}, 3), InputError);
  EXPECT_THROW(WriteGifAnimation(dir / "b.gif", {Canvas(4, 4), Canvas(5, 4)}, 3), InputError);
  EXPECT_THROW(WriteGif(dir / "b.gif", std::vector<std::vector<uint8_t>>{{1, 2}}, 4, 4, 3),
               InputError);
  EXPECT_FALSE(std::filesystem::exists(dir / "b.gif"));
  size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) files += !e.path().empty();
  EXPECT_EQ(files, 1u);
}

}  // namespace
}  // namespace keycld
