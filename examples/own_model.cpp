// A model and a dataset of your own in hotloop's command line: register
// them, hand main over to hotloop, and `model.name=tiny_net` and
// `data.dataset=stripes` work with config files, overrides, --help,
// checkpoints, resume, validate/test/predict and report, as the built-in
// ones do.
//
//   own_model fit --model.name=tiny_net --model.width=32 --data.dataset=stripes
//   own_model fit --help
#include <hotloop/cli.h>
#include <hotloop/data.h>

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

// Any torch::nn::Module whose forward maps [N, C, H, W] images to
// [N, classes] logits.
struct TinyNetImpl : torch::nn::Module {
  TinyNetImpl(int64_t inputs, int64_t width, int64_t classes)
      : hidden(register_module("hidden", torch::nn::Linear(inputs, width))),
        out(register_module("out", torch::nn::Linear(width, classes))) {}

  at::Tensor forward(const at::Tensor& images) {
    return out(hidden(images.flatten(1)).relu());
  }

  torch::nn::Linear hidden, out;
};
TORCH_MODULE(TinyNet);

// Its option becomes model.width in every command.
static const bool tiny_net_registered = hotloop::cli::register_model(
    hotloop::cli::ModelRegistration("tiny_net", "a one-hidden-layer perceptron")
        .option("width", hotloop::cli::OptionType::kInt, "64", "hidden units", 1)
        .build([](const hotloop::cli::ModelInputs& in) {
          const int64_t inputs = in.in_channels * in.height * in.width;
          return torch::nn::AnyModule(TinyNet(
              inputs, in.config.get_int("model.width"), in.num_classes));
        }));

// Images with horizontal (class 0) or vertical (class 1) stripes, made from
// data.stripes_seed; data.synthetic_size sets the training split's size.
static const bool stripes_registered = hotloop::cli::register_dataset(
    hotloop::cli::DatasetRegistration("stripes", "horizontal or vertical stripes")
        .option("stripes_seed", hotloop::cli::OptionType::kInt, "1", "seed")
        .build([](const hotloop::cli::DatasetInputs& in) {
          const int64_t n = in.train ? in.config.get_int("data.synthetic_size")
                                     : 500;
          at::manual_seed(in.config.get_int("data.stripes_seed") + in.train);
          const at::Tensor labels = at::randint(0, 2, {n}, at::kLong);
          const at::Tensor phase = at::randint(0, 2, {n, 1, 1, 1});
          const at::Tensor lines = (at::arange(12).remainder(2)).view({1, 1, 12});
          const at::Tensor rows = lines.view({1, 1, 12, 1}).expand({n, 1, 12, 12});
          const at::Tensor cols = lines.view({1, 1, 1, 12}).expand({n, 1, 12, 12});
          const at::Tensor horizontal = labels.view({n, 1, 1, 1}) == 0;
          const at::Tensor images =
              (at::where(horizontal, rows, cols) + phase).remainder(2) * 255;
          return std::make_shared<hotloop::data::ImageClassificationDataset>(
              images.to(at::kByte).contiguous(), labels, in.transform);
        }));

int main(int argc, char** argv) {
  return hotloop::cli::main(argc, argv);
}
