#pragma once

#include <string>

namespace hotloop::log::detail {

/// `text` with & < > " ' replaced by entities: safe as HTML or SVG text and
/// inside a quoted attribute.
std::string html_escape(const std::string& text);

/// `value` for a table cell: whole numbers without a fraction (`3525`), the
/// rest with 6 significant digits (`0.192083`, `1e-05`); `nan`, `inf`,
/// `-inf` as such.
std::string format_number(double value);

/// Seconds as a duration a person reads: `42.1 s`, `2 min 44 s`,
/// `3 h 05 min`.
std::string format_duration(double seconds);

} // namespace hotloop::log::detail
