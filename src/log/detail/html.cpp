#include "hotloop/log/detail/html.h"

#include <cmath>
#include <cstdio>

namespace hotloop::log::detail {

std::string html_escape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string format_number(double value) {
  if (std::isnan(value)) {
    return "nan";
  }
  if (std::isinf(value)) {
    return value > 0 ? "inf" : "-inf";
  }
  char buffer[32];
  if (value == std::floor(value) && std::abs(value) < 1e15) {
    std::snprintf(buffer, sizeof(buffer), "%.0f", value);
  } else {
    std::snprintf(buffer, sizeof(buffer), "%.6g", value);
  }
  return buffer;
}

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) {
    return format_number(seconds) + " s";
  }
  char buffer[64];
  const long long whole = std::llround(seconds);
  if (seconds < 60) {
    std::snprintf(buffer, sizeof(buffer), "%.1f s", seconds);
  } else if (whole < 3600) {
    std::snprintf(
        buffer, sizeof(buffer), "%lld min %02lld s", whole / 60, whole % 60);
  } else {
    std::snprintf(
        buffer,
        sizeof(buffer),
        "%lld h %02lld min",
        whole / 3600,
        whole / 60 % 60);
  }
  return buffer;
}

} // namespace hotloop::log::detail
