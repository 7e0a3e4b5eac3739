#pragma once

#include <string>
#include <vector>

namespace hotloop::log {

/// A CSV field as RFC 4180 writes it: quoted when it holds a comma, a quote
/// or a line break, quotes doubled.
std::string csv_field(const std::string& text);

/// Splits one CSV line into its fields. A field may be double-quoted so
/// that it can hold commas, with "" standing for a quote (what csv_field
/// and Python's csv module write). Returns false on an unterminated quote.
bool split_csv_line(const std::string& line, std::vector<std::string>* fields);

} // namespace hotloop::log
