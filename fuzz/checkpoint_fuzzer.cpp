// A checkpoint file: the seal, LibTorch's archive, the model's names and
// shapes, an optimizer's and a schedule's state, the loop's records.
#include "fuzz_input.h"

#include "hotloop/optim/lr_scheduler.h"
#include "hotloop/train/checkpoint.h"

#include <torch/nn/modules/linear.h>
#include <torch/optim/adam.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = hotloop::fuzz::write_input(data, size, "input.ckpt");
  hotloop::fuzz::expect_clean([&] {
    torch::nn::Linear model(3, 2);
    torch::optim::Adam adam(model->parameters());
    hotloop::train::CheckpointState state;
    state.optimizers = {&adam};
    hotloop::train::load_checkpoint(path, *model, &state);
  });
  hotloop::fuzz::expect_clean(
      [&] { hotloop::train::describe_checkpoint(path); });
  return 0;
}
