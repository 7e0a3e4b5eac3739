#include "hotloop/log/detail/svg_chart.h"

#include "hotloop/core/error.h"
#include "hotloop/log/detail/html.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace hotloop::log::detail {
namespace {

// Line chart geometry in viewBox units; the page scales the whole <svg>.
constexpr double kWidth = 640;
constexpr double kLeft = 74; // room for tick labels and the y label
constexpr double kRight = kWidth - 20;
constexpr double kTop = 46; // below the title
constexpr double kBottom = kTop + 250;
constexpr double kLegendTop = kBottom + 64;
constexpr double kLegendRow = 24;
// Dots only where they can be told apart.
constexpr size_t kMaxDotted = 60;

// A coordinate with one decimal: finer is invisible and bloats the page.
std::string coord(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%.1f", value);
  return buffer;
}

double nice_step(double span, int target) {
  const double raw = span / std::max(target, 1);
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  const double fraction = raw / power;
  const double nice = fraction < 1.5 ? 1
                      : fraction < 3 ? 2
                      : fraction < 7 ? 5
                                     : 10;
  return nice * power;
}

std::vector<double> ticks_between(double lo, double hi, double step) {
  std::vector<double> ticks;
  // Multiples of step, so that accumulated rounding never shows in labels.
  const double first = std::ceil(lo / step - 1e-9);
  const double last = std::floor(hi / step + 1e-9);
  for (double k = first; k <= last; ++k) {
    const double tick = k * step;
    ticks.push_back(std::abs(tick) < step * 1e-9 ? 0.0 : tick);
  }
  return ticks;
}

// The shown range of an axis and its ticks.
struct Axis {
  double lo = 0;
  double hi = 1;
  double step = 1;
  std::vector<double> ticks;
};

// Steps run from the first to the last logged one; values get round ends
// so that the top and bottom grid lines are labelled.
Axis make_axis(double lo, double hi, int target, bool round_ends) {
  if (!(hi > lo)) {
    const double pad = lo == 0 ? 1 : std::abs(lo) * 0.1;
    lo -= pad;
    hi += pad;
  }
  Axis axis;
  axis.step = nice_step(hi - lo, target);
  axis.lo = round_ends ? std::floor(lo / axis.step) * axis.step : lo;
  axis.hi = round_ends ? std::ceil(hi / axis.step) * axis.step : hi;
  axis.ticks = ticks_between(axis.lo, axis.hi, axis.step);
  return axis;
}

// Indices of the finite points of `series`.
std::vector<size_t> finite_points(const Series& series) {
  HOTLOOP_CHECK(
      series.x.size() == series.y.size(),
      "series '",
      series.name,
      "': ",
      series.x.size(),
      " x values for ",
      series.y.size(),
      " y values");
  std::vector<size_t> points;
  for (size_t i = 0; i < series.x.size(); ++i) {
    if (std::isfinite(series.x[i]) && std::isfinite(series.y[i])) {
      points.push_back(i);
    }
  }
  return points;
}

// At most kMaxDrawnPoints of `points`: the first, lowest, highest and last
// point of each of kMaxDrawnPoints / 4 equal runs, in order. A plot is
// about 550 units wide, so this draws the same picture as all of them.
std::vector<size_t> thin(const Series& series, std::vector<size_t> points) {
  if (points.size() <= kMaxDrawnPoints) {
    return points;
  }
  const size_t runs = kMaxDrawnPoints / 4;
  const size_t run = (points.size() + runs - 1) / runs;
  std::vector<size_t> kept;
  for (size_t begin = 0; begin < points.size(); begin += run) {
    const size_t end = std::min(begin + run, points.size());
    size_t low = begin, high = begin;
    for (size_t i = begin; i < end; ++i) {
      low = series.y[points[i]] < series.y[points[low]] ? i : low;
      high = series.y[points[i]] > series.y[points[high]] ? i : high;
    }
    std::vector<size_t> picks = {begin, low, high, end - 1};
    std::sort(picks.begin(), picks.end());
    picks.erase(std::unique(picks.begin(), picks.end()), picks.end());
    for (const size_t pick : picks) {
      kept.push_back(points[pick]);
    }
  }
  return kept;
}

double largest_tick(const Axis& axis) {
  double largest = 0;
  for (const double tick : axis.ticks) {
    largest = std::max(largest, std::abs(tick));
  }
  return largest;
}

void write_svg_open(
    std::ostringstream& svg,
    const std::string& id,
    const std::string& title,
    double height) {
  const std::string safe_id = html_escape(id);
  svg << "<svg id=\"" << safe_id << "\" class=\"chart\" viewBox=\"0 0 "
      << coord(kWidth) << " " << coord(height)
      << "\" xmlns=\"http://www.w3.org/2000/svg\" role=\"img\" "
         "aria-labelledby=\""
      << safe_id << "-title\">\n"
      << "<title id=\"" << safe_id << "-title\">" << html_escape(title)
      << "</title>\n"
      << "<text class=\"chart-title\" x=\"16\" y=\"26\" font-size=\"16\" "
         "font-weight=\"600\">"
      << html_escape(title) << "</text>\n";
}

void write_axes(
    std::ostringstream& svg,
    const LineChartLabels& labels,
    const Axis& x,
    const Axis& y) {
  const auto sx = [&](double v) {
    return kLeft + (v - x.lo) / (x.hi - x.lo) * (kRight - kLeft);
  };
  const auto sy = [&](double v) {
    return kBottom - (v - y.lo) / (y.hi - y.lo) * (kBottom - kTop);
  };
  svg << "<g class=\"grid\" stroke=\"#e3e6ea\" stroke-width=\"1\">\n";
  for (const double tick : y.ticks) {
    svg << "<line x1=\"" << coord(kLeft) << "\" x2=\"" << coord(kRight)
        << "\" y1=\"" << coord(sy(tick)) << "\" y2=\"" << coord(sy(tick))
        << "\"/>\n";
  }
  for (const double tick : x.ticks) {
    svg << "<line y1=\"" << coord(kTop) << "\" y2=\"" << coord(kBottom)
        << "\" x1=\"" << coord(sx(tick)) << "\" x2=\"" << coord(sx(tick))
        << "\"/>\n";
  }
  svg << "</g>\n<g class=\"axis\" stroke=\"#8a929c\" stroke-width=\"1\">\n"
      << "<line x1=\"" << coord(kLeft) << "\" x2=\"" << coord(kLeft)
      << "\" y1=\"" << coord(kTop) << "\" y2=\"" << coord(kBottom) << "\"/>\n"
      << "<line x1=\"" << coord(kLeft) << "\" x2=\"" << coord(kRight)
      << "\" y1=\"" << coord(kBottom) << "\" y2=\"" << coord(kBottom)
      << "\"/>\n</g>\n<g class=\"ticks\" font-size=\"12\" fill=\"#5b636d\">\n";
  for (const double tick : y.ticks) {
    svg << "<text x=\"" << coord(kLeft - 8) << "\" y=\"" << coord(sy(tick) + 4)
        << "\" text-anchor=\"end\">"
        << format_tick(tick, y.step, largest_tick(y)) << "</text>\n";
  }
  for (const double tick : x.ticks) {
    svg << "<text x=\"" << coord(sx(tick)) << "\" y=\"" << coord(kBottom + 19)
        << "\" text-anchor=\"middle\">"
        << format_tick(tick, x.step, largest_tick(x)) << "</text>\n";
  }
  const double middle = (kTop + kBottom) / 2;
  svg << "</g>\n<g class=\"axis-label\" font-size=\"13\" fill=\"#3b424a\">\n"
      << "<text x=\"" << coord((kLeft + kRight) / 2) << "\" y=\""
      << coord(kBottom + 42) << "\" text-anchor=\"middle\">"
      << html_escape(labels.x_label) << "</text>\n"
      << "<text transform=\"translate(18 " << coord(middle)
      << ") rotate(-90)\" text-anchor=\"middle\">"
      << html_escape(labels.y_label) << "</text>\n</g>\n";
}

// Legend items flow left to right and wrap; text width is estimated, as
// an SVG cannot measure its text without a script.
std::string legend(const std::vector<std::string>& names, int* rows) {
  std::ostringstream svg;
  svg << "<g class=\"legend\" font-size=\"13\" fill=\"#3b424a\">\n";
  double x = kLeft;
  double y = kLegendTop;
  *rows = names.empty() ? 0 : 1;
  for (size_t i = 0; i < names.size(); ++i) {
    const double width = 30 + 7.8 * static_cast<double>(names[i].size()) + 18;
    if (x > kLeft && x + width > kRight) {
      x = kLeft;
      y += kLegendRow;
      ++*rows;
    }
    svg << "<line x1=\"" << coord(x) << "\" x2=\"" << coord(x + 22)
        << "\" y1=\"" << coord(y - 4) << "\" y2=\"" << coord(y - 4)
        << "\" stroke=\"" << series_color(i)
        << "\" stroke-width=\"3\" stroke-linecap=\"round\"/>\n"
        << "<text x=\"" << coord(x + 30) << "\" y=\"" << coord(y) << "\">"
        << html_escape(names[i]) << "</text>\n";
    x += width;
  }
  svg << "</g>\n";
  return svg.str();
}

} // namespace

bool has_finite_point(const Series& series) {
  return !finite_points(series).empty();
}

std::string svg_line_chart(
    const LineChartLabels& labels, const std::vector<Series>& series) {
  std::vector<const Series*> drawn;
  std::vector<std::vector<size_t>> points;
  double x_lo = INFINITY, x_hi = -INFINITY, y_lo = INFINITY, y_hi = -INFINITY;
  for (const Series& s : series) {
    std::vector<size_t> finite = finite_points(s);
    if (finite.empty()) {
      continue;
    }
    for (const size_t i : finite) {
      x_lo = std::min(x_lo, s.x[i]);
      x_hi = std::max(x_hi, s.x[i]);
      y_lo = std::min(y_lo, s.y[i]);
      y_hi = std::max(y_hi, s.y[i]);
    }
    drawn.push_back(&s);
    points.push_back(thin(s, std::move(finite)));
  }
  HOTLOOP_CHECK(
      !drawn.empty(), "chart '", labels.id, "': no series with a finite point");
  const Axis x = make_axis(x_lo, x_hi, 6, /*round_ends=*/false);
  const Axis y = make_axis(y_lo, y_hi, 5, /*round_ends=*/true);
  const auto sx = [&](double v) {
    return kLeft + (v - x.lo) / (x.hi - x.lo) * (kRight - kLeft);
  };
  const auto sy = [&](double v) {
    return kBottom - (v - y.lo) / (y.hi - y.lo) * (kBottom - kTop);
  };

  std::vector<std::string> names;
  for (const Series* s : drawn) {
    names.push_back(s->name);
  }
  int legend_rows = 0;
  const std::string legend_svg = legend(names, &legend_rows);
  std::ostringstream svg;
  write_svg_open(
      svg,
      labels.id,
      labels.title,
      kLegendTop + kLegendRow * (legend_rows - 1) + 10);
  write_axes(svg, labels, x, y);
  for (size_t k = 0; k < drawn.size(); ++k) {
    const Series& s = *drawn[k];
    const std::string name = html_escape(s.name);
    svg << "<polyline class=\"series\" data-series=\"" << name
        << "\" fill=\"none\" stroke=\"" << series_color(k)
        << "\" stroke-width=\"2\" stroke-linejoin=\"round\" "
           "stroke-linecap=\"round\" points=\"";
    for (size_t j = 0; j < points[k].size(); ++j) {
      const size_t i = points[k][j];
      svg << (j ? " " : "") << coord(sx(s.x[i])) << "," << coord(sy(s.y[i]));
    }
    svg << "\"/>\n";
    if (points[k].size() > kMaxDotted) {
      continue;
    }
    // A single point draws no line: the dots make it visible, and their
    // tooltips give exact values without a script.
    svg << "<g class=\"dots\" fill=\"" << series_color(k) << "\">\n";
    for (const size_t i : points[k]) {
      svg << "<circle cx=\"" << coord(sx(s.x[i])) << "\" cy=\""
          << coord(sy(s.y[i])) << "\" r=\"3\"><title>" << name << " at "
          << html_escape(labels.x_label) << " " << format_number(s.x[i]) << ": "
          << format_number(s.y[i]) << "</title></circle>\n";
    }
    svg << "</g>\n";
  }
  svg << legend_svg << "</svg>\n";
  return svg.str();
}

std::string svg_share_chart(
    const std::string& id,
    const std::string& title,
    const std::vector<Share>& shares) {
  std::vector<Share> kept;
  double total = 0, largest = 0;
  for (const Share& share : shares) {
    if (std::isfinite(share.value) && share.value >= 0) {
      kept.push_back(share);
      total += share.value;
      largest = std::max(largest, share.value);
    }
  }
  HOTLOOP_CHECK(
      total > 0 && std::isfinite(total),
      "chart '",
      id,
      "': expected a positive total, got ",
      total);
  constexpr double kBarTop = 46, kBarHeight = 22;
  constexpr double kRowsTop = kBarTop + kBarHeight + 22, kRow = 28;
  constexpr double kLabelRight = 112, kBarLeft = 122;
  // Room right of the longest bar for its "39.5% (60.1)".
  constexpr double kBarMax = kRight - kBarLeft - 130;
  std::ostringstream svg;
  write_svg_open(svg, id, title, kRowsTop + kRow * kept.size() + 4);

  // The stacked bar shows the split at a glance ...
  svg << "<g class=\"stack\">\n";
  double x = 16;
  for (size_t i = 0; i < kept.size(); ++i) {
    const double width = kept[i].value / total * (kRight - 16);
    svg << "<rect x=\"" << coord(x) << "\" y=\"" << coord(kBarTop)
        << "\" width=\"" << coord(width) << "\" height=\"" << coord(kBarHeight)
        << "\" fill=\"" << series_color(i) << "\"><title>"
        << html_escape(kept[i].label) << " "
        << coord(100 * kept[i].value / total) << "%</title></rect>\n";
    x += width;
  }
  // ... the rows compare the phases, scaled to the largest one.
  svg << "</g>\n<g class=\"rows\" font-size=\"13\" fill=\"#3b424a\">\n";
  for (size_t i = 0; i < kept.size(); ++i) {
    const double top = kRowsTop + kRow * i;
    const double width = kept[i].value / largest * kBarMax;
    svg << "<text x=\"" << coord(kLabelRight) << "\" y=\"" << coord(top + 14)
        << "\" text-anchor=\"end\">" << html_escape(kept[i].label)
        << "</text>\n"
        << "<path class=\"bar\" data-series=\"" << html_escape(kept[i].label)
        << "\" fill=\"" << series_color(i) << "\" d=\"M" << coord(kBarLeft)
        << "," << coord(top) << "h" << coord(width) << "v18h-" << coord(width)
        << "z\"/>\n"
        << "<text class=\"value\" x=\"" << coord(kBarLeft + width + 8)
        << "\" y=\"" << coord(top + 14) << "\"><tspan font-weight=\"600\">"
        << coord(100 * kept[i].value / total) << "%</tspan> ("
        << format_number(kept[i].value) << ")</text>\n";
  }
  svg << "</g>\n</svg>\n";
  return svg.str();
}

std::vector<double> nice_ticks(double lo, double hi, int target) {
  HOTLOOP_CHECK(
      std::isfinite(lo) && std::isfinite(hi) && lo < hi,
      "nice_ticks: expected finite lo < hi, got ",
      lo,
      " and ",
      hi);
  return ticks_between(lo, hi, nice_step(hi - lo, target));
}

std::string format_tick(double value, double step, double largest) {
  if (value == 0) {
    return "0";
  }
  char buffer[32];
  const int step_digit = static_cast<int>(std::floor(std::log10(step) + 1e-9));
  if (largest >= 1e6 || largest < 1e-3) {
    // As many mantissa digits as the step needs: 1.2e-5 next to 1.4e-5.
    const int value_digit =
        static_cast<int>(std::floor(std::log10(std::abs(value)) + 1e-9));
    std::snprintf(
        buffer,
        sizeof(buffer),
        "%.*e",
        std::max(0, value_digit - step_digit),
        value);
    // "2.5e-05" -> "2.5e-5", "1e+06" -> "1e6".
    const std::string text = buffer;
    const size_t e = text.find('e');
    return text.substr(0, e) + "e" +
           std::to_string(std::stoi(text.substr(e + 1)));
  }
  std::snprintf(
      buffer, sizeof(buffer), "%.*f", std::max(0, -step_digit), value);
  return buffer;
}

const char* series_color(size_t index) {
  // Okabe and Ito's colour-blind-safe palette, yellow left out (too light
  // on white), then two darker tones.
  constexpr const char* kColors[] = {
      "#0072b2",
      "#e69f00",
      "#009e73",
      "#d55e00",
      "#cc79a7",
      "#56b4e9",
      "#8c6d31",
      "#6a6a6a",
  };
  return kColors[index % (sizeof(kColors) / sizeof(kColors[0]))];
}

} // namespace hotloop::log::detail
