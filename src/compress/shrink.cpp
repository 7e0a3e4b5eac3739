#include "hotloop/compress/shrink.h"

#include "detail/module_access.h"
#include "hotloop/compress/parametrization.h"
#include "hotloop/compress/prune.h"
#include "hotloop/core/error.h"

#include <ATen/ATen.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

#include <iomanip>
#include <sstream>

namespace hotloop::compress {
namespace {

// What the forward reads for `name` now: the masked value of a pruned
// tensor; undefined for an absent one (no bias).
at::Tensor value(torch::nn::Module& module, const std::string& name) {
  if (is_pruned(module, name)) {
    return masked_tensor(module, name).detach();
  }
  const auto parameters = module.named_parameters(false);
  const at::Tensor* found = parameters.find(name);
  return found != nullptr && found->defined() ? found->detach() : at::Tensor();
}

at::Tensor buffer(torch::nn::Module& module, const std::string& name) {
  const auto buffers = module.named_buffers(false);
  const at::Tensor* found = buffers.find(name);
  return found != nullptr ? found->detach() : at::Tensor();
}

torch::nn::Module& child(torch::nn::Module& root, const std::string& path) {
  torch::nn::Module* module = detail::module_at(root, path);
  HOTLOOP_CHECK(module != nullptr, "shrink: the model has no '", path, "'");
  return *module;
}

int64_t parameter_count(torch::nn::Module& module) {
  int64_t count = 0;
  for (const at::Tensor& p : module.parameters()) {
    count += p.numel();
  }
  return count;
}

// Indices i with keep[i], as an int64 tensor on `device`.
at::Tensor indices(const std::vector<bool>& keep, c10::Device device) {
  std::vector<int64_t> kept;
  for (size_t i = 0; i < keep.size(); ++i) {
    if (keep[i]) {
      kept.push_back(static_cast<int64_t>(i));
    }
  }
  return at::tensor(kept, at::kLong).to(device);
}

// Keeps at least one unit: the first, when every one could go.
int64_t settle(std::vector<bool>& keep) {
  int64_t kept = 0;
  for (const bool k : keep) {
    kept += k;
  }
  if (kept == 0 && !keep.empty()) {
    keep[0] = true;
    kept = 1;
  }
  return kept;
}

// Whether slice `i` along `dim` of `w` is all zero, per i.
std::vector<bool> zero_slices(const at::Tensor& w, int64_t dim) {
  const at::Tensor nonzero = (w != 0).transpose(0, dim).flatten(1).any(1);
  const at::Tensor cpu = nonzero.to(at::kCPU);
  std::vector<bool> zero(cpu.size(0));
  for (int64_t i = 0; i < cpu.size(0); ++i) {
    zero[i] = !cpu[i].item<bool>();
  }
  return zero;
}

void copy_into(
    torch::nn::Module& module, const std::string& name, const at::Tensor& v) {
  const auto parameters = module.named_parameters(false);
  const at::Tensor* target = parameters.find(name);
  if (target != nullptr && target->defined()) {
    at::Tensor t = *target;
    t.copy_(v);
    return;
  }
  at::Tensor b = module.named_buffers(false)[name];
  b.copy_(v);
}

// A hidden Linear -> activation -> Linear chain: which of `first`'s units
// stay, and the bias of `second` with the constant units folded in.
// `consumer_keep`: the rows of `second` that stay.
std::vector<bool> hidden_units(
    const at::Tensor& w1,
    const at::Tensor& b1,
    const at::Tensor& w2,
    const std::vector<bool>& consumer_keep,
    bool gelu,
    at::Tensor& b2) {
  const std::vector<bool> zero_row = zero_slices(w1, 0);
  const at::Tensor read = w2.index({indices(consumer_keep, w2.device())});
  const std::vector<bool> unused = zero_slices(read, 1);
  std::vector<bool> keep(zero_row.size());
  for (size_t j = 0; j < keep.size(); ++j) {
    keep[j] = !(unused[j] || zero_row[j]);
    if (zero_row[j] && !unused[j] && b1.defined()) {
      // A constant unit: act(b1[j]) on every input, folded into b2.
      const at::Tensor activation = gelu ? at::gelu(b1[j]) : at::relu(b1[j]);
      b2 = b2 + w2.select(1, j) * activation;
    }
  }
  return keep;
}

std::string list(const std::vector<int64_t>& values, size_t from, size_t to) {
  std::string text = "[";
  for (size_t i = from; i < to; ++i) {
    text += (i > from ? ", " : "") + std::to_string(values[i]);
  }
  return text + "]";
}

} // namespace

std::string ShrinkReport::describe() const {
  std::ostringstream out;
  out << list(before, 0, before.size()) << " -> "
      << list(after, 0, after.size()) << " units, parameters "
      << parameters_before << " -> " << parameters_after << " (" << std::fixed
      << std::setprecision(1)
      << 100.0 * static_cast<double>(parameters_after) /
             static_cast<double>(std::max<int64_t>(parameters_before, 1))
      << "%)";
  if (kept_constant > 0) {
    out << "; " << kept_constant
        << " zero-filter channels kept (their BatchNorm output is not zero: "
           "prune_channels prunes it too)";
  }
  return out.str();
}

void prune_channels(
    models::FashionCnnImpl& model,
    int64_t block,
    PruningAmount amount,
    double n) {
  const auto blocks = static_cast<int64_t>(model.options().channels.size());
  HOTLOOP_CHECK_AS(
      ConfigError,
      block >= 0 && block < blocks,
      "prune_channels: block ",
      block,
      " does not exist (the model has ",
      blocks,
      " conv blocks)");
  torch::nn::Module& conv =
      child(model, "features." + std::to_string(4 * block));
  torch::nn::Module& norm =
      child(model, "features." + std::to_string(4 * block + 1));
  ln_structured(conv, "weight", amount, n, 0);
  const at::Tensor alive =
      (mask_of(conv, "weight").flatten(1) != 0).any(1).to(at::kFloat);
  custom_from_mask(norm, "weight", alive);
  custom_from_mask(norm, "bias", alive);
  if (value(conv, "bias").defined()) {
    custom_from_mask(conv, "bias", alive);
  }
}

void prune_units(
    models::FashionCnnImpl& model,
    int64_t layer,
    PruningAmount amount,
    double n) {
  HOTLOOP_CHECK_AS(
      ConfigError,
      layer == 0 && model.options().hidden > 0,
      "prune_units: the model's head has ",
      model.options().hidden > 0 ? "one hidden layer (0)" : "no hidden layer",
      ", not layer ",
      layer);
  torch::nn::Module& linear = child(model, "head.1");
  ln_structured(linear, "weight", amount, n, 0);
  const at::Tensor alive =
      (mask_of(linear, "weight") != 0).any(1).to(at::kFloat);
  custom_from_mask(linear, "bias", alive);
}

void prune_units(
    models::MlpImpl& model, int64_t layer, PruningAmount amount, double n) {
  const auto hidden = static_cast<int64_t>(model.options().hidden().size());
  HOTLOOP_CHECK_AS(
      ConfigError,
      layer >= 0 && layer < hidden,
      "prune_units: layer ",
      layer,
      " is not a hidden layer (the model has ",
      hidden,
      ")");
  torch::nn::Module& linear = child(model, "layers." + std::to_string(layer));
  ln_structured(linear, "weight", amount, n, 0);
  const at::Tensor alive =
      (mask_of(linear, "weight") != 0).any(1).to(at::kFloat);
  custom_from_mask(linear, "bias", alive);
}

models::FashionCnn shrink(models::FashionCnnImpl& model, ShrinkReport* report) {
  const at::NoGradGuard no_grad;
  const models::FashionCnnOptions& options = model.options();
  const auto blocks = static_cast<int64_t>(options.channels.size());
  const bool hidden = options.hidden > 0;
  const int64_t final_index =
      static_cast<int64_t>(child(model, "head").children().size()) - 1;
  torch::nn::Module& final_linear =
      child(model, "head." + std::to_string(final_index));
  torch::nn::Module* first_linear =
      hidden ? &child(model, "head.1") : &final_linear;

  // Spatial size after each block.
  std::vector<int64_t> sizes;
  int64_t size = options.image_size;
  for (int64_t b = 0; b < blocks; ++b) {
    size /= 2;
    sizes.push_back(size);
  }

  at::Tensor w_final = value(final_linear, "weight");
  at::Tensor b_final = value(final_linear, "bias");
  at::Tensor w_first = value(*first_linear, "weight");
  at::Tensor b_first = value(*first_linear, "bias");

  // The head's hidden units (its rows read by the final Linear's kept
  // rows: all of them).
  std::vector<bool> keep_hidden;
  if (hidden) {
    keep_hidden = hidden_units(
        w_first,
        b_first,
        w_final,
        std::vector<bool>(w_final.size(0), true),
        /*gelu=*/false,
        b_final);
    settle(keep_hidden);
  }

  // Blocks, last first: a channel goes when its reader ignores it, or its
  // output is zero, or (last block) constant and foldable into the head.
  std::vector<std::vector<bool>> keep(blocks);
  int64_t kept_constant = 0;
  std::vector<bool> consumer_rows =
      hidden ? keep_hidden : std::vector<bool>(w_first.size(0), true);
  for (int64_t b = blocks - 1; b >= 0; --b) {
    torch::nn::Module& conv = child(model, "features." + std::to_string(4 * b));
    torch::nn::Module& norm =
        child(model, "features." + std::to_string(4 * b + 1));
    const at::Tensor w = value(conv, "weight");
    const at::Tensor conv_bias = value(conv, "bias");
    const int64_t channels = w.size(0);
    // What each channel's reader takes from it.
    std::vector<bool> unused;
    if (b + 1 < blocks) {
      const at::Tensor next = value(
          child(model, "features." + std::to_string(4 * (b + 1))), "weight");
      unused =
          zero_slices(next.index({indices(keep[b + 1], next.device())}), 1);
    } else {
      const int64_t area = sizes[b] * sizes[b];
      const at::Tensor read =
          w_first.index({indices(consumer_rows, w_first.device())})
              .view({-1, channels, area});
      unused = zero_slices(read, 1);
    }
    // The eval output of a zero filter: BatchNorm of the conv's bias (or
    // 0), through ReLU and pooling, a constant per channel.
    const std::vector<bool> zero_filter = zero_slices(w, 0);
    at::Tensor x =
        conv_bias.defined() ? conv_bias : at::zeros({channels}, w.options());
    at::Tensor constant = x;
    const at::Tensor mean = buffer(norm, "running_mean");
    const at::Tensor var = buffer(norm, "running_var");
    if (mean.defined() && var.defined()) {
      const auto* bn = norm.as<torch::nn::BatchNorm2d>();
      const double eps = bn != nullptr ? bn->options.eps() : 1e-5;
      constant = (x - mean) / at::sqrt(var + eps);
      const at::Tensor gamma = value(norm, "weight");
      const at::Tensor beta = value(norm, "bias");
      if (gamma.defined()) {
        constant = constant * gamma + beta;
      }
    }
    constant = at::relu(constant);
    keep[b].assign(channels, true);
    for (int64_t c = 0; c < channels; ++c) {
      if (unused[c]) {
        keep[b][c] = false;
        continue;
      }
      if (!zero_filter[c] || !mean.defined()) {
        continue;
      }
      const double k = constant[c].item<double>();
      if (k == 0) {
        keep[b][c] = false;
      } else if (b == blocks - 1) {
        // Constant features into the head's first Linear: fold.
        const int64_t area = sizes[b] * sizes[b];
        b_first =
            b_first + w_first.narrow(1, c * area, area).sum(1) * constant[c];
        keep[b][c] = false;
      } else {
        ++kept_constant;
      }
    }
    settle(keep[b]);
    consumer_rows = keep[b];
  }

  models::FashionCnnOptions shrunk_options = options;
  ShrinkReport result;
  for (int64_t b = 0; b < blocks; ++b) {
    shrunk_options.channels[b] = settle(keep[b]);
    result.before.push_back(options.channels[b]);
    result.after.push_back(shrunk_options.channels[b]);
  }
  if (hidden) {
    shrunk_options.hidden = settle(keep_hidden);
    result.before.push_back(options.hidden);
    result.after.push_back(shrunk_options.hidden);
  }
  models::FashionCnn shrunk(shrunk_options);
  const c10::Device device = w_final.device();
  shrunk->to(device);

  at::Tensor in_keep = at::arange(options.in_channels, at::kLong).to(device);
  for (int64_t b = 0; b < blocks; ++b) {
    const std::string conv_path = "features." + std::to_string(4 * b);
    const std::string norm_path = "features." + std::to_string(4 * b + 1);
    torch::nn::Module& conv = child(model, conv_path);
    torch::nn::Module& norm = child(model, norm_path);
    const at::Tensor out_keep = indices(keep[b], device);
    copy_into(
        child(*shrunk, conv_path),
        "weight",
        value(conv, "weight").index({out_keep}).index_select(1, in_keep));
    if (value(conv, "bias").defined()) {
      copy_into(
          child(*shrunk, conv_path),
          "bias",
          value(conv, "bias").index({out_keep}));
    }
    for (const char* name : {"weight", "bias"}) {
      if (value(norm, name).defined()) {
        copy_into(
            child(*shrunk, norm_path),
            name,
            value(norm, name).index({out_keep}));
      }
    }
    for (const char* name : {"running_mean", "running_var"}) {
      if (buffer(norm, name).defined()) {
        copy_into(
            child(*shrunk, norm_path),
            name,
            buffer(norm, name).index({out_keep}));
      }
    }
    if (buffer(norm, "num_batches_tracked").defined()) {
      copy_into(
          child(*shrunk, norm_path),
          "num_batches_tracked",
          buffer(norm, "num_batches_tracked"));
    }
    in_keep = out_keep;
  }
  // The head's first Linear reads the last block's kept channels' features.
  const int64_t area = sizes.back() * sizes.back();
  const at::Tensor columns =
      (in_keep.unsqueeze(1) * area + at::arange(area, at::kLong).to(device))
          .flatten();
  const std::string final_path = "head." + std::to_string(final_index);
  if (hidden) {
    const at::Tensor rows = indices(keep_hidden, device);
    copy_into(
        child(*shrunk, "head.1"),
        "weight",
        w_first.index({rows}).index_select(1, columns));
    copy_into(child(*shrunk, "head.1"), "bias", b_first.index({rows}));
    copy_into(
        child(*shrunk, final_path), "weight", w_final.index_select(1, rows));
    copy_into(child(*shrunk, final_path), "bias", b_final);
  } else {
    copy_into(
        child(*shrunk, final_path), "weight", w_first.index_select(1, columns));
    copy_into(child(*shrunk, final_path), "bias", b_first);
  }
  shrunk->train(model.is_training());
  result.kept_constant = kept_constant;
  result.parameters_before = parameter_count(model);
  result.parameters_after = parameter_count(*shrunk);
  if (report != nullptr) {
    *report = result;
  }
  return shrunk;
}

models::Mlp shrink(models::MlpImpl& model, ShrinkReport* report) {
  const at::NoGradGuard no_grad;
  const models::MlpOptions& options = model.options();
  const auto layers = static_cast<int64_t>(options.hidden().size()) + 1;
  const bool gelu = options.activation() == "gelu";
  std::vector<at::Tensor> w(layers), b(layers);
  for (int64_t l = 0; l < layers; ++l) {
    torch::nn::Module& linear = child(model, "layers." + std::to_string(l));
    w[l] = value(linear, "weight");
    b[l] = value(linear, "bias");
  }
  // Hidden layers, last first: their kept units decide what the layer
  // before may drop.
  std::vector<std::vector<bool>> keep(layers);
  keep[layers - 1].assign(w[layers - 1].size(0), true);
  for (int64_t l = layers - 2; l >= 0; --l) {
    keep[l] = hidden_units(w[l], b[l], w[l + 1], keep[l + 1], gelu, b[l + 1]);
    settle(keep[l]);
  }
  ShrinkReport result;
  std::vector<int64_t> widths;
  for (int64_t l = 0; l + 1 < layers; ++l) {
    widths.push_back(settle(keep[l]));
    result.before.push_back(options.hidden()[l]);
    result.after.push_back(widths.back());
  }
  models::Mlp shrunk(
      models::MlpOptions(options.in_features(), options.num_classes())
          .hidden(widths)
          .dropout(options.dropout())
          .activation(options.activation()));
  const c10::Device device = w[0].device();
  shrunk->to(device);
  at::Tensor in_keep = at::arange(options.in_features(), at::kLong).to(device);
  for (int64_t l = 0; l < layers; ++l) {
    const at::Tensor rows = indices(keep[l], device);
    torch::nn::Module& target = child(*shrunk, "layers." + std::to_string(l));
    copy_into(target, "weight", w[l].index({rows}).index_select(1, in_keep));
    if (b[l].defined()) {
      copy_into(target, "bias", b[l].index({rows}));
    }
    in_keep = rows;
  }
  shrunk->train(model.is_training());
  result.parameters_before = parameter_count(model);
  result.parameters_after = parameter_count(*shrunk);
  if (report != nullptr) {
    *report = result;
  }
  return shrunk;
}

} // namespace hotloop::compress
