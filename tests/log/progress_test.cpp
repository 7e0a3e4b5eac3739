#include "hotloop/log/progress.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sstream>

namespace hotloop::log {
namespace {

using ::testing::HasSubstr;

TEST(ProgressBar, ShowsProgressRateEtaLossLrAndWhereTimeGoes) {
  std::ostringstream out;
  ProgressBar bar(out, /*live=*/false, /*every_n_steps=*/1);
  bar.start_epoch(2, 5, 10);
  StepTimes times;
  times.data = 0.5;
  times.compute = 1.0;
  times.optimizer = 0.5;
  EXPECT_EQ(
      bar.format(4, 1024, 0.31234, 0.0032, times),
      "epoch 2/5 [########------------] 4/10  512 samples/s  ETA 3s  "
      "loss 0.3123  lr 3.20e-03  time: data 25% fwd+bwd 50% opt 25%");
}

TEST(ProgressBar, ShowsTheWaitForOtherProcessesWhenThereIsOne) {
  std::ostringstream out;
  ProgressBar bar(out, /*live=*/false, /*every_n_steps=*/1);
  bar.start_epoch(1, 1, 4);
  StepTimes times;
  times.data = 0.5;
  times.compute = 1.0;
  times.comm = 0.2;
  times.optimizer = 0.3;
  EXPECT_THAT(
      bar.format(2, 512, 0.5, 0.1, times),
      ::testing::EndsWith("time: data 25% fwd+bwd 50% comm 10% opt 15%"));
}

TEST(ProgressBar, AnEpochIsNamedWithItsTotalUnlessThereIsNone) {
  EXPECT_EQ(epoch_label(3, 5), "epoch 3/5");
  EXPECT_EQ(epoch_label(3, -1), "epoch 3");
}

TEST(ProgressBar, WritesALineEveryNStepsWhenNotATerminal) {
  std::ostringstream out;
  ProgressBar bar(out, /*live=*/false, /*every_n_steps=*/4);
  bar.start_epoch(1, 1, 10);
  StepTimes times{0.1, 0.1, 0.1};
  for (int64_t b = 1; b <= 10; ++b) {
    bar.update(b, b * 8, 1.0, 0.1, times);
  }
  bar.end_epoch();
  const std::string text = out.str();
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 2);
  EXPECT_THAT(text, HasSubstr("] 4/10 "));
  EXPECT_THAT(text, HasSubstr("] 8/10 "));
  EXPECT_EQ(text.find('\r'), std::string::npos);
}

TEST(ProgressBar, DueSaysWhetherAnUpdateWouldDraw) {
  std::ostringstream out;
  ProgressBar lines(out, /*live=*/false, /*every_n_steps=*/4);
  lines.start_epoch(1, 1, 10);
  EXPECT_FALSE(lines.due(3));
  EXPECT_TRUE(lines.due(4));
  ProgressBar live(out, /*live=*/true, 4, /*refresh=*/3600);
  live.start_epoch(1, 1, 10);
  EXPECT_TRUE(live.due(1)); // nothing drawn yet
  live.update(1, 8, 1.0, 0.1, StepTimes{});
  EXPECT_FALSE(live.due(2)); // within the refresh interval
  EXPECT_TRUE(live.due(10)); // the epoch's last batch always shows
}

TEST(ProgressBar, ALiveBarRedrawsInPlaceAndClearsAtTheEnd) {
  std::ostringstream out;
  ProgressBar bar(out, /*live=*/true, /*every_n_steps=*/4, /*refresh=*/0);
  bar.start_epoch(1, 1, 3);
  StepTimes times{0.1, 0.1, 0.1};
  for (int64_t b = 1; b <= 3; ++b) {
    bar.update(b, b * 8, 1.0, 0.1, times);
  }
  bar.end_epoch();
  const std::string text = out.str();
  EXPECT_EQ(std::count(text.begin(), text.end(), '\r'), 4);
  EXPECT_EQ(text.find('\n'), std::string::npos);
  EXPECT_THAT(text, HasSubstr("] 3/3 "));
  EXPECT_EQ(text.substr(text.size() - 4), "\r\x1b[K");
  EXPECT_FALSE(ProgressBar::is_terminal(out));
}

} // namespace
} // namespace hotloop::log
