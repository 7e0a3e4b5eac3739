#include "hotloop/log/report.h"

#include "hotloop/core/error.h"
#include "hotloop/log/detail/html.h"
#include "hotloop/log/confusion.h"
#include "hotloop/log/csv.h"
#include "hotloop/log/detail/svg_chart.h"
#include "hotloop/log/metrics_csv.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iomanip>
#include <limits>
#include <optional>
#include <sstream>
#include <system_error>
#include <vector>

namespace hotloop::log {
namespace {

namespace fs = std::filesystem;
// Ordered: tables and the step-time chart keep the order the trainer wrote.
using Json = nlohmann::ordered_json;
using detail::format_number;
using detail::html_escape;
using hotloop::detail::str_cat;

constexpr const char* kStyle = R"css(
:root {
  --bg: #f5f6f8; --card: #ffffff; --text: #1f2328; --muted: #5b636d;
  --border: #e1e4e8; --grid: #e9ecef; --axis: #8a929c; --accent: #0072b2;
  --code: #f6f8fa;
}
@media (prefers-color-scheme: dark) {
  :root {
    --bg: #0f1216; --card: #171b21; --text: #e6e8eb; --muted: #9aa3ad;
    --border: #2a3038; --grid: #262c33; --axis: #5d6670; --accent: #56b4e9;
    --code: #12161b;
  }
}
* { box-sizing: border-box; }
body {
  margin: 0; background: var(--bg); color: var(--text);
  font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto,
    "Helvetica Neue", Arial, sans-serif;
}
main { max-width: 1200px; margin: 0 auto; padding: 32px 24px 48px; }
h1 { font-size: 28px; margin: 2px 0 4px; }
h1 .version { color: var(--muted); font-weight: 400; }
h2 { font-size: 17px; margin: 0 0 12px; }
.eyebrow {
  color: var(--accent); font-size: 12px; font-weight: 600;
  letter-spacing: .08em; text-transform: uppercase;
}
.mono, .path, pre, td.num {
  font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace;
}
.path { color: var(--muted); font-size: 13px; margin: 0; word-break: break-all; }
.sources { display: flex; flex-wrap: wrap; gap: 8px; list-style: none;
  margin: 12px 0 0; padding: 0; }
.sources li { border: 1px solid var(--border); border-radius: 999px;
  font-size: 12px; padding: 2px 10px; }
.sources .found::before { content: "\2713\00a0"; color: #009e73; }
.sources .absent { color: var(--muted); text-decoration: line-through; }
.stats { display: grid; gap: 12px; margin: 24px 0;
  grid-template-columns: repeat(auto-fit, minmax(150px, 1fr)); }
.stat, .card { background: var(--card); border: 1px solid var(--border);
  border-radius: 10px; box-shadow: 0 1px 2px rgba(0, 0, 0, .04); }
.stat { padding: 12px 16px; }
.stat .label { color: var(--muted); font-size: 12px; letter-spacing: .05em;
  text-transform: uppercase; }
.stat .value { font-size: 22px; font-variant-numeric: tabular-nums;
  font-weight: 600; white-space: nowrap; }
.grid { display: grid; gap: 16px; margin-bottom: 16px;
  grid-template-columns: repeat(auto-fit, minmax(min(100%, 520px), 1fr)); }
.card { padding: 16px 18px; margin-bottom: 16px; min-width: 0; }
.grid > .card { margin-bottom: 0; }
svg.chart { display: block; height: auto; width: 100%; }
svg.chart .grid { stroke: var(--grid); }
svg.chart .axis { stroke: var(--axis); }
svg.chart .ticks { fill: var(--muted); }
svg.chart .chart-title, svg.chart .axis-label, svg.chart .legend,
svg.chart .rows { fill: var(--text); }
.missing { color: var(--muted); font-style: italic; margin: 8px 0 0; }
.verdict { background: var(--code); border-left: 4px solid var(--accent);
  border-radius: 0 6px 6px 0; margin: 12px 0 0; padding: 8px 12px; }
.note { color: var(--muted); font-size: 13px; margin: 8px 0 0; }
table { border-collapse: collapse; font-size: 14px; width: 100%; }
th, td { border-bottom: 1px solid var(--border); padding: 6px 10px;
  text-align: left; vertical-align: top; }
th { color: var(--muted); font-weight: 600; }
tr:last-child td { border-bottom: none; }
td.num { font-size: 13px; font-variant-numeric: tabular-nums;
  text-align: right; white-space: nowrap; }
td.text { overflow-wrap: anywhere; }
pre { background: var(--code); border: 1px solid var(--border);
  border-radius: 8px; font-size: 13px; line-height: 1.45; margin: 0;
  max-height: 640px; overflow: auto; padding: 12px 14px; }
footer { color: var(--muted); font-size: 12px; margin-top: 24px;
  text-align: center; }
)css";

// What a run folder holds; a file the folder lacks is nullopt.
struct Run {
  std::string metrics_path;
  std::optional<MetricsTable> metrics;
  std::optional<Json> summary;
  std::optional<std::string> config;
};

std::optional<std::string> read_text(const fs::path& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) {
    return std::nullopt;
  }
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  HOTLOOP_CHECK(!in.bad(), path.string(), ": cannot read");
  return text.str();
}

Json parse_summary(const std::string& path, const std::string& text) {
  Json summary;
  try {
    summary = Json::parse(text);
  } catch (const Json::parse_error& e) {
    throw Error(str_cat(path, ": invalid JSON: ", e.what()));
  }
  HOTLOOP_CHECK(
      summary.is_object(),
      path,
      ": expected a JSON object, got ",
      summary.type_name());
  return summary;
}

Run load_run(const std::string& run_dir) {
  std::error_code ec;
  HOTLOOP_CHECK(fs::is_directory(run_dir, ec), run_dir, ": no such run folder");
  Run run;
  run.metrics_path = (fs::path(run_dir) / "metrics.csv").string();
  if (fs::is_regular_file(run.metrics_path, ec)) {
    run.metrics = read_metrics_csv(run.metrics_path);
    HOTLOOP_CHECK(
        run.metrics->rows() == 0 || run.metrics->has("step"),
        run.metrics_path,
        ": expected a 'step' column to chart against, got columns ",
        [&] {
          std::string names;
          for (const std::string& name : run.metrics->names()) {
            names += (names.empty() ? "" : ", ") + name;
          }
          return names;
        }());
  }
  const fs::path summary_path = fs::path(run_dir) / "summary.json";
  if (const auto text = read_text(summary_path)) {
    run.summary = parse_summary(summary_path.string(), *text);
  }
  run.config = read_text(fs::path(run_dir) / "config.yaml");
  HOTLOOP_CHECK(
      run.metrics || run.summary || run.config,
      run_dir,
      ": expected metrics.csv, summary.json or config.yaml in the run "
      "folder, found none");
  return run;
}

// "fashion_mnist / version_0" for runs/fashion_mnist/version_0.
std::pair<std::string, std::string> run_name(const std::string& run_dir) {
  std::error_code ec;
  fs::path path = fs::weakly_canonical(run_dir, ec);
  if (ec || path.filename().empty()) {
    path = fs::path(run_dir).lexically_normal();
  }
  const std::string leaf = path.filename().string();
  if (leaf.rfind("version_", 0) == 0 && !path.parent_path().empty()) {
    return {path.parent_path().filename().string(), leaf};
  }
  return {leaf, ""};
}

bool contains(const std::string& text, const char* part) {
  return text.find(part) != std::string::npos;
}

std::string json_text(const Json& value) {
  if (value.is_string()) {
    return value.get<std::string>();
  }
  if (value.is_number_float()) {
    return format_number(value.get<double>());
  }
  return value.dump(); // integers, booleans, null, arrays
}

// One table row; numbers right-aligned so that their digits line up.
std::string row(const std::string& key, const Json& value) {
  return str_cat(
      "<tr><td>",
      html_escape(key),
      "</td><td class=\"",
      value.is_number() ? "num" : "text",
      "\">",
      html_escape(json_text(value)),
      "</td></tr>\n");
}

std::string stat(const std::string& label, const std::string& value) {
  return str_cat(
      "<div class=\"stat\"><div class=\"label\">",
      html_escape(label),
      "</div><div class=\"value\">",
      html_escape(value),
      "</div></div>\n");
}

// The numbers a reader looks for first, where summary.json has them.
std::string headline(const Run& run) {
  if (!run.summary) {
    return "";
  }
  const Json& summary = *run.summary;
  const auto number = [&](const char* key) -> std::optional<double> {
    const auto it = summary.find(key);
    if (it == summary.end() || !it->is_number()) {
      return std::nullopt;
    }
    return it->get<double>();
  };
  std::string stats;
  for (const char* key : {"val_acc", "val_loss", "train_loss"}) {
    if (const auto value = number(key)) {
      // An accuracy in [0, 1] reads best as a percentage.
      const bool percent = contains(key, "acc") && *value >= 0 && *value <= 1;
      char text[32];
      std::string label = key;
      std::replace(label.begin(), label.end(), '_', ' ');
      std::snprintf(
          text,
          sizeof(text),
          percent ? "%.2f%%" : "%.4g",
          percent ? 100 * *value : *value);
      stats += stat(label, text);
    }
  }
  for (const char* key : {"epochs", "steps"}) {
    if (const auto value = number(key)) {
      stats += stat(key, format_number(*value));
    }
  }
  if (const auto value = number("wall_s")) {
    stats += stat("wall time", detail::format_duration(*value));
  }
  if (const auto value = number("train_samples_per_s")) {
    stats += stat("samples / s", format_number(std::round(*value)));
  }
  return stats.empty() ? ""
                       : "<section class=\"stats\">\n" + stats + "</section>\n";
}

std::vector<double> values(const MetricsTable::Column& column) {
  std::vector<double> out;
  out.reserve(column.size());
  for (const std::optional<double>& cell : column) {
    out.push_back(cell.value_or(std::numeric_limits<double>::quiet_NaN()));
  }
  return out;
}

// Columns `matches` picks, against step, that have a point to draw.
std::vector<detail::Series> series_of(
    const MetricsTable& metrics,
    const std::function<bool(const std::string&)>& matches) {
  std::vector<detail::Series> series;
  if (metrics.rows() == 0) {
    return series;
  }
  const std::vector<double> steps = values(metrics.column("step"));
  for (const std::string& name : metrics.names()) {
    if (name == "step" || name == "epoch" || !matches(name)) {
      continue;
    }
    detail::Series s{name, steps, values(metrics.column(name))};
    if (detail::has_finite_point(s)) {
      series.push_back(std::move(s));
    }
  }
  return series;
}

std::string missing(
    const std::string& id, const std::string& heading, const std::string& why) {
  return str_cat(
      "<h2>",
      html_escape(heading),
      "</h2>\n<p class=\"missing\" id=\"",
      id,
      "-missing\">",
      html_escape(why),
      "</p>\n");
}

std::string line_chart_card(
    const Run& run,
    const detail::LineChartLabels& labels,
    const std::string& what,
    const std::function<bool(const std::string&)>& matches) {
  std::string body;
  if (!run.metrics) {
    body = missing(
        labels.id,
        labels.title,
        "no " + what + " logged (the run folder has no metrics.csv)");
  } else {
    const std::vector<detail::Series> series = series_of(*run.metrics, matches);
    body = series.empty()
               ? missing(labels.id, labels.title, "no " + what + " logged")
               : detail::svg_line_chart(labels, series);
  }
  return "<div class=\"card\">\n" + body + "</div>\n";
}

// parent[key] when parent is given and that is an object, else null.
const Json* object_at(const Json* parent, const char* key) {
  if (!parent) {
    return nullptr;
  }
  const auto it = parent->find(key);
  return it != parent->end() && it->is_object() ? &*it : nullptr;
}

// The phases with a time to show: a step's phases in the order they run
// (JSON objects keep no order), then any others by name.
std::vector<detail::Share> phase_shares(const Json* phases) {
  static const std::vector<std::string> kStepOrder = {
      "data", "h2d", "forward", "backward", "optimizer", "logging"};
  std::vector<detail::Share> shares;
  if (!phases) {
    return shares;
  }
  auto add = [&](const std::string& phase, const Json& value) {
    if (value.is_number() && std::isfinite(value.get<double>()) &&
        value.get<double>() >= 0) {
      shares.push_back({phase, value.get<double>()});
    }
  };
  for (const std::string& phase : kStepOrder) {
    const auto found = phases->find(phase);
    if (found != phases->end()) {
      add(phase, *found);
    }
  }
  for (const auto& [phase, value] : phases->items()) {
    if (std::find(kStepOrder.begin(), kStepOrder.end(), phase) ==
        kStepOrder.end()) {
      add(phase, value);
    }
  }
  return shares;
}

// The verdict, then the profile's other scalars on one line.
std::string profile_notes(const Json& profile) {
  std::string verdict, rest;
  for (const auto& [key, value] : profile.items()) {
    if (key == "verdict") {
      verdict =
          "<p class=\"verdict\">" + html_escape(json_text(value)) + "</p>\n";
    } else if (!value.is_structured()) {
      rest += str_cat(
          rest.empty() ? "" : " &middot; ",
          html_escape(key),
          " ",
          html_escape(json_text(value)));
    }
  }
  return verdict + (rest.empty() ? "" : "<p class=\"note\">" + rest + "</p>\n");
}

std::string time_card(const Run& run) {
  const std::string id = "chart-time";
  const std::string title = "Where step time goes";
  const Json* profile =
      object_at(run.summary ? &*run.summary : nullptr, "profile");
  // On an asynchronous device the synced steps' phases are the true split.
  const Json* synced = object_at(profile, "synced_phases");
  const bool use_synced = profile && synced && !synced->empty() &&
                          profile->value("asynchronous", false) &&
                          profile->value("synced_steps", 0) > 0;
  const std::vector<detail::Share> shares =
      phase_shares(use_synced ? synced : object_at(profile, "phases"));
  double total = 0;
  for (const detail::Share& share : shares) {
    total += share.value;
  }
  std::string body;
  if (total > 0 && std::isfinite(total)) {
    body = detail::svg_share_chart(id, title, shares);
  } else if (!run.summary) {
    body = missing(
        id,
        title,
        "no step-time profile recorded (the run folder has no summary.json)");
  } else {
    body = missing(
        id,
        title,
        profile ? "no step-time phases in the profile"
                : "no step-time profile recorded");
  }
  return "<div class=\"card\">\n" + body +
         (profile ? profile_notes(*profile) : "") + "</div>\n";
}

// Nested objects flatten to dotted keys: {"a": {"b": 1}} -> a.b = 1.
void flatten(const std::string& prefix, const Json& object, std::string* rows) {
  for (const auto& [key, value] : object.items()) {
    const std::string name = prefix.empty() ? key : prefix + "." + key;
    if (value.is_object()) {
      flatten(name, value, rows);
    } else {
      *rows += row(name, value);
    }
  }
}

std::string table(const std::string& heading, const std::string& rows) {
  return str_cat(
      "<section class=\"card\">\n<h2>",
      html_escape(heading),
      "</h2>\n<table>\n",
      rows,
      "</table>\n</section>\n");
}

// Every top-level value that is no object, then one table per object
// (the profile has its own card).
std::string summary_tables(const Run& run) {
  if (!run.summary) {
    return "";
  }
  std::string scalars, objects;
  for (const auto& [key, value] : run.summary->items()) {
    if (!value.is_object()) {
      scalars += row(key, value);
    } else if (key != "profile") {
      std::string rows;
      flatten("", value, &rows);
      objects += table(key + " (summary.json)", rows);
    }
  }
  const std::string summary =
      scalars.empty() ? "" : table("Summary (summary.json)", scalars);
  return "<div class=\"grid\">\n" + summary + objects + "</div>\n";
}

std::string metric_row(
    const std::string& name, const MetricsTable::Column& column) {
  size_t logged = 0, bad = 0;
  std::optional<double> first, last, low, high;
  for (const std::optional<double>& cell : column) {
    if (!cell) {
      continue;
    }
    ++logged;
    if (!std::isfinite(*cell)) {
      ++bad;
      continue;
    }
    first = first ? first : cell;
    last = cell;
    low = std::min(low.value_or(*cell), *cell);
    high = std::max(high.value_or(*cell), *cell);
  }
  const auto cell = [](const std::optional<double>& value) {
    return "<td class=\"num\">" +
           (value ? html_escape(format_number(*value)) : "&ndash;") + "</td>";
  };
  return str_cat(
      "<tr><td>",
      html_escape(name),
      "</td><td class=\"num\">",
      logged,
      bad ? str_cat(" (", bad, " nan/inf)") : "",
      "</td>",
      cell(first),
      cell(last),
      cell(low),
      cell(high),
      "</tr>\n");
}

std::string metrics_table(const Run& run) {
  if (!run.metrics || run.metrics->rows() == 0) {
    return "";
  }
  std::string rows =
      "<tr><th>metric</th><th>logged</th><th>first</th><th>last</th>"
      "<th>min</th><th>max</th></tr>\n";
  for (const std::string& name : run.metrics->names()) {
    if (name != "step" && name != "epoch") {
      rows += metric_row(name, run.metrics->column(name));
    }
  }
  return table("Metrics (metrics.csv)", rows);
}

// The fit's last validation's confusion matrix (confusion.csv, written at
// the end of a fit of a classifier) as a heat map: each cell shaded by its
// share of the true class's samples, the count written where the cells are
// large.
std::string confusion_card(const std::string& run_dir) {
  const fs::path path = fs::path(run_dir) / "confusion.csv";
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) {
    return "";
  }
  const ConfusionTable table = read_confusion_csv(path.string());
  const auto k = static_cast<int64_t>(table.names.size());
  const int64_t cell = k <= 12 ? 34 : k <= 32 ? 16 : 7;
  size_t longest = 1;
  for (const std::string& name : table.names) {
    longest = std::max(longest, name.size());
  }
  const int64_t label = std::min<int64_t>(
      200, 12 + 7 * static_cast<int64_t>(longest));
  const int64_t width = label + k * cell + 8;
  const int64_t height = label + k * cell + 8;
  std::ostringstream svg;
  svg << "<svg class=\"chart\" viewBox=\"0 0 " << width << " " << height
      << "\" width=\"" << width << "\" role=\"img\" aria-label=\"confusion "
         "matrix\">\n";
  for (int64_t t = 0; t < k; ++t) {
    int64_t total = 0;
    for (const int64_t count : table.counts[t]) {
      total += count;
    }
    const int64_t y = label + t * cell;
    svg << "<text class=\"ticks\" x=\"" << label - 6 << "\" y=\""
        << y + cell / 2 + 4 << "\" text-anchor=\"end\" font-size=\"11\">"
        << html_escape(table.names[t]) << "</text>\n";
    for (int64_t p = 0; p < k; ++p) {
      const int64_t count = table.counts[t][p];
      const double share =
          total > 0 ? static_cast<double>(count) / total : 0.0;
      const int64_t x = label + p * cell;
      svg << "<rect x=\"" << x << "\" y=\"" << y << "\" width=\"" << cell
          << "\" height=\"" << cell << "\" fill=\""
          << (p == t ? "#16a34a" : "#dc2626") << "\" fill-opacity=\""
          << format_number(0.04 + 0.96 * share)
          << "\" stroke=\"var(--grid)\"><title>"
          << html_escape(table.names[t]) << " predicted as "
          << html_escape(table.names[p]) << ": " << count << "</title></rect>\n";
      if (cell >= 30 && count > 0) {
        svg << "<text x=\"" << x + cell / 2 << "\" y=\"" << y + cell / 2 + 4
            << "\" text-anchor=\"middle\" font-size=\"10\" class=\"rows\">"
            << count << "</text>\n";
      }
    }
  }
  for (int64_t p = 0; p < k; ++p) {
    const int64_t x = label + p * cell + cell / 2 + 4;
    svg << "<text class=\"ticks\" transform=\"translate(" << x << " "
        << label - 6 << ") rotate(-90)\" font-size=\"11\">"
        << html_escape(table.names[p]) << "</text>\n";
  }
  svg << "</svg>\n";
  return "<section class=\"card\">\n<h2>Confusion matrix (validation)</h2>\n"
         "<p class=\"note\">Rows: the true class; columns: the prediction; "
         "shade: the share of the row. The fit's last validation, as its "
         "val_acc (confusion.csv).</p>\n" +
         svg.str() + "</section>\n";
}

// The learning-rate range test of `tuner.lr_find` (lr_find.csv: step, lr,
// smoothed loss, the suggested row marked): loss against log10 of the
// rate, and the suggestion.
std::string lr_find_card(const std::string& run_dir) {
  const fs::path path = fs::path(run_dir) / "lr_find.csv";
  std::ifstream in(path);
  if (!in) {
    return "";
  }
  detail::Series curve{"smoothed loss", {}, {}};
  double suggested = 0;
  std::vector<std::string> fields;
  std::string line;
  std::getline(in, line); // header
  while (std::getline(in, line)) {
    if (!split_csv_line(line, &fields) || fields.size() < 4) {
      continue;
    }
    char* end = nullptr;
    const double lr = std::strtod(fields[1].c_str(), &end);
    const double loss = std::strtod(fields[2].c_str(), &end);
    if (!(lr > 0)) {
      continue;
    }
    curve.x.push_back(std::log10(lr));
    curve.y.push_back(loss);
    if (fields[3] == "1") {
      suggested = lr;
    }
  }
  if (!detail::has_finite_point(curve)) {
    return "";
  }
  std::ostringstream note;
  note << "The loss over a range test of rising rates, before training. ";
  if (suggested > 0) {
    note << "Suggested (the steepest descent): " << std::setprecision(3)
         << suggested << ", the rate the fit used.";
  } else {
    note << "No rate was suggested (too few finite points).";
  }
  return "<section class=\"card\">\n" +
      detail::svg_line_chart(
             {"chart-lr-find",
              "Learning-rate range test",
              "log10 learning rate",
              "smoothed loss"},
             {curve}) +
      "<p class=\"note\" id=\"lr-find-note\">" + html_escape(note.str()) +
      " From lr_find.csv.</p>\n</section>\n";
}

std::string config_card(const Run& run) {
  return str_cat(
      "<section class=\"card\">\n<h2>Config (config.yaml)</h2>\n",
      run.config ? "<pre>" + html_escape(*run.config) + "</pre>\n"
                 : "<p class=\"missing\" id=\"config-missing\">no "
                   "config.yaml in the run folder</p>\n",
      "</section>\n");
}

std::string sources(const Run& run) {
  const auto source = [](const char* name, bool found) {
    return str_cat(
        "<li class=\"", found ? "found" : "absent", "\">", name, "</li>");
  };
  return str_cat(
      "<ul class=\"sources\">",
      source("metrics.csv", run.metrics.has_value()),
      source("summary.json", run.summary.has_value()),
      source("config.yaml", run.config.has_value()),
      "</ul>\n");
}

} // namespace

std::string render_run_report(const std::string& run_dir) {
  const Run run = load_run(run_dir);
  const auto [name, version] = run_name(run_dir);
  std::error_code ec;
  const fs::path absolute = fs::absolute(run_dir, ec);
  std::ostringstream html;
  html << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta "
          "charset=\"utf-8\">\n<meta name=\"viewport\" "
          "content=\"width=device-width, initial-scale=1\">\n<title>"
       << html_escape(name) << (version.empty() ? "" : " / ")
       << html_escape(version) << " &middot; hotloop report</title>\n<style>"
       << kStyle << "</style>\n</head>\n<body>\n<main>\n<header>\n"
       << "<div class=\"eyebrow\">hotloop run report</div>\n<h1>"
       << html_escape(name);
  if (!version.empty()) {
    html << " <span class=\"version\">/ " << html_escape(version) << "</span>";
  }
  html << "</h1>\n<p class=\"path\">"
       << html_escape(ec ? run_dir : absolute.lexically_normal().string())
       << "</p>\n"
       << sources(run) << "</header>\n"
       << headline(run) << "<section class=\"grid\">\n"
       << line_chart_card(
              run,
              {"chart-loss", "Loss", "step", "loss"},
              "loss",
              [](const std::string& n) { return contains(n, "loss"); })
       << line_chart_card(
              run,
              {"chart-acc", "Accuracy", "step", "accuracy"},
              "accuracy",
              [](const std::string& n) { return contains(n, "acc"); })
       << line_chart_card(
              run,
              {"chart-lr", "Learning rate", "step", "learning rate"},
              "learning rate",
              [](const std::string& n) { return n.rfind("lr", 0) == 0; })
       << time_card(run) << "</section>\n"
       << confusion_card(run_dir) << lr_find_card(run_dir)
       << summary_tables(run) << metrics_table(run)
       << config_card(run)
       << "<footer>generated by <span class=\"mono\">hotloop report</span>"
          "</footer>\n</main>\n</body>\n</html>\n";
  return html.str();
}

std::string write_run_report(
    const std::string& run_dir, const std::string& output) {
  const std::string path =
      output.empty() ? (fs::path(run_dir) / "report.html").string() : output;
  const std::string html = render_run_report(run_dir);
  // Written beside the target, then renamed over it: a browser or a second
  // report never sees a half-written page.
  const std::string temp = path + ".tmp";
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    out << html;
    out.close();
    if (!out) {
      std::error_code ec;
      fs::remove(temp, ec);
      throw Error(path + ": cannot write the report");
    }
  }
  std::error_code ec;
  fs::rename(temp, path, ec);
  if (ec) {
    const std::string reason = ec.message();
    fs::remove(temp, ec);
    throw Error(path + ": cannot write the report (" + reason + ")");
  }
  return path;
}

} // namespace hotloop::log
