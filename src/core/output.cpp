#include "core/output.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <regex>
#include <streambuf>
#include <vector>

#include "core/error.h"

namespace ringside::output {

namespace fs = std::filesystem;

namespace {

// What a path names, for writing.
enum class Kind { absent, regular, through, standard_output, refused };

struct Target {
  Kind kind;
  std::string why;  // for refused
};

bool names_standard_output(const std::string& path) {
  const std::string p = fs::path(path).lexically_normal().string();
  return p == "/dev/stdout" || p == "/dev/fd/1" || p == "/proc/self/fd/1";
}

// /dev/stderr, /dev/fd/3, /proc/self/fd/N: names of a process's open files, written through
// even when they lead to a regular file (replacing that file would cut the shell's stream off).
// Other regular files under /dev (/dev/shm/x.json) are files like any other.
bool names_open_file(const std::string& path) {
  std::error_code ec;
  const std::string p = fs::absolute(path, ec).lexically_normal().string();
  static const std::regex open_file(R"(/dev/(stdin|stdout|stderr|fd/[0-9]+)|/proc/(self|thread-self|[0-9]+)/fd/[0-9]+)");
  return !ec && std::regex_match(p, open_file);
}

Target classify(const std::string& path) {
  if (names_standard_output(path)) return {Kind::standard_output, ""};
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return {Kind::absent, ""};
    return {Kind::refused, std::strerror(errno)};
  }
  if (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)) return {Kind::through, ""};
  if (S_ISREG(st.st_mode)) return {names_open_file(path) ? Kind::through : Kind::regular, ""};
  const char* what = S_ISDIR(st.st_mode)    ? "it is a directory"
                     : S_ISSOCK(st.st_mode) ? "it is a socket"
                     : S_ISBLK(st.st_mode)  ? "it is a block device"
                                            : "it is not a regular file";
  return {Kind::refused, std::string(what) + " (ringside writes regular files, and through character devices and pipes)"};
}

// The file a regular output replaces: symlinks followed (the link stays, its target is
// replaced, as a shell redirection writes through it), `.` and `..` resolved.
fs::path real_path(const std::string& path) {
  std::error_code ec;
  const fs::path p = fs::absolute(path, ec);
  if (ec) return fs::path(path);
  const fs::path c = fs::weakly_canonical(p, ec);
  return ec ? p.lexically_normal() : c;
}

size_t name_max(const fs::path& dir) {
  const long n = ::pathconf(dir.c_str(), _PC_NAME_MAX);
  return n > 0 ? size_t(n) : 255;
}

// NAME.XXXXXX.partial beside `real`; NAME is cut so that the whole fits the file system's limit.
constexpr const char* kTempSuffix = ".XXXXXX.partial";
constexpr int kPartialLength = 8;  // ".partial", after the six random characters

std::string temp_template(const fs::path& real) {
  std::string base = real.filename().string();
  const size_t limit = name_max(real.parent_path()), suffix = std::strlen(kTempSuffix);
  if (base.size() + suffix > limit) base.resize(limit > suffix ? limit - suffix : 0);
  return (real.parent_path() / (base + kTempSuffix)).string();
}

// A unique temporary from the template (mkostemps fills the X's); -1 and errno on failure.
int make_temp(std::string& name) { return ::mkostemps(name.data(), kPartialLength, O_CLOEXEC); }

mode_t process_umask() {
  static const mode_t mask = [] {
    const mode_t m = ::umask(0);
    ::umask(m);
    return m;
  }();
  return mask;
}

// Standard output once the report has moved to stderr (-1: it has not).
std::mutex g_stdout_mu;
int g_stdout_fd = -1;

void move_report_to_stderr() {
  std::lock_guard lock(g_stdout_mu);
  if (g_stdout_fd >= 0) return;
  std::fflush(stdout);
  std::cout.flush();
  g_stdout_fd = ::fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 3);
  if (g_stdout_fd >= 0) ::dup2(STDERR_FILENO, STDOUT_FILENO);
}

int standard_output_fd() {
  std::lock_guard lock(g_stdout_mu);
  return g_stdout_fd >= 0 ? g_stdout_fd : STDOUT_FILENO;
}

// A stream buffer over a file descriptor that keeps the first write error (an errno).
class FdBuf : public std::streambuf {
 public:
  explicit FdBuf(int fd) : fd_(fd), buf_(1 << 16) { setp(buf_.data(), buf_.data() + buf_.size()); }
  int error() const { return error_; }

 protected:
  int_type overflow(int_type c) override {
    if (!drain()) return traits_type::eof();
    if (!traits_type::eq_int_type(c, traits_type::eof())) {
      *pptr() = traits_type::to_char_type(c);
      pbump(1);
    }
    return traits_type::not_eof(c);
  }
  int sync() override { return drain() ? 0 : -1; }

 private:
  bool drain() {
    const char* p = pbase();
    size_t n = size_t(pptr() - pbase());
    while (n > 0 && error_ == 0) {
      const ssize_t w = ::write(fd_, p, n);
      if (w < 0) {
        if (errno != EINTR) error_ = errno;
        continue;
      }
      p += w, n -= size_t(w);
    }
    setp(buf_.data(), buf_.data() + buf_.size());
    return error_ == 0;
  }
  int fd_;
  std::vector<char> buf_;
  int error_ = 0;
};

// Runs `fill` into fd; returns 0 or the first write error.
int fill_fd(int fd, const std::function<void(std::ostream&)>& fill) {
  FdBuf buf(fd);
  std::ostream os(&buf);
  fill(os);
  os.flush();
  return buf.error();
}

// A file-size limit (ulimit -f) fails the write with EFBIG, as a full disk does, rather than
// killing the process with SIGXFSZ halfway through a file.
void fail_writes_past_size_limit() {
  static std::once_flag once;
  std::call_once(once, [] { std::signal(SIGXFSZ, SIG_IGN); });
}

}  // namespace

void check(const std::string& path, const std::string& option) {
  auto refusal = [&](const std::string& why) { return ConfigError(option + ": cannot write " + path + ": " + why); };
  if (path.empty()) throw ConfigError(option + " needs a file name");
  const Target t = classify(path);
  switch (t.kind) {
    case Kind::refused: throw refusal(t.why);
    case Kind::standard_output: move_report_to_stderr(); return;
    case Kind::through:
      if (::access(path.c_str(), W_OK) != 0) throw refusal(std::strerror(errno));
      return;
    case Kind::regular:
      if (::access(path.c_str(), W_OK) != 0) throw refusal(std::strerror(errno));
      [[fallthrough]];
    case Kind::absent: {
      const fs::path real = real_path(path), dir = real.parent_path();
      const std::string name = real.filename().string();
      if (name.empty() || name == "." || name == "..") throw refusal("not a file name");
      struct stat st {};
      if (::stat(dir.c_str(), &st) != 0)
        throw refusal("the directory " + dir.string() + (errno == ENOENT ? " does not exist" : ": " + std::string(std::strerror(errno))));
      if (!S_ISDIR(st.st_mode)) throw refusal(dir.string() + " is not a directory");
      // The temporary is the file actually written: prove it can be made, then remove it.
      std::string temp = temp_template(real);
      const int fd = make_temp(temp);
      if (fd < 0) throw refusal("cannot create a file in " + dir.string() + ": " + std::strerror(errno));
      ::close(fd);
      ::unlink(temp.c_str());
      return;
    }
  }
}

bool written_through(const std::string& path) {
  const Kind k = classify(path).kind;
  return k == Kind::through || k == Kind::standard_output;
}

void write_with(const std::string& path, const std::function<void(std::ostream&)>& fill, const std::string& option) {
  fail_writes_past_size_limit();
  auto failure = [&](const std::string& why) { return Error(option + ": cannot write " + path + ": " + why); };
  const Target t = classify(path);
  if (t.kind == Kind::refused) throw failure(t.why);
  if (t.kind == Kind::standard_output) {
    if (const int err = fill_fd(standard_output_fd(), fill)) throw failure(std::strerror(err));
    return;
  }
  if (t.kind == Kind::through) {
    // As `>>` would: a device or pipe does not care, a file behind /dev/fd keeps what it has.
    const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
    if (fd < 0) throw failure(std::strerror(errno));
    int err = 0;
    try {
      err = fill_fd(fd, fill);
    } catch (...) {
      ::close(fd);
      throw;
    }
    if (::close(fd) != 0 && err == 0) err = errno;
    if (err) throw failure(std::strerror(err));
    return;
  }
  // A regular file, or none yet: a temporary of our own, renamed over the name once whole.
  const fs::path real = real_path(path);
  std::string temp = temp_template(real);
  struct Temporary {
    std::string name;
    int fd;
    bool kept = false;
    ~Temporary() {
      if (fd >= 0) ::close(fd);
      if (!kept) ::unlink(name.c_str());
    }
  };
  const int fd = make_temp(temp);
  if (fd < 0) throw failure("cannot create " + temp + ": " + std::strerror(errno));
  Temporary tmp{temp, fd};
  if (const int err = fill_fd(tmp.fd, fill)) throw failure(std::strerror(err));
  // The replaced file's mode and owner carry over; a new file gets 0666 less the umask.
  struct stat old {};
  if (t.kind == Kind::regular && ::stat(real.c_str(), &old) == 0) {
    ::fchmod(tmp.fd, old.st_mode & 07777);
    if (::fchown(tmp.fd, old.st_uid, old.st_gid) != 0) {
      // Only root may give a file away; anyone else's copy is theirs, as a new file would be.
    }
  } else {
    ::fchmod(tmp.fd, 0666 & ~process_umask());
  }
  if (::fsync(tmp.fd) != 0) throw failure(std::strerror(errno));
  const int closed = ::close(tmp.fd);
  tmp.fd = -1;
  if (closed != 0) throw failure(std::strerror(errno));
  if (::rename(temp.c_str(), real.c_str()) != 0) throw failure(std::strerror(errno));
  tmp.kept = true;
}

void write(const std::string& path, std::string_view text, const std::string& option) {
  write_with(path, [&](std::ostream& os) { os.write(text.data(), std::streamsize(text.size())); }, option);
}

bool same_file(const std::string& a, const std::string& b) {
  struct stat sa {}, sb {};
  const bool a_exists = ::stat(a.c_str(), &sa) == 0, b_exists = ::stat(b.c_str(), &sb) == 0;
  if (a_exists && b_exists) return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
  if (a_exists != b_exists) return false;
  return real_path(a) == real_path(b);
}

void check_distinct(const std::vector<Named>& outputs, const std::vector<Named>& inputs) {
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Named& o = outputs[i];
    if (o.path.empty() || written_through(o.path)) continue;
    for (size_t j = i + 1; j < outputs.size(); ++j)
      if (!outputs[j].path.empty() && same_file(o.path, outputs[j].path))
        throw ConfigError(o.option + " " + o.path + " and " + outputs[j].option + " " + outputs[j].path +
                          " name the same file: give each its own");
    for (const Named& in : inputs)
      if (!in.path.empty() && same_file(o.path, in.path))
        throw ConfigError(o.option + " " + o.path + " would replace the input " +
                          (in.option.empty() ? std::string() : in.option + " ") + in.path);
  }
}

}  // namespace ringside::output
