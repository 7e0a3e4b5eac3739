#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

namespace hotloop::data {

/// Produces the sample indices of one epoch, like the samplers of
/// `torch.utils.data`.
///
/// Stateless across epochs: the indices of epoch e depend only on the
/// constructor arguments and e, so a loader can resume any epoch at any
/// position without replaying earlier ones. Random samplers draw epoch e from
/// a fresh CPU generator seeded with `seed + e` (modulo 2^64) using the same
/// ATen ops as PyTorch's Python samplers, so their indices equal Python's
/// with `generator=torch.Generator().manual_seed(seed + e)`. As in PyTorch,
/// the generator (mt19937) keeps only the low 32 bits of that seed.
///
/// Difference from PyTorch: a PyTorch RandomSampler (or SubsetRandomSampler,
/// WeightedRandomSampler) given a generator continues one random stream
/// across epochs; hotloop reseeds every epoch with `seed + epoch`, as
/// DistributedSampler does. With no generator PyTorch draws a fresh seed;
/// hotloop is always deterministic.
///
/// Implementations are immutable after construction: `indices` and `size`
/// may be called from any number of threads at once.
class Sampler {
 public:
  virtual ~Sampler() = default;

  /// The indices of epoch `epoch` (any value; 0 is the first epoch), in
  /// order; `size()` of them.
  virtual std::vector<int64_t> indices(int64_t epoch) const = 0;

  /// Indices per epoch (`len(sampler)`).
  virtual int64_t size() const = 0;
};

/// 0, 1, ..., n - 1 every epoch (`SequentialSampler`).
class SequentialSampler final : public Sampler {
 public:
  /// `n`: the dataset size; requires n >= 0 (else `hotloop::ConfigError`).
  explicit SequentialSampler(int64_t n);

  std::vector<int64_t> indices(int64_t epoch) const override;
  int64_t size() const override;

 private:
  int64_t n_;
};

/// Indices in [0, n) in random order (`RandomSampler`).
///
/// Without replacement: `num_samples / n` full permutations
/// (`torch.randperm(n)`), then the first `num_samples % n` of one more. With
/// replacement: `torch.randint(n, (32,))` draws, 32 at a time, then the
/// remainder.
class RandomSampler final : public Sampler {
 public:
  /// `n`: the dataset size. `num_samples`: indices per epoch, default n.
  /// Requires n >= 0, num_samples > 0 (so n > 0 when it is left out), and
  /// n > 0 whenever samples are drawn (else `hotloop::ConfigError`).
  explicit RandomSampler(
      int64_t n,
      bool replacement = false,
      std::optional<int64_t> num_samples = std::nullopt,
      uint64_t seed = 0);

  std::vector<int64_t> indices(int64_t epoch) const override;
  int64_t size() const override;

 private:
  int64_t n_;
  bool replacement_;
  int64_t num_samples_;
  uint64_t seed_;
};

/// The given indices in random order, each once (`SubsetRandomSampler`):
/// `indices[i] for i in torch.randperm(len(indices))`. An empty subset gives
/// empty epochs. The indices are not checked against any dataset.
class SubsetRandomSampler final : public Sampler {
 public:
  explicit SubsetRandomSampler(std::vector<int64_t> indices, uint64_t seed = 0);

  std::vector<int64_t> indices(int64_t epoch) const override;
  int64_t size() const override;

 private:
  std::vector<int64_t> subset_;
  uint64_t seed_;
};

/// Indices in [0, weights.size()) drawn with probability proportional to
/// their weight (`WeightedRandomSampler`):
/// `torch.multinomial(weights [double], num_samples, replacement)`.
///
/// Without replacement each index is drawn at most once; as in PyTorch, once
/// every positive-weight index is drawn, zero-weight indices fill the rest.
class WeightedRandomSampler final : public Sampler {
 public:
  /// Requires num_samples > 0, non-negative finite weights with a positive
  /// finite sum, and without replacement num_samples <= weights.size() (else
  /// `hotloop::ConfigError`).
  WeightedRandomSampler(
      std::vector<double> weights,
      int64_t num_samples,
      bool replacement = true,
      uint64_t seed = 0);

  std::vector<int64_t> indices(int64_t epoch) const override;
  int64_t size() const override;

 private:
  std::vector<double> weights_;
  int64_t num_samples_;
  bool replacement_;
  uint64_t seed_;
};

/// The share of one rank (process) of a dataset split across `num_replicas`
/// ranks (`torch.utils.data.distributed.DistributedSampler`).
///
/// Each epoch the order is `torch.randperm(n)` with `shuffle`, else
/// 0..n-1. Without `drop_last` it is padded to a multiple of num_replicas by
/// repeating its start (as many times as needed) and every rank gets
/// ceil(n / num_replicas) indices; with `drop_last` its tail is dropped and
/// every rank gets floor(n / num_replicas). Rank r takes positions r,
/// r + num_replicas, r + 2 * num_replicas, ... of that list. So the ranks'
/// shares are disjoint (up to the padding) and together cover every index
/// (every kept index with `drop_last`), provided every rank uses the same n,
/// shuffle, seed and epoch.
class DistributedSampler final : public Sampler {
 public:
  /// Requires n >= 0, num_replicas > 0 and 0 <= rank < num_replicas (else
  /// `hotloop::ConfigError`).
  DistributedSampler(
      int64_t n,
      int64_t num_replicas,
      int64_t rank,
      bool shuffle = true,
      uint64_t seed = 0,
      bool drop_last = false);

  std::vector<int64_t> indices(int64_t epoch) const override;
  /// Indices per rank per epoch (PyTorch's `num_samples`).
  int64_t size() const override;
  /// Indices of all ranks together per epoch (PyTorch's `total_size`).
  int64_t total_size() const;

  /// The constructor's arguments.
  int64_t num_replicas() const {
    return num_replicas_;
  }
  int64_t rank() const {
    return rank_;
  }
  bool shuffle() const {
    return shuffle_;
  }
  uint64_t seed() const {
    return seed_;
  }

 private:
  int64_t n_;
  int64_t num_replicas_;
  int64_t rank_;
  bool shuffle_;
  uint64_t seed_;
  int64_t num_samples_;
};

/// One rank's share of 0..n-1 for evaluation: rank, rank + num_replicas,
/// rank + 2 * num_replicas, ... in order, without DistributedSampler's
/// padding, so that over all ranks every sample counts exactly once (the
/// shares differ in size by at most one).
class ShardSampler final : public Sampler {
 public:
  /// Requires n >= 0, num_replicas > 0 and 0 <= rank < num_replicas (else
  /// `hotloop::ConfigError`).
  ShardSampler(int64_t n, int64_t num_replicas, int64_t rank);

  std::vector<int64_t> indices(int64_t epoch) const override;
  int64_t size() const override;

  /// The constructor's arguments.
  int64_t num_replicas() const {
    return num_replicas_;
  }
  int64_t rank() const {
    return rank_;
  }

 private:
  int64_t n_;
  int64_t num_replicas_;
  int64_t rank_;
};

/// One rank's share of another sampler's epoch, for a data-parallel run
/// (Lightning's DistributedSamplerWrapper; without `pad`, its
/// UnrepeatedDistributedSamplerWrapper): positions rank,
/// rank + num_replicas, rank + 2 * num_replicas, ... of `sampler`'s
/// indices, in their order. With `pad` (training) the list is first
/// padded to a multiple of num_replicas by repeating its start, as
/// DistributedSampler pads, so every rank takes
/// ceil(size / num_replicas) indices and the ranks step together; without
/// (evaluation) every index counts once and the shares differ in size by
/// at most one.
///
/// The shares are disjoint only when every rank builds `sampler` alike
/// (the same arguments and seed), so that all draw the same epoch; a
/// data-parallel fit checks that their first epochs agree.
class DistributedSamplerWrapper final : public Sampler {
 public:
  /// Requires a sampler, num_replicas > 0 and 0 <= rank < num_replicas
  /// (else `hotloop::ConfigError`).
  DistributedSamplerWrapper(
      std::shared_ptr<const Sampler> sampler,
      int64_t num_replicas,
      int64_t rank,
      bool pad = true);

  std::vector<int64_t> indices(int64_t epoch) const override;
  int64_t size() const override;

  /// The sampler whose epochs are split.
  const Sampler& sampler() const {
    return *sampler_;
  }
  int64_t num_replicas() const {
    return num_replicas_;
  }
  int64_t rank() const {
    return rank_;
  }

 private:
  std::shared_ptr<const Sampler> sampler_;
  int64_t num_replicas_;
  int64_t rank_;
  bool pad_;
};

/// Indices in random order, grouped so that every run of `batch_size` holds
/// samples of similar length, for batches padded to their longest sample
/// (Hugging Face's LengthGroupedSampler, its Trainer's `group_by_length`):
/// less padding, so less work per sample, while the order stays random.
///
/// Each epoch: `torch.randperm(n)` (as RandomSampler), cut into megabatches
/// of `mega_batch_mult * batch_size`, each sorted by length, longest first
/// (a stable sort); then the first sample of the megabatch with the longest
/// sample trades places with the very first, so the epoch's first batch is
/// its largest and an out-of-memory shows at once. Batch the indices with
/// the same `batch_size` (DataLoaderOptions::batch_size with this as its
/// `sampler`).
///
/// For n > 0 the indices equal transformers'
/// `get_length_grouped_indices(lengths, batch_size, mega_batch_mult,
/// generator=torch.Generator().manual_seed(seed + epoch))`. Differences
/// from its Trainer: that draws from the global generator across epochs
/// (here each epoch is seeded, as every sampler here is) and groups by
/// batch_size x gradient accumulation steps (pass that product to match);
/// no lengths give an empty epoch (there, an error). A data-parallel fit
/// splits it as any sampler (DistributedSamplerWrapper): each rank's batch
/// is every num_replicas-th of num_replicas x batch_size neighbours, so
/// keep a megabatch several times that.
class LengthGroupedSampler final : public Sampler {
 public:
  /// `lengths[i]`: sample i's length (tokens, frames), >= 0. Without
  /// `mega_batch_mult`, min(n / (4 batch_size), 50), at least 1. Requires
  /// batch_size > 0 and mega_batch_mult > 0 (else `hotloop::ConfigError`).
  LengthGroupedSampler(
      std::vector<int64_t> lengths,
      int64_t batch_size,
      uint64_t seed = 0,
      std::optional<int64_t> mega_batch_mult = std::nullopt);

  std::vector<int64_t> indices(int64_t epoch) const override;
  int64_t size() const override;

  /// Samples per megabatch: mega_batch_mult x batch_size.
  int64_t megabatch_size() const {
    return megabatch_size_;
  }

 private:
  std::vector<int64_t> lengths_;
  int64_t megabatch_size_;
  uint64_t seed_;
};

/// Produces the batches of one epoch: PyTorch's `batch_sampler`, any
/// sampler of index lists. Subclass it for batches of your own making
/// (a token budget per batch, buckets of equal shape); each list is one
/// batch, of any size but not empty, and every epoch has `size()` of them
/// (the loader's length; it names an epoch that has not). So pack the
/// batches once and shuffle their order per epoch, as fairseq does.
///
/// Like Sampler: the batches of epoch e depend only on the constructor
/// arguments and e (a loader resumes mid-epoch from that), and `batches`
/// and `size` may be called from any number of threads at once. A
/// data-parallel fit gives each process every num_replicas-th batch
/// (DistributedBatchSampler), so every process must build it alike.
class BatchSamplerBase {
 public:
  virtual ~BatchSamplerBase() = default;

  /// The batches of epoch `epoch` (any value; 0 is the first epoch), in
  /// order; `size()` of them.
  virtual std::vector<std::vector<int64_t>> batches(int64_t epoch) const = 0;

  /// Batches per epoch (`len(batch_sampler)`).
  virtual int64_t size() const = 0;
};

/// Groups a sampler's indices into batches of `batch_size` (`BatchSampler`);
/// the last batch is smaller, or dropped with `drop_last`. Thread-safe like
/// the samplers.
class BatchSampler final : public BatchSamplerBase {
 public:
  /// Requires a sampler and batch_size > 0 (else `hotloop::ConfigError`).
  BatchSampler(
      std::shared_ptr<const Sampler> sampler,
      int64_t batch_size,
      bool drop_last);

  /// The batches of epoch `epoch`: the sampler's `indices(epoch)` in order,
  /// `size()` batches.
  std::vector<std::vector<int64_t>> batches(int64_t epoch) const override;

  /// Batches per epoch (`len(batch_sampler)`).
  int64_t size() const override;

  const Sampler& sampler() const {
    return *sampler_;
  }
  int64_t batch_size() const {
    return batch_size_;
  }
  bool drop_last() const {
    return drop_last_;
  }

 private:
  std::shared_ptr<const Sampler> sampler_;
  int64_t batch_size_;
  bool drop_last_;
};

/// One rank's share of another batch sampler's epoch, for a data-parallel
/// run (like accelerate's BatchSamplerShard): batches rank,
/// rank + num_replicas, rank + 2 * num_replicas, ... of `batch_sampler`'s,
/// in their order. With `pad` (training) the epoch's batches are first
/// continued with its first whole batches to a multiple of num_replicas
/// (accelerate's even_batches pads with the epoch's first samples, cut to
/// the batch size, instead), so every rank takes ceil(size / num_replicas)
/// batches and the ranks step together; without (evaluation) every batch
/// counts once.
///
/// Each step then averages the ranks' gradients, each the mean over its own
/// batch, whatever the batches' sizes. Every rank must build
/// `batch_sampler` alike (the same arguments and seed); a data-parallel
/// fit checks that their first epochs agree.
class DistributedBatchSampler final : public BatchSamplerBase {
 public:
  /// Requires a batch sampler, num_replicas > 0 and
  /// 0 <= rank < num_replicas (else `hotloop::ConfigError`).
  DistributedBatchSampler(
      std::shared_ptr<const BatchSamplerBase> batch_sampler,
      int64_t num_replicas,
      int64_t rank,
      bool pad = true);

  std::vector<std::vector<int64_t>> batches(int64_t epoch) const override;
  int64_t size() const override;

  /// The batch sampler whose epochs are split.
  const BatchSamplerBase& batch_sampler() const {
    return *batch_sampler_;
  }
  int64_t num_replicas() const {
    return num_replicas_;
  }
  int64_t rank() const {
    return rank_;
  }

 private:
  std::shared_ptr<const BatchSamplerBase> batch_sampler_;
  int64_t num_replicas_;
  int64_t rank_;
  bool pad_;
};

namespace detail {

/// Throws `hotloop::DataError` unless `batches`, a batch sampler's epoch
/// `epoch`, are `size` lists (its `size()`), none empty.
void check_batches(
    const std::vector<std::vector<int64_t>>& batches,
    int64_t size,
    int64_t epoch);

} // namespace detail

} // namespace hotloop::data
