#include "hotloop/log/report.h"
#include "hotloop/core/error.h"
#include "hotloop/log/confusion.h"
#include "hotloop/log/csv_logger.h"
#include "hotloop/log/detail/svg_chart.h"
#include "hotloop/log/metrics_csv.h"
#include "hotloop/train/lr_monitor.h"
#include "test_util.h"
#include "train/trainer_fixture.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <png.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace hotloop::log {
namespace {

namespace fs = std::filesystem;
using ::testing::DoubleNear;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::Pointwise;
using ::testing::StartsWith;

// Debian's package; HOTLOOP_CHROMIUM points elsewhere (or, set to a path
// that does not exist, checks that the browser tests skip).
std::string chromium() {
  const char* path = std::getenv("HOTLOOP_CHROMIUM");
  return path && *path ? path : "/usr/bin/chromium";
}

// The shared temp folder, plus writing a file into it.
class TempDir : public hotloop::testing::TempDir {
 public:
  /// Writes `text` to file(name) and returns its path.
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(file(name), std::ios::binary) << text;
    return file(name);
  }
};

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The message of the hotloop::Error `statement` throws, for exact checks.
std::string error_of(const std::function<void()>& statement) {
  try {
    statement();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// Lightning's CSVLogger layout: step-level rows carry the training metrics,
// epoch-end rows the validation ones; one training loss is nan.
constexpr const char* kMetricsCsv =
    "epoch,step,lr-AdamW,lr-AdamW/pg1,train_loss,train_samples_per_s,"
    "val_acc,val_acc_top5,val_loss\n"
    "0,49,0.001,0.0005,2.1,5000.5,,,\n"
    "0,99,0.002,0.001,1.5,5100,,,\n"
    "0,99,,,,,0.61,0.9,1.2\n"
    "1,149,0.003,0.0015,nan,5200,,,\n"
    "1,199,0.004,0.002,0.9,5300,,,\n"
    "1,199,,,,,0.75,0.95,0.8\n";

constexpr const char* kSummaryJson = R"json({
  "val_acc": 0.92, "val_loss": 0.23, "train_loss": 0.2, "epochs": 15,
  "steps": 3525, "train_samples_per_s": 5900.1, "wall_s": 165.2,
  "checkpoint": "runs/x/version_0/checkpoints/last.ckpt",
  "profile": {
    "phases": {"data": 1.2, "h2d": 0.0, "forward": 60.1, "backward": 80.3,
               "optimizer": 10.2, "logging": 0.3},
    "verdict": "compute-bound: forward+backward take 92% of step time",
    "samples_per_s": 5900.1},
  "model": {"total_params": 420000, "trainable_params": 420000,
            "size_mb": 1.6}
})json";

constexpr const char* kConfigYaml =
    "trainer:\n  max_epochs: 15\nmodel:\n  name: fashion_cnn\n";

// A run folder `runs/demo/version_0` under `dir` with the given files
// (an empty text leaves that file out).
std::string write_run(
    const TempDir& dir,
    const std::string& metrics,
    const std::string& summary,
    const std::string& config) {
  const fs::path run = fs::path(dir.path()) / "runs" / "demo" / "version_0";
  fs::create_directories(run);
  const auto put = [&](const char* name, const std::string& text) {
    if (!text.empty()) {
      std::ofstream(run / name, std::ios::binary) << text;
    }
  };
  put("metrics.csv", metrics);
  put("summary.json", summary);
  put("config.yaml", config);
  return run.string();
}

std::string full_run(const TempDir& dir) {
  return write_run(dir, kMetricsCsv, kSummaryJson, kConfigYaml);
}

// The <svg id="<id>"> ... </svg> element of `html`, or "" if none.
std::string svg_of(const std::string& html, const std::string& id) {
  const size_t begin = html.find("<svg id=\"" + id + "\"");
  if (begin == std::string::npos) {
    return "";
  }
  return html.substr(begin, html.find("</svg>", begin) + 6 - begin);
}

// The data-series names in `svg`, in order.
std::vector<std::string> series_in(const std::string& svg) {
  std::vector<std::string> names;
  const std::string key = "data-series=\"";
  for (size_t at = svg.find(key); at != std::string::npos;
       at = svg.find(key, at + 1)) {
    const size_t begin = at + key.size();
    names.push_back(svg.substr(begin, svg.find('"', begin) - begin));
  }
  return names;
}

// The `points` attribute of the series called `name` (already escaped).
std::string points_of(const std::string& svg, const std::string& name) {
  const size_t at = svg.find("data-series=\"" + name + "\"");
  if (at == std::string::npos) {
    return "";
  }
  const size_t tag_begin = svg.rfind('<', at);
  const std::string tag = svg.substr(tag_begin, svg.find('>', at) - tag_begin);
  const size_t begin = tag.find("points=\"");
  if (begin == std::string::npos) {
    return "";
  }
  return tag.substr(begin + 8, tag.find('"', begin + 8) - begin - 8);
}

size_t point_count(const std::string& svg, const std::string& name) {
  const std::string points = points_of(svg, name);
  return points.empty() ? 0 : std::count(points.begin(), points.end(), ' ') + 1;
}

// ---------------------------------------------------------------- metrics.csv

TEST(MetricsCsv, ReadsTheHeaderAndEmptyCellsAsNotLogged) {
  TempDir dir;
  const std::string path = dir.write("metrics.csv", kMetricsCsv);
  const MetricsTable table = read_metrics_csv(path);
  EXPECT_THAT(
      table.names(),
      ElementsAre(
          "epoch",
          "step",
          "lr-AdamW",
          "lr-AdamW/pg1",
          "train_loss",
          "train_samples_per_s",
          "val_acc",
          "val_acc_top5",
          "val_loss"));
  EXPECT_EQ(table.rows(), 6u);
  EXPECT_THAT(
      table.column("step"), ElementsAre(49.0, 99.0, 99.0, 149.0, 199.0, 199.0));
  const MetricsTable::Column& val_acc = table.column("val_acc");
  EXPECT_FALSE(val_acc[0].has_value());
  EXPECT_FALSE(val_acc[1].has_value());
  EXPECT_EQ(val_acc[2], 0.61);
  EXPECT_EQ(val_acc[5], 0.75);
  EXPECT_EQ(table.column("train_samples_per_s")[0], 5000.5);
  EXPECT_TRUE(table.has("lr-AdamW/pg1"));
  EXPECT_FALSE(table.has("test_acc"));
  EXPECT_EQ(
      error_of([&] { table.column("test_acc"); }),
      "metrics: no column 'test_acc'");
}

TEST(MetricsCsv, ReadsNanInfAndExponentNotationAsValues) {
  TempDir dir;
  const std::string path = dir.write(
      "metrics.csv",
      "step,a,b,c,d,e\n1,nan,inf,-inf,1e-05,NaN\n2,-2.5E+3,,,.5,\n");
  const MetricsTable table = read_metrics_csv(path);
  EXPECT_TRUE(std::isnan(*table.column("a")[0]));
  EXPECT_EQ(*table.column("b")[0], INFINITY);
  EXPECT_EQ(*table.column("c")[0], -INFINITY);
  EXPECT_EQ(*table.column("d")[0], 1e-05);
  EXPECT_TRUE(std::isnan(*table.column("e")[0]));
  EXPECT_EQ(*table.column("a")[1], -2500.0);
  EXPECT_FALSE(table.column("b")[1].has_value());
  EXPECT_EQ(*table.column("d")[1], 0.5);
}

TEST(MetricsCsv, AcceptsQuotedCellsWindowsLineEndsAndBlankLines) {
  TempDir dir;
  const std::string path = dir.write(
      "metrics.csv",
      "step,\"acc,top1\",\"say \"\"hi\"\"\"\r\n\r\n1,\"0.5\",2\r\n\n");
  const MetricsTable table = read_metrics_csv(path);
  EXPECT_THAT(table.names(), ElementsAre("step", "acc,top1", "say \"hi\""));
  EXPECT_EQ(table.rows(), 1u);
  EXPECT_EQ(table.column("acc,top1")[0], 0.5);
}

TEST(MetricsCsv, AnEmptyFileIsAnEmptyTableAndAHeaderAloneHasNoRows) {
  TempDir dir;
  EXPECT_TRUE(read_metrics_csv(dir.write("empty.csv", "")).names().empty());
  const MetricsTable table =
      read_metrics_csv(dir.write("header.csv", "epoch,step,loss\n"));
  EXPECT_EQ(table.names().size(), 3u);
  EXPECT_EQ(table.rows(), 0u);
}

TEST(MetricsCsv, ARaggedRowNamesTheFileTheLineAndTheCellCounts) {
  TempDir dir;
  const std::string path =
      dir.write("metrics.csv", "epoch,step,loss,acc\n0,1,0.5,0.1\n0,2,0.4\n");
  EXPECT_EQ(
      error_of([&] { read_metrics_csv(path); }),
      path + ":3: expected 4 cells as in the header, got 3");
  const std::string longer = dir.write("longer.csv", "step,loss\n\n1,0.5,7\n");
  EXPECT_EQ(
      error_of([&] { read_metrics_csv(longer); }),
      longer + ":3: expected 2 cells as in the header, got 3");
}

TEST(MetricsCsv, ANonNumericCellNamesTheFileTheLineTheColumnAndTheText) {
  TempDir dir;
  const std::string path =
      dir.write("metrics.csv", "epoch,step,val_acc\n0,10,0.5\n0,20,high\n");
  EXPECT_EQ(
      error_of([&] { read_metrics_csv(path); }),
      path + ":3: expected a number in column 'val_acc', got 'high'");
  const std::string hex = dir.write("hex.csv", "step,loss\n0x10,1\n");
  EXPECT_EQ(
      error_of([&] { read_metrics_csv(hex); }),
      hex + ":2: expected a number in column 'step', got '0x10'");
}

TEST(MetricsCsv, AMalformedHeaderOrMissingFileIsAnError) {
  TempDir dir;
  const std::string twice = dir.write("twice.csv", "step,loss,loss\n");
  EXPECT_EQ(
      error_of([&] { read_metrics_csv(twice); }),
      twice + ":1: expected unique column names, got 'loss' twice");
  const std::string blank = dir.write("blank.csv", "step,,loss\n");
  EXPECT_EQ(
      error_of([&] { read_metrics_csv(blank); }),
      blank +
          ":1: expected a name for every column, got an empty one in "
          "column 2");
  const std::string quote = dir.write("quote.csv", "step,\"loss\n");
  EXPECT_EQ(
      error_of([&] { read_metrics_csv(quote); }),
      quote + ":1: expected a closing quote");
  EXPECT_EQ(
      error_of([&] { read_metrics_csv(dir.file("none.csv")); }),
      dir.file("none.csv") + ": no such file");
}

// ------------------------------------------------------------------ charts

TEST(SvgChart, NiceTicksAreRoundNumbersInsideTheRange) {
  const auto near = [](std::vector<double> ticks) {
    return Pointwise(DoubleNear(1e-12), ticks);
  };
  EXPECT_THAT(detail::nice_ticks(0, 1, 5), near({0, 0.2, 0.4, 0.6, 0.8, 1}));
  EXPECT_THAT(
      detail::nice_ticks(49, 3525, 6),
      near({500, 1000, 1500, 2000, 2500, 3000, 3500}));
  EXPECT_THAT(
      detail::nice_ticks(-0.3, 0.25, 5), near({-0.3, -0.2, -0.1, 0, 0.1, 0.2}));
  // Zero is exactly zero, not -2.7e-17.
  EXPECT_EQ(detail::nice_ticks(-0.3, 0.25, 5)[3], 0.0);
}

TEST(SvgChart, TickLabelsHaveJustEnoughDigits) {
  EXPECT_EQ(detail::format_tick(0, 0.5, 2), "0");
  EXPECT_EQ(detail::format_tick(1500, 500, 3500), "1500");
  EXPECT_EQ(detail::format_tick(0.0035, 0.0005, 0.004), "0.0035");
  EXPECT_EQ(detail::format_tick(0.4, 0.2, 1), "0.4");
  EXPECT_EQ(detail::format_tick(1.2e-5, 2e-6, 2e-5), "1.2e-5");
  EXPECT_EQ(detail::format_tick(8e-6, 2e-6, 2e-5), "8e-6");
  EXPECT_EQ(detail::format_tick(2e6, 1e6, 5e6), "2e6");
}

TEST(SvgChart, ALineChartHasTitleAxesTicksLegendAndOneLinePerSeries) {
  const std::string svg = detail::svg_line_chart(
      {"chart-x", "Loss & co", "step", "loss"},
      {{"train_loss", {0, 50, 100}, {1.0, 0.6, 0.2}},
       {"val_loss", {100}, {0.5}},
       {"empty", {1, 2}, {NAN, INFINITY}}});
  EXPECT_THAT(svg, StartsWith("<svg id=\"chart-x\""));
  EXPECT_THAT(svg, HasSubstr(">Loss &amp; co</text>"));
  EXPECT_THAT(svg, HasSubstr("class=\"axis\""));
  EXPECT_THAT(svg, HasSubstr(">step</text>")); // x label
  EXPECT_THAT(svg, HasSubstr(">loss</text>")); // y label
  for (const char* tick :
       {">0.2</text>",
        ">1.0</text>",
        ">0</text>",
        ">20</text>",
        ">100</text>"}) {
    EXPECT_THAT(svg, HasSubstr(tick));
  }
  EXPECT_THAT(svg, HasSubstr("class=\"legend\""));
  EXPECT_THAT(svg, HasSubstr(">train_loss</text>"));
  EXPECT_THAT(svg, Not(HasSubstr(">empty</text>")));
  EXPECT_THAT(series_in(svg), ElementsAre("train_loss", "val_loss"));
  EXPECT_EQ(point_count(svg, "train_loss"), 3u);
  EXPECT_EQ(point_count(svg, "val_loss"), 1u);
  // A lone point still shows: as a dot.
  EXPECT_THAT(svg, HasSubstr("<title>val_loss at step 100: 0.5</title>"));
}

TEST(SvgChart, AFlatSeriesAtOneStepStillGetsAxesAroundIt) {
  const std::string svg = detail::svg_line_chart(
      {"chart-lr", "LR", "step", "lr"}, {{"lr", {7, 7}, {0.01, 0.01}}});
  EXPECT_EQ(point_count(svg, "lr"), 2u);
  // 0.01 padded by 10% to [0.009, 0.011]; step 7 padded by 1 to [6, 8].
  EXPECT_THAT(svg, HasSubstr(">0.0100</text>"));
  EXPECT_THAT(svg, HasSubstr(">7.0</text>"));
  EXPECT_THAT(points_of(svg, "lr"), StartsWith("347.0,171.0"));
}

TEST(SvgChart, ALongSeriesIsThinnedButKeepsItsShapeAndExtremes) {
  detail::Series series{"loss", {}, {}};
  for (int i = 0; i < 100000; ++i) {
    series.x.push_back(i);
    series.y.push_back(i == 31337 ? 10.0 : i == 77777 ? 0.0 : 5.0);
  }
  const std::string svg =
      detail::svg_line_chart({"chart-loss", "Loss", "step", "loss"}, {series});
  const size_t drawn = point_count(svg, "loss");
  EXPECT_LE(drawn, detail::kMaxDrawnPoints);
  EXPECT_GE(drawn, detail::kMaxDrawnPoints / 2);
  const std::string points = points_of(svg, "loss");
  // y axis 0..10: the spike at the top of the plot, the dip at its bottom.
  EXPECT_THAT(points, HasSubstr(",46.0 "));
  EXPECT_THAT(points, HasSubstr(",296.0 "));
  EXPECT_THAT(points, StartsWith("74.0,171.0")); // x from the first step
  EXPECT_THAT(svg, Not(HasSubstr("<circle")));
}

TEST(SvgChart, AShareChartShowsPercentagesAndLeavesOutBadValues) {
  const std::string svg = detail::svg_share_chart(
      "chart-time",
      "Step time",
      {{"data", 1}, {"forward", 3}, {"bad", NAN}, {"neg", -1}, {"zero", 0}});
  EXPECT_THAT(series_in(svg), ElementsAre("data", "forward", "zero"));
  EXPECT_THAT(svg, HasSubstr(">25.0%</tspan>"));
  EXPECT_THAT(svg, HasSubstr(">75.0%</tspan>"));
  EXPECT_EQ(
      error_of([] {
        detail::svg_share_chart("c", "t", {{"a", 0}});
      }),
      "chart 'c': expected a positive total, got 0");
}

// ------------------------------------------------------------------ report

TEST(RunReport, DrawsOneSeriesPerLossColumn) {
  TempDir dir;
  const std::string html = render_run_report(full_run(dir));
  const std::string svg = svg_of(html, "chart-loss");
  ASSERT_FALSE(svg.empty());
  EXPECT_THAT(series_in(svg), ElementsAre("train_loss", "val_loss"));
  EXPECT_EQ(point_count(svg, "train_loss"), 3u); // 4 logged, one nan
  EXPECT_EQ(point_count(svg, "val_loss"), 2u);
}

TEST(RunReport, DrawsAccuracyAndLearningRateColumns) {
  TempDir dir;
  const std::string html = render_run_report(full_run(dir));
  const std::string acc = svg_of(html, "chart-acc");
  EXPECT_THAT(series_in(acc), ElementsAre("val_acc", "val_acc_top5"));
  EXPECT_EQ(point_count(acc, "val_acc"), 2u);
  EXPECT_EQ(point_count(acc, "val_acc_top5"), 2u);
  const std::string lr = svg_of(html, "chart-lr");
  EXPECT_THAT(series_in(lr), ElementsAre("lr-AdamW", "lr-AdamW/pg1"));
  EXPECT_EQ(point_count(lr, "lr-AdamW"), 4u);
  EXPECT_EQ(point_count(lr, "lr-AdamW/pg1"), 4u);
  // Throughput is in the metrics table, in no chart.
  EXPECT_THAT(html, Not(HasSubstr("data-series=\"train_samples_per_s\"")));
  EXPECT_THAT(html, HasSubstr("<td>train_samples_per_s</td>"));
}

TEST(RunReport, DrawsTheLearningRateRangeTestAndItsSuggestion) {
  TempDir dir;
  const std::string run = full_run(dir);
  EXPECT_THAT(
      render_run_report(run), Not(HasSubstr("id=\"chart-lr-find\"")));
  std::ofstream(fs::path(run) / "lr_find.csv")
      << "step,lr,loss,suggested\n0,1e-05,2.3,0\n1,0.0001,2.2,0\n"
         "2,0.001,1.5,1\n3,0.01,nan,0\n4,0.1,3.5,0\n";
  const std::string html = render_run_report(run);
  const std::string svg = svg_of(html, "chart-lr-find");
  ASSERT_FALSE(svg.empty());
  EXPECT_THAT(series_in(svg), ElementsAre("smoothed loss"));
  EXPECT_EQ(point_count(svg, "smoothed loss"), 4u); // the nan left out
  EXPECT_THAT(svg, HasSubstr("log10 learning rate"));
  EXPECT_THAT(
      html,
      HasSubstr("Suggested (the steepest descent): 0.001, the rate the fit "
                "used."));
}

TEST(RunReport, SkipsNanAndInfPointsInsteadOfDrawingThem) {
  TempDir dir;
  const std::string run = write_run(
      dir,
      "epoch,step,train_loss\n0,1,1.0\n0,2,nan\n0,3,inf\n0,4,-inf\n0,5,0.5\n"
      "0,,0.4\n",
      "",
      "");
  const std::string svg = svg_of(render_run_report(run), "chart-loss");
  EXPECT_EQ(point_count(svg, "train_loss"), 2u);
  const std::string points = points_of(svg, "train_loss");
  EXPECT_EQ(points.find_first_not_of("0123456789., "), std::string::npos)
      << points;
}

TEST(RunReport, SaysSoWhenAChartHasNoData) {
  TempDir dir;
  const std::string run =
      write_run(dir, "epoch,step,train_loss,val_acc\n0,1,0.5,\n", "{}", "");
  const std::string html = render_run_report(run);
  EXPECT_FALSE(svg_of(html, "chart-loss").empty());
  for (const char* id : {"chart-acc", "chart-lr", "chart-time"}) {
    EXPECT_TRUE(svg_of(html, id).empty()) << id;
  }
  EXPECT_THAT(html, HasSubstr("id=\"chart-acc-missing\">no accuracy logged<"));
  EXPECT_THAT(
      html, HasSubstr("id=\"chart-lr-missing\">no learning rate logged<"));
  EXPECT_THAT(
      html,
      HasSubstr("id=\"chart-time-missing\">no step-time profile recorded<"));
  EXPECT_THAT(html, HasSubstr("no config.yaml in the run folder"));
}

TEST(RunReport, ReportsARunFolderWithOnlyAConfig) {
  TempDir dir;
  const std::string html =
      render_run_report(write_run(dir, "", "", kConfigYaml));
  EXPECT_THAT(
      html, HasSubstr("no loss logged (the run folder has no metrics.csv)"));
  EXPECT_THAT(html, HasSubstr("no accuracy logged"));
  EXPECT_THAT(
      html,
      HasSubstr("no step-time profile recorded (the run folder has no "
                "summary.json)"));
  EXPECT_THAT(html, HasSubstr("<pre>trainer:\n  max_epochs: 15\n"));
  EXPECT_THAT(html, Not(HasSubstr("<svg")));
}

TEST(RunReport, DrawsTheStepTimePhasesWithPercentagesAndTheVerdict) {
  TempDir dir;
  const std::string html = render_run_report(full_run(dir));
  const std::string svg = svg_of(html, "chart-time");
  EXPECT_THAT(
      series_in(svg),
      ElementsAre(
          "data", "h2d", "forward", "backward", "optimizer", "logging"));
  // forward: 60.1 of 152.1.
  EXPECT_THAT(svg, HasSubstr(">39.5%</tspan> (60.1)"));
  EXPECT_THAT(svg, HasSubstr(">0.0%</tspan> (0)"));
  EXPECT_THAT(
      html,
      HasSubstr("<p class=\"verdict\">compute-bound: forward+backward take 92% "
                "of step time</p>"));
  EXPECT_THAT(html, HasSubstr("samples_per_s 5900.1"));
}

TEST(RunReport, ShowsEveryTopLevelScalarOfTheSummaryAndItsObjects) {
  TempDir dir;
  const std::string run = write_run(
      dir,
      "",
      R"({"epochs": 15, "steps": 3525, "wall_s": 165.2, "val_acc": 0.92,
          "checkpoint": "runs/x/last.ckpt", "interrupted": false,
          "best_score": null, "added_later": "yes",
          "model": {"total_params": 420000, "size_mb": 1.6}})",
      "");
  const std::string html = render_run_report(run);
  for (const char* row :
       {"<td>epochs</td><td class=\"num\">15</td>",
        "<td>steps</td><td class=\"num\">3525</td>",
        "<td>wall_s</td><td class=\"num\">165.2</td>",
        "<td>val_acc</td><td class=\"num\">0.92</td>",
        "<td>checkpoint</td><td class=\"text\">runs/x/last.ckpt</td>",
        "<td>interrupted</td><td class=\"text\">false</td>",
        "<td>best_score</td><td class=\"text\">null</td>",
        "<td>added_later</td><td class=\"text\">yes</td>",
        "<td>total_params</td><td class=\"num\">420000</td>",
        "<td>size_mb</td><td class=\"num\">1.6</td>"}) {
    EXPECT_THAT(html, HasSubstr(row));
  }
  EXPECT_THAT(html, HasSubstr("<h2>model (summary.json)</h2>"));
  // Headline numbers.
  EXPECT_THAT(html, HasSubstr(">92.00%<"));
  EXPECT_THAT(html, HasSubstr(">2 min 45 s<"));
}

TEST(RunReport, EscapesEverythingTakenFromTheFiles) {
  TempDir dir;
  const std::string run = write_run(
      dir,
      "epoch,step,\"val_loss<i>\"\n0,1,0.5\n",
      R"({"checkpoint": "<b>x</b>", "profile": {"verdict": "a<script>",
          "phases": {"<em>fwd": 1}}})",
      "name: </pre><script>alert('x & y')</script>\n");
  const std::string html = render_run_report(run);
  EXPECT_THAT(
      html,
      HasSubstr("<pre>name: &lt;/pre&gt;&lt;script&gt;alert(&#39;x &amp; "
                "y&#39;)&lt;/script&gt;\n</pre>"));
  EXPECT_THAT(html, HasSubstr("data-series=\"val_loss&lt;i&gt;\""));
  EXPECT_THAT(html, HasSubstr("&lt;b&gt;x&lt;/b&gt;"));
  EXPECT_THAT(html, HasSubstr("data-series=\"&lt;em&gt;fwd\""));
  EXPECT_THAT(html, HasSubstr("a&lt;script&gt;"));
  EXPECT_THAT(html, Not(HasSubstr("<script")));
  EXPECT_THAT(html, Not(HasSubstr("<b>")));
  EXPECT_THAT(html, Not(HasSubstr("<em>")));
}

TEST(RunReport, ThePageNeedsNothingFromTheNetwork) {
  TempDir dir;
  const std::string html = render_run_report(full_run(dir));
  for (const char* fetch :
       {"<script",
        "<link",
        "<img",
        "<iframe",
        "@import",
        "url(",
        "src=",
        "href="}) {
    EXPECT_THAT(html, Not(HasSubstr(fetch))) << fetch;
  }
  // The only URL is the SVG namespace, which is a name, not a fetch.
  const std::string svg_ns = "http://www.w3.org/2000/svg";
  size_t urls = 0, namespaces = 0;
  for (size_t at = html.find("http"); at != std::string::npos;
       at = html.find("http", at + 1)) {
    ++urls;
    namespaces += html.compare(at, svg_ns.size(), svg_ns) == 0;
  }
  EXPECT_EQ(urls, namespaces);
  EXPECT_EQ(namespaces, 4u);
}

TEST(RunReport, AMissingRunFolderIsAnErrorNamingIt) {
  TempDir dir;
  const std::string missing = dir.file("runs/none/version_3");
  EXPECT_EQ(
      error_of([&] { write_run_report(missing); }),
      missing + ": no such run folder");
  EXPECT_EQ(
      error_of([&] { render_run_report(dir.path()); }),
      dir.path() +
          ": expected metrics.csv, summary.json or config.yaml in the run "
          "folder, found none");
}

TEST(RunReport, AMalformedFileFailsTheReportNamingIt) {
  TempDir dir;
  const std::string ragged = write_run(dir, "epoch,step,loss\n0,1\n", "", "");
  EXPECT_EQ(
      error_of([&] { write_run_report(ragged); }),
      ragged + "/metrics.csv:2: expected 3 cells as in the header, got 2");
  fs::remove(ragged + "/metrics.csv");
  std::ofstream(ragged + "/metrics.csv") << "epoch,loss\n0,1\n";
  EXPECT_EQ(
      error_of([&] { render_run_report(ragged); }),
      ragged +
          "/metrics.csv: expected a 'step' column to chart against, got "
          "columns epoch, loss");
  fs::remove(ragged + "/metrics.csv");
  std::ofstream(ragged + "/summary.json") << "{\"epochs\": 3,";
  EXPECT_THAT(
      error_of([&] { render_run_report(ragged); }),
      StartsWith(ragged + "/summary.json: invalid JSON: "));
  std::ofstream(ragged + "/summary.json") << "[1, 2]";
  EXPECT_EQ(
      error_of([&] { render_run_report(ragged); }),
      ragged + "/summary.json: expected a JSON object, got array");
}

TEST(RunReport, WritesReportHtmlIntoTheRunFolderByDefault) {
  TempDir dir;
  const std::string run = full_run(dir);
  const std::string path = write_run_report(run);
  EXPECT_EQ(path, run + "/report.html");
  EXPECT_EQ(read(path), render_run_report(run));
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  // Again, over the old one, and elsewhere.
  EXPECT_EQ(write_run_report(run), path);
  const std::string other = dir.file("other.html");
  EXPECT_EQ(write_run_report(run, other), other);
  EXPECT_THAT(read(other), StartsWith("<!DOCTYPE html>"));
  const std::string nowhere = dir.file("no/such/dir/report.html");
  EXPECT_EQ(
      error_of([&] { write_run_report(run, nowhere); }),
      nowhere + ": cannot write the report");
  EXPECT_THAT(
      render_run_report(run),
      HasSubstr("<title>demo / version_0 &middot; hotloop report</title>"));
}

// --------------------------------------------------------- in a real browser

// Runs headless Chromium on `page` with `flags`, its stdout into `out`,
// under a timeout and with a throwaway profile, cut off from the network
// (no name resolves, every connection goes to a dead proxy), so that a page
// that needed anything from outside would show it. Returns its exit status
// (124 on timeout), its stderr appended to `log`.
int run_chromium(
    const TempDir& dir,
    const std::string& flags,
    const std::string& page,
    const std::string& out,
    std::string* log) {
  const std::string err = dir.file("chromium.err");
  const std::string command =
      "timeout -k 5 60 '" + chromium() + "'" +
      " --headless --no-sandbox --disable-gpu --no-first-run"
      " --disable-extensions --disable-background-networking"
      " --disable-component-update --disable-sync --disable-quic"
      " --host-resolver-rules='MAP * ~NOTFOUND'"
      " --proxy-server=127.0.0.1:9 --user-data-dir='" +
      dir.file("profile") + "' " + flags + " 'file://" + page + "' >'" + out +
      "' 2>'" + err + "'";
  const int status = std::system(command.c_str());
  *log = command + "\n" + read(err);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(RunReportInChromium, TheLoadedPageHasTheFourChartsAndTheirSeries) {
  if (!fs::exists(chromium())) {
    GTEST_SKIP() << chromium()
                 << " is not installed (apt-get install chromium), so the "
                    "report is not checked in a browser";
  }
  TempDir dir;
  const std::string page = write_run_report(full_run(dir));
  std::string log;
  ASSERT_EQ(
      run_chromium(dir, "--dump-dom", page, dir.file("dom.html"), &log), 0)
      << log;
  const std::string dom = read(dir.file("dom.html"));
  ASSERT_THAT(dom, HasSubstr("</html>")) << log;
  EXPECT_THAT(
      series_in(svg_of(dom, "chart-loss")),
      ElementsAre("train_loss", "val_loss"));
  EXPECT_THAT(
      series_in(svg_of(dom, "chart-acc")),
      ElementsAre("val_acc", "val_acc_top5"));
  EXPECT_THAT(
      series_in(svg_of(dom, "chart-lr")),
      ElementsAre("lr-AdamW", "lr-AdamW/pg1"));
  EXPECT_THAT(
      series_in(svg_of(dom, "chart-time")),
      ElementsAre(
          "data", "h2d", "forward", "backward", "optimizer", "logging"));
  EXPECT_EQ(point_count(svg_of(dom, "chart-loss"), "train_loss"), 3u);
  EXPECT_EQ(point_count(svg_of(dom, "chart-lr"), "lr-AdamW"), 4u);
}

TEST(RunReportInChromium, ARealFitsRunFolderShowsItsCurves) {
  if (!fs::exists(chromium())) {
    GTEST_SKIP() << chromium()
                 << " is not installed (apt-get install chromium), so the "
                    "report is not checked in a browser";
  }
  // A fit as hotloop fit runs it: CSV logger and learning-rate monitor
  // into the run folder, summary.json at the end.
  TempDir dir;
  auto module = train::make_module(0);
  data::DataLoader train_loader(
      train::quadrants(64, 1), data::DataLoaderOptions(16).shuffle(true));
  data::DataLoader val_loader(
      train::quadrants(32, 2), data::DataLoaderOptions(32));
  train::Trainer trainer(train::TrainerOptions()
                             .accelerator("cpu")
                             .max_epochs(3)
                             .default_root_dir(dir.path())
                             .name("fit")
                             .enable_progress_bar(false)
                             .log_every_n_steps(1));
  trainer.add_logger(std::make_shared<CsvLogger>(trainer.log_dir()))
      .add_callback(std::make_shared<train::LearningRateMonitor>());
  trainer.fit(*module, train_loader, &val_loader);
  const std::string page = write_run_report(trainer.log_dir());

  std::string log;
  ASSERT_EQ(
      run_chromium(dir, "--dump-dom", page, dir.file("dom.html"), &log), 0)
      << log;
  const std::string dom = read(dir.file("dom.html"));
  ASSERT_THAT(dom, HasSubstr("</html>")) << log;
  EXPECT_THAT(
      series_in(svg_of(dom, "chart-loss")),
      ElementsAre("train_loss", "train_loss_step", "val_loss"));
  EXPECT_THAT(series_in(svg_of(dom, "chart-acc")), ElementsAre("val_acc"));
  // No weight decay on norms and biases: two parameter groups.
  EXPECT_THAT(
      series_in(svg_of(dom, "chart-lr")),
      ElementsAre("lr-Adam/pg1", "lr-Adam/pg2"));
  EXPECT_THAT(
      series_in(svg_of(dom, "chart-time")),
      ElementsAre(
          "data", "h2d", "forward", "backward", "optimizer", "logging"));
  // One point per epoch, one per step.
  EXPECT_EQ(point_count(svg_of(dom, "chart-loss"), "val_loss"), 3u);
  EXPECT_EQ(point_count(svg_of(dom, "chart-loss"), "train_loss_step"), 12u);
  EXPECT_EQ(point_count(svg_of(dom, "chart-lr"), "lr-Adam/pg1"), 12u);
}

struct Pixel {
  int r, g, b;
};

// The RGB pixels of the PNG at `path`, row by row; empty if unreadable.
std::vector<Pixel> decode_png(
    const std::string& path, int* width, int* height) {
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_file(&image, path.c_str())) {
    return {};
  }
  image.format = PNG_FORMAT_RGB;
  std::vector<png_byte> bytes(PNG_IMAGE_SIZE(image));
  if (!png_image_finish_read(&image, nullptr, bytes.data(), 0, nullptr)) {
    png_image_free(&image);
    return {};
  }
  *width = static_cast<int>(image.width);
  *height = static_cast<int>(image.height);
  std::vector<Pixel> pixels;
  for (size_t i = 0; i + 2 < bytes.size(); i += 3) {
    pixels.push_back({bytes[i], bytes[i + 1], bytes[i + 2]});
  }
  return pixels;
}

TEST(RunReportInChromium, TheScreenshotShowsTheChartsNotABlankPage) {
  if (!fs::exists(chromium())) {
    GTEST_SKIP() << chromium()
                 << " is not installed (apt-get install chromium), so the "
                    "report is not checked in a browser";
  }
  TempDir dir;
  const std::string page = write_run_report(full_run(dir));
  const std::string png = dir.file("shot.png");
  std::string log;
  ASSERT_EQ(
      run_chromium(
          dir,
          "--hide-scrollbars --window-size=1200,2000 --screenshot='" + png +
              "'",
          page,
          dir.file("stdout.txt"),
          &log),
      0)
      << log;
  ASSERT_TRUE(fs::exists(png)) << log;
  int width = 0, height = 0;
  const std::vector<Pixel> pixels = decode_png(png, &width, &height);
  ASSERT_FALSE(pixels.empty()) << png << " is not a readable PNG";
  EXPECT_EQ(width, 1200);
  EXPECT_EQ(height, 2000);
  size_t light = 0, dark = 0, blue = 0;
  std::set<int> colors;
  for (const Pixel& p : pixels) {
    light += p.r > 230 && p.g > 230 && p.b > 230;
    dark += p.r < 80 && p.g < 80 && p.b < 80;
    // The first series colour, #0072b2: the charts drew lines.
    blue += std::abs(p.r - 0x00) < 24 && std::abs(p.g - 0x72) < 24 &&
            std::abs(p.b - 0xb2) < 24;
    colors.insert(p.r << 16 | p.g << 8 | p.b);
  }
  EXPECT_GT(light, pixels.size() / 2) << "background";
  EXPECT_GT(dark, 500u) << "text";
  EXPECT_GT(blue, 500u) << "series lines and bars";
  EXPECT_GT(colors.size(), 100u) << "distinct colours";
}

} // namespace
} // namespace hotloop::log

namespace hotloop::log {
namespace {

TEST(Confusion, PrintsWritesAndDrawsEachTrueClassAgainstItsPrediction) {
  // Three classes: rows true, columns predicted.
  const at::Tensor confusion =
      at::tensor({2, 0, 0, 0, 1, 1, 0, 0, 1}, at::kLong).view({3, 3});

  std::ostringstream text;
  print_confusion(text, confusion, {"cat", "dog", "bird"});
  EXPECT_EQ(
      text.str(),
      "per class (accuracy: the share of the class predicted right)\n"
      "  class  accuracy   count\n"
      "  cat      1.0000       2\n"
      "  dog      0.5000       2\n"
      "  bird     1.0000       1\n"
      "confusion matrix (rows: true class, columns: predicted)\n"
      "          cat   dog  bird\n"
      "  cat       2     0     0\n"
      "  dog       0     1     1\n"
      "  bird      0     0     1\n");

  TempDir dir;
  write_confusion_csv(dir.file("confusion.csv"), confusion, {"cat", "d,og", "bird"});
  const ConfusionTable table = read_confusion_csv(dir.file("confusion.csv"));
  EXPECT_EQ(table.names, (std::vector<std::string>{"cat", "d,og", "bird"}));
  EXPECT_EQ(table.counts[1], (std::vector<int64_t>{0, 1, 1}));
  // The report draws it, one shaded cell per pair.
  std::ofstream(dir.file("summary.json")) << "{}";
  const std::string html = render_run_report(dir.path());
  EXPECT_THAT(html, HasSubstr("Confusion matrix (validation)"));
  EXPECT_THAT(html, HasSubstr("<title>d,og predicted as bird: 1</title>"));
}

} // namespace
} // namespace hotloop::log
