#pragma once

#include <cstdint>
#include <string>

namespace hotloop::compress {

/// How much one pruning call removes: torch.nn.utils.prune's `amount`,
/// either a fraction of the units (entries, or channels for a structured
/// method) still alive, or a count of them. Python tells the two apart by
/// type (0.5 vs 5, and 1.0 vs 1); here the factory says which.
class PruningAmount {
 public:
  /// A fraction in [0, 1]: round(fraction * units) units, rounded half to
  /// even as Python's round (0.25 of 6 is 2, 0.75 of 6 is 4). Throws
  /// ConfigError for anything outside [0, 1] or not finite.
  static PruningAmount fraction(double fraction);
  /// `count` units (>= 0); throws ConfigError for a negative count.
  static PruningAmount count(int64_t count);
  /// Parses `text` as Python would read the literal: digits only is a
  /// count ("5"), a number with a point or an exponent a fraction ("0.5",
  /// "1.0", "5e-1"). Throws ConfigError naming `what` (a key such as
  /// `pruning.amount`) for anything else or a value out of range.
  static PruningAmount parse(const std::string& text, const std::string& what);

  bool is_fraction() const {
    return fraction_;
  }
  /// The fraction, or the count as a double.
  double value() const {
    return value_;
  }
  /// True for a fraction of 0 or a count of 0 (Lightning skips such a
  /// pruning).
  bool is_zero() const {
    return value_ == 0;
  }

  /// The units to prune out of `units`: the count, or the rounded fraction
  /// (PyTorch's _compute_nparams_toprune). Throws ConfigError naming
  /// `what` when a count exceeds `units` (PyTorch's "amount=N should be
  /// smaller than the number of parameters to prune=M").
  int64_t of(int64_t units, const std::string& what) const;

  /// As Python prints the literal: "0.5", "1.0", "5".
  std::string str() const;

 private:
  PruningAmount(bool fraction, double value)
      : fraction_(fraction), value_(value) {}
  bool fraction_ = true;
  double value_ = 0;
};

} // namespace hotloop::compress
