#include "hotloop/compress/pruning_amount.h"

#include "hotloop/core/error.h"

#include <cfenv>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>

namespace hotloop::compress {

PruningAmount PruningAmount::fraction(double fraction) {
  HOTLOOP_CHECK_AS(
      ConfigError,
      std::isfinite(fraction) && fraction >= 0.0 && fraction <= 1.0,
      "amount=",
      fraction,
      " should either be a float in the range [0, 1] or a non-negative "
      "integer");
  return PruningAmount(true, fraction);
}

PruningAmount PruningAmount::count(int64_t count) {
  HOTLOOP_CHECK_AS(
      ConfigError,
      count >= 0,
      "amount=",
      count,
      " should either be a float in the range [0, 1] or a non-negative "
      "integer");
  return PruningAmount(false, static_cast<double>(count));
}

PruningAmount PruningAmount::parse(
    const std::string& text, const std::string& what) {
  const bool integer =
      !text.empty() &&
      text.find_first_not_of("+-0123456789") == std::string::npos &&
      text.find_first_of("0123456789") != std::string::npos;
  try {
    if (integer) {
      int64_t value = 0;
      const char* begin = text.c_str() + (text[0] == '+' ? 1 : 0);
      const auto [end, error] =
          std::from_chars(begin, text.c_str() + text.size(), value);
      HOTLOOP_CHECK_AS(
          ConfigError,
          error == std::errc() && end == text.c_str() + text.size(),
          "not a whole number");
      return count(value);
    }
    char* end = nullptr;
    const double value = std::strtod(text.c_str(), &end);
    HOTLOOP_CHECK_AS(
        ConfigError,
        !text.empty() && end == text.c_str() + text.size() &&
            std::isfinite(value),
        "expected a fraction such as 0.5 or a count such as 10");
    return fraction(value);
  } catch (const ConfigError& e) {
    throw ConfigError(hotloop::detail::str_cat(
        what,
        ": '",
        text,
        "': ",
        e.what(),
        " (a fraction has a point: 1.0 prunes everything, 1 one unit)"));
  }
}

int64_t PruningAmount::of(int64_t units, const std::string& what) const {
  if (!fraction_) {
    const auto n = static_cast<int64_t>(value_);
    HOTLOOP_CHECK_AS(
        ConfigError,
        n <= units,
        what,
        ": amount=",
        n,
        " should be smaller than the number of parameters to prune=",
        units);
    return n;
  }
  // Python's round(): to the nearest, ties to even, which is the default
  // floating-point rounding mode that nearbyint follows.
  const int mode = std::fegetround();
  std::fesetround(FE_TONEAREST);
  const double rounded = std::nearbyint(value_ * static_cast<double>(units));
  std::fesetround(mode);
  return static_cast<int64_t>(rounded);
}

std::string PruningAmount::str() const {
  if (!fraction_) {
    return std::to_string(static_cast<int64_t>(value_));
  }
  // Python's repr of a float: the shortest text that reads back, with a
  // point.
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof(buffer), value_);
  std::string text(buffer, result.ptr);
  if (text.find_first_of(".e") == std::string::npos) {
    text += ".0";
  }
  return text;
}

} // namespace hotloop::compress
