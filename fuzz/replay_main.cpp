// Runs the fuzz targets without libFuzzer, each over the files given: the
// seed corpora and every input that once failed (fuzz/regressions). The
// test suite runs it, so what the fuzzers found stays fixed on any
// compiler.
//
//   fuzz_replay TARGET FILE_OR_FOLDER...
//   fuzz_replay --write-checkpoint-seed PATH   (the checkpoint corpus's seed)

#include "hotloop/optim/lr_scheduler.h"
#include "hotloop/train/checkpoint.h"

#include <torch/nn/modules/linear.h>
#include <torch/optim/adam.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#define HOTLOOP_FUZZ_TARGET(name) \
  extern "C" int hotloop_fuzz_##name(const uint8_t* data, size_t size);
#include "replay_targets.h"
#undef HOTLOOP_FUZZ_TARGET

namespace {

namespace fs = std::filesystem;
using Target = int (*)(const uint8_t*, size_t);

const std::map<std::string, Target>& targets() {
  static const std::map<std::string, Target> all = {
#define HOTLOOP_FUZZ_TARGET(name) {#name, hotloop_fuzz_##name},
#include "replay_targets.h"
#undef HOTLOOP_FUZZ_TARGET
  };
  return all;
}

// The checkpoint target's model (Linear(3, 2)) and optimizer after one
// step: a sealed checkpoint every part of the loader reads.
int write_checkpoint_seed(const std::string& path) {
  torch::nn::Linear model(3, 2);
  torch::optim::Adam adam(model->parameters());
  model(torch::ones({4, 3})).sum().backward();
  adam.step();
  hotloop::train::CheckpointState state;
  state.optimizers = {&adam};
  state.progress.epoch = 1;
  state.progress.global_step = 1;
  state.callbacks = R"({"data":{"num_classes":2}})";
  state.loop.callback_metrics = {{"val_loss", 0.5}};
  hotloop::train::save_checkpoint(path, *model, state);
  std::cout << "wrote " << path << "\n";
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--write-checkpoint-seed") {
    return write_checkpoint_seed(argv[2]);
  }
  if (argc < 3 || targets().count(argv[1]) == 0) {
    std::cerr << "usage: fuzz_replay TARGET FILE_OR_FOLDER... (targets:";
    for (const auto& [name, target] : targets()) {
      std::cerr << " " << name;
    }
    std::cerr << ")\n";
    return 2;
  }
  const Target target = targets().at(argv[1]);
  std::vector<fs::path> files;
  for (int i = 2; i < argc; ++i) {
    if (fs::is_directory(argv[i])) {
      for (const auto& entry : fs::directory_iterator(argv[i])) {
        if (entry.is_regular_file()) {
          files.push_back(entry.path());
        }
      }
    } else if (fs::exists(argv[i])) {
      files.emplace_back(argv[i]);
    }
  }
  std::sort(files.begin(), files.end());
  for (const fs::path& file : files) {
    std::ifstream in(file, std::ios::binary);
    const std::vector<uint8_t> bytes(
        (std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::cout << argv[1] << ": " << file.filename().string() << " ("
              << bytes.size() << " bytes)" << std::endl;
    target(bytes.data(), bytes.size());
  }
  std::cout << argv[1] << ": " << files.size() << " inputs, no finding\n";
  return files.empty() ? 1 : 0;
}
