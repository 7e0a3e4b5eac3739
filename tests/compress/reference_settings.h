// The fixture of the tests that compare with torch.ao's references: those
// ran on one thread, and a test may select a quantized engine; both are
// put back as they were after each test.
#pragma once

#include "hotloop/compress/quantized_engine.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <string>

namespace hotloop::compress::testing {

class ReferenceSettingsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    threads_ = at::get_num_threads();
    at::set_num_threads(1);
    engine_ = quantized_engine();
  }
  void TearDown() override {
    at::set_num_threads(threads_);
    select_quantized_engine(engine_);
  }

 private:
  int threads_ = 1;
  std::string engine_;
};

} // namespace hotloop::compress::testing
