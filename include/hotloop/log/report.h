#pragma once

#include <string>

namespace hotloop::log {

/// The HTML report of the run folder `run_dir` (`runs/<name>/version_N`),
/// as write_run_report writes it: one self-contained page (inline CSS and
/// SVG; no scripts, fonts, images or links to fetch) with
///  - the run's headline numbers and every top-level scalar of summary.json
///    in a table, and each of its objects (such as `model`) in one more;
///  - line charts against `step` of metrics.csv's columns: losses (names
///    containing "loss", `<svg id="chart-loss">`), accuracies ("acc",
///    `chart-acc`) and learning rates (starting "lr", `chart-lr`), each
///    column one `<polyline data-series="<column>">` of its finite points;
///  - where step time goes, from summary.json's `profile.phases`
///    (`chart-time`, one `<path data-series="<phase>">` each), and the
///    profile's `verdict`;
///  - the first, last, lowest and highest value of every metric;
///  - config.yaml verbatim.
/// A chart without data gives a line saying so ("no accuracy logged").
/// Everything taken from the files is HTML-escaped.
///
/// Any of metrics.csv, summary.json and config.yaml may be missing, but
/// not all. Throws Error `<run_dir>: no such run folder`, Error
/// `<run_dir>: expected metrics.csv, summary.json or config.yaml in the run
/// folder, found none`, and for a malformed file an Error naming it (see
/// read_metrics_csv; `<path>: invalid JSON: ...`).
std::string render_run_report(const std::string& run_dir);

/// Writes render_run_report(run_dir) to `output` (default
/// `<run_dir>/report.html`) and returns the path written. The file is
/// replaced atomically (written beside it, then renamed), so a reader never
/// sees half a report. Throws Error `<output>: cannot write the report`.
std::string write_run_report(
    const std::string& run_dir, const std::string& output = "");

} // namespace hotloop::log
