// Plots for reports: line plots, grouped bar charts and heat maps as PNG files (PLplot's cairo
// memory device "memcairo", encoded and written by WritePng, every write checked). White
// background, black axes and text, one distinct colour per series (PlotSeriesColor), a legend for
// labelled series. Files are written atomically (a temporary file in the same folder, then
// renamed). PLplot keeps global state, so every plot holds one process-wide mutex: the functions
// are thread-safe but do not run in parallel.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace keycld {

/// One curve (line plot) or one bar per category (bar chart).
struct PlotSeries {
  std::string label;          // legend entry ("" = none)
  std::vector<double> x, y;   // same length >= 1
  std::vector<double> y_err;  // optional: error bars / ±band (same length as y, or empty)
  bool markers = false;       // line plots: a marker at each point instead of a polyline
};

/// Titles, axes and size of a plot.
struct PlotOptions {
  std::string title, x_label, y_label;
  bool log_y = false;                  // log10 y axis (values must be > 0)
  std::optional<double> y_min, y_max;  // default: data range with a margin
  std::vector<double> h_lines;         // dashed horizontal reference lines (e.g. the VPT threshold)
  int width = 900, height = 560;       // pixels
};

/// The RGB colour of series `index` (a 10-colour qualitative palette, repeated): series i of
/// every plot is drawn in PlotSeriesColor(i). Dashed reference lines are dark grey (96, 96, 96).
std::array<uint8_t, 3> PlotSeriesColor(size_t index);

/// Line plot: series[i].y against series[i].x as a polyline (a single point is drawn as a
/// marker); a non-empty y_err adds vertical error bars (≤ 60 points) or a shaded ±band (more).
/// With log_y the errors are clipped at the bottom of the axis. The plot box spans the
/// fractions [0.10, 0.96] × [0.12, 0.90] of the page (left to right, bottom to top).
/// Throws InputError for no series, an empty or mismatched series, non-finite values, y ≤ 0
/// (or a y_min ≤ 0) with log_y, y_min ≥ y_max, or a size outside [64, 8192] pixels; IoError if
/// the file cannot be written.
void WriteLinePlot(const std::filesystem::path& png, const std::vector<PlotSeries>& series,
                   const PlotOptions& options);

/// Grouped bars: categories along x; one bar per series in each group (series[i].y[c], with
/// optional y_err as error bars). x of the series is ignored. Bars start at 0 (at the bottom
/// of the axis with log_y). Throws as WriteLinePlot, and InputError when a series does not
/// have one value per category.
void WriteBarChart(const std::filesystem::path& png, const std::vector<std::string>& categories,
                   const std::vector<PlotSeries>& series, const PlotOptions& options);

/// Heat map of values [ny, nx] row-major (row 0 = y_min), cells spanning [x_min, x_max] ×
/// [y_min, y_max], with a colour bar labelled `colorbar_label`. Here options.y_min / y_max
/// fix the colour scale (default: the data range) and log_y makes it logarithmic (values
/// > 0); h_lines are drawn across the map. Throws InputError for nx, ny < 1, a size mismatch,
/// non-finite values, an empty axis range; IoError if the file cannot be written.
void WriteHeatMap(const std::filesystem::path& png, const std::vector<double>& values, int nx,
                  int ny, double x_min, double x_max, double y_min, double y_max,
                  const std::string& colorbar_label, const PlotOptions& options);

}  // namespace keycld
