#include "hotloop/core/error.h"

#include <c10/util/Exception.h>

namespace hotloop::detail {

std::string message_of(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const c10::Error& e) {
    const std::string text = e.what_without_backtrace();
    return text.substr(0, text.find('\n'));
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown exception";
  }
}

} // namespace hotloop::detail
