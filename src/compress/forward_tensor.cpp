#include "hotloop/compress/forward_tensor.h"

#include "hotloop/dist/sync_batch_norm.h"

#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/instancenorm.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <map>
#include <mutex>
#include <utility>

namespace hotloop::compress {
namespace {

using Member = std::function<at::Tensor*(torch::nn::Module&)>;
using Table = std::map<std::pair<std::type_index, std::string>, Member>;

template <typename Impl>
void add_weight_and_bias(Table& table) {
  table[{std::type_index(typeid(Impl)), "weight"}] = [](torch::nn::Module& m) {
    return &dynamic_cast<Impl&>(m).weight;
  };
  table[{std::type_index(typeid(Impl)), "bias"}] = [](torch::nn::Module& m) {
    return &dynamic_cast<Impl&>(m).bias;
  };
}

struct Registry {
  std::mutex mutex;
  Table table;
  Registry() {
    namespace nn = torch::nn;
    add_weight_and_bias<nn::LinearImpl>(table);
    add_weight_and_bias<nn::BilinearImpl>(table);
    add_weight_and_bias<nn::Conv1dImpl>(table);
    add_weight_and_bias<nn::Conv2dImpl>(table);
    add_weight_and_bias<nn::Conv3dImpl>(table);
    add_weight_and_bias<nn::ConvTranspose1dImpl>(table);
    add_weight_and_bias<nn::ConvTranspose2dImpl>(table);
    add_weight_and_bias<nn::ConvTranspose3dImpl>(table);
    add_weight_and_bias<nn::BatchNorm1dImpl>(table);
    add_weight_and_bias<nn::BatchNorm2dImpl>(table);
    add_weight_and_bias<nn::BatchNorm3dImpl>(table);
    add_weight_and_bias<nn::InstanceNorm1dImpl>(table);
    add_weight_and_bias<nn::InstanceNorm2dImpl>(table);
    add_weight_and_bias<nn::InstanceNorm3dImpl>(table);
    add_weight_and_bias<nn::LayerNormImpl>(table);
    add_weight_and_bias<nn::GroupNormImpl>(table);
    add_weight_and_bias<dist::SyncBatchNormImpl>(table);
    table[{std::type_index(typeid(nn::EmbeddingImpl)), "weight"}] =
        [](torch::nn::Module& m) {
          return &dynamic_cast<nn::EmbeddingImpl&>(m).weight;
        };
  }
};

Registry& registry() {
  static Registry instance;
  return instance;
}

} // namespace

at::Tensor* forward_tensor(torch::nn::Module& module, const std::string& name) {
  Registry& r = registry();
  Member member;
  {
    const std::lock_guard<std::mutex> lock(r.mutex);
    const auto found = r.table.find({std::type_index(typeid(module)), name});
    if (found == r.table.end()) {
      return nullptr;
    }
    member = found->second;
  }
  return member(module);
}

namespace detail {
void register_forward_tensor(
    std::type_index type,
    const std::string& name,
    std::function<at::Tensor*(torch::nn::Module&)> member) {
  Registry& r = registry();
  const std::lock_guard<std::mutex> lock(r.mutex);
  r.table[{type, name}] = std::move(member);
}
} // namespace detail

} // namespace hotloop::compress
