#include "hotloop/dist/process_group.h"

#include "hotloop/core/compat.h"
#include "hotloop/core/error.h"

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
// c10d declares its Gloo process group only under USE_C10D_GLOO, which
// LibTorch's CMake package may not define, and it needs Gloo's headers
// (Debian's libgloo-dev), which a PyTorch wheel lacks. CMakeLists.txt sets
// HOTLOOP_HAS_GLOO where the header compiles with them; elsewhere data
// parallelism says so at run time instead of the build failing.
#if HOTLOOP_HAS_GLOO
#ifndef USE_C10D_GLOO
#define USE_C10D_GLOO
#endif
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
// Likewise NCCL's, under USE_C10D_NCCL with NCCL's nccl.h, in builds whose
// LibTorch has CUDA (CMakeLists.txt sets HOTLOOP_HAS_NCCL).
#if HOTLOOP_HAS_NCCL
#ifndef USE_C10D_NCCL
#define USE_C10D_NCCL
#endif
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif
#include <c10/core/impl/VirtualGuardImpl.h>

#include <chrono>
#include <cstdlib>
#include <thread>
#include <type_traits>

namespace hotloop::dist {
namespace {

using Milliseconds = std::chrono::milliseconds;
constexpr const char* kFailedKey = "hotloop/failed";

Milliseconds to_milliseconds(double seconds) {
  return Milliseconds(static_cast<int64_t>(seconds * 1000));
}

std::string endpoint(const ProcessEnvironment& env) {
  return env.master_addr + ":" + std::to_string(env.master_port);
}

// The rendezvous store: rank 0 serves it, unless torchrun's agent already
// does (TORCHELASTIC_USE_AGENT_STORE), as PyTorch's env:// rendezvous does.
c10::intrusive_ptr<c10d::Store> connect_store(
    const ProcessEnvironment& env, Milliseconds timeout) {
  const char* agent = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
  const bool agent_store = agent != nullptr && std::string(agent) == "True";
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(env.master_port);
  options.isServer = !agent_store && env.rank == 0;
  options.numWorkers = static_cast<std::size_t>(env.world_size);
  options.waitWorkers = false; // counted below, with a clearer error
  options.timeout = timeout;
  // As in PyTorch, USE_LIBUV=0 asks for the store's classic server. Without
  // the variable, every rank falls back to it where libuv was the default
  // but LibTorch was built without it (compat::use_libuv_store): 2.6 then
  // refuses to make a client too.
  const char* use_libuv = std::getenv("USE_LIBUV");
  if (use_libuv != nullptr && std::string(use_libuv) == "0") {
    compat::use_libuv_store(options, false);
  }
  const auto serve_or_connect = [&] {
    return c10::make_intrusive<c10d::TCPStore>(env.master_addr, options);
  };
  c10::intrusive_ptr<c10d::Store> store;
  try {
    try {
      store = serve_or_connect();
    } catch (const std::exception& error) {
      const bool no_libuv = std::string(error.what()).find("without libuv") !=
          std::string::npos;
      if (use_libuv != nullptr || !no_libuv ||
          !compat::use_libuv_store(options, false)) {
        throw;
      }
      store = serve_or_connect();
    }
  } catch (const std::exception& error) {
    const std::string what = error.what();
    if (options.isServer) {
      throw DistError(hotloop::detail::str_cat(
          "rank 0 cannot serve the rendezvous at ",
          endpoint(env),
          what.find("already in use") != std::string::npos
              ? ": the port is in use (another run?); choose another "
                "MASTER_PORT"
              : ": " + what.substr(0, what.find('\n'))));
    }
    throw DistError(hotloop::detail::str_cat(
        "rank ",
        env.rank,
        " cannot reach the rendezvous at ",
        endpoint(env),
        " within ",
        timeout.count() / 1000.0,
        " s: is rank 0 running, with the same MASTER_ADDR and MASTER_PORT "
        "on every process?"));
  }
  if (agent_store) {
    return c10::make_intrusive<c10d::PrefixStore>(
        "/worker/attempt_" + std::to_string(env.restart_count), store);
  }
  return store;
}

// Every process announces itself; all must have come before the backend
// connects them, and all must agree on how many they are.
void check_arrivals(
    c10d::Store& store, const ProcessEnvironment& env, Milliseconds timeout) {
  const std::string size_key = "hotloop/world_size";
  if (env.rank == 0) {
    const std::string size = std::to_string(env.world_size);
    store.set(size_key, std::vector<uint8_t>(size.begin(), size.end()));
  }
  std::vector<uint8_t> size;
  try {
    size = store.get(size_key);
  } catch (const std::exception&) {
    throw DistError(hotloop::detail::str_cat(
        "rank ",
        env.rank,
        ": rank 0 did not announce itself at ",
        endpoint(env),
        " within ",
        timeout.count() / 1000.0,
        " s"));
  }
  const int64_t rank0_size = std::stoll(std::string(size.begin(), size.end()));
  HOTLOOP_CHECK_AS(
      DistError,
      rank0_size == env.world_size,
      "rank ",
      env.rank,
      " was started with WORLD_SIZE=",
      env.world_size,
      ", rank 0 with ",
      rank0_size,
      ": every process of a run must be told the same world size");
  int64_t arrived = store.add("hotloop/arrived", 1);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (arrived < env.world_size) {
    HOTLOOP_CHECK_AS(
        DistError,
        std::chrono::steady_clock::now() < deadline,
        "only ",
        arrived,
        " of ",
        env.world_size,
        " processes joined the rendezvous at ",
        endpoint(env),
        " within ",
        timeout.count() / 1000.0,
        " s (trainer.dist_timeout): did every rank start?");
    std::this_thread::sleep_for(Milliseconds(20));
    arrived = store.add("hotloop/arrived", 0);
  }
}

#if HOTLOOP_HAS_GLOO
std::shared_ptr<::gloo::transport::Device> gloo_device(
    const ProcessEnvironment& env) {
  // GLOO_SOCKET_IFNAME picks the network interface, as in PyTorch; on one
  // machine the loopback always works.
  if (const char* name = std::getenv("GLOO_SOCKET_IFNAME")) {
    return c10d::ProcessGroupGloo::createDeviceForInterface(name);
  }
  if (env.world_size == env.local_world_size) {
    return c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  }
  return c10d::ProcessGroupGloo::createDefaultDevice();
}
#endif // HOTLOOP_HAS_GLOO

// LibTorch 2.x splits a process group from its backends; 1.13's backend
// is the process group itself. The 2.x constructor changed too, so the one
// this LibTorch has is chosen at compile time.
#if HOTLOOP_C10D_HAS_BACKENDS
template <typename Group = c10d::ProcessGroup, typename BackendImpl>
c10::intrusive_ptr<Group> group_of(
    const c10::intrusive_ptr<c10d::Store>& store,
    const ProcessEnvironment& env,
    Milliseconds timeout,
    const c10::intrusive_ptr<BackendImpl>& backend,
    typename Group::BackendType type,
    const std::string& name,
    std::initializer_list<c10::DeviceType> devices) {
  const int rank = static_cast<int>(env.rank);
  const int size = static_cast<int>(env.world_size);
  c10::intrusive_ptr<Group> group;
  if constexpr (std::is_constructible_v<
                    Group,
                    c10::intrusive_ptr<c10d::Store>,
                    int,
                    int>) {
    group = c10::make_intrusive<Group>(store, rank, size);
    group->setDefaultBackend(type);
  } else {
    group = c10::make_intrusive<Group>(
        store,
        rank,
        size,
        c10::make_intrusive<typename Group::Options>(name, timeout));
  }
  for (const c10::DeviceType device : devices) {
    group->setBackend(device, type, backend);
  }
  return group;
}
#endif

#if HOTLOOP_HAS_GLOO
c10::intrusive_ptr<c10d::ProcessGroup> gloo_group(
    const c10::intrusive_ptr<c10d::Store>& store,
    const ProcessEnvironment& env,
    Milliseconds timeout) {
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  options->devices.push_back(gloo_device(env));
  auto gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(
      store, static_cast<int>(env.rank), static_cast<int>(env.world_size),
      options);
#if HOTLOOP_C10D_HAS_BACKENDS
  // Gloo reduces CUDA tensors too (through host copies), as PyTorch's
  // init_process_group("gloo") registers it for both.
  return group_of(
      store,
      env,
      timeout,
      gloo,
      c10d::ProcessGroup::BackendType::GLOO,
      "gloo",
      {c10::DeviceType::CPU, c10::DeviceType::CUDA});
#else
  return gloo;
#endif
}
#endif // HOTLOOP_HAS_GLOO

#if HOTLOOP_HAS_NCCL
// One NCCL communicator per process, on the GPU current when the first
// collective runs (Trainer makes its device current; so does the CLI).
c10::intrusive_ptr<c10d::ProcessGroup> nccl_group(
    const c10::intrusive_ptr<c10d::Store>& store,
    const ProcessEnvironment& env,
    Milliseconds timeout) {
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  auto nccl = c10::make_intrusive<c10d::ProcessGroupNCCL>(
      store, static_cast<int>(env.rank), static_cast<int>(env.world_size),
      options);
#if HOTLOOP_C10D_HAS_BACKENDS
  return group_of(
      store,
      env,
      timeout,
      nccl,
      c10d::ProcessGroup::BackendType::NCCL,
      "nccl",
      {c10::DeviceType::CUDA});
#else
  return nccl;
#endif
}
#endif // HOTLOOP_HAS_NCCL

// NCCL reduces CUDA tensors only: a CPU tensor (the Trainer's stop
// decisions, metric sums, the model check) travels through the current
// GPU and back. Gloo takes either as it is.
template <typename Collective>
void on_group_device(
    bool cuda_only, at::Tensor& tensor, const Collective& collective) {
  if (!cuda_only || !tensor.is_cpu()) {
    collective(tensor);
    return;
  }
  at::Tensor staged = tensor.to(
      c10::impl::VirtualGuardImpl(c10::DeviceType::CUDA).getDevice());
  collective(staged);
  tensor.copy_(staged);
}

} // namespace

struct ProcessGroup::Impl {
  ProcessEnvironment env;
  std::string backend;
  Milliseconds timeout{0};
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::ProcessGroup> group;

  // NCCL takes CUDA tensors only.
  bool cuda_only() const {
    return backend == "nccl";
  }
};

ProcessGroup::ProcessGroup(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}

ProcessGroup::~ProcessGroup() = default;

std::shared_ptr<ProcessGroup> ProcessGroup::join(
    const ProcessEnvironment& env, ProcessGroupOptions options) {
  HOTLOOP_CHECK_AS(
      ConfigError,
      options.timeout() > 0,
      "trainer.dist_timeout must be positive, got ",
      options.timeout());
  std::string backend = options.backend();
  if (backend.empty()) {
    backend = options.cuda() ? "nccl" : "gloo";
  }
  HOTLOOP_CHECK_AS(
      ConfigError,
      backend == "gloo" || backend == "nccl",
      "trainer.process_group_backend: expected gloo or nccl, got '",
      backend,
      "'");
  // A backend this build lacks is named before any process waits for
  // another.
#if !HOTLOOP_HAS_NCCL
  HOTLOOP_CHECK_AS(
      ConfigError,
      backend != "nccl",
      "trainer.process_group_backend=nccl: this build of hotloop has no NCCL "
      "process group (its LibTorch has no CUDA, or NCCL's nccl.h was not "
      "found when it was built); use gloo");
#endif
#if !HOTLOOP_HAS_GLOO
  HOTLOOP_CHECK_AS(
      ConfigError,
      backend != "gloo",
      "this build of hotloop has no Gloo process group: Gloo's headers "
      "(Debian's libgloo-dev) were not found, or did not compile with this "
      "LibTorch, when it was built");
#endif
  auto impl = std::make_unique<Impl>();
  impl->env = env;
  impl->backend = backend;
  impl->timeout = to_milliseconds(options.timeout());
  impl->store = connect_store(env, impl->timeout);
  check_arrivals(*impl->store, env, impl->timeout);
  try {
#if HOTLOOP_HAS_NCCL
    if (backend == "nccl") {
      impl->group = nccl_group(impl->store, env, impl->timeout);
    }
#endif
#if HOTLOOP_HAS_GLOO
    if (backend == "gloo") {
      impl->group = gloo_group(impl->store, env, impl->timeout);
    }
#endif
  } catch (const std::exception& error) {
    throw DistError(hotloop::detail::str_cat(
        "rank ",
        env.rank,
        backend == "nccl" ? ": the NCCL" : ": the Gloo",
        " process group could not connect every process within ",
        options.timeout(),
        " s: ",
        std::string(error.what())
            .substr(0, std::string(error.what()).find('\n'))));
  }
  return std::shared_ptr<ProcessGroup>(new ProcessGroup(std::move(impl)));
}

int64_t ProcessGroup::rank() const {
  return impl_->env.rank;
}

int64_t ProcessGroup::world_size() const {
  return impl_->env.world_size;
}

const ProcessEnvironment& ProcessGroup::environment() const {
  return impl_->env;
}

const std::string& ProcessGroup::backend_name() const {
  return impl_->backend;
}

const c10::intrusive_ptr<c10d::ProcessGroup>& ProcessGroup::c10d() const {
  return impl_->group;
}

void ProcessGroup::all_reduce(at::Tensor& tensor, ReduceOp op) {
  c10d::AllreduceOptions options;
  options.reduceOp =
      op == ReduceOp::kSum ? c10d::ReduceOp::SUM : c10d::ReduceOp::MAX;
  options.timeout = impl_->timeout;
  on_group_device(impl_->cuda_only(), tensor, [&](at::Tensor& on_device) {
    std::vector<at::Tensor> tensors{on_device};
    try {
      impl_->group->allreduce(tensors, options)->wait(impl_->timeout);
    } catch (const std::exception& error) {
      rethrow(error, "an all-reduce");
    }
  });
}

void ProcessGroup::broadcast(at::Tensor& tensor, int64_t root) {
  c10d::BroadcastOptions options;
  options.rootRank = root;
  options.timeout = impl_->timeout;
  on_group_device(impl_->cuda_only(), tensor, [&](at::Tensor& on_device) {
    std::vector<at::Tensor> tensors{on_device};
    try {
      impl_->group->broadcast(tensors, options)->wait(impl_->timeout);
    } catch (const std::exception& error) {
      rethrow(error, "a broadcast");
    }
  });
}

void ProcessGroup::barrier() {
  c10d::BarrierOptions options;
  options.timeout = impl_->timeout;
  try {
    impl_->group->barrier(options)->wait(impl_->timeout);
  } catch (const std::exception& error) {
    rethrow(error, "a barrier");
  }
}

void ProcessGroup::report_failure(const std::string& what) noexcept {
  try {
    const std::string text =
        "rank " + std::to_string(rank()) + ": " + what.substr(0, 500);
    // The first failure is the cause; later ones are its echoes.
    impl_->store->compareSet(
        kFailedKey, {}, std::vector<uint8_t>(text.begin(), text.end()));
  } catch (...) {
  }
}

std::string ProcessGroup::reported_failure() noexcept {
  try {
    if (!impl_->store->check({kFailedKey})) {
      return "";
    }
    const std::vector<uint8_t> text = impl_->store->get(kFailedKey);
    return std::string(text.begin(), text.end());
  } catch (...) {
    return "";
  }
}

void ProcessGroup::rethrow(const std::exception& error, const char* what) {
  if (dynamic_cast<const hotloop::Error*>(&error) != nullptr) {
    throw;
  }
  std::string cause = reported_failure();
  if (cause.empty()) {
    const std::string message = error.what();
    cause = message.substr(0, message.find('\n'));
  }
  throw DistError(hotloop::detail::str_cat(
      "rank ",
      rank(),
      ": ",
      what,
      " across the ",
      world_size(),
      " processes failed; ",
      cause.rfind("rank ", 0) == 0 ? "" : "another process failed or left? ",
      cause));
}

} // namespace hotloop::dist
