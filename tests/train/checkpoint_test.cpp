#include "hotloop/train/checkpoint.h"
#include "hotloop/core/error.h"
#include "hotloop/version.h"
#include "test_util.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/adam.h>
#include <torch/serialize/output-archive.h>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <sstream>
#include <thread>

namespace hotloop::train {
namespace {

using ::hotloop::testing::TempDir;
using ::testing::HasSubstr;

struct Net : torch::nn::Module {
  Net() {
    linear = register_module("linear", torch::nn::Linear(4, 3));
    norm = register_module("norm", torch::nn::BatchNorm1d(3));
  }
  at::Tensor forward(const at::Tensor& x) {
    return norm->forward(linear->forward(x));
  }
  torch::nn::Linear linear{nullptr};
  torch::nn::BatchNorm1d norm{nullptr};
};

void train_step(Net& net, torch::optim::Optimizer& optimizer, int64_t seed) {
  const at::Tensor x = at::arange(8 * 4, at::kFloat).view({8, 4}).sin() *
                       static_cast<double>(seed);
  optimizer.zero_grad();
  net.forward(x).pow(2).mean().backward();
  optimizer.step();
}

std::vector<std::string> files_in(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

TEST(Checkpoint, ResumedOptimizerContinuesBitForBit) {
  TempDir dir;
  at::manual_seed(1);
  Net a;
  torch::optim::Adam adam_a(a.parameters(), torch::optim::AdamOptions(0.1));
  train_step(a, adam_a, 1);
  train_step(a, adam_a, 2);
  CheckpointState saved;
  saved.optimizers = {&adam_a};
  saved.progress = TrainingProgress{3, 17};
  save_checkpoint(dir.file("c.ckpt"), a, saved);

  at::manual_seed(2); // different init, overwritten by the load
  Net b;
  torch::optim::Adam adam_b(b.parameters(), torch::optim::AdamOptions(0.1));
  CheckpointState loaded;
  loaded.optimizers = {&adam_b};
  const TrainingProgress progress =
      load_checkpoint(dir.file("c.ckpt"), b, &loaded);
  EXPECT_EQ(progress.epoch, 3);
  EXPECT_EQ(progress.global_step, 17);
  EXPECT_TRUE(b.norm->running_mean.equal(a.norm->running_mean));

  train_step(a, adam_a, 3);
  train_step(b, adam_b, 3);
  const auto pa = a.parameters();
  const auto pb = b.parameters();
  for (size_t i = 0; i < pa.size(); ++i) {
    EXPECT_TRUE(pa[i].equal(pb[i])) << "parameter " << i;
  }
}

TEST(Checkpoint, RestoresTheRandomNumberGenerator) {
  TempDir dir;
  Net net;
  at::manual_seed(5);
  save_checkpoint(dir.file("c.ckpt"), net);
  const at::Tensor expected = at::rand({4});
  CheckpointState state;
  load_checkpoint(dir.file("c.ckpt"), net, &state);
  EXPECT_TRUE(at::rand({4}).equal(expected));
}

TEST(Checkpoint, RestoresEveryCudaDevicesGenerator) {
  if (!at::hasCUDA() || at::getNumGPUs() == 0) {
    GTEST_SKIP() << "needs a CUDA build of LibTorch and a GPU";
  }
  TempDir dir;
  Net net;
  at::manual_seed(5);
  const auto cuda = at::TensorOptions().device(at::kCUDA);
  at::rand({3}, cuda); // move the CUDA generator off its seed
  save_checkpoint(dir.file("c.ckpt"), net);
  const at::Tensor expected = at::rand({4}, cuda);
  at::manual_seed(6);
  CheckpointState state;
  load_checkpoint(dir.file("c.ckpt"), net, &state);
  EXPECT_TRUE(at::rand({4}, cuda).equal(expected));
}

// One Adam step of `net` on a fixed batch, made on the net's device. The
// loss reaches every parameter with a gradient far above rounding: the
// mean square of BatchNorm's output alone is 1 whatever the weights, and
// Adam would scale the rounding left in its gradient (which differs between
// devices) up to full steps.
void device_step(Net& net, torch::optim::Adam& optimizer) {
  const at::Tensor x = at::arange(8 * 4, at::kFloat)
                           .view({8, 4})
                           .cos()
                           .to(net.linear->weight.device());
  optimizer.zero_grad();
  const at::Tensor hidden = net.linear->forward(x);
  const at::Tensor target = x.narrow(1, 0, 3);
  ((net.norm->forward(hidden) - target).pow(2).mean() + hidden.pow(2).mean())
      .backward();
  optimizer.step();
}

// Tensors load onto the model's device (PyTorch's map_location), either
// way, optimizer state included: a step after the load needs the moments on
// the parameters' device and matches the step the saved model takes.
TEST(Checkpoint, LoadsOntoTheModelsDeviceEitherWay) {
  if (!at::hasCUDA() || at::getNumGPUs() == 0) {
    GTEST_SKIP() << "needs a CUDA build of LibTorch and a GPU";
  }
  TempDir dir;
  at::manual_seed(1);
  Net gpu;
  gpu.to(at::kCUDA);
  torch::optim::Adam adam_gpu(gpu.parameters(), torch::optim::AdamOptions(0.1));
  device_step(gpu, adam_gpu);
  CheckpointState saved;
  saved.optimizers = {&adam_gpu};
  saved.progress = TrainingProgress{1, 5};
  save_checkpoint(dir.file("gpu.ckpt"), gpu, saved);

  Net cpu;
  torch::optim::Adam adam_cpu(cpu.parameters(), torch::optim::AdamOptions(0.1));
  CheckpointState on_cpu;
  on_cpu.optimizers = {&adam_cpu};
  EXPECT_EQ(load_checkpoint(dir.file("gpu.ckpt"), cpu, &on_cpu).global_step, 5);
  EXPECT_TRUE(cpu.norm->running_mean.is_cpu());
  save_checkpoint(dir.file("cpu.ckpt"), cpu, on_cpu);
  Net back;
  back.to(at::kCUDA);
  torch::optim::Adam adam_back(
      back.parameters(), torch::optim::AdamOptions(0.1));
  CheckpointState on_gpu;
  on_gpu.optimizers = {&adam_back};
  load_checkpoint(dir.file("cpu.ckpt"), back, &on_gpu);

  device_step(gpu, adam_gpu);
  device_step(cpu, adam_cpu);
  device_step(back, adam_back);
  const auto gpu_params = gpu.parameters();
  const auto cpu_params = cpu.parameters();
  const auto back_params = back.parameters();
  for (size_t i = 0; i < gpu_params.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_TRUE(cpu_params[i].is_cpu());
    EXPECT_TRUE(back_params[i].is_cuda());
    const at::Tensor expected = gpu_params[i].cpu();
    EXPECT_TRUE(cpu_params[i].allclose(expected, /*rtol=*/1e-5, /*atol=*/1e-6));
    EXPECT_TRUE(back_params[i].cpu().allclose(expected, 1e-5, 1e-6));
  }
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(Checkpoint, AtomicWriteReplacesTheFileAndLeavesNoTemporaries) {
  TempDir dir;
  const std::string path = dir.file("f.txt");
  write_file_atomically(path, [](std::ostream& out) { out << "first"; });
  write_file_atomically(path, [](std::ostream& out) { out << "second"; });
  std::ifstream in(path);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "second");
  EXPECT_EQ(files_in(dir.path()), std::vector<std::string>{"f.txt"});
}

TEST(Checkpoint, TheFirstWriteIntoAFolderRemovesTemporariesAKillLeft) {
  TempDir dir;
  const auto touch = [&](const std::string& name, bool old) {
    std::ofstream(dir.file(name)) << "partial";
    if (old) { // written before this process started
      std::filesystem::last_write_time(
          dir.file(name),
          std::filesystem::file_time_type::clock::now() -
              std::chrono::hours(1));
    }
  };
  touch("last.ckpt.tmp.aB3xYz", true);   // a kill's leftover: removed
  touch("metrics.csv.tmp.Q1w2E3", true); // removed
  touch("last.ckpt.tmp.aB3xY", true);    // not mkstemp's six: kept
  touch("notes.tmp.txt", true);          // not the pattern: kept
  touch("last.ckpt.tmp.Zz9Zz9", false);  // newer than this process: kept
  write_file_atomically(
      dir.file("f.txt"), [](std::ostream& out) { out << "x"; });
  EXPECT_EQ(
      files_in(dir.path()),
      (std::vector<std::string>{
          "f.txt",
          "last.ckpt.tmp.Zz9Zz9",
          "last.ckpt.tmp.aB3xY",
          "notes.tmp.txt"}));
}

TEST(Checkpoint, AFailedWriteKeepsThePreviousFile) {
  TempDir dir;
  const std::string path = dir.file("f.txt");
  write_file_atomically(path, [](std::ostream& out) { out << "good"; });
  EXPECT_THROW(
      write_file_atomically(
          path,
          [](std::ostream& out) {
            out << "partial";
            throw std::runtime_error("disk on fire");
          }),
      std::runtime_error);
  std::ifstream in(path);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "good");
  EXPECT_EQ(files_in(dir.path()), std::vector<std::string>{"f.txt"});
  EXPECT_THAT(
      [&] {
        write_file_atomically(dir.file("no/such/dir/f"), [](std::ostream&) {});
      },
      ::testing::ThrowsMessage<Error>(HasSubstr(
          "no/such/dir/f: cannot write it: folder '" + dir.file("no/such/dir") +
          "' does not exist")));
  EXPECT_THAT(
      [&] { write_file_atomically(dir.file("f.txt/g"), [](std::ostream&) {}); },
      ::testing::ThrowsMessage<Error>(HasSubstr("' is not a folder")));
}

TEST(Checkpoint, AnAtomicWriteStreamsPiecesOfAnySizeInOrder) {
  // The content goes to the file as it is written (a checkpoint is never
  // held whole in memory): pieces smaller and larger than the write buffer
  // arrive in order.
  TempDir dir;
  const std::string path = dir.file("f.bin");
  std::string expected;
  write_file_atomically(path, [&](std::ostream& out) {
    for (size_t size : {size_t{1}, size_t{1000}, size_t{3} << 20, size_t{7}}) {
      const std::string piece(size, static_cast<char>('a' + size % 26));
      out.write(piece.data(), static_cast<std::streamsize>(size));
      expected += piece;
      out.put('|');
      expected += '|';
    }
  });
  EXPECT_EQ(read_bytes(path), expected);
}

TEST(Checkpoint, AWriteTheDiskRefusesNamesTheFileAndKeepsThePreviousOne) {
  TempDir dir;
  const std::string path = dir.file("f.bin");
  write_file_atomically(path, [](std::ostream& out) { out << "good"; });
  const std::string what = hotloop::testing::error_when_files_stop_at_1mb([&] {
    write_file_atomically(path, [](std::ostream& out) {
      out << std::string(size_t{4} << 20, 'x');
    });
  });
  EXPECT_THAT(what, HasSubstr(path + ".tmp."));
  EXPECT_THAT(what, HasSubstr(": write failed: File too large"));
  EXPECT_EQ(read_bytes(path), "good");
  EXPECT_EQ(files_in(dir.path()), std::vector<std::string>{"f.bin"});

  // A checkpoint's zip is written from LibTorch's C zip writer, which the
  // error must not cross: the same message, the same previous file.
  torch::nn::Linear big(1024, 1024); // 4 MB of weights
  const std::string ckpt = dir.file("last.ckpt");
  save_checkpoint(ckpt, *big);
  const std::string before = read_bytes(ckpt);
  big->weight.data().add_(1);
  const std::string ckpt_what = hotloop::testing::error_when_files_stop_at_1mb(
      [&] { save_checkpoint(ckpt, *big); });
  EXPECT_THAT(ckpt_what, HasSubstr(ckpt + ".tmp."));
  EXPECT_THAT(ckpt_what, HasSubstr(": write failed: File too large"));
  EXPECT_TRUE(read_bytes(ckpt) == before);
  EXPECT_EQ(
      files_in(dir.path()), (std::vector<std::string>{"f.bin", "last.ckpt"}));
}

TEST(Checkpoint, AFileNameWithoutAFolderIsWrittenInTheWorkingDirectory) {
  TempDir dir;
  const hotloop::testing::ScopedWorkingDirectory cwd(dir.path());
  write_file_atomically("bare.txt", [](std::ostream& out) { out << "here"; });
  std::ifstream in(dir.file("bare.txt"));
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "here");
  EXPECT_EQ(files_in(dir.path()), std::vector<std::string>{"bare.txt"});
}

TEST(Checkpoint, AProcessKilledWhileWritingLeavesAWholeFile) {
  // A child rewrites a 16 MB file over and over, each time filled with a
  // new byte, until it is killed at some moment of a write. The file is
  // then one whole version: never cut short, never two versions mixed.
  TempDir dir;
  const std::string path = dir.file("big.ckpt");
  constexpr size_t kBytes = 16 << 20;
  write_file_atomically(
      path, [](std::ostream& out) { out << std::string(kBytes, 'a'); });
  for (int delay_ms : {5, 40, 120}) {
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      try {
        for (char fill = 'b';; fill = fill == 'z' ? 'b' : fill + 1) {
          write_file_atomically(path, [&](std::ostream& out) {
            out << std::string(kBytes, fill);
          });
        }
      } catch (...) {
      }
      ::_exit(1); // never back into the test runner
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    ::kill(child, SIGKILL);
    int status = 0;
    ::waitpid(child, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status));
    std::ifstream in(path, std::ios::binary);
    const std::string content(std::istreambuf_iterator<char>(in), {});
    ASSERT_EQ(content.size(), kBytes) << "killed after " << delay_ms << " ms";
    EXPECT_EQ(content.find_first_not_of(content[0]), std::string::npos)
        << "killed after " << delay_ms << " ms";
  }
}

TEST(Checkpoint, LoaderFingerprintRoundTrips) {
  TempDir dir;
  Net net;
  CheckpointState saved;
  saved.loader.seed = 12345678901234ull;
  saved.loader.batches_per_epoch = 7;
  saved.loader.batch_size = 0; // batch_size = None
  saved.loader.dataset_size = 7;
  saved.loader.shuffle = true;
  saved.loader.order = 987654321;
  saved.loader.world_size = 2;
  save_checkpoint(dir.file("c.ckpt"), net, saved);
  CheckpointState loaded;
  load_checkpoint(dir.file("c.ckpt"), net, &loaded);
  EXPECT_TRUE(loaded.loader == saved.loader);
  EXPECT_EQ(loaded.loader.order, 987654321);
  EXPECT_EQ(loaded.loader.world_size, 2);
  // Another order or world size is another loader; one not recorded (an
  // older checkpoint's) agrees with any.
  LoaderFingerprint other = saved.loader;
  other.order = 5;
  EXPECT_FALSE(other == saved.loader);
  other.order = -1;
  EXPECT_TRUE(other == saved.loader);
  other.world_size = 3;
  EXPECT_FALSE(other == saved.loader);
  // Before the order was recorded a checkpoint held the five numbers
  // alone (no loader_order): it loads with both unknown, agreeing with any.
  CheckpointState older = saved;
  older.loader.order = -1;
  older.loader.world_size = 0;
  save_checkpoint(dir.file("older.ckpt"), net, older);
  load_checkpoint(dir.file("older.ckpt"), net, &loaded);
  EXPECT_EQ(loaded.loader.order, -1);
  EXPECT_EQ(loaded.loader.world_size, 0);
  EXPECT_EQ(loaded.loader.seed, saved.loader.seed);
  EXPECT_TRUE(loaded.loader == saved.loader);
  save_checkpoint(dir.file("none.ckpt"), net, CheckpointState{});
  load_checkpoint(dir.file("none.ckpt"), net, &loaded);
  EXPECT_FALSE(loaded.loader.known());
}

TEST(Checkpoint, LoadErrorsNameTheFile) {
  TempDir dir;
  Net net;
  EXPECT_THAT(
      [&] { load_checkpoint(dir.file("missing.ckpt"), net); },
      ::testing::ThrowsMessage<Error>(HasSubstr(
          "checkpoint '" + dir.file("missing.ckpt") + "' does not exist")));
  hotloop::testing::write_bytes(dir.file("garbage.ckpt"), {1, 2, 3, 4, 5});
  EXPECT_THAT(
      [&] { load_checkpoint(dir.file("garbage.ckpt"), net); },
      ::testing::ThrowsMessage<Error>(HasSubstr(
          dir.file("garbage.ckpt") +
          ": corrupted or truncated checkpoint (no zip end record at its "
          "end)")));
  torch::serialize::OutputArchive other;
  net.save(other);
  other.save_to(dir.file("plain.pt"));
  EXPECT_THAT(
      [&] { load_checkpoint(dir.file("plain.pt"), net); },
      ::testing::ThrowsMessage<Error>(
          HasSubstr(dir.file("plain.pt") + ": not a hotloop checkpoint")));
}

void write_string(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

TEST(Checkpoint, AChecksumSealsEveryCheckpointAndLoadingVerifiesIt) {
  TempDir dir;
  Net net;
  const std::string path = dir.file("a.ckpt");
  save_checkpoint(path, net);
  const CheckpointSeal seal = read_checkpoint_seal(path);
  EXPECT_TRUE(seal.sealed);
  EXPECT_TRUE(seal.intact);
  EXPECT_EQ(seal.format, 2);
  EXPECT_EQ(seal.hotloop_version, HOTLOOP_VERSION);
  EXPECT_FALSE(seal.libtorch_version.empty());
  EXPECT_EQ(seal.stored_crc, seal.computed_crc);
  EXPECT_TRUE(describe_checkpoint(path).content_read);
  Net other;
  load_checkpoint(path, other); // LibTorch's zip reader takes the seal
  EXPECT_TRUE(other.linear->weight.equal(net.linear->weight));

  // Some bytes in the middle overwritten: one line naming the file.
  const std::string good = read_bytes(path);
  std::string damaged = good;
  for (size_t i = damaged.size() / 2; i < damaged.size() / 2 + 4; ++i) {
    damaged[i] = static_cast<char>(damaged[i] ^ 0x5A);
  }
  write_string(path, damaged);
  EXPECT_FALSE(read_checkpoint_seal(path).intact);
  // Described from its seal alone: LibTorch's reader makes no promise about
  // a damaged archive (fuzz/regressions/checkpoint).
  const CheckpointSummary summary = describe_checkpoint(path);
  EXPECT_TRUE(summary.seal.sealed);
  EXPECT_FALSE(summary.seal.intact);
  EXPECT_FALSE(summary.content_read);
  EXPECT_EQ(summary.format, 0);
  EXPECT_TRUE(summary.model.empty());
  EXPECT_THAT(
      [&] { load_checkpoint(path, other); },
      ::testing::ThrowsMessage<Error>(::testing::AllOf(
          HasSubstr(path + ": corrupted checkpoint (its checksum says "),
          HasSubstr("): the file changed after hotloop wrote it"))));
  // Cut short.
  write_string(path, good.substr(0, good.size() - 100));
  EXPECT_THAT(
      [&] { load_checkpoint(path, other); },
      ::testing::ThrowsMessage<Error>(HasSubstr(
          path + ": corrupted or truncated checkpoint (no zip end record")));
  // A newer format: the seal says so before anything is read.
  std::string newer = good;
  const size_t format = newer.rfind("format=2");
  ASSERT_NE(format, std::string::npos);
  newer[format + 7] = '9';
  write_string(path, newer);
  EXPECT_THAT(
      [&] { load_checkpoint(path, other); },
      ::testing::ThrowsMessage<Error>(HasSubstr(
          path + ": written by a newer version (hotloop " HOTLOOP_VERSION
                 ", checkpoint format 9; this hotloop " HOTLOOP_VERSION
                 " reads formats up to 2)")));
  // Without a seal (as before seals): loads, with a note.
  const size_t comment = good.rfind("hotloop-checkpoint ");
  std::string unsealed = good.substr(0, comment);
  unsealed[unsealed.size() - 2] = 0;
  unsealed[unsealed.size() - 1] = 0;
  write_string(path, unsealed);
  std::ostringstream notes;
  verify_checkpoint(path, &notes);
  EXPECT_EQ(
      notes.str(),
      "note: " + path +
          " carries no checksum (written by an older hotloop); its records' "
          "CRC-32s match, loading it\n");
  load_checkpoint(path, other);
  EXPECT_TRUE(describe_checkpoint(path).content_read);
}

// A checkpoint from before seals is checked against its zip's own CRC-32s
// and directory before LibTorch's reader, which checks neither, sees it.
TEST(Checkpoint, AnUnsealedCheckpointIsCheckedRecordByRecord) {
  TempDir dir;
  Net net;
  const std::string path = dir.file("a.ckpt");
  save_checkpoint(path, net);
  std::string good = read_bytes(path);
  const size_t comment = good.rfind("hotloop-checkpoint ");
  ASSERT_NE(comment, std::string::npos);
  good.resize(comment);
  good[good.size() - 2] = 0;
  good[good.size() - 1] = 0;
  const auto expect_damage = [&](const std::string& bytes,
                                 const std::string& problem) {
    write_string(path, bytes);
    const CheckpointSeal seal = read_checkpoint_seal(path);
    EXPECT_FALSE(seal.sealed);
    EXPECT_FALSE(seal.intact);
    EXPECT_THAT(seal.problem, ::testing::ContainsRegex(problem));
    EXPECT_FALSE(describe_checkpoint(path).content_read);
    Net other;
    EXPECT_THAT(
        [&] { load_checkpoint(path, other); },
        ::testing::ThrowsMessage<Error>(::testing::ContainsRegex(
            "^" + path + ": corrupted checkpoint \\(" + problem)));
  };
  const auto le = [&](size_t at, int bytes) {
    uint32_t v = 0;
    for (int i = bytes - 1; i >= 0; --i) {
      v = (v << 8) | static_cast<unsigned char>(good[at + i]);
    }
    return v;
  };
  const auto le32 = [&](size_t at) { return le(at, 4); };
  // One changed byte inside a record: that record's CRC-32 fails. The
  // first "archive/data.pkl" is the name in its local header.
  const size_t pickle = good.find("archive/data.pkl");
  ASSERT_NE(pickle, std::string::npos);
  const size_t pickle_data = pickle + 16 + le(pickle - 30 + 28, 2);
  std::string bytes = good;
  bytes[pickle_data + 5] = static_cast<char>(bytes[pickle_data + 5] ^ 1);
  expect_damage(
      bytes,
      "record 'archive/data.pkl' fails its CRC-32 check \\(the directory "
      "says [0-9a-f]{8}, its bytes give [0-9a-f]{8}\\)");
  // The central directory's first entry damaged.
  const uint64_t end = good.size() - 22;
  ASSERT_EQ(le32(end), 0x06054b50u);
  const uint32_t directory = le32(end + 16);
  bytes = good;
  bytes[directory] = 'X';
  expect_damage(bytes, "its central directory is damaged at entry 1");
  // A record said to lie past the records.
  bytes = good;
  bytes[directory + 42 + 3] = 0x7f; // the first entry's local header offset
  expect_damage(bytes, "record '[^']+' starts outside the file");
  // A record in a compression LibTorch does not read; a stored record
  // said to be deflated.
  bytes = good;
  bytes[directory + 10] = 12;
  expect_damage(
      bytes,
      "record '[^']+' uses compression method 12 \\(LibTorch reads stored "
      "and deflated records\\)");
  ASSERT_EQ(le(directory + 10, 2), 0u) << "the first record is stored";
  bytes = good;
  bytes[directory + 10] = 8;
  expect_damage(
      bytes, "record '[^']+' (does not inflate|inflates to |ends before)");
  // A deflated record (LibTorch deflates its code records) with one changed
  // byte: it no longer inflates, or not to its CRC-32.
  const size_t code = good.find("archive/code/__torch__.py");
  ASSERT_NE(code, std::string::npos);
  ASSERT_EQ(le(code - 30 + 8, 2), 8u) << "the code record is deflated";
  const size_t code_data = code + le(code - 30 + 26, 2) + le(code - 30 + 28, 2);
  bytes = good;
  bytes[code_data + 3] = static_cast<char>(bytes[code_data + 3] ^ 0x10);
  expect_damage(
      bytes,
      "record 'archive/code/__torch__.py' (does not inflate|inflates to |"
      "ends before its deflate stream does|fails its CRC-32 check)");
  // A directory that claims more entries than it holds.
  bytes = good;
  bytes[end + 10] = static_cast<char>(0xff);
  bytes[end + 8] = static_cast<char>(0xff);
  expect_damage(bytes, "its central directory does not fit the file");
  // A local header whose name differs from the directory's.
  const uint32_t first_local = le32(directory + 42);
  bytes = good;
  bytes[first_local + 30] = static_cast<char>(bytes[first_local + 30] ^ 1);
  expect_damage(bytes, "record '[^']+' has a damaged local header");
}

// The same archive in zip64 form, as a writer makes it for files past
// 4 GiB: every entry's sizes and local header offset moved into a zip64
// extra field, the directory's place and size into a zip64 end record.
std::string as_zip64(const std::string& zip) {
  const auto le = [&](size_t at, int bytes) {
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; --i) {
      v = (v << 8) | static_cast<unsigned char>(zip[at + i]);
    }
    return v;
  };
  const auto put = [](std::string& out, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) {
      out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
    }
  };
  const size_t end = zip.size() - 22;
  const uint64_t entries = le(end + 10, 2);
  const uint64_t directory = le(end + 16, 4);
  std::string out = zip.substr(0, directory);
  for (size_t at = directory, i = 0; i < entries; ++i) {
    const uint64_t name = le(at + 28, 2);
    const uint64_t extra = le(at + 30, 2);
    const uint64_t comment = le(at + 32, 2);
    std::string fixed = zip.substr(at, 46);
    for (size_t field : {20, 24, 42}) {
      fixed.replace(field, 4, "\xff\xff\xff\xff");
    }
    fixed[30] = static_cast<char>((extra + 28) & 0xff);
    fixed[31] = static_cast<char>((extra + 28) >> 8);
    out += fixed + zip.substr(at + 46, name + extra);
    put(out, 0x0001, 2); // the zip64 extra field: uncompressed, compressed,
    put(out, 24, 2);     // local header offset, in that order
    put(out, le(at + 24, 4), 8);
    put(out, le(at + 20, 4), 8);
    put(out, le(at + 42, 4), 8);
    out += zip.substr(at + 46 + name + extra, comment);
    at += 46 + name + extra + comment;
  }
  const uint64_t record64 = out.size();
  put(out, 0x06064b50, 4);
  put(out, 44, 8); // the record's size after this field
  put(out, 45, 2);
  put(out, 45, 2);
  put(out, 0, 4);
  put(out, 0, 4);
  put(out, entries, 8);
  put(out, entries, 8);
  put(out, record64 - directory, 8);
  put(out, directory, 8);
  put(out, 0x07064b50, 4); // the locator
  put(out, 0, 4);
  put(out, record64, 8);
  put(out, 1, 4);
  put(out, 0x06054b50, 4); // the end record, its fields full
  put(out, 0, 4);
  put(out, 0xffff, 2);
  put(out, 0xffff, 2);
  put(out, 0xffffffff, 4);
  put(out, 0xffffffff, 4);
  put(out, 0, 2);
  return out;
}

// A checkpoint past 4 GiB is a zip64 archive: its records are found
// through the zip64 end record and extra fields, and damage there is named.
TEST(Checkpoint, AZip64CheckpointIsCheckedThroughItsZip64Records) {
  TempDir dir;
  Net net;
  net.linear->weight.data().fill_(0.25);
  const std::string path = dir.file("a.ckpt");
  save_checkpoint(path, net);
  std::string unsealed = read_bytes(path);
  unsealed.resize(unsealed.rfind("hotloop-checkpoint "));
  unsealed[unsealed.size() - 2] = 0;
  unsealed[unsealed.size() - 1] = 0;
  const std::string good = as_zip64(unsealed);
  ASSERT_GT(good.size(), unsealed.size());
  write_string(path, good);
  const CheckpointSeal seal = read_checkpoint_seal(path);
  EXPECT_FALSE(seal.sealed);
  EXPECT_TRUE(seal.intact) << seal.problem;
  EXPECT_EQ(seal.problem, "");
  Net other;
  load_checkpoint(path, other); // LibTorch's reader takes zip64 too
  EXPECT_TRUE(other.linear->weight.equal(net.linear->weight));

  const auto expect_damage = [&](const std::string& bytes,
                                 const std::string& problem) {
    write_string(path, bytes);
    EXPECT_EQ(read_checkpoint_seal(path).problem, problem);
    Net fresh;
    EXPECT_THAT(
        [&] { load_checkpoint(path, fresh); },
        ::testing::ThrowsMessage<Error>(
            HasSubstr(path + ": corrupted checkpoint (" + problem + ")")));
  };
  const size_t end = good.size() - 22;
  const size_t locator = end - 20;
  const size_t record64 = locator - 56;
  std::string bytes = good;
  bytes[locator] = 'X';
  expect_damage(bytes, "its zip64 end record locator is missing");
  bytes = good;
  bytes[record64] = 'X';
  expect_damage(bytes, "its zip64 end record is damaged");
  bytes = good;
  bytes[locator + 8 + 3] = 0x7f; // the zip64 end record's offset
  expect_damage(bytes, "its zip64 end record lies outside the file");
  bytes = good;
  bytes[record64 + 24] ^= 1; // this disk's entries differ from the total
  expect_damage(
      bytes, "its zip64 end record describes a zip split over several disks");
  // The first entry's zip64 extra field: another id, then too short for
  // the three values its 0xFFFFFFFF fields ask for.
  const auto le16 = [&](size_t at) {
    return static_cast<size_t>(static_cast<unsigned char>(good[at])) |
           static_cast<size_t>(static_cast<unsigned char>(good[at + 1])) << 8;
  };
  const size_t directory = good.find("PK\x01\x02");
  ASSERT_NE(directory, std::string::npos);
  const std::string first(good, directory + 46, le16(directory + 28));
  // as_zip64 put the zip64 field last.
  const size_t extra =
      directory + 46 + first.size() + le16(directory + 30) - 28;
  ASSERT_EQ(le16(extra), 1u);
  bytes = good;
  bytes[extra] = 2;
  expect_damage(bytes, "record '" + first + "' lacks its zip64 extra field");
  bytes = good;
  bytes[extra + 2] = 16;
  expect_damage(bytes, "record '" + first + "' has a short zip64 extra field");
  // The zip64 extra field's local header offset moved past the records.
  bytes = good;
  bytes[extra + 4 + 16 + 3] = 0x7f;
  expect_damage(bytes, "record '" + first + "' starts outside the file");
}

struct WiderNet : torch::nn::Module {
  WiderNet() {
    linear = register_module("linear", torch::nn::Linear(4, 5));
    norm = register_module("norm", torch::nn::BatchNorm1d(5));
  }
  torch::nn::Linear linear{nullptr};
  torch::nn::BatchNorm1d norm{nullptr};
};

TEST(Checkpoint, AModelOfOtherShapesIsRefusedNamingTheFirstDifference) {
  TempDir dir;
  Net net;
  save_checkpoint(dir.file("a.ckpt"), net);
  WiderNet wider;
  EXPECT_THAT(
      [&] { load_checkpoint(dir.file("a.ckpt"), wider); },
      ::testing::ThrowsMessage<Error>(HasSubstr(
          dir.file("a.ckpt") +
          ": the checkpoint's model differs from this one: 'linear.weight' is "
          "[3, 4] in the checkpoint and [5, 4] here (were the model options "
          "changed?)")));
  // LibTorch would have taken the checkpoint's shapes: nothing changed.
  EXPECT_EQ(wider.linear->weight.sizes(), (std::vector<int64_t>{5, 4}));
  const CheckpointSummary summary = describe_checkpoint(dir.file("a.ckpt"));
  ASSERT_EQ(summary.model.size(), 7u); // 4 parameters, BatchNorm's 3 buffers
  EXPECT_EQ(
      summary.model[0],
      std::make_pair(std::string("linear.weight"), std::string("[3, 4]")));
}

} // namespace
} // namespace hotloop::train
