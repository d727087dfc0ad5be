#include "keycld/eval/plot.h"

#include <plplot/plstream.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>

#include "keycld/util/error.h"
#include "keycld/util/image_io.h"

namespace keycld {
namespace {

namespace fs = std::filesystem;

// A qualitative palette (matplotlib's "tab10").
constexpr std::array<std::array<uint8_t, 3>, 10> kPalette = {{{31, 119, 180},
                                                              {255, 127, 14},
                                                              {44, 160, 44},
                                                              {214, 39, 40},
                                                              {148, 103, 189},
                                                              {140, 86, 75},
                                                              {227, 119, 194},
                                                              {127, 127, 127},
                                                              {188, 189, 34},
                                                              {23, 190, 207}}};

// cmap0 layout: 0 background, 1 text and axes, 2 reference lines, 3 grid, then the palette
// opaque (kSeries + i) and translucent for bands (kBand + i).
constexpr int kBackground = 0, kBlack = 1, kReference = 2, kGrid = 3, kSeries = 4,
              kBand = kSeries + int(kPalette.size()), kColours = kBand + int(kPalette.size());

// The plot box in fractions of the page (documented in plot.h).
constexpr double kBoxLeft = 0.10, kBoxRight = 0.96, kBoxBottom = 0.12, kBoxTop = 0.90;
// Line plots with more points than this draw the error as a band instead of bars.
constexpr size_t kMaxErrorBars = 60;

std::mutex& PlotMutex() {
  static std::mutex mutex;
  return mutex;
}

// PLplot ends the process on internal errors; the inputs are validated beforehand so that this
// handler only ever reports, but its message then names the cause.
int ExitHandler(const char* message) {
  std::fprintf(stderr, "keycld: error: PLplot: %s\n", message);
  return 1;
}

void CheckFinite(const std::vector<double>& v, const std::string& what) {
  for (double d : v) {
    if (!std::isfinite(d)) throw InputError("plot: " + what + " holds a non-finite value");
  }
}

void CheckOptions(const PlotOptions& o, const fs::path& png) {
  if (o.width < 64 || o.width > 8192 || o.height < 64 || o.height > 8192) {
    throw InputError("plot '" + png.string() + "': size " + std::to_string(o.width) + "x" +
                     std::to_string(o.height) + " is outside [64, 8192] pixels");
  }
  for (const auto& [v, name] : {std::pair{o.y_min, "y_min"}, std::pair{o.y_max, "y_max"}}) {
    if (v && !std::isfinite(*v)) throw InputError(std::string("plot: ") + name + " is not finite");
  }
  if (o.y_min && o.y_max && !(*o.y_min < *o.y_max)) {
    throw InputError("plot '" + png.string() + "': y_min " + std::to_string(*o.y_min) +
                     " is not below y_max " + std::to_string(*o.y_max));
  }
  CheckFinite(o.h_lines, "h_lines");
}

void CheckSeries(const std::vector<PlotSeries>& series, bool need_x, const fs::path& png) {
  if (series.empty()) throw InputError("plot '" + png.string() + "': no series");
  for (size_t i = 0; i < series.size(); ++i) {
    const PlotSeries& s = series[i];
    const std::string name = "series " + std::to_string(i) + " ('" + s.label + "')";
    if (s.y.empty()) throw InputError("plot '" + png.string() + "': " + name + " is empty");
    if (need_x && s.x.size() != s.y.size()) {
      throw InputError("plot '" + png.string() + "': " + name + " has " +
                       std::to_string(s.x.size()) + " x values and " + std::to_string(s.y.size()) +
                       " y values");
    }
    if (!s.y_err.empty() && s.y_err.size() != s.y.size()) {
      throw InputError("plot '" + png.string() + "': " + name + " has " +
                       std::to_string(s.y_err.size()) + " y_err values for " +
                       std::to_string(s.y.size()) + " y values");
    }
    if (need_x) CheckFinite(s.x, name + " x");
    CheckFinite(s.y, name + " y");
    CheckFinite(s.y_err, name + " y_err");
  }
}

struct Range {
  double lo, hi;
};

// Widens a degenerate range and adds a margin of `margin` of its width on both sides.
Range Pad(Range r, double margin) {
  if (!(r.hi > r.lo)) {
    double d = std::max(1e-12, std::abs(r.lo) * 0.1);
    if (std::abs(r.lo) < 1e-300) d = 1;
    return {r.lo - d, r.hi + d};
  }
  double m = (r.hi - r.lo) * margin;
  return {r.lo - m, r.hi + m};
}

// The y axis range in plot units (log10 of the values when log_y): the data (with errors and
// reference lines) padded by 5 %, replaced by y_min / y_max where given.
Range YRange(const std::vector<PlotSeries>& series, const PlotOptions& o, bool include_zero,
             const fs::path& png) {
  auto to_axis = [&](double v) { return o.log_y ? std::log10(v) : v; };
  if (o.log_y) {
    for (const PlotSeries& s : series) {
      for (double v : s.y) {
        if (!(v > 0)) {
          throw InputError("plot '" + png.string() + "': log y axis but series '" + s.label +
                           "' holds " + std::to_string(v) + " (values must be > 0)");
        }
      }
    }
    for (double v : o.h_lines) {
      if (!(v > 0)) throw InputError("plot '" + png.string() + "': log y axis, h_line <= 0");
    }
    if (o.y_min && !(*o.y_min > 0)) {
      throw InputError("plot '" + png.string() + "': log y axis, y_min must be > 0");
    }
    if (o.y_max && !(*o.y_max > 0)) {
      throw InputError("plot '" + png.string() + "': log y axis, y_max must be > 0");
    }
  }
  Range r{INFINITY, -INFINITY};
  auto add = [&](double v) {
    r.lo = std::min(r.lo, v);
    r.hi = std::max(r.hi, v);
  };
  for (const PlotSeries& s : series) {
    for (size_t i = 0; i < s.y.size(); ++i) {
      add(to_axis(s.y[i]));
      if (!s.y_err.empty()) {
        add(to_axis(s.y[i] + std::abs(s.y_err[i])));
        if (!o.log_y) add(s.y[i] - std::abs(s.y_err[i]));
      }
    }
  }
  for (double v : o.h_lines) add(to_axis(v));
  if (include_zero && !o.log_y) add(0);
  r = Pad(r, 0.05);
  if (include_zero && !o.log_y && r.lo >= -1e-300 && !o.y_min) r.lo = 0;
  if (o.y_min) r.lo = to_axis(*o.y_min);
  if (o.y_max) r.hi = to_axis(*o.y_max);
  if (!(r.hi > r.lo)) {
    throw InputError("plot '" + png.string() + "': empty y range [" + std::to_string(r.lo) + ", " +
                     std::to_string(r.hi) + "]");
  }
  return r;
}

// One PLplot stream drawing into memory (the cairo driver's memory device); Finish() ends the
// stream and writes the pixels as a PNG (WritePng: atomic, every write checked). PLplot's own
// PNG writer is not used: it ignores failed writes and, after one, crashed in plend. The mutex
// is held for the whole life of the object.
class PngStream {
 public:
  PngStream(const fs::path& png, const PlotOptions& o)
      : lock_(PlotMutex()),
        png_(png),
        width_(o.width),
        height_(o.height),
        pixels_(size_t(o.width) * o.height * 3, 255) {
    CheckDriver();
    pls_ = std::make_unique<plstream>();
    pls_->sexit(ExitHandler);
    pls_->sdev("memcairo");
    pls_->smem(o.width, o.height, pixels_.data());
    PLINT r[kColours], g[kColours], b[kColours];
    PLFLT a[kColours];
    auto set = [&](int i, int rr, int gg, int bb, double aa) {
      r[i] = rr;
      g[i] = gg;
      b[i] = bb;
      a[i] = aa;
    };
    set(kBackground, 255, 255, 255, 1);
    set(kBlack, 0, 0, 0, 1);
    set(kReference, 96, 96, 96, 1);
    set(kGrid, 225, 225, 225, 1);
    for (size_t i = 0; i < kPalette.size(); ++i) {
      set(kSeries + int(i), kPalette[i][0], kPalette[i][1], kPalette[i][2], 1);
      set(kBand + int(i), kPalette[i][0], kPalette[i][1], kPalette[i][2], 0.22);
    }
    pls_->scmap0a(r, g, b, a, kColours);
    pls_->init();
    pls_->adv(0);
    pls_->schr(0, 0.9 * std::clamp(std::min(o.width / 900.0, o.height / 560.0), 0.6, 2.5));
    pls_->width(1);
  }

  plstream& operator*() { return *pls_; }
  plstream* operator->() { return pls_.get(); }

  void Finish() {
    pls_.reset();  // plend1: the driver copies its surface into pixels_
    WritePng(png_, pixels_, width_, height_);
  }

 private:
  // An unknown device makes PLplot ask on stdin; check that the cairo driver is installed.
  static void CheckDriver() {
    static const bool available = [] {
      const char* menu[256];
      const char* names[256];
      int n = 256;
      const char** p_menu = menu;
      const char** p_names = names;
      plgDevs(&p_menu, &p_names, &n);
      for (int i = 0; i < n; ++i) {
        if (names[i] && std::strcmp(names[i], "memcairo") == 0) return true;
      }
      return false;
    }();
    if (!available) {
      throw IoError(
          "PLplot's cairo driver (device 'memcairo') was not found: install "
          "plplot-driver-cairo (PLplot lists its drivers through a temporary file, so a full "
          "temporary folder gives this error too)");
    }
  }

  std::lock_guard<std::mutex> lock_;
  fs::path png_;
  int width_, height_;
  std::vector<uint8_t> pixels_;
  std::unique_ptr<plstream> pls_;
};

// Labelled values of a log axis spanning less than two decades, where PLplot would label
// at most one power of ten: 1, 2, 5 × 10^n (every digit when that gives fewer than two).
std::vector<double> LogTickValues(Range y) {
  for (const std::vector<int>& digits :
       {std::vector<int>{1, 2, 5}, std::vector<int>{1, 2, 3, 4, 5, 6, 7, 8, 9}}) {
    std::vector<double> values;
    for (int n = int(std::floor(y.lo)) - 1; n <= int(std::ceil(y.hi)); ++n) {
      for (int d : digits) {
        double lv = std::log10(d) + n;
        if (lv >= y.lo && lv <= y.hi) values.push_back(lv);
      }
    }
    if (values.size() >= 2) return values;
  }
  return {};
}

// Axes box with a light grid, labels and title; `log_y` labels the y axis in decades (or at
// 1, 2, 5 × 10^n for a range under two decades).
void DrawFrame(plstream& pls, const PlotOptions& o, const char* x_opt, Range y) {
  const bool grid_x = x_opt[0] == 'g';
  const std::vector<double> ticks =
      o.log_y && y.hi - y.lo < 2 ? LogTickValues(y) : std::vector<double>{};
  pls.col0(kGrid);
  if (ticks.empty()) {
    pls.box(grid_x ? "g" : "", 0, 0, o.log_y ? "gl" : "g", 0, 0);
  } else {
    pls.box(grid_x ? "g" : "", 0, 0, "", 0, 0);
    PLFLT x_lo, x_hi, y_lo, y_hi;
    pls.gvpw(x_lo, x_hi, y_lo, y_hi);
    for (double v : ticks) pls.join(x_lo, v, x_hi, v);
  }
  pls.col0(kBlack);
  pls.box(x_opt + (grid_x ? 1 : 0), 0, 0,
          o.log_y ? (ticks.empty() ? "bcnstvl" : "bcstvl") : "bcnstv", 0, 0);
  size_t longest = 0;
  for (double v : ticks) {
    // Compact labels: "0.02", "0.5", "20", but "5e-4" and "2e5" far from 1.
    const double value = std::pow(10.0, v);
    char label[32];
    if (value < 0.01 || value >= 1e4) {
      const int exponent = int(std::floor(v + 1e-9));
      std::snprintf(label, sizeof label, "%.0fe%d", value / std::pow(10.0, exponent), exponent);
    } else {
      std::snprintf(label, sizeof label, "%g", value);
    }
    pls.mtex("lv", 0.7, (v - y.lo) / (y.hi - y.lo), 1.0, label);
    longest = std::max(longest, std::strlen(label));
  }
  if (ticks.empty()) {
    pls.lab(o.x_label.c_str(), o.y_label.c_str(), o.title.c_str());
  } else {
    // The y label clears the tick labels: about 0.75 character heights per character.
    pls.lab(o.x_label.c_str(), "", o.title.c_str());
    pls.mtex("l", 1.9 + 0.75 * double(longest), 0.5, 0.5, o.y_label.c_str());
  }
}

// Dashed horizontal reference lines across the box.
void DrawReferenceLines(plstream& pls, const PlotOptions& o, double x_lo, double x_hi) {
  if (o.h_lines.empty()) return;
  pls.col0(kReference);
  pls.width(1.5);
  pls.lsty(2);
  for (double v : o.h_lines) {
    double y = o.log_y ? std::log10(v) : v;
    pls.join(x_lo, y, x_hi, y);
  }
  pls.lsty(1);
}

// Legend in the top-right corner of the box for the labelled series.
void DrawLegend(plstream& pls, const std::vector<PlotSeries>& series, bool boxes) {
  std::vector<PLINT> opt, colours, styles, patterns;
  std::vector<PLFLT> widths, scales;
  std::vector<const char*> text;
  for (size_t i = 0; i < series.size(); ++i) {
    if (series[i].label.empty()) continue;
    opt.push_back(boxes ? PL_LEGEND_COLOR_BOX : PL_LEGEND_LINE);
    colours.push_back(kSeries + PLINT(i % kPalette.size()));
    styles.push_back(1);
    patterns.push_back(0);
    widths.push_back(2.5);
    scales.push_back(0.8);
    text.push_back(series[i].label.c_str());
  }
  if (text.empty()) return;
  std::vector<PLINT> text_colours(text.size(), kBlack);
  PLFLT w = 0, h = 0;
  pls.legend(&w, &h, PL_LEGEND_BACKGROUND | PL_LEGEND_BOUNDING_BOX,
             PL_POSITION_TOP | PL_POSITION_RIGHT | PL_POSITION_INSIDE | PL_POSITION_VIEWPORT, 0.01,
             0.01, 0.06, kBackground, kBlack, 1, 0, 0, PLINT(text.size()), opt.data(), 0.8, 0.9,
             2.0, 0.0, text_colours.data(), text.data(), colours.data(), patterns.data(),
             scales.data(), widths.data(), colours.data(), styles.data(), widths.data(), nullptr,
             nullptr, nullptr, nullptr);
}

}  // namespace

std::array<uint8_t, 3> PlotSeriesColor(size_t index) { return kPalette[index % kPalette.size()]; }

void WriteLinePlot(const fs::path& png, const std::vector<PlotSeries>& series,
                   const PlotOptions& options) {
  CheckOptions(options, png);
  CheckSeries(series, /*need_x=*/true, png);
  Range y = YRange(series, options, /*include_zero=*/false, png);
  Range x{INFINITY, -INFINITY};
  for (const PlotSeries& s : series) {
    for (double v : s.x) {
      x.lo = std::min(x.lo, v);
      x.hi = std::max(x.hi, v);
    }
  }
  if (!(x.hi > x.lo)) x = Pad(x, 0);
  auto to_axis = [&](double v) { return options.log_y ? std::log10(v) : v; };
  // Lower end of an error on the axis: clipped to the bottom of a log axis.
  auto lower = [&](double v, double e) {
    double lo = v - std::abs(e);
    return options.log_y ? (lo > 0 ? std::max(std::log10(lo), y.lo) : y.lo) : lo;
  };

  PngStream stream(png, options);
  plstream& pls = *stream;
  pls.vpor(kBoxLeft, kBoxRight, kBoxBottom, kBoxTop);
  pls.wind(x.lo, x.hi, y.lo, y.hi);
  DrawFrame(pls, options, "gbcnst", y);
  DrawReferenceLines(pls, options, x.lo, x.hi);
  for (size_t i = 0; i < series.size(); ++i) {
    const PlotSeries& s = series[i];
    const PLINT n = PLINT(s.y.size());
    std::vector<PLFLT> ys(n);
    for (PLINT j = 0; j < n; ++j) ys[j] = to_axis(s.y[j]);
    if (!s.y_err.empty()) {
      std::vector<PLFLT> lo(n), hi(n);
      for (PLINT j = 0; j < n; ++j) {
        lo[j] = lower(s.y[j], s.y_err[j]);
        hi[j] = to_axis(s.y[j] + std::abs(s.y_err[j]));
      }
      if (s.y.size() > kMaxErrorBars) {
        std::vector<PLFLT> px(s.x), py(hi);
        px.insert(px.end(), s.x.rbegin(), s.x.rend());
        py.insert(py.end(), lo.rbegin(), lo.rend());
        pls.col0(kBand + PLINT(i % kPalette.size()));
        pls.fill(PLINT(px.size()), px.data(), py.data());
      } else {
        pls.col0(kSeries + PLINT(i % kPalette.size()));
        pls.width(1.5);
        pls.erry(n, s.x.data(), lo.data(), hi.data());
      }
    }
    pls.col0(kSeries + PLINT(i % kPalette.size()));
    pls.width(2.5);
    if (n == 1 || s.markers) {
      pls.ssym(0, 1.5);
      pls.poin(n, s.x.data(), ys.data(), 17);
    } else {
      pls.line(n, s.x.data(), ys.data());
    }
  }
  pls.width(1);
  DrawLegend(pls, series, /*boxes=*/false);
  stream.Finish();
}

void WriteBarChart(const fs::path& png, const std::vector<std::string>& categories,
                   const std::vector<PlotSeries>& series, const PlotOptions& options) {
  CheckOptions(options, png);
  CheckSeries(series, /*need_x=*/false, png);
  if (categories.empty()) throw InputError("bar chart '" + png.string() + "': no categories");
  for (size_t i = 0; i < series.size(); ++i) {
    if (series[i].y.size() != categories.size()) {
      throw InputError("bar chart '" + png.string() + "': series " + std::to_string(i) + " ('" +
                       series[i].label + "') has " + std::to_string(series[i].y.size()) +
                       " values for " + std::to_string(categories.size()) + " categories");
    }
  }
  Range y = YRange(series, options, /*include_zero=*/true, png);
  const int nc = int(categories.size()), ns = int(series.size());
  auto to_axis = [&](double v) { return options.log_y ? std::log10(v) : v; };
  const double base = options.log_y ? y.lo : std::clamp(0.0, y.lo, y.hi);

  PngStream stream(png, options);
  plstream& pls = *stream;
  pls.vpor(kBoxLeft, kBoxRight, kBoxBottom, kBoxTop);
  pls.wind(-0.5, nc - 0.5, y.lo, y.hi);
  DrawFrame(pls, options, "bc", y);
  for (int c = 0; c < nc; ++c) {
    pls.mtex("b", 1.5, (c + 0.5) / nc, 0.5, categories[c].c_str());
  }
  const double group = 0.8, bar = group / ns;
  for (int i = 0; i < ns; ++i) {
    const PlotSeries& s = series[i];
    for (int c = 0; c < nc; ++c) {
      double x0 = c - group / 2 + i * bar, x1 = x0 + bar * 0.92;
      double top = std::clamp(to_axis(s.y[c]), y.lo, y.hi);
      double b = base;
      PLFLT px[4] = {x0, x1, x1, x0}, py[4] = {b, b, top, top};
      pls.col0(kSeries + PLINT(i % kPalette.size()));
      pls.fill(4, px, py);
      if (!s.y_err.empty()) {
        double lo = s.y[c] - std::abs(s.y_err[c]);
        PLFLT ex = (x0 + x1) / 2;
        PLFLT elo = options.log_y ? (lo > 0 ? std::max(std::log10(lo), y.lo) : y.lo) : lo;
        PLFLT ehi = to_axis(s.y[c] + std::abs(s.y_err[c]));
        pls.col0(kBlack);
        pls.width(1.5);
        pls.erry(1, &ex, &elo, &ehi);
        pls.width(1);
      }
    }
  }
  DrawReferenceLines(pls, options, -0.5, nc - 0.5);
  pls.width(1);
  DrawLegend(pls, series, /*boxes=*/true);
  stream.Finish();
}

void WriteHeatMap(const fs::path& png, const std::vector<double>& values, int nx, int ny,
                  double x_min, double x_max, double y_min, double y_max,
                  const std::string& colorbar_label, const PlotOptions& options) {
  CheckOptions(options, png);
  if (nx < 1 || ny < 1 || values.size() != size_t(nx) * size_t(ny)) {
    throw InputError("heat map '" + png.string() + "': " + std::to_string(values.size()) +
                     " values for a grid of " + std::to_string(ny) + "x" + std::to_string(nx));
  }
  CheckFinite(values, "heat map values");
  if (!std::isfinite(x_min) || !std::isfinite(x_max) || !(x_min < x_max) || !std::isfinite(y_min) ||
      !std::isfinite(y_max) || !(y_min < y_max)) {
    throw InputError("heat map '" + png.string() + "': empty or non-finite axis range");
  }
  std::vector<double> z(values);
  if (options.log_y) {
    for (double& v : z) {
      if (!(v > 0)) throw InputError("heat map '" + png.string() + "': log scale, value <= 0");
      v = std::log10(v);
    }
    if ((options.y_min && !(*options.y_min > 0)) || (options.y_max && !(*options.y_max > 0))) {
      throw InputError("heat map '" + png.string() + "': log scale, colour range must be > 0");
    }
  }
  auto to_scale = [&](double v) { return options.log_y ? std::log10(v) : v; };
  Range zr{*std::min_element(z.begin(), z.end()), *std::max_element(z.begin(), z.end())};
  if (options.y_min) zr.lo = to_scale(*options.y_min);
  if (options.y_max) zr.hi = to_scale(*options.y_max);
  if (!(zr.hi > zr.lo)) zr = Pad(zr, 0);
  PngStream stream(png, options);
  plstream& pls = *stream;
  // Colour map 1: viridis through five control points.
  PLFLT pos[5] = {0, 0.25, 0.5, 0.75, 1};
  PLFLT r[5] = {68 / 255., 59 / 255., 33 / 255., 94 / 255., 253 / 255.};
  PLFLT g[5] = {1 / 255., 82 / 255., 145 / 255., 201 / 255., 231 / 255.};
  PLFLT b[5] = {84 / 255., 139 / 255., 140 / 255., 98 / 255., 37 / 255.};
  pls.scmap1n(256);
  pls.scmap1l(true, 5, pos, r, g, b);
  pls.vpor(kBoxLeft, 0.80, kBoxBottom, kBoxTop);
  pls.wind(x_min, x_max, y_min, y_max);
  // One filled rectangle per cell, coloured through cmap1. Each cell but the last column / row
  // reaches one pixel into its neighbour, which hides the seams of anti-aliased edges.
  const double dx = (x_max - x_min) / nx, dy = (y_max - y_min) / ny;
  const double px = (x_max - x_min) / ((0.80 - kBoxLeft) * options.width);
  const double py = (y_max - y_min) / ((kBoxTop - kBoxBottom) * options.height);
  for (int iy = 0; iy < ny; ++iy) {
    for (int ix = 0; ix < nx; ++ix) {
      double v = std::clamp(z[size_t(iy) * nx + ix], zr.lo, zr.hi);
      double x0 = x_min + ix * dx, x1 = x0 + dx + (ix + 1 < nx ? px : 0);
      double y0 = y_min + iy * dy, y1 = y0 + dy + (iy + 1 < ny ? py : 0);
      PLFLT cx[4] = {x0, x1, x1, x0}, cy[4] = {y0, y0, y1, y1};
      pls.col1((v - zr.lo) / (zr.hi - zr.lo));
      pls.fill(4, cx, cy);
    }
  }
  pls.col0(kBlack);
  pls.box("bcnst", 0, 0, "bcnstv", 0, 0);
  pls.lab(options.x_label.c_str(), options.y_label.c_str(), options.title.c_str());
  PlotOptions lines = options;
  lines.log_y = false;
  DrawReferenceLines(pls, lines, x_min, x_max);
  // Colour bar to the right of the map.
  PLINT label_opts[1] = {PL_COLORBAR_LABEL_RIGHT};
  const char* labels[1] = {colorbar_label.c_str()};
  const char* axis_opts[1] = {options.log_y ? "bcvtml" : "bcvtm"};
  PLFLT ticks[1] = {0};
  PLINT sub_ticks[1] = {0};
  PLINT n_values[1] = {2};
  PLFLT range[2] = {zr.lo, zr.hi};
  const PLFLT* values_ptr[1] = {range};
  PLFLT w = 0, h = 0;
  pls.colorbar(&w, &h, PL_COLORBAR_IMAGE | PL_COLORBAR_LABEL_RIGHT,
               PL_POSITION_RIGHT | PL_POSITION_OUTSIDE | PL_POSITION_VIEWPORT, 0.03, 0, 0.04, 1.0,
               kBackground, kBlack, 1, 0, 0, 0, 0, 1, label_opts, labels, 1, axis_opts, ticks,
               sub_ticks, n_values, values_ptr);
  stream.Finish();
}

}  // namespace keycld
