#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace hotloop::log::detail {

/// One line of a line chart: the points (x[i], y[i]) in that order.
/// Requires x and y of equal length; points with a NaN or infinite
/// coordinate are not drawn.
struct Series {
  std::string name;
  std::vector<double> x;
  std::vector<double> y;
};

/// Whether `series` has a point a chart can draw.
bool has_finite_point(const Series& series);

/// The text around a line chart.
struct LineChartLabels {
  /// The `id` of the <svg>, e.g. `chart-loss`.
  std::string id;
  std::string title;
  std::string x_label;
  std::string y_label;
};

/// Series longer than this many drawn points are thinned to it.
constexpr size_t kMaxDrawnPoints = 2400;

/// An inline `<svg id="<id>">` line chart: title, axes with round-number
/// ticks and grid lines, the axis labels, and a legend below. Each series
/// with a finite point is one `<polyline data-series="<name>">` whose
/// `points` are its finite points in order; a series of more than
/// kMaxDrawnPoints points is thinned to the first, last, lowest and highest
/// point of equal runs, which keeps its shape and extremes. Short series
/// also get a dot with a tooltip per point. All text is escaped. Scales
/// with the page width (viewBox, no fixed size). Requires a series with a
/// finite point.
std::string svg_line_chart(
    const LineChartLabels& labels, const std::vector<Series>& series);

/// One bar of a share chart.
struct Share {
  std::string label;
  double value = 0;
};

/// An inline `<svg id="<id>">` chart of how `shares` split their total:
/// a stacked 100% bar above one horizontal bar per share, labelled with its
/// percentage and value. Each share's bar is a `<path data-series="<label>">`.
/// Shares with a negative or non-finite value are left out. Requires a
/// positive total.
std::string svg_share_chart(
    const std::string& id,
    const std::string& title,
    const std::vector<Share>& shares);

/// Evenly spaced round ticks (1, 2 or 5 times a power of ten apart), about
/// `target` of them, within [lo, hi]. Requires lo < hi, both finite.
std::vector<double> nice_ticks(double lo, double hi, int target);

/// The label of tick `value` on an axis whose ticks are `step` apart and
/// at most `largest` in magnitude: just enough decimals to tell ticks apart
/// (`0.0035`), or, when `largest` is below 1e-3 or from 1e6 on, exponent
/// notation for every tick of the axis (`2.5e-5`).
std::string format_tick(double value, double step, double largest);

/// The line colour of the `index`-th series (a colour-blind-safe palette,
/// cycling).
const char* series_color(size_t index);

} // namespace hotloop::log::detail
