// Data parallelism on c10d: environment parsing, sharding, process-group
// errors, and multi-process runs. A multi-process test starts this test
// binary again as its workers (DistWorker.DISABLED_Run, chosen by
// HOTLOOP_DIST_SCENARIO) with torchrun's variables, on 127.0.0.1; every
// collective has a timeout of kTimeout seconds and every worker is killed
// after kWorkerLimit, so no test can hang.

#include "hotloop/dist.h"
#include "hotloop/core/compat.h"
#include "hotloop/core/error.h"
#include "hotloop/data/dataloader.h"
#include "hotloop/data/tensor_dataset.h"
#include "hotloop/models/fashion_cnn.h"
#include "hotloop/models/mlp.h"
#include "hotloop/models/resnet.h"
#include "hotloop/train/classifier.h"
#include "hotloop/train/detail/agreement.h"
#include "hotloop/train/trainer.h"
#include "test_util.h"
#include "train/trainer_fixture.h"

#include <ATen/ATen.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/serialize.h>
#include <nlohmann/json.hpp>

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <sstream>
#include <thread>

namespace hotloop::dist {
namespace {

namespace fs = std::filesystem;
using ::hotloop::testing::TempDir;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

constexpr double kTimeout = 20;     // seconds, every collective
constexpr double kWorkerLimit = 90; // seconds, every worker process

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// ---------------------------------------------------------------------------
// The environment a launcher leaves.

using Variables = std::map<std::string, std::string>;

ProcessEnvironment read(const Variables& variables) {
  return read_environment([&](const char* name) -> const char* {
    const auto found = variables.find(name);
    return found == variables.end() ? nullptr : found->second.c_str();
  });
}

TEST(ProcessEnvironment, ReadsTorchrunsVariables) {
  const ProcessEnvironment env = read(
      {{"RANK", "3"},
       {"LOCAL_RANK", "1"},
       {"WORLD_SIZE", "4"},
       {"LOCAL_WORLD_SIZE", "2"},
       {"GROUP_RANK", "1"},
       {"MASTER_ADDR", "node0"},
       {"MASTER_PORT", "29511"},
       {"TORCHELASTIC_RESTART_COUNT", "2"}});
  EXPECT_EQ(env.launcher, "torchrun");
  EXPECT_TRUE(env.distributed());
  EXPECT_EQ(env.rank, 3);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.world_size, 4);
  EXPECT_EQ(env.local_world_size, 2);
  EXPECT_EQ(env.node_rank, 1);
  EXPECT_EQ(env.master_addr, "node0");
  EXPECT_EQ(env.master_port, 29511);
  EXPECT_EQ(env.restart_count, 2);
}

TEST(ProcessEnvironment, WithoutALauncherItIsOneProcess) {
  const ProcessEnvironment env = read({});
  EXPECT_FALSE(env.distributed());
  EXPECT_EQ(env.world_size, 1);
  // An interactive shell inside a SLURM allocation is not a rank.
  EXPECT_FALSE(
      read({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}}).distributed());
}

TEST(ProcessEnvironment, InconsistentVariablesAreNamed) {
  EXPECT_THROWS_WITH(
      ConfigError,
      read({{"RANK", "2"}, {"WORLD_SIZE", "2"}}),
      "environment variable RANK=2 must be below WORLD_SIZE=2");
  EXPECT_THROWS_WITH(
      ConfigError,
      read({{"RANK", "0"}}),
      "environment variable WORLD_SIZE is not set, but RANK is");
  EXPECT_THROWS_WITH(
      ConfigError,
      read({{"WORLD_SIZE", "2"}}),
      "environment variable RANK is not set, but WORLD_SIZE is");
  EXPECT_THROWS_WITH(
      ConfigError,
      read({{"RANK", "one"}, {"WORLD_SIZE", "2"}}),
      "environment variable RANK='one': expected a whole number");
  EXPECT_THROWS_WITH(
      ConfigError,
      read(
          {{"RANK", "1"},
           {"WORLD_SIZE", "4"},
           {"LOCAL_RANK", "2"},
           {"LOCAL_WORLD_SIZE", "2"}}),
      "environment variable LOCAL_RANK=2 must be below LOCAL_WORLD_SIZE=2");
  EXPECT_THROWS_WITH(
      ConfigError,
      read({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "70000"}}),
      "MASTER_PORT=70000: expected a port number");
}

TEST(ProcessEnvironment, ReadsSlurmsVariables) {
  const ProcessEnvironment env = read(
      {{"SLURM_PROCID", "5"},
       {"SLURM_LOCALID", "1"},
       {"SLURM_NTASKS", "8"},
       {"SLURM_NODEID", "2"},
       {"SLURM_TASKS_PER_NODE", "2(x4)"},
       {"SLURM_NODELIST", "gpu[07-10],cpu1"},
       {"SLURM_JOB_ID", "1234567"}});
  EXPECT_EQ(env.launcher, "slurm");
  EXPECT_EQ(env.rank, 5);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.world_size, 8);
  EXPECT_EQ(env.local_world_size, 2);
  EXPECT_EQ(env.node_rank, 2);
  EXPECT_EQ(env.master_addr, "gpu07");
  EXPECT_EQ(env.master_port, 15000 + 4567);
  EXPECT_EQ(first_slurm_host("node5"), "node5");
  EXPECT_EQ(first_slurm_host("a1,b[1-2]"), "a1");
  EXPECT_EQ(first_slurm_host("b[3,8-9]"), "b3");
}

// ---------------------------------------------------------------------------
// Each process's share of the data.

std::shared_ptr<data::TensorDataset> numbered(int64_t n) {
  return std::make_shared<data::TensorDataset>(
      at::arange(n, at::kFloat).reshape({n, 1}), at::arange(n));
}

std::vector<int64_t> targets_of(data::DataLoader& loader) {
  std::vector<int64_t> out;
  for (auto& batch : loader) {
    const at::Tensor target = batch.target.contiguous();
    out.insert(
        out.end(),
        target.data_ptr<int64_t>(),
        target.data_ptr<int64_t>() + target.numel());
  }
  return out;
}

TEST(Shard, TheRanksTrainingSharesCoverAnEpochExactlyOnce) {
  data::DataLoader loader(
      numbered(24), data::DataLoaderOptions(4).shuffle(true).seed(7));
  std::vector<int64_t> all;
  for (int64_t rank = 0; rank < 3; ++rank) {
    auto share = data::shard(loader, 3, rank, /*training=*/true);
    EXPECT_EQ(share->num_batches(), 2);
    share->set_epoch(5);
    const auto mine = targets_of(*share);
    all.insert(all.end(), mine.begin(), mine.end());
  }
  std::sort(all.begin(), all.end());
  std::vector<int64_t> expected(24);
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(all, expected);
}

TEST(Shard, EvaluationSharesCountEverySampleOnceWithoutPadding) {
  data::DataLoader loader(numbered(10), data::DataLoaderOptions(4));
  EXPECT_EQ(
      targets_of(*data::shard(loader, 3, 0, false)),
      (std::vector<int64_t>{0, 3, 6, 9}));
  EXPECT_EQ(
      targets_of(*data::shard(loader, 3, 2, false)),
      (std::vector<int64_t>{2, 5, 8}));
}

TEST(Shard, ALoadersOwnSamplerIsSplitPositionByPosition) {
  auto sampler = std::make_shared<data::WeightedRandomSampler>(
      std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 9, true, 3);
  data::DataLoader loader(
      numbered(10), data::DataLoaderOptions(2).sampler(sampler));
  for (const bool training : {true, false}) {
    std::vector<int64_t> expected;
    const std::vector<int64_t> drawn = sampler->indices(4);
    // Positions 1, 3, 5, 7 (and 9 % 9 = 0 when padded for training).
    for (int64_t p = 1; p < (training ? 10 : 9); p += 2) {
      expected.push_back(drawn[static_cast<size_t>(p % 9)]);
    }
    auto share = data::shard(loader, 2, 1, training);
    share->set_epoch(4);
    EXPECT_EQ(targets_of(*share), expected) << "training=" << training;
    EXPECT_EQ(share->num_batches(), training ? 3 : 2);
  }
}

TEST(Shard, ALoadersOwnBatchSamplerIsSplitBatchByBatch) {
  // Batches [0 1 2] [3 4 5] [6 7 8] [9]; rank 1 of 3 takes batch 1, then
  // for training batch 4 % 4 = 0, so every rank takes two.
  data::DataLoader loader(
      numbered(10),
      data::DataLoaderOptions().batch_sampler(
          std::make_shared<data::BatchSampler>(
              std::make_shared<data::SequentialSampler>(10), 3, false)));
  auto training = data::shard(loader, 3, 1, true);
  EXPECT_EQ(targets_of(*training), (std::vector<int64_t>{3, 4, 5, 0, 1, 2}));
  EXPECT_EQ(training->num_batches(), 2);
  EXPECT_EQ(
      targets_of(*data::shard(loader, 3, 1, false)),
      (std::vector<int64_t>{3, 4, 5}));
  EXPECT_EQ(
      targets_of(*data::shard(loader, 3, 0, false)),
      (std::vector<int64_t>{0, 1, 2, 9}));
}

TEST(Shard, AShareBuiltByHandIsKeptForItsRankAndNamedForAnother) {
  auto own = std::make_shared<data::DistributedSampler>(10, 2, 1, true, 5);
  data::DataLoader loader(
      numbered(10), data::DataLoaderOptions(4).sampler(own));
  EXPECT_EQ(targets_of(*data::shard(loader, 2, 1, true)), own->indices(0));
  EXPECT_THROWS_WITH(
      ConfigError,
      data::shard(loader, 2, 0, true),
      "the loader's sampler is the share of rank 1 of 2, but this process is "
      "rank 0 of 2: give the loader the whole data's sampler (each process "
      "takes its share of it), or build its share with this process's rank "
      "and world size");
  auto own_batches = std::make_shared<data::DistributedBatchSampler>(
      std::make_shared<data::BatchSampler>(
          std::make_shared<data::SequentialSampler>(10), 2, false),
      2,
      0);
  data::DataLoader batch_share(
      numbered(10), data::DataLoaderOptions().batch_sampler(own_batches));
  EXPECT_EQ(
      targets_of(*data::shard(batch_share, 2, 0, true)),
      (std::vector<int64_t>{0, 1, 4, 5, 8, 9}));
  data::DataLoader batched(
      numbered(10),
      data::DataLoaderOptions().batch_sampler(
          std::make_shared<data::BatchSampler>(own, 2, false)));
  EXPECT_THROWS_WITH(
      ConfigError,
      data::shard(batched, 3, 1, false),
      "the loader's batch_sampler is the share of rank 1 of 2, but this "
      "process is rank 1 of 3");
}

// ---------------------------------------------------------------------------
// Forming a group: what goes wrong is named.

ProcessEnvironment local_env(int64_t rank, int64_t world, int64_t port) {
  ProcessEnvironment env;
  env.launcher = "torchrun";
  env.rank = rank;
  env.local_rank = rank;
  env.world_size = world;
  env.local_world_size = world;
  env.master_port = port;
  return env;
}

TEST(ProcessGroup, AnUnreachableMasterIsNamedAfterTheTimeout) {
  const int64_t port = free_port();
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THROWS_WITH(
      DistError,
      ProcessGroup::join(
          local_env(1, 2, port), ProcessGroupOptions().timeout(1)),
      "rank 1 cannot reach the rendezvous at 127.0.0.1:" +
          std::to_string(port) + " within 1 s");
  EXPECT_LT(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count(),
      15);
}

TEST(ProcessGroup, APortInUseIsNamed) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_ANY);
  ASSERT_EQ(
      ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  socklen_t length = sizeof(address);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  const int64_t port = ntohs(address.sin_port);
  EXPECT_THROWS_WITH(
      DistError,
      ProcessGroup::join(
          local_env(0, 2, port), ProcessGroupOptions().timeout(1)),
      "rank 0 cannot serve the rendezvous at 127.0.0.1:" +
          std::to_string(port) + ": the port is in use");
  ::close(fd);
}

// LibTorch 2.4 and later serve the store on libuv by default; Debian 13's
// 2.6 is built without it, so there rank 0 falls back to the classic
// server, and USE_LIBUV=0 asks for that one as in PyTorch. Every
// multi-process test below goes through the default.
TEST(ProcessGroup, TheStoreIsServedWithOrWithoutLibuv) {
  struct WithTheChoice {
    bool useLibUV = true;
  };
  struct WithoutIt {
    int port = 0;
  };
  WithTheChoice with;
  EXPECT_TRUE(compat::use_libuv_store(with, false));
  EXPECT_FALSE(with.useLibUV);
  WithoutIt without;
  EXPECT_FALSE(compat::use_libuv_store(without, false));

  for (const char* use_libuv : {"0", ""}) {
    SCOPED_TRACE(std::string("USE_LIBUV=") + use_libuv);
    if (*use_libuv != '\0') {
      ::setenv("USE_LIBUV", use_libuv, 1);
    } else {
      ::unsetenv("USE_LIBUV");
    }
    auto group = ProcessGroup::join(
        local_env(0, 1, free_port()), ProcessGroupOptions().timeout(kTimeout));
    at::Tensor sum = at::arange(3, at::kFloat);
    group->all_reduce(sum);
    EXPECT_TRUE(sum.equal(at::arange(3, at::kFloat)));
  }
  ::unsetenv("USE_LIBUV");
}

TEST(ProcessGroup, MissingProcessesAndADifferentWorldSizeAreNamed) {
  const int64_t port = free_port();
  std::string rank1_error;
  std::thread other([&] {
    try {
      ProcessGroup::join(
          local_env(1, 3, port), ProcessGroupOptions().timeout(2));
    } catch (const DistError& error) {
      rank1_error = error.what();
    }
  });
  EXPECT_THROWS_WITH(
      DistError,
      ProcessGroup::join(
          local_env(0, 2, port), ProcessGroupOptions().timeout(2)),
      "only 1 of 2 processes joined the rendezvous at 127.0.0.1:" +
          std::to_string(port));
  other.join();
  EXPECT_THAT(
      rank1_error,
      HasSubstr("rank 1 was started with WORLD_SIZE=3, rank 0 with 2"));
}

// ---------------------------------------------------------------------------
// NCCL: one process on its GPU (a GPU machine), or named as missing.

TEST(ProcessGroup, NcclIsRefusedByABuildWithoutCudaBeforeTheRendezvous) {
  if (at::hasCUDA()) {
    GTEST_SKIP() << "this LibTorch has CUDA";
  }
  // No process serves the rendezvous at this port: only a check made
  // before connecting can answer within the test.
  EXPECT_THROWS_WITH(
      ConfigError,
      ProcessGroup::join(
          local_env(1, 2, free_port()),
          ProcessGroupOptions().backend("nccl").timeout(kTimeout)),
      "trainer.process_group_backend=nccl: this build of hotloop has no NCCL "
      "process group");
}

TEST(ProcessGroupNccl, OneProcessReducesOnItsGpuAndDdpKeepsTheGradients) {
  if (!at::hasCUDA() || at::getNumGPUs() == 0) {
    GTEST_SKIP() << "needs a CUDA build of LibTorch and a GPU";
  }
  const c10::Device gpu(c10::kCUDA, 0);
  c10::impl::VirtualGuardImpl(c10::DeviceType::CUDA).setDevice(gpu);
  auto group = ProcessGroup::join(
      local_env(0, 1, free_port()),
      ProcessGroupOptions().timeout(kTimeout).cuda(true));
  EXPECT_EQ(group->backend_name(), "nccl"); // chosen by the device
  // A CUDA tensor is reduced where it is; a CPU one travels through the
  // GPU and comes back to the CPU.
  at::Tensor on_gpu = at::arange(4, at::TensorOptions(gpu).dtype(at::kFloat));
  group->all_reduce(on_gpu, ReduceOp::kMax);
  EXPECT_TRUE(on_gpu.is_cuda());
  EXPECT_TRUE(on_gpu.cpu().equal(at::arange(4, at::kFloat)));
  at::Tensor on_cpu = at::tensor({int64_t{3}, int64_t{-1}});
  group->all_reduce(on_cpu);
  group->broadcast(on_cpu);
  EXPECT_TRUE(on_cpu.is_cpu());
  EXPECT_TRUE(on_cpu.equal(at::tensor({int64_t{3}, int64_t{-1}})));

  // DDP over NCCL on one process: the mean over one process is its own
  // gradient, so the wrapped model's gradients equal a plain copy's.
  torch::manual_seed(0);
  torch::nn::Sequential net(
      torch::nn::Linear(6, 5), torch::nn::Tanh(), torch::nn::Linear(5, 3));
  net->to(gpu);
  torch::nn::Sequential plain(
      torch::nn::Linear(6, 5), torch::nn::Tanh(), torch::nn::Linear(5, 3));
  plain->to(gpu);
  {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < net->parameters().size(); ++i) {
      plain->parameters()[i].copy_(net->parameters()[i]);
    }
  }
  DistributedDataParallel ddp(*net, group);
  const at::Tensor x = at::randn({8, 6}, at::TensorOptions(gpu));
  const at::Tensor y = at::randint(3, {8}, at::TensorOptions(gpu).dtype(at::kLong));
  const at::Tensor loss = at::cross_entropy_loss(net->forward(x), y);
  ddp.prepare_for_backward(loss);
  loss.backward();
  at::cross_entropy_loss(plain->forward(x), y).backward();
  for (size_t i = 0; i < net->parameters().size(); ++i) {
    EXPECT_TRUE(at::allclose(
        net->parameters()[i].grad(), plain->parameters()[i].grad(), 1e-6, 1e-7))
        << "parameter " << i;
  }
}

// ---------------------------------------------------------------------------
// Multi-process runs: this binary again, as workers.

struct Workers {
  std::vector<int> codes; // exit codes, 128 + signal when killed
  std::string dir;
  std::string log(int64_t rank) const {
    return read_text(dir + "/rank" + std::to_string(rank) + ".log");
  }
  std::string error(int64_t rank) const {
    return read_text(dir + "/rank" + std::to_string(rank) + ".error");
  }
};

// Runs `scenario` in `world` processes; `env` adds variables (all ranks).
Workers run_workers(
    const std::string& scenario,
    int64_t world,
    const std::string& dir,
    const Variables& env = {}) {
  const int64_t port = free_port();
  Workers workers;
  workers.dir = dir;
  std::vector<pid_t> pids;
  for (int64_t rank = 0; rank < world; ++rank) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      Variables all = env;
      all["HOTLOOP_DIST_SCENARIO"] = scenario;
      all["HOTLOOP_DIST_DIR"] = dir;
      all["RANK"] = std::to_string(rank);
      all["LOCAL_RANK"] = std::to_string(rank);
      all["WORLD_SIZE"] = std::to_string(world);
      all["LOCAL_WORLD_SIZE"] = std::to_string(world);
      all["MASTER_ADDR"] = "127.0.0.1";
      all["MASTER_PORT"] = std::to_string(port);
      for (const auto& [name, value] : all) {
        ::setenv(name.c_str(), value.c_str(), 1);
      }
      const std::string log = dir + "/rank" + std::to_string(rank) + ".log";
      std::FILE* out = std::freopen(log.c_str(), "w", stdout);
      ::dup2(::fileno(out), 2);
      ::execl(
          "/proc/self/exe",
          "hotloop_tests",
          "--gtest_filter=DistWorker.DISABLED_Run",
          "--gtest_also_run_disabled_tests",
          static_cast<char*>(nullptr));
      ::_exit(127);
    }
    pids.push_back(pid);
  }
  const auto deadline =
      std::chrono::steady_clock::now() +
      std::chrono::milliseconds(static_cast<int64_t>(kWorkerLimit * 1000));
  workers.codes.assign(world, -1);
  size_t left = pids.size();
  while (left > 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      for (size_t i = 0; i < pids.size(); ++i) {
        if (workers.codes[i] == -1) {
          ::kill(pids[i], SIGKILL);
        }
      }
    }
    int status = 0;
    const pid_t done = ::waitpid(-1, &status, WNOHANG);
    if (done <= 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    for (size_t i = 0; i < pids.size(); ++i) {
      if (pids[i] == done) {
        workers.codes[i] =
            WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
        --left;
      }
    }
  }
  return workers;
}

std::string environment(const char* name, const std::string& fallback = "") {
  const char* value = std::getenv(name);
  return value == nullptr ? fallback : value;
}

int64_t environment_int(const char* name, int64_t fallback) {
  const std::string value = environment(name);
  return value.empty() ? fallback : std::stoll(value);
}

// The small classification task of the Trainer tests, with an MLP and
// plain SGD: a step's update is linear in the mean gradient, so two
// processes with half batches and one with whole batches take the same
// steps. The CNN variant adds BatchNorm, whose statistics are the same
// only when they cover both processes' halves (SyncBatchNorm).
constexpr int64_t kSamples = 64;

std::shared_ptr<train::ImageClassifier> classifier(
    bool cnn = false, bool sync_batchnorm = false, double dropout = 0) {
  train::seed_everything(4);
  optim::OptimizerOptions optimizer;
  optimizer.name = "sgd";
  optimizer.lr = 0.5;
  optimizer.momentum = 0;
  optim::SchedulerOptions scheduler;
  scheduler.name = "none";
  torch::nn::AnyModule network(models::Mlp(
      models::MlpOptions(train::kSize * train::kSize, 4)
          .hidden({16})
          .dropout(dropout)));
  if (cnn) {
    models::FashionCnnOptions options;
    options.channels = {4};
    options.hidden = 0;
    options.num_classes = 4;
    options.image_size = train::kSize;
    options.sync_batchnorm = sync_batchnorm;
    network = torch::nn::AnyModule(models::FashionCnn(options));
  }
  return std::make_shared<train::ImageClassifier>(
      std::move(network), optimizer, scheduler);
}

std::shared_ptr<train::ImageClassifier> mlp_classifier() {
  return classifier();
}

train::TrainerOptions worker_trainer_options(const std::string& root) {
  return train::TrainerOptions()
      .accelerator("cpu")
      .num_threads(1)
      .default_root_dir(root)
      .name("t")
      .enable_progress_bar(false)
      .num_sanity_val_steps(0)
      .max_epochs(environment_int("HOTLOOP_DIST_EPOCHS", 1))
      .max_steps(environment_int("HOTLOOP_DIST_MAX_STEPS", -1))
      .accumulate_grad_batches(environment_int("HOTLOOP_DIST_ACCUMULATE", 1));
}

// Parameters, then buffers (BatchNorm's running statistics).
std::vector<at::Tensor> state_of(torch::nn::Module& module) {
  std::vector<at::Tensor> state;
  for (const at::Tensor& p : module.parameters()) {
    state.push_back(p.detach().clone());
  }
  for (const at::Tensor& b : module.buffers()) {
    state.push_back(b.detach().clone());
  }
  return state;
}

void save_parameters(torch::nn::Module& module, const std::string& path) {
  torch::save(state_of(module), path);
}

std::vector<at::Tensor> load_parameters(const std::string& path) {
  std::vector<at::Tensor> parameters;
  torch::load(parameters, path);
  return parameters;
}

// A batch sampler of the user's own: a permutation of n samples (i -> 37 i
// + 11 epoch + seed mod 64), cut into batches of `batch_size`.
class Chunks final : public data::BatchSamplerBase {
 public:
  Chunks(int64_t batch_size, uint64_t seed)
      : batch_size_(batch_size), seed_(static_cast<int64_t>(seed)) {}
  std::vector<std::vector<int64_t>> batches(int64_t epoch) const override {
    std::vector<std::vector<int64_t>> out(kSamples / batch_size_);
    for (int64_t i = 0; i < kSamples; ++i) {
      out[i / batch_size_].push_back((37 * i + 11 * epoch + seed_) % kSamples);
    }
    return out;
  }
  int64_t size() const override {
    return kSamples / batch_size_;
  }

 private:
  int64_t batch_size_;
  int64_t seed_;
};

// The training loader's order: the Trainer's shuffle-free split of the
// dataset (""), a shuffled one ("shuffle", seeded), a sampler of the
// user's own ("sampler": weighted draws with replacement) or a batch
// sampler of the user's own ("batch_sampler").
data::DataLoaderOptions train_loader_options(
    const std::string& order, int64_t batch_size, uint64_t seed) {
  if (order == "sampler") {
    std::vector<double> weights(kSamples);
    std::iota(weights.begin(), weights.end(), 1.0);
    return data::DataLoaderOptions(batch_size)
        .sampler(std::make_shared<data::WeightedRandomSampler>(
            weights, kSamples, true, seed));
  }
  if (order == "batch_sampler") {
    return data::DataLoaderOptions().batch_sampler(
        std::make_shared<Chunks>(batch_size, seed));
  }
  if (order == "shuffle") {
    return data::DataLoaderOptions(batch_size).shuffle(true).seed(seed);
  }
  return data::DataLoaderOptions(batch_size);
}

// The training loader over `samples` quadrant images in `order` (see
// train_loader_options), or ("stream") read as an IterableDataset that
// splits its samples among all processes' readers, its streams ending at
// sample `stream_end`.
std::unique_ptr<data::DataLoader> train_loader(
    const std::string& order,
    int64_t batch_size,
    uint64_t seed,
    int64_t samples = kSamples,
    int64_t stream_end = INT64_MAX) {
  if (order == "stream") {
    return std::make_unique<data::DataLoader>(
        std::make_shared<train::StreamOf>(
            train::quadrants(samples, 1), /*sized=*/true, stream_end),
        data::DataLoaderOptions(batch_size));
  }
  return std::make_unique<data::DataLoader>(
      train::quadrants(samples, 1),
      train_loader_options(order, batch_size, seed));
}

// The validation loader: 40 images in batches of 6, read as a stream of
// unknown length with the "stream" order.
std::unique_ptr<data::DataLoader> val_loader(const std::string& order) {
  if (order == "stream") {
    return std::make_unique<data::DataLoader>(
        std::make_shared<train::StreamOf>(
            train::quadrants(40, 2), /*sized=*/false),
        data::DataLoaderOptions(6));
  }
  return std::make_unique<data::DataLoader>(
      train::quadrants(40, 2), data::DataLoaderOptions(6));
}

// A fit of mlp_classifier (HOTLOOP_DIST_CNN: the CNN, with
// SyncBatchNorm unless HOTLOOP_DIST_SYNC_BN=0) on quadrant images: batch
// HOTLOOP_DIST_BATCH per
// process, HOTLOOP_DIST_SAMPLES samples (rank 1 may be told another
// number), resumed from HOTLOOP_DIST_CKPT when set. Writes the final
// parameters and validation metrics.
void fit_scenario(ProcessEnvironment env, const std::string& dir) {
  auto group = ProcessGroup::join(env, ProcessGroupOptions().timeout(kTimeout));
  const int64_t samples =
      env.rank == 1 ? environment_int("HOTLOOP_DIST_RANK1_SAMPLES", kSamples)
                    : kSamples;
  const int64_t seed =
      env.rank == 1 ? environment_int("HOTLOOP_DIST_RANK1_SEED", 2) : 2;
  const std::string order = environment("HOTLOOP_DIST_ORDER");
  const std::unique_ptr<data::DataLoader> train = train_loader(
      order,
      environment_int("HOTLOOP_DIST_BATCH", 8),
      static_cast<uint64_t>(seed),
      samples,
      env.rank == 1
          ? environment_int("HOTLOOP_DIST_RANK1_STREAM_END", INT64_MAX)
          : INT64_MAX);
  const std::unique_ptr<data::DataLoader> val = val_loader(order);
  const bool cnn = !environment("HOTLOOP_DIST_CNN").empty();
  const bool sync = environment("HOTLOOP_DIST_SYNC_BN") != "0";
  const double dropout =
      std::stod(environment("HOTLOOP_DIST_DROPOUT", "0"));
  auto module = classifier(cnn, cnn && sync, dropout);
  if (env.rank == 1 && !environment("HOTLOOP_DIST_RANK1_WIDER").empty()) {
    module = std::make_shared<train::ImageClassifier>(
        torch::nn::AnyModule(models::Mlp(
            models::MlpOptions(train::kSize * train::kSize, 4).hidden({17}))),
        optim::OptimizerOptions(),
        optim::SchedulerOptions());
  }
  const int64_t throw_at = environment_int("HOTLOOP_DIST_RANK1_THROWS_AT", 0);
  std::shared_ptr<train::Module> trained = module;
  if (env.rank == 1 && throw_at > 0) {
    trained = std::make_shared<train::OnStepClassifier>(
        std::move(*module), throw_at, [](const at::Tensor&) -> at::Tensor {
          throw DataError("sample 17: bad bytes on rank 1's disk");
        });
  }
  train::Trainer trainer(worker_trainer_options(dir + "/runs"));
  trainer.set_strategy(std::make_shared<DDPStrategy>(
      group, DistributedDataParallelOptions().sync_batchnorm(cnn && sync)));
  const train::FitResult result = trainer.fit(
      *trained, *train, val.get(), environment("HOTLOOP_DIST_CKPT"));
  save_parameters(*trained, dir + "/params" + std::to_string(env.rank) + ".pt");
  torch::save(
      at::detail::getDefaultCPUGenerator().get_state(),
      dir + "/rng" + std::to_string(env.rank) + ".pt");
  const auto metrics = trainer.validate(*trained, *val);
  nlohmann::json out;
  out["val_loss"] = metrics.at("val_loss");
  out["val_acc"] = metrics.at("val_acc");
  out["fit_val_loss"] = result.metrics.at("val_loss");
  out["steps"] = result.steps;
  out["world_size"] = result.world_size;
  out["checkpoint"] = result.checkpoint_path;
  std::ofstream(dir + "/result" + std::to_string(env.rank) + ".json")
      << out.dump();
}

// One backward step of DistributedDataParallel on the weights and batches
// of tests/reference/ddp_gradients.txt (PyTorch's DDP over Gloo).
void python_parity_scenario(ProcessEnvironment env, const std::string& dir) {
  using hotloop::testing::Reference;
  using hotloop::testing::to_tensor;
  const Reference& reference = Reference::get("ddp_gradients.txt");
  auto group = ProcessGroup::join(env, ProcessGroupOptions().timeout(kTimeout));
  torch::nn::Sequential net(
      torch::nn::Linear(6, 5), torch::nn::Tanh(), torch::nn::Linear(5, 3));
  {
    torch::NoGradGuard no_grad;
    for (const auto& entry : reference.all("mlp", "param")) {
      net->named_parameters()[entry.name].copy_(
          to_tensor(entry, at::kFloat, 1024));
    }
  }
  DistributedDataParallel ddp(
      *net,
      group,
      DistributedDataParallelOptions()
          .bucket_cap_mb(50.0 / (1 << 20))
          .first_bucket_cap_mb(50.0 / (1 << 20)));
  const int64_t buckets_first = ddp.bucket_count();
  for (int step = 0; step < 2; ++step) {
    for (auto& p : net->parameters()) {
      p.mutable_grad().reset();
    }
    const std::string suffix =
        std::to_string(env.rank) + "_" + std::to_string(step);
    const at::Tensor x =
        to_tensor(reference.one("mlp", "input", "x" + suffix), at::kFloat, 64);
    const at::Tensor y =
        to_tensor(reference.one("mlp", "target", "y" + suffix), at::kLong);
    const at::Tensor loss = at::cross_entropy_loss(net->forward(x), y);
    ddp.prepare_for_backward(loss);
    loss.backward();
  }
  std::vector<at::Tensor> grads;
  for (const auto& item : net->named_parameters()) {
    grads.push_back(item.value().grad().clone());
  }
  torch::save(grads, dir + "/grads" + std::to_string(env.rank) + ".pt");
  std::ofstream(dir + "/buckets" + std::to_string(env.rank) + ".txt")
      << buckets_first << " " << ddp.bucket_count();
}

// predict under DDP: 41 quadrant images, so that no number of processes
// splits them evenly, in the loaders named by kPredictCases.
constexpr int64_t kPredicted = 41;

// The classifier's probabilities averaged over the batch (one row for the
// whole batch, not one per sample); a sample of an unbatched loader is a
// batch of one.
class MeanPredictor final : public train::ImageClassifier {
 public:
  explicit MeanPredictor(train::ImageClassifier&& base)
      : train::ImageClassifier(std::move(base)) {}
  at::Tensor predict_step(const data::Batch& batch, int64_t) override {
    const at::Tensor input =
        batch.input.dim() == 3 ? batch.input.unsqueeze(0) : batch.input;
    return at::softmax(forward(input), 1).mean(0);
  }
};

// A classifier whose predict_step fails on rank 1.
class FailsOnRank1 final : public train::ImageClassifier {
 public:
  FailsOnRank1(train::ImageClassifier&& base, int64_t rank)
      : train::ImageClassifier(std::move(base)), rank_(rank) {}
  at::Tensor predict_step(const data::Batch& batch, int64_t idx) override {
    if (rank_ == 1) {
      throw DataError("sample 3: bad bytes on rank 1's disk");
    }
    return train::ImageClassifier::predict_step(batch, idx);
  }

 private:
  int64_t rank_;
};

const std::vector<std::string> kPredictCases = {
    "plain",
    "shuffle",
    "drop_last",
    "sampler",
    "batch_sampler",
    "limit",
    "fraction",
    "tiny",
    "stream",
    "own_share",
    "mean_batch_sampler",
    "mean_unbatched",
    "mean_rows",
    "seeds",
    "fails"};

// The loader of case `name` in process `rank` of `world` (own_share: its
// share, built by hand; seeds: a seed that differs by rank).
std::unique_ptr<data::DataLoader> predict_loader(
    const std::string& name, int64_t rank = 0, int64_t world = 1) {
  auto dataset = train::quadrants(name == "tiny" ? 2 : kPredicted, 3);
  data::DataLoaderOptions options(6);
  if (name == "seeds") {
    options.shuffle(true).seed(9 + static_cast<uint64_t>(rank));
  } else if (name == "own_share") {
    options.sampler(std::make_shared<data::DistributedSampler>(
        kPredicted, world, rank, /*shuffle=*/false, 0));
  } else if (name == "shuffle") {
    options.shuffle(true).seed(9);
  } else if (name == "drop_last") {
    // Batches of 7: a share cut to whole batches would miss samples.
    options.batch_size(7).drop_last(true);
  } else if (name == "sampler") {
    std::vector<double> weights(kPredicted);
    std::iota(weights.begin(), weights.end(), 1.0);
    options.sampler(
        std::make_shared<data::WeightedRandomSampler>(weights, 29, true, 5));
  } else if (name == "batch_sampler" || name == "mean_batch_sampler") {
    options = data::DataLoaderOptions().batch_sampler(
        std::make_shared<data::BatchSampler>(
            std::make_shared<data::RandomSampler>(
                kPredicted, false, std::nullopt, 4),
            5,
            false));
  } else if (name == "mean_unbatched") {
    options.batch_size(std::nullopt);
  } else if (name == "stream") {
    return std::make_unique<data::DataLoader>(
        std::make_shared<train::StreamOf>(dataset, /*sized=*/true), options);
  }
  return std::make_unique<data::DataLoader>(dataset, options);
}

std::shared_ptr<train::Module> predictor(
    const std::string& name, int64_t rank = 0) {
  auto module = mlp_classifier();
  if (name.rfind("mean_", 0) == 0) {
    return std::make_shared<MeanPredictor>(std::move(*module));
  }
  if (name == "fails") {
    return std::make_shared<FailsOnRank1>(std::move(*module), rank);
  }
  return module;
}

train::TrainerOptions predict_options(const std::string& name) {
  return worker_trainer_options("").limit_predict_batches(
      name == "limit" ? 3 : (name == "fraction" ? 0.5 : -1));
}

// The samples a process's predict_step saw.
class CountSamples final : public train::Callback {
 public:
  void on_predict_batch_end(
      train::Trainer&,
      train::Module&,
      const at::Tensor&,
      const data::Batch& batch,
      int64_t) override {
    samples += batch.input.dim() == 3 ? 1 : batch.input.size(0);
  }
  int64_t samples = 0;
};

// What process `rank` hands gather_everywhere: tensors of several dtypes,
// shapes and layouts, an undefined one, and a count that differs by rank.
std::vector<at::Tensor> gathered_by(int64_t rank) {
  const auto r = static_cast<double>(rank);
  std::vector<at::Tensor> out = {
      at::arange(rank + 1),
      at::scalar_tensor(rank % 2 == 0, at::kBool),
      at::Tensor(),
      (at::arange(6, at::kFloat).reshape({2, 3}) + r).t().to(at::kBFloat16),
      at::empty({0, 5}),
      at::full({3}, 0.1 + r, at::kDouble)};
  for (int64_t extra = 0; extra < rank; ++extra) {
    out.push_back(at::full({2, 2}, -r, at::kHalf));
  }
  return out;
}

// Whether `got` is every process's gathered_by, else what differs.
std::string check_gathered(
    const std::vector<std::vector<at::Tensor>>& got, int64_t world) {
  if (static_cast<int64_t>(got.size()) != world) {
    return "got " + std::to_string(got.size()) + " processes' tensors";
  }
  for (int64_t r = 0; r < world; ++r) {
    const std::vector<at::Tensor> expected = gathered_by(r);
    if (got[r].size() != expected.size()) {
      return "rank " + std::to_string(r) + ": " +
             std::to_string(got[r].size()) + " tensors";
    }
    for (size_t k = 0; k < expected.size(); ++k) {
      const at::Tensor& a = got[r][k];
      const at::Tensor& b = expected[k];
      const bool same = a.defined() == b.defined() &&
                        (!b.defined() ||
                         (a.scalar_type() == b.scalar_type() &&
                          a.sizes() == b.sizes() && a.is_cpu() && a.equal(b)));
      if (!same) {
        return "rank " + std::to_string(r) + "'s tensor " + std::to_string(k);
      }
    }
  }
  return "ok";
}

// Each case of kPredictCases predicted by this process of a DDP run:
// predict<rank>_<case>.pt holds its outputs, samples<rank>_<case>.txt the
// samples it predicted itself, error<rank>_<case>.txt what it threw.
void predict_scenario(ProcessEnvironment env, const std::string& dir) {
  auto group = ProcessGroup::join(env, ProcessGroupOptions().timeout(kTimeout));
  const std::string mine = std::to_string(env.rank) + "_";
  DDPStrategy strategy(group);
  std::ofstream(dir + "/gather" + std::to_string(env.rank) + ".txt")
      << check_gathered(
             train::detail::gather_everywhere(
                 strategy, gathered_by(env.rank), c10::Device("cpu")),
             env.world_size);
  for (const std::string& name : kPredictCases) {
    auto count = std::make_shared<CountSamples>();
    train::Trainer trainer(predict_options(name));
    trainer.set_strategy(std::make_shared<DDPStrategy>(group));
    trainer.add_callback(count);
    const auto loader = predict_loader(name, env.rank, env.world_size);
    const auto module = predictor(name, env.rank);
    try {
      torch::save(
          trainer.predict(*module, *loader),
          dir + "/predict" + mine + name + ".pt");
    } catch (const std::exception& error) {
      std::ofstream(dir + "/error" + mine + name + ".txt") << error.what();
    }
    std::ofstream(dir + "/samples" + mine + name + ".txt") << count->samples;
  }
}

// A classifier that logs one more metric on rank 1.
class LogsMoreOnRank1 final : public train::ImageClassifier {
 public:
  LogsMoreOnRank1(train::ImageClassifier&& base, int64_t rank)
      : train::ImageClassifier(std::move(base)), rank_(rank) {}
  void validation_step(
      const data::Batch& batch,
      int64_t batch_idx,
      train::MetricCollection& metrics) override {
    train::ImageClassifier::validation_step(batch, batch_idx, metrics);
    if (rank_ == 1) {
      metrics.log("val_extra", 1.0);
    }
  }

 private:
  int64_t rank_;
};

// A classifier whose validation_step fails on rank 1.
class FailsValidatingOnRank1 final : public train::ImageClassifier {
 public:
  FailsValidatingOnRank1(train::ImageClassifier&& base, int64_t rank)
      : train::ImageClassifier(std::move(base)), rank_(rank) {}
  void validation_step(
      const data::Batch& batch,
      int64_t batch_idx,
      train::MetricCollection& metrics) override {
    if (rank_ == 1) {
      throw DataError("sample 1: bad bytes on rank 1's disk");
    }
    train::ImageClassifier::validation_step(batch, batch_idx, metrics);
  }

 private:
  int64_t rank_;
};

// Validation of 2 samples in 3 processes: rank 2's share has no batch.
// A short fit validates so, then validate; writes the parameters and the
// metrics. Then a validation whose rank 1 logs one more metric, and one
// whose rank 1 fails: what each process threw goes to differ<rank>.txt
// and fails<rank>.txt.
void few_samples_scenario(ProcessEnvironment env, const std::string& dir) {
  auto group = ProcessGroup::join(env, ProcessGroupOptions().timeout(kTimeout));
  auto module = mlp_classifier();
  const auto train = train_loader("", 8, 2);
  data::DataLoader tiny(train::quadrants(2, 2), data::DataLoaderOptions(6));
  train::Trainer trainer(worker_trainer_options(dir + "/runs").max_steps(2));
  trainer.set_strategy(std::make_shared<DDPStrategy>(group));
  const train::FitResult result = trainer.fit(*module, *train, &tiny);
  const auto metrics = trainer.validate(*module, tiny);
  save_parameters(*module, dir + "/params" + std::to_string(env.rank) + ".pt");
  // 4 samples in batches of 1: shares of 2, 1 and 1 batches, half of the
  // largest share's for each (no share refuses the fraction alone).
  data::DataLoader four(train::quadrants(4, 2), data::DataLoaderOptions(1));
  train::Trainer half(
      worker_trainer_options(dir + "/runs").limit_val_batches(0.5));
  half.set_strategy(std::make_shared<DDPStrategy>(group));
  nlohmann::json out;
  out["half_val_loss"] = half.validate(*module, four).at("val_loss");
  out["fit_val_loss"] = result.metrics.at("val_loss");
  out["val_loss"] = metrics.at("val_loss");
  out["val_acc"] = metrics.at("val_acc");
  std::ofstream(dir + "/result" + std::to_string(env.rank) + ".json")
      << out.dump();
  LogsMoreOnRank1 differs(std::move(*module), env.rank);
  try {
    trainer.validate(differs, tiny);
  } catch (const DistError& error) {
    std::ofstream(dir + "/differ" + std::to_string(env.rank) + ".txt")
        << error.what();
  }
  FailsValidatingOnRank1 fails(std::move(differs), env.rank);
  try {
    trainer.validate(fails, tiny);
  } catch (const std::exception& error) {
    std::ofstream(dir + "/fails" + std::to_string(env.rank) + ".txt")
        << error.what();
  }
}

TEST(DistWorker, DISABLED_Run) {
  const std::string scenario = environment("HOTLOOP_DIST_SCENARIO");
  const std::string dir = environment("HOTLOOP_DIST_DIR");
  ASSERT_FALSE(scenario.empty()) << "started by run_workers only";
  const ProcessEnvironment env = read_environment();
  try {
    if (scenario == "fit") {
      fit_scenario(env, dir);
    } else if (scenario == "few_samples") {
      few_samples_scenario(env, dir);
    } else if (scenario == "predict") {
      predict_scenario(env, dir);
    } else if (scenario == "python_parity") {
      python_parity_scenario(env, dir);
    } else {
      FAIL() << "unknown scenario " << scenario;
    }
  } catch (const std::exception& error) {
    std::ofstream(dir + "/rank" + std::to_string(env.rank) + ".error")
        << error.what();
    std::_Exit(3); // what a failed rank's process does: exit, with a code
  }
}

// One process's predictions of case `name`, and the samples it predicted
// (own_share: of every process's share in turn).
std::vector<at::Tensor> predicted_by_one(
    const std::string& name, int64_t world, int64_t& samples) {
  auto count = std::make_shared<CountSamples>();
  train::Trainer trainer(predict_options(name));
  trainer.add_callback(count);
  std::vector<at::Tensor> out;
  for (int64_t rank = 0; rank < (name == "own_share" ? world : 1); ++rank) {
    const auto some =
        trainer.predict(*predictor(name), *predict_loader(name, rank, world));
    out.insert(out.end(), some.begin(), some.end());
  }
  samples = count->samples;
  return out;
}

// What process `rank` threw, if anything, in case `name`.
std::string predict_error(
    const TempDir& dir, int64_t rank, const std::string& name) {
  const std::string path =
      dir.file("error" + std::to_string(rank) + "_" + name + ".txt");
  return fs::exists(path) ? read_text(path) : "";
}

// What process `rank` throws in case `name` (empty: it predicts).
std::string refusal(const std::string& name, int64_t rank) {
  if (name == "fails") {
    // Rank 1's error there; the others name it and stop, none waits.
    return rank == 1 ? "sample 3: bad bytes on rank 1's disk"
                     : "rank 1 failed in predict: sample 3: bad bytes on rank "
                       "1's disk (this process, rank " +
                           std::to_string(rank) + ", stops with it)";
  }
  if (name == "seeds") {
    return "predict's loader draws its samples in another order, or "
           "batches them otherwise, on another process (its seed, batch "
           "size, or its sampler or batch sampler differs): every process "
           "must build the loader alike, or their shares overlap and miss "
           "samples";
  }
  if (name == "mean_rows") {
    return "predict under a data-parallel strategy puts the processes' "
           "outputs back in order sample by sample, so predict_step must "
           "return a tensor whose first dimension counts the batch's "
           "samples: rank 0's batch 0 has 6 samples, its output is [4] "
           "Float (give the loader a batch_sampler, or batch_size=None, to "
           "gather whole outputs, or predict in one process)";
  }
  return "";
}

// `world` processes predict the cases of kPredictCases in shares: each
// returns what one process returns, from its own share of the samples.
void expect_ranks_predict_as_one_process(int64_t world) {
  TempDir dir;
  const Workers workers = run_workers("predict", world, dir.path());
  ASSERT_EQ(workers.codes, std::vector<int>(world, 0))
      << workers.log(0) << workers.error(0) << workers.log(1)
      << workers.error(1);
  for (int64_t rank = 0; rank < world; ++rank) {
    EXPECT_EQ(
        read_text(dir.file("gather" + std::to_string(rank) + ".txt")), "ok")
        << "rank " << rank;
  }
  for (const std::string& name : kPredictCases) {
    SCOPED_TRACE(name);
    int64_t one_samples = 0;
    if (!refusal(name, 0).empty()) {
      for (int64_t rank = 0; rank < world; ++rank) {
        EXPECT_EQ(predict_error(dir, rank, name), refusal(name, rank))
            << "rank " << rank;
      }
      continue;
    }
    const std::vector<at::Tensor> one =
        predicted_by_one(name, world, one_samples);
    // Whole outputs come back bit for bit; rows predicted in other
    // company, to float rounding.
    const bool whole = name == "batch_sampler" || name.rfind("mean_", 0) == 0;
    int64_t samples = 0;
    for (int64_t rank = 0; rank < world; ++rank) {
      const std::string suffix = std::to_string(rank) + "_" + name;
      ASSERT_EQ(predict_error(dir, rank, name), "");
      std::vector<at::Tensor> got;
      torch::load(got, dir.file("predict" + suffix + ".pt"));
      const int64_t seen =
          std::stoll(read_text(dir.file("samples" + suffix + ".txt")));
      samples += seen;
      // Each predicted its share, not the whole: with limit 3, one
      // process's first 18 samples, rank r those of r, r + W, ... in
      // whole batches of 6.
      if (name == "limit") {
        EXPECT_EQ(seen, world == 2 ? 12 : 6) << "rank " << rank;
      }
      EXPECT_LE(seen, (one_samples + world - 1) / world + 6) << "rank " << rank;
      if (name == "stream") {
        // Process after process: rank r read samples r, r + W, ...
        std::vector<int64_t> order;
        for (int64_t r = 0; r < world; ++r) {
          for (int64_t i = r; i < kPredicted; i += world) {
            order.push_back(i);
          }
        }
        const at::Tensor expected =
            at::cat(one).index_select(0, at::tensor(order));
        const at::Tensor rows = at::cat(got);
        ASSERT_EQ(rows.sizes(), expected.sizes());
        EXPECT_LE((rows - expected).abs().max().item<double>(), 1e-6);
        continue;
      }
      ASSERT_EQ(got.size(), one.size()) << "rank " << rank;
      for (size_t k = 0; k < one.size(); ++k) {
        ASSERT_EQ(got[k].sizes(), one[k].sizes())
            << "rank " << rank << " output " << k;
        if (whole) {
          EXPECT_TRUE(got[k].equal(one[k]))
              << "rank " << rank << " output " << k;
        } else {
          EXPECT_LE((got[k] - one[k]).abs().max().item<double>(), 1e-6)
              << "rank " << rank << " output " << k;
        }
      }
    }
    if (name == "limit" || name == "fraction" || name == "drop_last") {
      // A process's last batch may go past the samples kept.
      EXPECT_GE(samples, one_samples);
      EXPECT_LE(samples, one_samples + world * 6);
    } else {
      EXPECT_EQ(samples, one_samples);
    }
  }
}

TEST(DDPTrainer, TwoRanksPredictTheirSharesAndReturnWhatOneProcessDoes) {
  expect_ranks_predict_as_one_process(2);
}

TEST(DDPTrainer, ThreeRanksPredictUnevenSharesAndReturnWhatOneProcessDoes) {
  expect_ranks_predict_as_one_process(3);
}

TEST(DDPTrainer, ARankWhoseValidationShareHasNoBatchAddsNothing) {
  TempDir dir;
  const Workers workers = run_workers("few_samples", 3, dir.path());
  ASSERT_EQ(workers.codes, (std::vector<int>{0, 0, 0}))
      << workers.error(0) << workers.error(1) << workers.error(2);
  // One process's validation of the weights trained.
  auto single = mlp_classifier();
  {
    torch::NoGradGuard no_grad;
    const auto trained = load_parameters(dir.file("params0.pt"));
    const auto parameters = single->parameters();
    ASSERT_EQ(trained.size(), parameters.size());
    for (size_t i = 0; i < trained.size(); ++i) {
      parameters[i].copy_(trained[i]);
    }
  }
  data::DataLoader tiny(train::quadrants(2, 2), data::DataLoaderOptions(6));
  train::Trainer trainer(worker_trainer_options(""));
  const auto expected = trainer.validate(*single, tiny);
  data::DataLoader four(train::quadrants(4, 2), data::DataLoaderOptions(1));
  train::Trainer first_three(worker_trainer_options("").limit_val_batches(3));
  const auto half_expected = first_three.validate(*single, four);
  for (int64_t rank = 0; rank < 3; ++rank) {
    const auto got = nlohmann::json::parse(
        read_text(dir.file("result" + std::to_string(rank) + ".json")));
    EXPECT_NEAR(got.at("val_loss").get<double>(), expected.at("val_loss"), 1e-6)
        << "rank " << rank;
    EXPECT_DOUBLE_EQ(got.at("val_acc").get<double>(), expected.at("val_acc"))
        << "rank " << rank;
    EXPECT_EQ(got.at("fit_val_loss"), got.at("val_loss")) << "rank " << rank;
    // Each validated its first batch: samples 0, 1 and 2.
    EXPECT_NEAR(
        got.at("half_val_loss").get<double>(),
        half_expected.at("val_loss"),
        1e-6)
        << "rank " << rank;
  }
  // Metrics that differ are named on every process, not summed.
  // (Ranks 0 and 1 count the confusion matrix; rank 2 had no batch.)
  const char* logged[] = {
      "2 and counted 1", "3 and counted 1", "0 and counted 0"};
  for (int64_t rank = 0; rank < 3; ++rank) {
    EXPECT_EQ(
        read_text(dir.file("differ" + std::to_string(rank) + ".txt")),
        "the evaluation's metrics differ across the 3 processes (this one, "
        "rank " +
            std::to_string(rank) + ", logged " + logged[rank] +
            "): every process must log the same metrics and counts of the "
            "same shapes");
  }
  // A rank that fails is named to the others, which stop at once.
  for (int64_t rank = 0; rank < 3; ++rank) {
    EXPECT_EQ(
        read_text(dir.file("fails" + std::to_string(rank) + ".txt")),
        rank == 1 ? "sample 1: bad bytes on rank 1's disk"
                  : "rank 1 failed in validation: sample 1: bad bytes on "
                    "rank 1's disk (this process, rank " +
                        std::to_string(rank) + ", stops with it)");
  }
}

TEST(DistributedDataParallel, GradientsEqualPyTorchsDDPOverGloo) {
  TempDir dir;
  const Workers workers = run_workers("python_parity", 2, dir.path());
  ASSERT_EQ(workers.codes, (std::vector<int>{0, 0}))
      << workers.log(0) << workers.log(1);
  using hotloop::testing::Reference;
  const auto expected = Reference::get("ddp_gradients.txt").all("mlp", "grad");
  for (int rank = 0; rank < 2; ++rank) {
    std::vector<at::Tensor> grads;
    torch::load(grads, dir.file("grads" + std::to_string(rank) + ".pt"));
    ASSERT_EQ(grads.size(), expected.size());
    for (size_t i = 0; i < grads.size(); ++i) {
      const at::Tensor want =
          hotloop::testing::to_tensor(expected[i], at::kFloat);
      EXPECT_TRUE(at::allclose(grads[i], want, 1e-5, 1e-6))
          << expected[i].name << " on rank " << rank << ": max difference "
          << (grads[i] - want).abs().max().item<double>();
    }
  }
  // One bucket in the first iteration; then, in the order gradients were
  // ready, buckets filled up to 50 bytes: [2.bias 12 B, 2.weight 60 B],
  // [0.bias 20 B, 0.weight 120 B].
  EXPECT_EQ(read_text(dir.file("buckets0.txt")), "1 2");
}

// One process with batch 16 (or 8 x 2 accumulated), its final state and
// metrics.
struct SingleProcess {
  std::vector<at::Tensor> state;
  train::FitResult result;
  std::map<std::string, double> metrics;
};

SingleProcess one_process(
    int64_t accumulate,
    bool cnn,
    const std::string& order = "",
    int64_t stream_end = INT64_MAX) {
  auto single = classifier(cnn, /*sync_batchnorm=*/false);
  const std::unique_ptr<data::DataLoader> train =
      train_loader(order, 16 / accumulate, 2, kSamples, stream_end);
  const std::unique_ptr<data::DataLoader> val = val_loader(order);
  train::Trainer trainer(
      worker_trainer_options("").max_epochs(2).accumulate_grad_batches(
          accumulate));
  SingleProcess out;
  out.result = trainer.fit(*single, *train, val.get());
  for (const auto& [name, value] : trainer.validate(*single, *val)) {
    out.metrics[name] = value;
  }
  out.state = state_of(*single);
  return out;
}

// Two processes with batch 8 each (or 4 x 2 accumulated) against one with
// batch 16: the same samples per step, the same mean gradient.
// With a sampler or batch_sampler of the user's own (`order`), the ranks'
// batches k are the positions (or batches) of one process's batch k; with
// a stream, the samples rank 0 and rank 1 read in turn. A stream_end stops
// rank 1's stream (and the one process's) at that sample.
void expect_two_ranks_equal_one_process(
    int64_t accumulate,
    bool cnn = false,
    const std::string& order = "",
    int64_t stream_end = INT64_MAX) {
  TempDir dir;
  Variables env{
      {"HOTLOOP_DIST_BATCH", std::to_string(8 / accumulate)},
      {"HOTLOOP_DIST_ACCUMULATE", std::to_string(accumulate)},
      {"HOTLOOP_DIST_EPOCHS", "2"},
      {"HOTLOOP_DIST_ORDER", order}};
  if (cnn) {
    env["HOTLOOP_DIST_CNN"] = "1";
  }
  if (stream_end != INT64_MAX) {
    env["HOTLOOP_DIST_RANK1_STREAM_END"] = std::to_string(stream_end);
  }
  const Workers workers = run_workers("fit", 2, dir.path(), env);
  ASSERT_EQ(workers.codes, (std::vector<int>{0, 0}))
      << workers.log(0) << workers.error(0) << workers.log(1)
      << workers.error(1);

  const SingleProcess single = one_process(accumulate, cnn, order, stream_end);
  const auto a = load_parameters(dir.file("params0.pt"));
  const auto b = load_parameters(dir.file("params1.pt"));
  const auto& expected = single.state;
  ASSERT_EQ(a.size(), expected.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(a[i].equal(b[i])) << "the ranks differ in tensor " << i;
    EXPECT_LE((a[i] - expected[i]).abs().max().item<double>(), 1e-6)
        << "tensor " << i << " (parameters, then buffers)";
  }
  // The steps moved the weights far beyond that tolerance.
  EXPECT_GT(
      (a[0] - classifier(cnn)->parameters()[0]).abs().max().item<double>(),
      1e-3);
  const auto summary =
      nlohmann::json::parse(read_text(dir.file("result0.json")));
  EXPECT_EQ(summary.at("steps"), single.result.steps);
  EXPECT_EQ(summary.at("world_size"), 2);
  // Validation over the two shares equals one process's over the split.
  EXPECT_NEAR(
      summary.at("val_loss").get<double>(), single.metrics.at("val_loss"), 1e-6);
  EXPECT_DOUBLE_EQ(
      summary.at("val_acc").get<double>(), single.metrics.at("val_acc"));
  EXPECT_NEAR(
      summary.at("fit_val_loss").get<double>(),
      single.result.metrics.at("val_loss"),
      1e-6);
}

TEST(DDPTrainer, TwoRanksOfBatch8EqualOneProcessOfBatch16) {
  expect_two_ranks_equal_one_process(1);
}

TEST(DDPTrainer, AccumulatedStepsEqualOneProcesssWholeBatches) {
  expect_two_ranks_equal_one_process(2);
}

TEST(DDPTrainer, ASamplerOfTheUsersOwnIsSplitAndEqualsOneProcess) {
  expect_two_ranks_equal_one_process(1, false, "sampler");
}

TEST(DDPTrainer, ABatchSamplerOfTheUsersOwnIsSplitAndEqualsOneProcess) {
  expect_two_ranks_equal_one_process(1, false, "batch_sampler");
}

TEST(DDPTrainer, AStreamSplitAmongTheRanksEqualsOneProcessReadingItAll) {
  expect_two_ranks_equal_one_process(1, false, "stream");
}

// Rank 1's stream ends at sample 48, after 3 of its batches (rank 0's goes
// on to 4): both end every epoch with the third, none waits for the
// other, and the steps equal one process's over samples 0-47.
TEST(DDPTrainer, StreamsThatEndApartEndTheEpochTogetherAtTheFirstEnd) {
  expect_two_ranks_equal_one_process(1, false, "stream", 48);
}

TEST(DDPTrainer, SyncBatchNormRanksEqualOneProcessWithBatchNorm) {
  expect_two_ranks_equal_one_process(1, /*cnn=*/true);
}

TEST(DDPTrainer, SyncBatchNormWithAccumulationEqualsOneProcess) {
  expect_two_ranks_equal_one_process(2, /*cnn=*/true);
}

TEST(DDPTrainer, WithoutSyncBatchNormEachRankNormalizesItsOwnHalf) {
  TempDir dir;
  const Workers workers = run_workers(
      "fit",
      2,
      dir.path(),
      {{"HOTLOOP_DIST_CNN", "1"},
       {"HOTLOOP_DIST_SYNC_BN", "0"},
       {"HOTLOOP_DIST_EPOCHS", "2"}});
  ASSERT_EQ(workers.codes, (std::vector<int>{0, 0})) << workers.error(0);
  const auto a = load_parameters(dir.file("params0.pt"));
  const SingleProcess single = one_process(1, /*cnn=*/true);
  double largest = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    largest = std::max(
        largest, (a[i] - single.state[i]).abs().max().item<double>());
  }
  EXPECT_GT(largest, 1e-4);
}

TEST(SyncBatchNorm, WithoutAGroupItIsBatchNorm) {
  for (const bool momentum : {true, false}) {
    auto options = torch::nn::BatchNormOptions(3);
    if (!momentum) {
      options.momentum(c10::nullopt);
    }
    torch::nn::BatchNorm2d plain(options);
    SyncBatchNorm sync(options);
    {
      torch::NoGradGuard no_grad;
      plain->weight.uniform_(0.5, 1.5);
      sync->weight.copy_(plain->weight);
      plain->bias.uniform_(-1, 1);
      sync->bias.copy_(plain->bias);
    }
    // Same names and shapes: checkpoints move between the two.
    EXPECT_EQ(plain->named_parameters().keys(), sync->named_parameters().keys());
    EXPECT_EQ(plain->named_buffers().keys(), sync->named_buffers().keys());
    for (int step = 0; step < 3; ++step) {
      const at::Tensor x = at::randn({5, 3, 4, 4}).requires_grad_();
      const at::Tensor y = x.detach().clone().requires_grad_();
      const at::Tensor g = at::randn({5, 3, 4, 4});
      plain->forward(x).backward(g);
      sync->forward(y).backward(g);
      EXPECT_TRUE(x.grad().equal(y.grad()));
    }
    EXPECT_TRUE(plain->running_mean.equal(sync->running_mean));
    EXPECT_TRUE(plain->running_var.equal(sync->running_var));
    EXPECT_TRUE(plain->weight.grad().equal(sync->weight.grad()));
    plain->eval();
    sync->eval();
    const at::Tensor x = at::randn({2, 3, 4, 4});
    EXPECT_TRUE(plain->forward(x).equal(sync->forward(x)));
  }
  SyncBatchNorm sync(4);
  EXPECT_THAT(
      [&] { sync->forward(at::randn({2, 3, 5})); },
      ThrowsMessage<Error>(HasSubstr(
          "SyncBatchNorm(4): expected an input [N, 4, ...], got [2, 3, 5]")));
}

TEST(SyncBatchNorm, APlainBatchNormIsNamedWhenStatisticsShouldBeSynced) {
  models::FashionCnnOptions options;
  options.channels = {4};
  models::FashionCnn cnn(options);
  EXPECT_THAT(
      [&] { attach_sync_batchnorm(*cnn, nullptr); },
      ThrowsMessage<ConfigError>(
          HasSubstr("sync_batchnorm: the model's 'features.1' is a "
                    "torch::nn::BatchNorm2d")));
  options.sync_batchnorm = true;
  models::FashionCnn synced(options);
  EXPECT_NO_THROW(attach_sync_batchnorm(*synced, nullptr));
  // A ResNet's every norm, stem to shortcut, can be synced.
  models::ResNet resnet(
      models::ResNetOptions(18).num_classes(3).sync_batchnorm(true));
  int64_t norms = 0;
  for (const auto& module : resnet->modules()) {
    norms += module->as<SyncBatchNorm>() != nullptr;
  }
  EXPECT_EQ(norms, 20);
  EXPECT_NO_THROW(attach_sync_batchnorm(*resnet, nullptr));
  // Its state has the plain ResNet's names, in order: checkpoints move.
  models::ResNet plain(models::ResNetOptions(18).num_classes(3));
  EXPECT_EQ(
      resnet->named_parameters().keys(), plain->named_parameters().keys());
  EXPECT_EQ(resnet->named_buffers().keys(), plain->named_buffers().keys());
}

TEST(DDPTrainer, AResumedTwoRankRunMatchesAnUninterruptedOneBitForBit) {
  TempDir straight;
  // With dropout, so that the random streams must resume exactly too.
  const Variables two_epochs{
      {"HOTLOOP_DIST_EPOCHS", "2"}, {"HOTLOOP_DIST_DROPOUT", "0.3"}};
  ASSERT_EQ(
      run_workers("fit", 2, straight.path(), two_epochs).codes,
      (std::vector<int>{0, 0}));
  TempDir halves;
  const Workers first = run_workers(
      "fit",
      2,
      halves.path(),
      {{"HOTLOOP_DIST_EPOCHS", "2"},
       {"HOTLOOP_DIST_DROPOUT", "0.3"},
       {"HOTLOOP_DIST_MAX_STEPS", "6"}});
  ASSERT_EQ(first.codes, (std::vector<int>{0, 0})) << first.error(0);
  const std::string checkpoint =
      nlohmann::json::parse(read_text(halves.file("result0.json")))
          .at("checkpoint");
  ASSERT_FALSE(checkpoint.empty());
  // Rank 1 wrote no files: only rank 0 has a run folder.
  EXPECT_EQ(
      nlohmann::json::parse(read_text(halves.file("result1.json")))
          .at("checkpoint"),
      "");
  Variables resume = two_epochs;
  resume["HOTLOOP_DIST_CKPT"] = checkpoint;
  const Workers second = run_workers("fit", 2, halves.path(), resume);
  ASSERT_EQ(second.codes, (std::vector<int>{0, 0})) << second.error(0);
  const auto a = load_parameters(straight.file("params0.pt"));
  const auto b = load_parameters(halves.file("params0.pt"));
  const auto c = load_parameters(halves.file("params1.pt"));
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(a[i].equal(b[i])) << "parameter " << i;
    EXPECT_TRUE(b[i].equal(c[i])) << "the ranks differ in parameter " << i;
  }
  // Every rank drew the same numbers, so rank 0's saved random state is
  // each rank's, and the resumed run continued it.
  const auto rng = [](const TempDir& dir, int rank) {
    at::Tensor state;
    torch::load(state, dir.file("rng" + std::to_string(rank) + ".pt"));
    return state;
  };
  EXPECT_TRUE(rng(straight, 0).equal(rng(straight, 1)));
  EXPECT_TRUE(rng(halves, 0).equal(rng(halves, 1)));
  EXPECT_TRUE(rng(straight, 0).equal(rng(halves, 0)));
  // An epoch-end checkpoint of the 2-rank run resumes in one process.
  const std::string epoch_end =
      nlohmann::json::parse(read_text(straight.file("result0.json")))
          .at("checkpoint");
  auto alone = classifier(false, false, 0.3);
  data::DataLoader train(
      train::quadrants(kSamples, 1), data::DataLoaderOptions(16));
  const train::FitResult more =
      train::Trainer(worker_trainer_options("").max_epochs(3))
          .fit(*alone, train, nullptr, epoch_end);
  EXPECT_EQ(more.epochs, 3);
}

TEST(DDPTrainer, ARankThatThrowsStopsTheOthersWithItsName) {
  TempDir dir;
  const Workers workers = run_workers(
      "fit",
      2,
      dir.path(),
      {{"HOTLOOP_DIST_EPOCHS", "5"}, {"HOTLOOP_DIST_RANK1_THROWS_AT", "3"}});
  EXPECT_EQ(workers.codes, (std::vector<int>{3, 3}));
  EXPECT_THAT(workers.error(1), HasSubstr("bad bytes on rank 1's disk"));
  EXPECT_THAT(
      workers.error(0),
      HasSubstr("rank 1: sample 17: bad bytes on rank 1's disk"));
}

TEST(DDPTrainer, DataOrAModelThatDiffersAcrossRanksStopsBeforeTheFirstStep) {
  TempDir data_dir;
  const Workers data = run_workers(
      "fit", 2, data_dir.path(), {{"HOTLOOP_DIST_RANK1_SAMPLES", "80"}});
  EXPECT_EQ(data.codes, (std::vector<int>{3, 3}));
  EXPECT_THAT(
      data.error(0),
      HasSubstr("the training set differs across the 2 processes: this one "
                "(rank 0) has 64 samples, others from 64 to 80"));
  // Rank 1 seeds its loader's shuffle, sampler or batch sampler apart.
  for (const char* kind : {"shuffle", "sampler", "batch_sampler"}) {
    TempDir order_dir;
    const Workers order = run_workers(
        "fit",
        2,
        order_dir.path(),
        {{"HOTLOOP_DIST_ORDER", kind}, {"HOTLOOP_DIST_RANK1_SEED", "9"}});
    EXPECT_EQ(order.codes, (std::vector<int>{3, 3})) << kind;
    for (int rank = 0; rank < 2; ++rank) {
      EXPECT_THAT(
          order.error(rank),
          HasSubstr("the training order differs across the 2 processes "
                    "(their loaders' seeds, or their samplers' or batch "
                    "samplers' first epochs, differ)"))
          << kind;
    }
  }
  TempDir model_dir;
  const Workers model = run_workers(
      "fit", 2, model_dir.path(), {{"HOTLOOP_DIST_RANK1_WIDER", "1"}});
  EXPECT_EQ(model.codes, (std::vector<int>{3, 3}));
  EXPECT_THAT(
      model.error(1),
      HasSubstr("rank 1's model differs from rank 0's: its parameter "
                "network.layers.0.weight [17, 144] Float, rank 0's "
                "network.layers.0.weight [16, 144] Float"));
  EXPECT_THAT(model.error(0), HasSubstr("rank 1's model differs"));
}

// ---------------------------------------------------------------------------
// The hotloop program: its own launcher, torchrun's.

// A small synthetic fit on the CPU, with `extra` flags.
std::vector<std::string> cli_fit(
    const std::string& root, const std::vector<std::string>& extra) {
  std::vector<std::string> args{
      "fit",
      "--data.dataset=synthetic",
      "--data.image_shape=[1,8,8]",
      "--data.synthetic_size=256",
      "--data.batch_size=32",
      "--data.num_workers=0",
      "--model.name=mlp",
      "--trainer.accelerator=cpu",
      "--trainer.dist_timeout=20",
      "--trainer.default_root_dir=" + root,
      "--trainer.name=ddp"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

// Starts `program args...` with output to `log`; returns its pid.
pid_t start(
    const std::string& program,
    const std::vector<std::string>& args,
    const std::string& log) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    std::FILE* out = std::freopen(log.c_str(), "w", stdout);
    ::dup2(::fileno(out), 2);
    std::vector<char*> argv{const_cast<char*>(program.c_str())};
    for (const std::string& arg : args) {
      argv.push_back(const_cast<char*>(arg.c_str()));
    }
    argv.push_back(nullptr);
    ::execvp(program.c_str(), argv.data());
    ::_exit(127);
  }
  return pid;
}

// Waits at most `seconds` for `pid`; its exit code (128 + signal), or -1
// after killing it when it did not end in time.
int finish(pid_t pid, double seconds) {
  const auto deadline =
      std::chrono::steady_clock::now() +
      std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ::kill(-pid, SIGKILL);
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  return -1;
}

// The processes whose parent is `parent`, by their RANK variable.
std::map<int64_t, pid_t> ranks_of(pid_t parent) {
  std::map<int64_t, pid_t> out;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) {
      continue;
    }
    std::istringstream stat(read_text(entry.path().string() + "/stat"));
    std::string pid, comm, state;
    pid_t ppid = 0;
    stat >> pid >> comm >> state >> ppid;
    if (ppid != parent) {
      continue;
    }
    const std::string environ = read_text(entry.path().string() + "/environ");
    for (size_t i = 0; i < environ.size();) {
      const size_t end = environ.find('\0', i);
      const std::string variable = environ.substr(i, end - i);
      if (variable.rfind("RANK=", 0) == 0) {
        out[std::stoll(variable.substr(5))] = std::stoi(name);
      }
      i = end == std::string::npos ? environ.size() : end + 1;
    }
  }
  return out;
}

bool alive(pid_t pid) {
  return ::kill(pid, 0) == 0 &&
         read_text("/proc/" + std::to_string(pid) + "/stat").find(") Z") ==
             std::string::npos;
}

TEST(Launcher, TrainsOnTwoRanksAndRankZeroAloneWritesTheRun) {
  TempDir dir;
  const pid_t pid = start(
      HOTLOOP_CLI_PATH,
      cli_fit(
          dir.file("runs"),
          {"--trainer.strategy=ddp",
           "--trainer.devices=2",
           "--trainer.max_epochs=2"}),
      dir.file("fit.log"));
  ASSERT_EQ(finish(pid, kWorkerLimit), 0) << read_text(dir.file("fit.log"));
  const std::string log = read_text(dir.file("fit.log"));
  EXPECT_THAT(
      log,
      HasSubstr("fit: 256 training samples, 4 batches/epoch per process, 2 "
                "processes"));
  // The wait for the other process's gradients is a phase of its own.
  EXPECT_THAT(log, ::testing::ContainsRegex("backward [0-9]+% comm [0-9]+%"));
  // One process prints: one "done" line, one run folder.
  EXPECT_EQ(log.find("done: "), log.rfind("done: "));
  EXPECT_TRUE(fs::exists(dir.file("runs/ddp/version_0/summary.json")));
  EXPECT_FALSE(fs::exists(dir.file("runs/ddp/version_1")));
  const auto summary = nlohmann::json::parse(
      read_text(dir.file("runs/ddp/version_0/summary.json")));
  EXPECT_EQ(summary.at("world_size"), 2);
  EXPECT_EQ(summary.at("steps"), 8);
  // The last validation's confusion, summed over both processes: each of
  // the 51 validation samples counted once, as val_acc counts them.
  const at::Tensor counted = hotloop::testing::read_confusion_counts(
      dir.file("runs/ddp/version_0/confusion.csv"));
  EXPECT_EQ(counted.sum().item<int64_t>(), 51);
  EXPECT_DOUBLE_EQ(
      counted.trace().item<int64_t>() / 51.0,
      summary.at("val_acc").get<double>());
}

// The run's own config.yaml says strategy=ddp and devices=2; the commands
// that evaluate one checkpoint run in one process from it, and say so.
TEST(Launcher, ADdpRunsConfigEvaluatesInOneProcess) {
  TempDir dir;
  const std::string run = dir.file("runs/ddp/version_0");
  ASSERT_EQ(
      finish(
          start(
              HOTLOOP_CLI_PATH,
              cli_fit(
                  dir.file("runs"),
                  {"--trainer.strategy=ddp",
                   "--trainer.devices=2",
                   "--trainer.max_epochs=1"}),
              dir.file("fit.log")),
          kWorkerLimit),
      0)
      << read_text(dir.file("fit.log"));
  const auto command = [&](const std::string& name,
                           std::vector<std::string> extra) {
    std::vector<std::string> args{
        name, "--config", run + "/config.yaml", "--ckpt_path", "last"};
    args.insert(args.end(), extra.begin(), extra.end());
    const std::string log = dir.file(name + ".log");
    EXPECT_EQ(finish(start(HOTLOOP_CLI_PATH, args, log), kWorkerLimit), 0)
        << read_text(log);
    return read_text(log);
  };
  const std::string one =
      " runs in this one process, on cpu\n";
  std::string log = command("test", {});
  EXPECT_THAT(
      log,
      HasSubstr("hotloop test: the config trains with trainer.strategy=ddp "
                "(trainer.devices=2); test" + one));
  EXPECT_THAT(log, HasSubstr("test_acc "));
  log = command("validate", {});
  EXPECT_THAT(log, HasSubstr("; validate" + one));
  log = command("predict", {"--output", dir.file("predictions.csv")});
  EXPECT_THAT(log, HasSubstr("; predict" + one));
  EXPECT_TRUE(fs::exists(dir.file("predictions.csv")));
  log = command(
      "quantize", {"--mode", "dynamic", "--output", dir.file("int8.ckpt")});
  EXPECT_THAT(log, HasSubstr("; quantize" + one));
  EXPECT_TRUE(fs::exists(dir.file("int8.ckpt")));
}

TEST(Launcher, SyncBatchNormFromTheCommandLine) {
  TempDir dir;
  auto args = cli_fit(
      dir.file("runs"),
      {"--trainer.strategy=ddp",
       "--trainer.devices=2",
       "--trainer.max_epochs=1",
       "--trainer.sync_batchnorm=true",
       "--model.name=fashion_cnn",
       "--model.channels=[4]"});
  const pid_t pid = start(HOTLOOP_CLI_PATH, args, dir.file("fit.log"));
  ASSERT_EQ(finish(pid, kWorkerLimit), 0) << read_text(dir.file("fit.log"));
  EXPECT_THAT(
      read_text(dir.file("fit.log")),
      ::testing::ContainsRegex("network.features.1 +SyncBatchNorm"));
}

TEST(Launcher, AGptOnATextFileTrainsOnTwoRanks) {
  TempDir dir;
  {
    std::ofstream text(dir.file("text.txt"));
    for (int i = 0; i < 100; ++i) {
      text << "two ranks read this text. ";
    }
  }
  const std::vector<std::string> args = {
      "fit",
      "--trainer.accelerator=cpu",
      "--trainer.strategy=ddp",
      "--trainer.devices=2",
      "--trainer.max_epochs=1",
      "--trainer.dist_timeout=60",
      "--trainer.default_root_dir=" + dir.file("runs"),
      "--trainer.name=gpt",
      "--trainer.enable_progress_bar=false",
      "--model.name=gpt",
      "--model.n_layer=1",
      "--model.n_head=2",
      "--model.n_embd=16",
      "--data.dataset=text",
      "--data.path=" + dir.file("text.txt"),
      "--data.block_size=16",
      "--data.batch_size=8",
      "--data.val_batch_size=8"};
  const pid_t pid = start(HOTLOOP_CLI_PATH, args, dir.file("fit.log"));
  ASSERT_EQ(finish(pid, kWorkerLimit), 0) << read_text(dir.file("fit.log"));
  // 2,600 bytes: 162 windows of 16, 16 validating; each process trains on
  // half of the other 146: 10 batches of 8.
  const auto summary = nlohmann::json::parse(
      read_text(dir.file("runs/gpt/version_0/summary.json")));
  EXPECT_EQ(summary.at("world_size"), 2);
  EXPECT_EQ(summary.at("steps"), 10);
}

TEST(Launcher, AKilledRankEndsTheRunAndNamesIt) {
  TempDir dir;
  const pid_t pid = start(
      HOTLOOP_CLI_PATH,
      cli_fit(
          dir.file("runs"),
          {"--trainer.strategy=ddp",
           "--trainer.devices=2",
           "--trainer.max_epochs=100000"}),
      dir.file("fit.log"));
  std::map<int64_t, pid_t> ranks;
  for (int i = 0; i < 600; ++i) {
    ranks = ranks_of(pid);
    if (ranks.size() == 2 &&
        read_text(dir.file("fit.log")).find("epoch 2/") != std::string::npos) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_EQ(ranks.size(), 2u) << read_text(dir.file("fit.log"));
  ::kill(ranks.at(1), SIGKILL);
  const auto killed = std::chrono::steady_clock::now();
  const int code = finish(pid, kTimeout + 10);
  EXPECT_LT(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - killed)
          .count(),
      kTimeout);
  EXPECT_EQ(code, 128 + SIGKILL) << read_text(dir.file("fit.log"));
  EXPECT_THAT(
      read_text(dir.file("fit.log")),
      HasSubstr("hotloop: rank 1 was killed by signal 9"));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_FALSE(alive(ranks.at(0))) << "rank 0 outlived the launcher";
}

TEST(Launcher, CtrlCReachesEveryRankOnceAndTheRunResumes) {
  TempDir dir;
  const auto args = cli_fit(
      dir.file("runs"),
      {"--trainer.strategy=ddp",
       "--trainer.devices=2",
       "--trainer.max_epochs=100000"});
  const pid_t pid = start(HOTLOOP_CLI_PATH, args, dir.file("fit.log"));
  for (int i = 0; i < 600 && read_text(dir.file("fit.log")).find("epoch 2/") ==
                                 std::string::npos;
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ::kill(pid, SIGINT);
  EXPECT_EQ(finish(pid, kWorkerLimit), 130) << read_text(dir.file("fit.log"));
  const std::string log = read_text(dir.file("fit.log"));
  EXPECT_THAT(log, HasSubstr("interrupted by signal 2"));
  const std::string ckpt = dir.file("runs/ddp/version_0/checkpoints/last.ckpt");
  EXPECT_TRUE(fs::exists(ckpt));
  // --ckpt_path auto takes it up (torchrun --max_restarts uses the same).
  auto resume = cli_fit(
      dir.file("runs"),
      {"--trainer.strategy=ddp",
       "--trainer.devices=2",
       "--trainer.max_epochs=1000",
       "--ckpt_path",
       "auto"});
  const pid_t again = start(HOTLOOP_CLI_PATH, resume, dir.file("resume.log"));
  // The resumed run is long too: stopping it shows it started from there.
  for (int i = 0;
       i < 600 && read_text(dir.file("resume.log")).find("resumed from") ==
                      std::string::npos;
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ::kill(again, SIGINT);
  EXPECT_EQ(finish(again, kWorkerLimit), 130);
  EXPECT_THAT(
      read_text(dir.file("resume.log")), HasSubstr("resumed from " + ckpt));
}

// torchrun, from HOTLOOP_TEST_PYTHON's torch (Debian's python3-torch by
// default). Its tests skip where it is missing, or where its agent cannot
// serve its own rendezvous store, as it does (a TCPStore with the default
// server): Debian 13's torch 2.6 asks for libuv's server, which it is built
// without, so its torchrun fails before it starts a process.
// Its 1.13 on Python 3.11 fails at start unless --redirects and --tee name
// one stream each (Python 3.11 no longer counts a flag's zero or combined
// values as its members); stdout to a file and the console here.
std::string why_no_torchrun() {
  const std::string probe = std::string(HOTLOOP_TEST_PYTHON) +
      " -c 'import torch.distributed.run, torch.distributed as d; "
      "d.TCPStore(\"127.0.0.1\", " +
      std::to_string(free_port()) + ", 1, True)' 2>&1";
  std::string output;
  if (FILE* pipe = ::popen(probe.c_str(), "r")) {
    char buffer[4096];
    while (std::fgets(buffer, sizeof buffer, pipe) != nullptr) {
      output = buffer; // the last line: the error, where there is one
    }
    if (::pclose(pipe) == 0) {
      return "";
    }
  }
  return "needs a torchrun that can serve its store: " +
      std::string(HOTLOOP_TEST_PYTHON) + " -m torch.distributed.run (" +
      output.substr(0, output.find('\n')) + ")";
}

// python3's arguments for torchrun starting 2 processes of hotloop on this
// node, with `flags` for torchrun and `fit` for hotloop.
std::vector<std::string> torchrun_two(
    const std::vector<std::string>& flags, const std::vector<std::string>& fit) {
  std::vector<std::string> args{
      "-m",
      "torch.distributed.run",
      "--no_python",
      "--redirects=1",
      "--tee=1",
      "--nproc_per_node=2",
      "--master_port=" + std::to_string(free_port())};
  args.insert(args.end(), flags.begin(), flags.end());
  args.push_back(HOTLOOP_CLI_PATH);
  args.insert(args.end(), fit.begin(), fit.end());
  return args;
}

TEST(Torchrun, StartsTheSameProgramOnOneNode) {
  if (const std::string why = why_no_torchrun(); !why.empty()) {
    GTEST_SKIP() << why;
  }
  TempDir dir;
  const auto args = torchrun_two(
      {}, cli_fit(dir.file("runs"), {"--trainer.max_epochs=2"}));
  const pid_t pid = start(HOTLOOP_TEST_PYTHON, args, dir.file("fit.log"));
  ASSERT_EQ(finish(pid, kWorkerLimit), 0) << read_text(dir.file("fit.log"));
  const auto summary = nlohmann::json::parse(
      read_text(dir.file("runs/ddp/version_0/summary.json")));
  EXPECT_EQ(summary.at("world_size"), 2);
  EXPECT_EQ(summary.at("steps"), 8);
}

TEST(Torchrun, ARestartedGroupResumesFromTheNewestCheckpoint) {
  if (const std::string why = why_no_torchrun(); !why.empty()) {
    GTEST_SKIP() << why;
  }
  TempDir dir;
  const auto args = torchrun_two(
      {"--max_restarts=1", "--monitor_interval=1"},
      cli_fit(
          dir.file("runs"), {"--trainer.max_epochs=60", "--ckpt_path", "auto"}));
  const pid_t pid = start(HOTLOOP_TEST_PYTHON, args, dir.file("fit.log"));
  std::map<int64_t, pid_t> ranks;
  for (int i = 0; i < 600; ++i) {
    ranks = ranks_of(pid);
    if (ranks.size() == 2 &&
        read_text(dir.file("fit.log")).find("epoch 5/") != std::string::npos) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(ranks.size(), 2u) << read_text(dir.file("fit.log"));
  ::kill(ranks.at(1), SIGKILL);
  ASSERT_EQ(finish(pid, kWorkerLimit), 0) << read_text(dir.file("fit.log"));
  // The second group found the first one's checkpoint by itself and
  // trained the remaining epochs in the same run folder.
  const std::string log = read_text(dir.file("fit.log"));
  EXPECT_THAT(
      log,
      ::testing::ContainsRegex(
          "resumed from .*/runs/ddp/version_0/checkpoints/last.ckpt after "
          "epoch [0-9]+"));
  const auto summary = nlohmann::json::parse(
      read_text(dir.file("runs/ddp/version_0/summary.json")));
  EXPECT_EQ(summary.at("steps"), 240);
  EXPECT_EQ(summary.at("world_size"), 2);
  EXPECT_FALSE(fs::exists(dir.file("runs/ddp/version_1")));
}

TEST(Torchrun, TwoNodesOnOneMachine) {
  if (const std::string why = why_no_torchrun(); !why.empty()) {
    GTEST_SKIP() << why;
  }
  TempDir dir;
  const std::string port = std::to_string(free_port());
  std::vector<pid_t> nodes;
  for (int node = 0; node < 2; ++node) {
    std::vector<std::string> args{
        "-m",
        "torch.distributed.run",
        "--no_python",
        "--redirects=1",
        "--tee=1",
        "--nnodes=2",
        "--node_rank=" + std::to_string(node),
        "--nproc_per_node=1",
        "--master_addr=127.0.0.1",
        "--master_port=" + port,
        HOTLOOP_CLI_PATH};
    const auto fit = cli_fit(
        dir.file("runs"),
        {"--trainer.max_epochs=2",
         "--trainer.strategy=ddp",
         "--trainer.devices=1",
         "--trainer.num_nodes=2"});
    args.insert(args.end(), fit.begin(), fit.end());
    nodes.push_back(start(
        HOTLOOP_TEST_PYTHON,
        args,
        dir.file("node" + std::to_string(node) + ".log")));
  }
  EXPECT_EQ(finish(nodes[0], kWorkerLimit), 0)
      << read_text(dir.file("node0.log"));
  EXPECT_EQ(finish(nodes[1], kWorkerLimit), 0)
      << read_text(dir.file("node1.log"));
  const auto summary = nlohmann::json::parse(
      read_text(dir.file("runs/ddp/version_0/summary.json")));
  EXPECT_EQ(summary.at("world_size"), 2);
}

} // namespace
} // namespace hotloop::dist
