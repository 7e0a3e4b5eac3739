#include "hotloop/log/csv_logger.h"
#include "hotloop/core/error.h"
#include "test_util.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <fstream>
#include <sstream>

namespace hotloop::log {
namespace {

using ::hotloop::testing::TempDir;

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(CsvLogger, WritesLightningsLayoutWithEmptyCellsForMissingMetrics) {
  TempDir dir;
  CsvLogger logger(dir.file("run"));
  logger.log_metrics({{"epoch", 0}, {"train_loss_step", 0.5}}, 2);
  logger.log_metrics({{"epoch", 0}, {"train_loss_step", 0.25}}, 4);
  logger.flush();
  EXPECT_EQ(
      read(logger.path()), "epoch,step,train_loss_step\n0,2,0.5\n0,4,0.25\n");
  // A new metric widens the header: the file is written again.
  logger.log_metrics(
      {{"epoch", 0}, {"val_acc", 0.9}, {"train_loss", 0.1 + 0.2}}, 4);
  logger.log_metrics({{"lr", 1e-5}}, 5);
  logger.flush();
  EXPECT_EQ(
      read(logger.path()),
      "epoch,step,lr,train_loss,train_loss_step,val_acc\n"
      "0,2,,,0.5,\n"
      "0,4,,,0.25,\n"
      "0,4,,0.30000000000000004,,0.9\n"
      ",5,1e-05,,,\n");
  // Same columns: rows are appended.
  logger.log_metrics({{"epoch", 1}, {"lr", NAN}, {"val_acc", INFINITY}}, 6);
  logger.finalize("success");
  EXPECT_THAT(read(logger.path()), ::testing::EndsWith("1,6,nan,,,inf\n"));
}

TEST(CsvLogger, HyperparametersGoToHparamsYaml) {
  TempDir dir;
  CsvLogger logger(dir.path());
  logger.log_hyperparams(
      {{"optimizer.lr", "0.004"},
       {"model.channels", "[16, 32]"},
       {"trainer.name", "a: b # c"},
       {"data.path", ""}},
      {});
  EXPECT_EQ(
      read(dir.file("hparams.yaml")),
      "data.path: \"\"\nmodel.channels: [16, 32]\noptimizer.lr: 0.004\n"
      "trainer.name: \"a: b # c\"\n");
  // Text that YAML would read as something else is quoted: it reads back.
  const YAML::Node back = YAML::LoadFile(dir.file("hparams.yaml"));
  EXPECT_EQ(back["trainer.name"].as<std::string>(), "a: b # c");
  EXPECT_EQ(back["data.path"].as<std::string>(), "");
  EXPECT_EQ(back["model.channels"][1].as<int>(), 32);
}

TEST(CsvLogger, QuotesMetricNamesThatHoldCommasOrQuotes) {
  TempDir dir;
  CsvLogger logger(dir.path());
  logger.log_metrics({{"acc,top5", 0.5}, {"say \"hi\"", 1}}, 1);
  logger.flush();
  EXPECT_EQ(
      read(logger.path()),
      "epoch,step,\"acc,top5\",\"say \"\"hi\"\"\"\n,1,0.5,1\n");
}

TEST(CsvLogger, AnUncreatableFolderIsNamed) {
  TempDir dir;
  std::ofstream(dir.file("file")) << "x";
  EXPECT_THROWS_WITH(
      Error,
      CsvLogger(dir.file("file") + "/run"),
      "cannot create the log folder '" + dir.file("file") + "/run'");
}

} // namespace
} // namespace hotloop::log
