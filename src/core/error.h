// Errors: one exception type for everything ringside rejects, so that the CLI (and, later,
// every rank) can print one clear line naming what went wrong.
#pragma once
#include <cctype>
#include <sstream>
#include <stdexcept>
#include <string>

namespace ringside {

/// Any error ringside raises: bad configuration, bad file, shape mismatch.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// An invalid LayerConfig or command-line configuration. Raised before any work starts.
class ConfigError : public Error {
 public:
  using Error::Error;
  /// Under mpirun every rank throws it and one says it: this one (cli: checked_on_every_rank).
  ConfigError(const std::string& what, int reporting_rank) : Error(what), reporting_rank(reporting_rank) {}
  int reporting_rank = 0;
};

namespace detail {
template <class... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

/// Text a user typed as an error message quotes it: on one printable line (control bytes as
/// '?'), whole up to `max` characters, else its start and its length.
inline std::string shown_input(const std::string& text, size_t max = 40) {
  std::string out;
  for (char ch : text.substr(0, max)) out += std::isprint(static_cast<unsigned char>(ch)) ? ch : '?';
  return text.size() <= max ? out : out + "... (" + std::to_string(text.size()) + " characters)";
}
}  // namespace detail

}  // namespace ringside

/// RS_CHECK(cond, message parts...): throws ringside::Error with the parts streamed together.
#define RS_CHECK(cond, ...)                                                   \
  do {                                                                        \
    if (!(cond)) throw ::ringside::Error(::ringside::detail::concat(__VA_ARGS__)); \
  } while (0)
