#include "hotloop/interop/load_weights.h"

#include "hotloop/core/error.h"
#include "hotloop/interop/safetensors.h"
#include "hotloop/interop/torch_file.h"
#include "hotloop/train/checkpoint.h"
#include "hotloop/train/detail/zip_archive.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/serialize/input-archive.h>

#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

namespace hotloop::interop {
namespace {

using hotloop::detail::str_cat;

// The first component all names share ("network." of "network.fc.weight"),
// or "" when they do not all share one.
std::string shared_prefix(const std::vector<std::string>& names) {
  if (names.empty()) {
    return "";
  }
  const size_t dot = names.front().find('.');
  if (dot == std::string::npos) {
    return "";
  }
  const std::string prefix = names.front().substr(0, dot + 1);
  for (const std::string& name : names) {
    if (name.compare(0, prefix.size(), prefix) != 0) {
      return "";
    }
  }
  return prefix;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::ostringstream out;
  out << at::IntArrayRef(shape);
  return out.str();
}

// "'a', 'b', 'c' and 5 more"
std::string first_names(const std::vector<std::string>& names, size_t n = 3) {
  std::string text;
  for (size_t i = 0; i < names.size() && i < n; ++i) {
    text += (i > 0 ? ", '" : "'") + names[i] + "'";
  }
  if (names.size() > n) {
    text += str_cat(" and ", names.size() - n, " more");
  }
  return text;
}

void add_tensors(
    torch::serialize::InputArchive& archive,
    const std::string& prefix,
    NamedTensors& out,
    int depth) {
  HOTLOOP_CHECK(depth < 64, "the checkpoint's model nests too deeply");
  for (const std::string& key : archive.keys()) {
    at::Tensor tensor;
    if (archive.try_read(key, tensor)) {
      out.add(prefix + key, tensor);
      continue;
    }
    torch::serialize::InputArchive child;
    if (archive.try_read(key, child)) {
      add_tensors(child, prefix + key + ".", out, depth + 1);
    }
  }
}

NamedTensors read_checkpoint_model(const std::string& path) {
  train::verify_checkpoint(path, &std::cerr);
  NamedTensors out;
  try {
    torch::serialize::InputArchive archive;
    archive.load_from(path, at::kCPU);
    torch::serialize::InputArchive model;
    HOTLOOP_CHECK(
        archive.try_read("model", model),
        path,
        ": not a hotloop checkpoint (no model in it)");
    // hotloop quantize's files hold int8 values and their scales, which no
    // float model (nor Python's) takes.
    c10::IValue callbacks;
    HOTLOOP_CHECK(
        !archive.try_read("callbacks", callbacks) ||
            !train::marks_int8_model(callbacks.toStringRef()),
        path,
        ": an int8 (quantized) checkpoint: its tensors are int8 values and "
        "scales, not a float model's weights; use the float checkpoint it "
        "was quantized from");
    add_tensors(model, "", out, 0);
  } catch (const Error&) {
    throw;
  } catch (const c10::Error& e) {
    throw Error(str_cat(
        path,
        ": cannot read the checkpoint's model: ",
        e.what_without_backtrace()));
  } catch (const std::exception& e) {
    throw Error(
        str_cat(path, ": cannot read the checkpoint's model: ", e.what()));
  }
  return out;
}

// A tensor of the file that a hotloop model leaves out on purpose: causal
// masks (nanoGPT on PyTorch before 2.0 keeps `attn.bias` [1, 1, T, T];
// Hugging Face's GPT-2 `attn.bias` and `attn.masked_bias`).
bool is_mask_buffer(const std::string& name, const at::Tensor& tensor) {
  const auto ends_with = [&](const std::string& suffix) {
    return name.size() >= suffix.size() &&
           name.compare(name.size() - suffix.size(), suffix.size(), suffix) ==
               0;
  };
  return (ends_with("attn.bias") && tensor.dim() == 4) ||
         ends_with("attn.masked_bias");
}

} // namespace

std::string to_string(WeightsFormat format) {
  switch (format) {
    case WeightsFormat::kSafetensors:
      return "safetensors";
    case WeightsFormat::kTorch:
      return "PyTorch state_dict";
    case WeightsFormat::kCheckpoint:
      return "hotloop checkpoint";
  }
  return "weights";
}

WeightsFormat detect_weights_format(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  HOTLOOP_CHECK(in.is_open(), path, ": cannot open");
  const auto size = static_cast<uint64_t>(in.tellg());
  in.seekg(0);
  char head[9] = {};
  in.read(head, std::min<uint64_t>(size, 9));
  uint64_t header = 0;
  std::memcpy(&header, head, 8);
  if (size >= 9 && head[8] == '{' && header <= size - 8) {
    return WeightsFormat::kSafetensors;
  }
  if (size >= 4 && std::memcmp(head, "PK\3\4", 4) == 0) {
    // TorchScript archives (hotloop's checkpoints) hold constants.pkl and
    // code; torch.save's zip holds neither. The names are in the central
    // directory, at the end.
    in.clear();
    train::detail::ZipEnd end;
    try {
      end = train::detail::find_zip_end(in, size, path);
    } catch (const Error&) {
      return WeightsFormat::kTorch; // whose reader says what is wrong
    }
    if (end.comment.rfind("hotloop-checkpoint ", 0) == 0) {
      return WeightsFormat::kCheckpoint;
    }
    const uint64_t tail = std::min<uint64_t>(end.offset, 1 << 20);
    std::string directory(tail, '\0');
    in.seekg(static_cast<std::streamoff>(end.offset - tail));
    in.read(directory.data(), static_cast<std::streamsize>(tail));
    return directory.find("/constants.pkl") != std::string::npos
               ? WeightsFormat::kCheckpoint
               : WeightsFormat::kTorch;
  }
  if (size >= 2 && static_cast<unsigned char>(head[0]) == 0x80) {
    return WeightsFormat::kTorch; // a pickle: torch.save's legacy format
  }
  throw Error(str_cat(
      path,
      ": not a weights file hotloop reads (safetensors, a PyTorch "
      "state_dict from torch.save, or a hotloop checkpoint)"));
}

NamedTensors read_weights(const std::string& path) {
  switch (detect_weights_format(path)) {
    case WeightsFormat::kSafetensors:
      return SafetensorsFile(path).read_all();
    case WeightsFormat::kTorch:
      return load_torch_state_dict(path);
    case WeightsFormat::kCheckpoint:
      return read_checkpoint_model(path);
  }
  return {};
}

namespace {

void collect(
    const torch::nn::Module& module,
    const std::string& prefix,
    NamedTensors& out) {
  for (const auto& p : module.named_parameters(/*recurse=*/false)) {
    out.add(prefix + p.key(), p.value());
  }
  for (const auto& b : module.named_buffers(/*recurse=*/false)) {
    out.add(prefix + b.key(), b.value());
  }
  for (const auto& child : module.named_children()) {
    collect(*child.value(), prefix + child.key() + ".", out);
  }
}

} // namespace

NamedTensors state_dict(const torch::nn::Module& module) {
  NamedTensors out;
  collect(module, "", out);
  return out;
}

bool name_matches(const std::string& pattern, const std::string& name) {
  // Iterative glob: '*' any run of characters (dots too), '?' one.
  const auto glob = [](const std::string& p, const std::string& s) {
    size_t pi = 0, si = 0, star = std::string::npos, mark = 0;
    while (si < s.size()) {
      if (pi < p.size() && (p[pi] == '?' || p[pi] == s[si])) {
        ++pi;
        ++si;
      } else if (pi < p.size() && p[pi] == '*') {
        star = pi++;
        mark = si;
      } else if (star != std::string::npos) {
        pi = star + 1;
        si = ++mark;
      } else {
        return false;
      }
    }
    while (pi < p.size() && p[pi] == '*') {
      ++pi;
    }
    return pi == p.size();
  };
  return glob(pattern, name) || glob(pattern + ".*", name);
}

void LoadReport::print(std::ostream& out) const {
  out << "init_from " << source << ": " << loaded.size() << " loaded, "
      << missing.size() << " missing, " << unexpected.size() << " unexpected, "
      << mismatched.size() << " of another shape, " << skipped.size()
      << " skipped, " << ignored.size() << " ignored";
  if (!renamed.empty()) {
    out << " (names: " << renamed << ")";
  }
  out << "\n";
  const auto rows = [&](const char* label,
                        const std::vector<std::string>& names,
                        const char* note) {
    constexpr size_t kShown = 8;
    for (size_t i = 0; i < names.size() && i < kShown; ++i) {
      out << "  " << label << names[i] << note << "\n";
    }
    if (names.size() > kShown) {
      out << "  " << label << "... " << names.size() - kShown << " more\n";
    }
  };
  for (const Mismatch& m : mismatched) {
    out << "  another shape  " << m.name << ": " << shape_text(m.file_shape);
    if (m.file_dtype != m.model_dtype) {
      out << " " << c10::toString(m.file_dtype);
    }
    out << " in the file, " << shape_text(m.model_shape);
    if (m.file_dtype != m.model_dtype) {
      out << " " << c10::toString(m.model_dtype);
    }
    out << " in the model (kept as initialised)\n";
  }
  rows("missing        ", missing, " (kept as initialised)");
  rows("unexpected     ", unexpected, " (not used)");
  rows("skipped        ", skipped, " (kept as initialised)");
  rows("ignored        ", ignored, "");
}

LoadReport load_weights(
    torch::nn::Module& module,
    const NamedTensors& weights,
    const std::string& weights_source,
    const LoadOptions& options) {
  const NamedTensors model = state_dict(module);
  std::map<std::string, at::Tensor> targets;
  std::vector<std::string> model_names;
  for (const auto& [name, tensor] : model.tensors) {
    targets.emplace(name, tensor);
    model_names.push_back(name);
  }
  std::vector<std::string> file_names;
  for (const auto& [name, tensor] : weights.tensors) {
    file_names.push_back(name);
  }
  // The renaming that matches most names.
  const std::string file_prefix = shared_prefix(file_names);
  const std::string& model_prefix = options.model_prefix();
  struct Renaming {
    std::string strip, add;
  };
  std::vector<Renaming> renamings = {{"", ""}};
  if (!file_prefix.empty()) {
    renamings.push_back({file_prefix, ""});
  }
  if (!model_prefix.empty()) {
    renamings.push_back({"", model_prefix});
    if (!file_prefix.empty()) {
      renamings.push_back({file_prefix, model_prefix});
    }
  }
  const auto rename = [](const Renaming& r, const std::string& name) {
    return r.add + name.substr(r.strip.size());
  };
  Renaming best = renamings.front();
  size_t best_matches = 0;
  for (const Renaming& r : renamings) {
    size_t matches = 0;
    for (const std::string& name : file_names) {
      matches += targets.count(rename(r, name));
    }
    if (matches > best_matches) {
      best = r;
      best_matches = matches;
    }
  }
  LoadReport report;
  report.source = weights_source;
  if (!best.strip.empty() || !best.add.empty()) {
    report.renamed = best.strip.empty() ? "" : "'" + best.strip + "' removed";
    if (!best.add.empty()) {
      report.renamed +=
          str_cat(report.renamed.empty() ? "" : ", ", "'", best.add, "' added");
    }
  }
  const auto user_name = [&](const std::string& name) {
    return name.substr(
        name.compare(0, model_prefix.size(), model_prefix) == 0
            ? model_prefix.size()
            : 0);
  };
  const auto skipped = [&](const std::string& name) {
    for (const std::string& pattern : options.skip()) {
      if (name_matches(pattern, user_name(name))) {
        return true;
      }
    }
    return false;
  };
  // The file's tensors by model name.
  std::map<std::string, at::Tensor> by_model_name;
  for (const auto& [name, tensor] : weights.tensors) {
    by_model_name[rename(best, name)] = tensor;
  }
  std::vector<std::pair<at::Tensor, at::Tensor>> copies;
  std::set<std::string> used;
  for (const auto& [name, tensor] : weights.tensors) {
    const std::string target_name = rename(best, name);
    const auto target = targets.find(target_name);
    if (target == targets.end()) {
      const std::string prefix = best.add;
      const auto wte = by_model_name.find(prefix + "transformer.wte.weight");
      const bool tied_head =
          target_name == prefix + "lm_head.weight" &&
          targets.count(prefix + "transformer.wte.weight") != 0 &&
          wte != by_model_name.end() && wte->second.sizes() == tensor.sizes() &&
          at::equal(wte->second, tensor);
      if (tied_head || is_mask_buffer(target_name, tensor)) {
        report.ignored.push_back(user_name(target_name));
      } else {
        report.unexpected.push_back(name);
      }
      continue;
    }
    used.insert(target_name);
    if (skipped(target_name)) {
      report.skipped.push_back(user_name(target_name));
      continue;
    }
    const at::Tensor& to = target->second;
    const bool castable = tensor.scalar_type() == to.scalar_type() ||
                          (at::isFloatingType(tensor.scalar_type()) &&
                           at::isFloatingType(to.scalar_type()));
    if (tensor.sizes() != to.sizes() || !castable) {
      report.mismatched.push_back(
          {user_name(target_name),
           tensor.sizes().vec(),
           to.sizes().vec(),
           tensor.scalar_type(),
           to.scalar_type()});
      continue;
    }
    report.loaded.push_back(user_name(target_name));
    copies.emplace_back(to, tensor);
  }
  for (const std::string& name : model_names) {
    if (used.count(name) == 0) {
      if (skipped(name)) {
        report.skipped.push_back(user_name(name));
      } else {
        report.missing.push_back(user_name(name));
      }
    }
  }
  if (options.strict() && !report.complete()) {
    std::string what;
    const auto part = [&](const std::string& text) {
      what += (what.empty() ? "" : "; ") + text;
    };
    if (!report.missing.empty()) {
      part(str_cat(
          report.missing.size(),
          " of the model's entries missing (",
          first_names(report.missing),
          ")"));
    }
    if (!report.unexpected.empty()) {
      part(str_cat(
          report.unexpected.size(),
          " unexpected (",
          first_names(report.unexpected),
          ")"));
    }
    if (!report.mismatched.empty()) {
      const LoadReport::Mismatch& m = report.mismatched.front();
      part(str_cat(
          report.mismatched.size(),
          " of another shape or dtype ('",
          m.name,
          "' is ",
          shape_text(m.file_shape),
          " ",
          c10::toString(m.file_dtype),
          " in the file, ",
          shape_text(m.model_shape),
          " ",
          c10::toString(m.model_dtype),
          " in the model)"));
    }
    throw Error(str_cat(
        weights_source,
        ": does not match the model: ",
        what,
        report.loaded.empty() ? " (a file of another model?)" : ""));
  }
  torch::NoGradGuard no_grad;
  for (auto& [to, from] : copies) {
    to.copy_(from);
  }
  return report;
}

std::vector<std::string> freeze_parameters(
    torch::nn::Module& module,
    const std::vector<std::string>& patterns,
    const std::string& model_prefix) {
  const auto drop = [&](const std::string& name) {
    return name.compare(0, model_prefix.size(), model_prefix) == 0
               ? name.substr(model_prefix.size())
               : name;
  };
  std::vector<std::string> names;
  for (const auto& p : module.named_parameters()) {
    names.push_back(drop(p.key()));
  }
  std::vector<std::string> frozen;
  for (const std::string& pattern : patterns) {
    bool any = false;
    for (auto& p : module.named_parameters()) {
      const std::string name = drop(p.key());
      if (name_matches(pattern, name)) {
        if (p.value().requires_grad()) {
          p.value().set_requires_grad(false);
          frozen.push_back(name);
        }
        any = true;
      }
    }
    HOTLOOP_CHECK_AS(
        ConfigError,
        any,
        "model.freeze: '",
        pattern,
        "' matches no parameter (they are named like ",
        first_names(names),
        ")");
  }
  return frozen;
}

} // namespace hotloop::interop
