#pragma once

#include <cstdint>
#include <exception>
#include <filesystem>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace hotloop {

/// Base of every error a user can cause (bad file, bad option, bad config).
/// `what()` is one line that names the file, key or option and what was
/// expected, so the CLI can print it as is.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

/// A config file, config key or command-line option is invalid.
class ConfigError : public Error {
 public:
  using Error::Error;
};

/// A dataset file or folder is missing, truncated or malformed.
class DataError : public Error {
 public:
  using Error::Error;
};

/// The processes of a distributed run cannot reach each other, disagree,
/// or one of them failed or left.
class DistError : public Error {
 public:
  using Error::Error;
};

namespace detail {
template <typename... Args>
std::string str_cat(Args&&... args) {
  std::ostringstream out;
  (out << ... << std::forward<Args>(args));
  return out.str();
}

/// `n` and the noun, singular for one: "1 epoch", "3 epochs"; `plural`
/// where it is not the noun and an s ("batches").
inline std::string counted(
    int64_t n, const std::string& noun, const std::string& plural = "") {
  return std::to_string(n) + " " +
         (n == 1           ? noun
          : plural.empty() ? noun + "s"
                           : plural);
}
} // namespace detail

} // namespace hotloop

/// Throws `ErrorType` with the concatenated message when `cond` is false:
/// `HOTLOOP_CHECK_AS(DataError, n > 0, path, ": expected ...")`.
#define HOTLOOP_CHECK_AS(ErrorType, cond, ...)                             \
  do {                                                                     \
    if (!(cond)) {                                                         \
      throw ::hotloop::ErrorType(::hotloop::detail::str_cat(__VA_ARGS__)); \
    }                                                                      \
  } while (false)

/// `HOTLOOP_CHECK_AS(Error, ...)`.
#define HOTLOOP_CHECK(cond, ...) HOTLOOP_CHECK_AS(Error, cond, __VA_ARGS__)

namespace hotloop::detail {
/// The first line of `error`'s message (a c10::Error's without its
/// backtrace), to pass it on inside another error's message.
std::string message_of(const std::exception_ptr& error);

/// Throws DataError `<path>: no such file` unless `path` is a regular file.
inline void require_file(const std::string& path) {
  std::error_code ec;
  HOTLOOP_CHECK_AS(
      DataError,
      std::filesystem::is_regular_file(path, ec),
      path,
      ": no such file");
}
} // namespace hotloop::detail
