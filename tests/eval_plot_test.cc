// Plots: decoded PNG headers, series colours at the pixels the axes put them, bad input.
#include "keycld/eval/plot.h"

#define STB_IMAGE_IMPLEMENTATION  // the one definition for the test binary
#include <gtest/gtest.h>
#include <stb/stb_image.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <thread>

#include "keycld/util/error.h"
#include "test_util.h"

namespace keycld {
namespace {

namespace fs = std::filesystem;

struct Image {
  int width = 0, height = 0, channels = 0;
  std::vector<uint8_t> rgb;  // [height, width, 3]
  std::array<int, 3> At(int x, int y) const {
    const uint8_t* p = &rgb[(size_t(y) * width + x) * 3];
    return {p[0], p[1], p[2]};
  }
};

Image ReadPng(const fs::path& path) {
  Image im;
  EXPECT_TRUE(stbi_info(path.c_str(), &im.width, &im.height, &im.channels)) << path;
  int w = 0, h = 0, c = 0;
  uint8_t* data = stbi_load(path.c_str(), &w, &h, &c, 3);
  if (!data) {
    ADD_FAILURE() << "cannot decode " << path;
    return im;
  }
  im.rgb.assign(data, data + size_t(w) * h * 3);
  stbi_image_free(data);
  return im;
}

bool Near(std::array<int, 3> a, std::array<uint8_t, 3> b, int tol = 12) {
  for (int i = 0; i < 3; ++i) {
    if (std::abs(a[i] - int(b[i])) > tol) return false;
  }
  return true;
}

// Number of pixels of colour `c` in column x, rows [y0, y1).
int CountInColumn(const Image& im, int x, int y0, int y1, std::array<uint8_t, 3> c) {
  int n = 0;
  for (int y = std::max(0, y0); y < std::min(im.height, y1); ++y) n += Near(im.At(x, y), c);
  return n;
}

// The plot box spans [0.10, 0.96] x [0.12, 0.90] of the page (plot.h): the pixel row of axis
// fraction f (0 = bottom of the box, 1 = top).
int RowOf(const Image& im, double f) {
  return int(std::lround((1 - (0.12 + f * (0.90 - 0.12))) * im.height));
}
int ColumnOf(const Image& im, double f, double right = 0.96) {
  return int(std::lround((0.10 + f * (right - 0.10)) * im.width));
}

std::vector<std::string> Files(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  return names;
}

TEST(Plot, LinePlotHasTheAskedSizeAndSeriesColoursWhereTheAxesPutThem) {
  testing::TempDir dir;
  PlotSeries a{"half", {0, 1}, {0.5, 0.5}, {}}, b{"quarter", {0, 0.5, 1}, {0.25, 0.25, 0.25}, {}};
  PlotOptions o;
  o.title = "two lines";
  o.x_label = "x";
  o.y_label = "y";
  o.y_min = 0;
  o.y_max = 1;
  o.width = 400;
  o.height = 300;
  WriteLinePlot(dir / "line.png", {a, b}, o);
  Image im = ReadPng(dir / "line.png");
  EXPECT_EQ(im.width, 400);
  EXPECT_EQ(im.height, 300);
  EXPECT_TRUE(im.channels == 3 || im.channels == 4) << im.channels;
  // Columns in the left half of the box (the legend sits top right).
  for (double fx : {0.1, 0.3, 0.5}) {
    int x = ColumnOf(im, fx);
    EXPECT_GT(CountInColumn(im, x, RowOf(im, 0.5) - 3, RowOf(im, 0.5) + 4, PlotSeriesColor(0)), 0)
        << "x " << x;
    EXPECT_GT(CountInColumn(im, x, RowOf(im, 0.25) - 3, RowOf(im, 0.25) + 4, PlotSeriesColor(1)),
              0);
    // Nowhere else in the column.
    EXPECT_EQ(CountInColumn(im, x, 0, RowOf(im, 0.5) - 4, PlotSeriesColor(0)), 0);
    EXPECT_EQ(CountInColumn(im, x, RowOf(im, 0.5) + 5, im.height, PlotSeriesColor(0)), 0);
    EXPECT_EQ(CountInColumn(im, x, 0, RowOf(im, 0.25) - 4, PlotSeriesColor(1)), 0);
  }
  // White background, black frame at the left edge of the box.
  EXPECT_EQ(im.At(2, 2), (std::array<int, 3>{255, 255, 255}));
  EXPECT_EQ(Files(dir.path()), std::vector<std::string>{"line.png"});
}

TEST(Plot, LogAxisPlacesDecadesLinearly) {
  testing::TempDir dir;
  // y = 1e-2 on [1e-4, 1] is half way up in log10; a rising line 1e-4 -> 1 crosses it mid-plot.
  PlotSeries flat{"", {0, 1}, {1e-2, 1e-2}, {}};
  PlotOptions o;
  o.log_y = true;
  o.y_min = 1e-4;
  o.y_max = 1;
  o.width = 300;
  o.height = 300;
  WriteLinePlot(dir / "log.png", {flat}, o);
  Image im = ReadPng(dir / "log.png");
  int x = ColumnOf(im, 0.5);
  EXPECT_GT(CountInColumn(im, x, RowOf(im, 0.5) - 3, RowOf(im, 0.5) + 4, PlotSeriesColor(0)), 0);
  EXPECT_EQ(CountInColumn(im, x, 0, RowOf(im, 0.5) - 4, PlotSeriesColor(0)), 0);
}

TEST(Plot, ReferenceLinesBandsAndSinglePointsAreDrawn) {
  testing::TempDir dir;
  // 100 points (a band, not bars) y = 1 + i ± 5, one point (50, 20) ± 3, a line at 50.
  // y axis: data [-4, 105] padded by 5 % = [-9.45, 110.45]; x axis [0, 99].
  PlotSeries many{"band", {}, {}, {}};
  for (int i = 0; i < 100; ++i) {
    many.x.push_back(i);
    many.y.push_back(1 + i);
    many.y_err.push_back(5);
  }
  PlotSeries one{"point", {50}, {20}, {3}};
  PlotOptions o;
  o.h_lines = {50};
  o.width = 320;
  o.height = 400;
  WriteLinePlot(dir / "band.png", {many, one}, o);
  Image im = ReadPng(dir / "band.png");
  EXPECT_EQ(im.width, 320);
  auto fy = [](double y) { return (y + 9.45) / 119.9; };
  // A dashed grey pixel of the reference line in some column near its row.
  int grey = 0;
  for (int x = ColumnOf(im, 0); x < ColumnOf(im, 0.5); ++x) {
    for (int dy = -1; dy <= 1; ++dy)
      grey += Near(im.At(x, RowOf(im, fy(50)) + dy), {96, 96, 96}, 30);
  }
  EXPECT_GT(grey, 5);
  // The band: series colour 0 at 22 % over white, 3 units above the line at x = 10.
  const std::array<uint8_t, 3> band = {206, 225, 238};
  int x10 = ColumnOf(im, 10 / 99.0);
  EXPECT_GT(CountInColumn(im, x10, RowOf(im, fy(11 + 3.5)) - 1, RowOf(im, fy(11 + 2.5)) + 1, band),
            0);
  EXPECT_EQ(CountInColumn(im, x10, 0, RowOf(im, fy(11 + 6)), band), 0);
  // The single point: a marker in colour 1.
  int x50 = ColumnOf(im, 50 / 99.0), y20 = RowOf(im, fy(20));
  int marker = 0;
  for (int x = x50 - 3; x <= x50 + 3; ++x) {
    marker += CountInColumn(im, x, y20 - 3, y20 + 4, PlotSeriesColor(1));
  }
  EXPECT_GT(marker, 0);
  EXPECT_EQ(CountInColumn(im, x50, 0, y20 - 12, PlotSeriesColor(1)), 0);
}

TEST(Plot, BarChartBarsReachTheirValue) {
  testing::TempDir dir;
  // Two categories, two series; y axis fixed at [0, 2]; series 0 = 1 in category 0.
  PlotSeries s0{"a", {}, {1, 2}, {0.1, 0.1}}, s1{"b", {}, {0.5, 1.5}, {}};
  PlotOptions o;
  o.y_min = 0;
  o.y_max = 2;
  o.width = 400;
  o.height = 300;
  WriteBarChart(dir / "bar.png", {"one", "two"}, {s0, s1}, o);
  Image im = ReadPng(dir / "bar.png");
  EXPECT_EQ(im.width, 400);
  EXPECT_EQ(im.height, 300);
  // x axis [-0.5, 1.5]: series 0 of category 0 is centred near x = -0.2 (fraction 0.15).
  int x0 = ColumnOf(im, (-0.2 + 0.5) / 2.0);
  EXPECT_TRUE(Near(im.At(x0, RowOf(im, 0.25)), PlotSeriesColor(0)))
      << im.At(x0, RowOf(im, 0.25))[0];
  EXPECT_FALSE(Near(im.At(x0, RowOf(im, 0.75)), PlotSeriesColor(0)));
  // Series 1 of category 0 (0.5 of 2 = fraction 0.25) near x = 0.2.
  int x1 = ColumnOf(im, (0.2 + 0.5) / 2.0);
  EXPECT_TRUE(Near(im.At(x1, RowOf(im, 0.1)), PlotSeriesColor(1)));
  EXPECT_FALSE(Near(im.At(x1, RowOf(im, 0.4)), PlotSeriesColor(1)));
}

TEST(Plot, HeatMapCellsFollowTheRowMajorLayoutAndTheColourScale) {
  testing::TempDir dir;
  // values [ny = 2, nx = 2] row-major, row 0 = y_min: bottom-left 0, bottom-right 1,
  // top-left 2, top-right 3; viridis ends: 0 -> (68, 1, 84), 3 -> (253, 231, 37).
  PlotOptions o;
  o.width = 500;
  o.height = 400;
  WriteHeatMap(dir / "heat.png", {0, 1, 2, 3}, 2, 2, -1, 1, 0, 10, "value", o);
  Image im = ReadPng(dir / "heat.png");
  EXPECT_EQ(im.width, 500);
  EXPECT_EQ(im.height, 400);
  // The map spans [0.10, 0.80] of the width.
  auto cell = [&](double fx, double fy) { return im.At(ColumnOf(im, fx, 0.80), RowOf(im, fy)); };
  EXPECT_TRUE(Near(cell(0.25, 0.25), {68, 1, 84}));
  EXPECT_TRUE(Near(cell(0.75, 0.75), {253, 231, 37}));
  EXPECT_FALSE(Near(cell(0.75, 0.25), {68, 1, 84}));
  EXPECT_FALSE(Near(cell(0.25, 0.75), {253, 231, 37}));
  EXPECT_NE(cell(0.75, 0.25), cell(0.25, 0.75));
  // A fixed colour range saturates: everything at or above 1 is the top colour.
  o.y_min = 0;
  o.y_max = 1;
  WriteHeatMap(dir / "heat.png", {0, 1, 2, 3}, 2, 2, -1, 1, 0, 10, "value", o);
  im = ReadPng(dir / "heat.png");
  EXPECT_TRUE(Near(cell(0.75, 0.25), {253, 231, 37}));
  EXPECT_TRUE(Near(cell(0.25, 0.75), {253, 231, 37}));
}

TEST(Plot, BadInputThrowsAndLeavesNoFile) {
  testing::TempDir dir;
  const fs::path png = dir / "bad.png";
  PlotOptions o;
  PlotSeries ok{"ok", {0, 1}, {1, 2}, {}};
  EXPECT_THROW(WriteLinePlot(png, {}, o), InputError);
  EXPECT_THROW(WriteLinePlot(png, {PlotSeries{"e", {}, {}, {}}}, o), InputError);
  EXPECT_THROW(WriteLinePlot(png, {PlotSeries{"m", {0, 1, 2}, {1, 2}, {}}}, o), InputError);
  EXPECT_THROW(WriteLinePlot(png, {PlotSeries{"r", {0, 1}, {1, 2}, {1}}}, o), InputError);
  EXPECT_THROW(WriteLinePlot(png, {PlotSeries{"n", {0, 1}, {1, NAN}, {}}}, o), InputError);
  EXPECT_THROW(WriteLinePlot(png, {PlotSeries{"i", {0, INFINITY}, {1, 2}, {}}}, o), InputError);
  PlotOptions log = o;
  log.log_y = true;
  EXPECT_THROW(WriteLinePlot(png, {PlotSeries{"z", {0, 1}, {1, 0}, {}}}, log), InputError);
  PlotOptions inverted = o;
  inverted.y_min = 2;
  inverted.y_max = 1;
  EXPECT_THROW(WriteLinePlot(png, {ok}, inverted), InputError);
  PlotOptions tiny = o;
  tiny.width = 10;
  EXPECT_THROW(WriteLinePlot(png, {ok}, tiny), InputError);
  PlotOptions nan_line = o;
  nan_line.h_lines = {NAN};
  EXPECT_THROW(WriteLinePlot(png, {ok}, nan_line), InputError);
  EXPECT_THROW(WriteBarChart(png, {"a", "b", "c"}, {ok}, o), InputError);
  EXPECT_THROW(WriteBarChart(png, {}, {PlotSeries{"x", {}, {}, {}}}, o), InputError);
  EXPECT_THROW(WriteHeatMap(png, {1, 2, 3}, 2, 2, 0, 1, 0, 1, "", o), InputError);
  EXPECT_THROW(WriteHeatMap(png, {1, 2, 3, NAN}, 2, 2, 0, 1, 0, 1, "", o), InputError);
  EXPECT_THROW(WriteHeatMap(png, {1, 2, 3, 4}, 2, 2, 1, 1, 0, 1, "", o), InputError);
  EXPECT_THROW(WriteHeatMap(png, {1, 2, 3, 0}, 2, 2, 0, 1, 0, 1, "", log), InputError);
  EXPECT_TRUE(Files(dir.path()).empty());
  // An unwritable place: a file where the folder should be.
  std::ofstream(dir / "file") << "x";
  EXPECT_THROW(WriteLinePlot(dir / "file" / "p.png", {ok}, o), IoError);
  EXPECT_EQ(Files(dir.path()), std::vector<std::string>{"file"});
}

TEST(Plot, ConcurrentPlotsFromTwoThreadsBothSucceed) {
  testing::TempDir dir;
  PlotSeries s{"s", {0, 1, 2}, {1, 3, 2}, {}};
  PlotOptions o;
  o.width = 200;
  o.height = 150;
  std::thread t([&] {
    for (int i = 0; i < 3; ++i) WriteLinePlot(dir / ("a" + std::to_string(i) + ".png"), {s}, o);
  });
  for (int i = 0; i < 3; ++i) {
    WriteBarChart(dir / ("b" + std::to_string(i) + ".png"), {"x", "y", "z"}, {s}, o);
  }
  t.join();
  EXPECT_EQ(Files(dir.path()).size(), 6u);
  for (const std::string& f : Files(dir.path())) EXPECT_EQ(ReadPng(dir / f).width, 200) << f;
}

}  // namespace
}  // namespace keycld
