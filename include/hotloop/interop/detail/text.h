#pragma once

#include <string>

namespace hotloop::interop::detail {

/// Text taken from a file (a tensor's name, a dtype, a class name) for a
/// one-line message: control characters (a newline too) shown as '?', cut
/// after `limit` bytes.
inline std::string printable(std::string text, size_t limit = 200) {
  if (text.size() > limit) {
    text = text.substr(0, limit) + "...";
  }
  for (char& c : text) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      c = '?';
    }
  }
  return text;
}

} // namespace hotloop::interop::detail
