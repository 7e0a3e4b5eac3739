#pragma once

#include "hotloop/data/dataset.h"

#include <torch/arg.h>

#include <cstdint>
#include <optional>
#include <string>

namespace hotloop::data {

/// How to cut a token file into training windows.
struct TokenDatasetOptions {
  /* implicit */ TokenDatasetOptions(int64_t context) : context_(context) {}

  /// Tokens per sample (the model's sequence length).
  TORCH_ARG(int64_t, context);
  /// Tokens between the starts of consecutive windows; nullopt: `context`
  /// (windows that do not overlap).
  TORCH_ARG(std::optional<int64_t>, stride);
  /// Bytes per token: 1 (the byte-level tokenizer: any file's bytes are its
  /// tokens, vocabulary 256), 2 (uint16, as nanoGPT and llm.c write) or 4
  /// (uint32).
  TORCH_ARG(int64_t, token_bytes) = 2;
  /// Token ids must be below this; 0 leaves them unchecked. Checked as
  /// windows are read, not when the file is opened.
  TORCH_ARG(int64_t, vocab_size) = 0;
};

/// A flat file of little-endian token ids (nanoGPT's `train.bin`), or any
/// file read byte by byte (token_bytes 1), mapped into memory read-only,
/// read as next-token-prediction windows.
///
/// Sample i is the `context + 1` tokens starting at token `i * stride`:
/// input = its first `context` tokens, target = its last `context`.
///
/// Owns the mapping (unmapped by the destructor), so it cannot be copied.
/// `get` and `get_batch` only read it, so any number of threads may call
/// them at once.
class TokenDataset : public Dataset {
 public:
  /// Throws ConfigError naming the option for a non-positive context or
  /// stride, a token_bytes other than 2 or 4, or a negative vocab_size;
  /// DataError naming `path` for a missing or unreadable file, a size that
  /// is not a multiple of token_bytes, or fewer than context + 1 tokens.
  TokenDataset(const std::string& path, TokenDatasetOptions options);
  ~TokenDataset() override;
  TokenDataset(const TokenDataset&) = delete;
  TokenDataset& operator=(const TokenDataset&) = delete;

  /// Number of whole windows: (num_tokens - context - 1) / stride + 1.
  int64_t size() const override;
  SampleSpec spec() const override;
  /// input: [context] int64; target: [context] int64, the input shifted by
  /// one token. Throws DataError naming the file and token offset for a
  /// token id >= vocab_size.
  Example get(int64_t index, const SampleContext& context) const override;
  /// out.input, out.target: [B, context] int64. Throws like `get`.
  void get_batch(
      c10::ArrayRef<int64_t> indices,
      const SampleContext& context,
      Batch& out) const override;

  /// Tokens in the file.
  int64_t num_tokens() const {
    return num_tokens_;
  }
  const TokenDatasetOptions& options() const {
    return options_;
  }

 private:
  // Writes window `index`'s input and target (each `context` tokens).
  void read_window(int64_t index, int64_t* input, int64_t* target) const;

  std::string path_;
  TokenDatasetOptions options_;
  int64_t stride_ = 0;
  int64_t num_tokens_ = 0;
  const uint8_t* data_ = nullptr;
  size_t mapped_bytes_ = 0;
};

} // namespace hotloop::data
