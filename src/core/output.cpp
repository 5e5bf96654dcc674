#include "core/output.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <dirent.h>
#include <pthread.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cerrno>
#include <climits>
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
  fs::path real;    // for regular and absent: the name a rename replaces
  bool device = false;  // a character device (several outputs may share one: /dev/null)
};

// An open file's name: /proc/PID/fd/N (or /proc/PID/task/TID/fd/N), as /dev/stdout,
// /dev/stderr, /dev/fd/N and /proc/self/fd/N resolve. A handle, not a path: written through.
// Returns the fd number, or -1; `own` says whether PID is this process.
int open_file_fd(const fs::path& p, bool& own) {
  static const std::regex fd_name(R"(/proc/([0-9]+)(/task/[0-9]+)?/fd/([0-9]+))");
  std::smatch m;
  const std::string s = p.string();
  // Such a name is short; a long one is not one (and std::regex recurses once per character).
  if (s.size() > 64 || !std::regex_match(s, m, fd_name)) return -1;
  own = std::stol(m[1]) == long(::getpid());
  return std::stoi(m[3]);
}

// The names a path reaches through its symlinks, one link at a time, each with its parent
// resolved: `so` -> /dev/stdout gives [/tmp/so, /dev/stdout, /proc/1234/fd/1]. It stops at an
// open file's name, or at a name that is not a symlink (which may not exist yet: a dangling
// link's target is where its output goes, as a shell redirection would put it).
std::vector<fs::path> link_chain(const std::string& path) {
  std::vector<fs::path> chain;
  std::error_code ec;
  fs::path p = fs::absolute(path, ec);
  if (ec) return {fs::path(path)};
  for (int hops = 0; hops < 40; ++hops) {
    fs::path parent = fs::weakly_canonical(p.parent_path(), ec);
    if (ec) parent = p.parent_path().lexically_normal();
    const fs::path name = p.filename();
    p = name.empty() || name == "." || name == ".." ? (parent / name).lexically_normal() : parent / name;
    chain.push_back(p);
    bool own = false;
    struct stat st {};
    if (open_file_fd(p, own) >= 0 || ::lstat(p.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) break;
    const fs::path target = fs::read_symlink(p, ec);
    if (ec) break;
    p = target.is_absolute() ? target : parent / target;
  }
  return chain;
}

bool same_identity(const struct stat& a, const struct stat& b) { return a.st_dev == b.st_dev && a.st_ino == b.st_ino; }

Target classify(const std::string& path) {
  const std::vector<fs::path> chain = link_chain(path);
  bool own = false;
  const int fd = open_file_fd(chain.back(), own);
  struct stat st {}, out {};
  const bool exists = ::stat(path.c_str(), &st) == 0;
  const int stat_errno = errno;
  // Standard output by any name (so -> /dev/stdout, /proc/self/fd/1), or the very file or
  // pipe it is (not a device: `--json /dev/null > /dev/null` is not an output to stdout).
  if ((own && fd == 1) || (exists && !S_ISCHR(st.st_mode) && ::fstat(STDOUT_FILENO, &out) == 0 && same_identity(st, out)))
    return {Kind::standard_output, "", {}, exists && S_ISCHR(st.st_mode)};
  if (!exists) {
    if (stat_errno == ENOENT && fd < 0) return {Kind::absent, "", chain.back()};
    return {Kind::refused, std::strerror(stat_errno), {}};
  }
  if (fd >= 0 || S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)) return {Kind::through, "", {}, S_ISCHR(st.st_mode)};
  if (S_ISREG(st.st_mode)) return {Kind::regular, "", chain.back()};
  const char* what = S_ISDIR(st.st_mode)    ? "it is a directory"
                     : S_ISSOCK(st.st_mode) ? "it is a socket"
                     : S_ISBLK(st.st_mode)  ? "it is a block device"
                                            : "it is not a regular file";
  return {Kind::refused, std::string(what) + " (ringside writes regular files, and through character devices and pipes)", {}};
}

// The file a path names for comparing outputs and inputs: through its symlinks, `.` and `..`.
fs::path real_path(const std::string& path) { return link_chain(path).back(); }

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

// fill_fd into a pipe, a FIFO or a device: with SIGPIPE held for this thread, a reader that
// goes away early makes the write fail with EPIPE, an error naming the output, instead of
// ending the process without a word (exit 141). The signal then pending is taken.
int fill_through(int fd, const std::function<void(std::ostream&)>& fill) {
  sigset_t pipe_signal;
  sigemptyset(&pipe_signal);
  sigaddset(&pipe_signal, SIGPIPE);
  struct Held {
    sigset_t previous;
    explicit Held(const sigset_t& s) { ::pthread_sigmask(SIG_BLOCK, &s, &previous); }
    ~Held() { ::pthread_sigmask(SIG_SETMASK, &previous, nullptr); }
  } held(pipe_signal);
  const int err = fill_fd(fd, fill);
  if (err == EPIPE) {
    const struct timespec now {};
    while (::sigtimedwait(&pipe_signal, nullptr, &now) == SIGPIPE) {
    }
  }
  return err;
}

// The signals whose default action ends the process (signal(7)'s "Term" and "Core"), but for
// SIGKILL, which no process can catch, and SIGXFSZ, which prepare_signals ignores; `fault`: raised
// by the thread's own instruction or abort(), which can be caught but not held off. Each removes
// the temporaries before the process ends as it would have. The real-time signals, whose default
// ends the process too, are SIGRTMIN to SIGRTMAX (not constants): for_each_ending_signal.
struct EndingSignal {
  int sig;
  bool fault;
};
constexpr EndingSignal kEndingSignals[] = {
    {SIGHUP, false},  {SIGINT, false},  {SIGQUIT, false}, {SIGILL, true},     {SIGTRAP, true},  {SIGABRT, true},
    {SIGBUS, true},   {SIGFPE, true},   {SIGUSR1, false}, {SIGSEGV, true},    {SIGUSR2, false}, {SIGPIPE, false},
    {SIGALRM, false}, {SIGTERM, false}, {SIGXCPU, false}, {SIGVTALRM, false}, {SIGPROF, false}, {SIGIO, false},
    {SIGSYS, true},
#ifdef SIGSTKFLT
    {SIGSTKFLT, false},
#endif
#ifdef SIGPWR
    {SIGPWR, false},
#endif
};

template <class F>
void for_each_ending_signal(F&& f) {
  for (const EndingSignal& s : kEndingSignals) f(s.sig, s.fault);
  for (int sig = SIGRTMIN; sig <= SIGRTMAX; ++sig) f(sig, false);
}

// The temporaries being written (files, and a dump's staging directory), so that a signal that
// ends the process in the middle of a write removes them first: fixed slots, read by the handler
// without locks, cleared with async-signal-safe calls only.
constexpr int kSlots = 32;
struct Slot {
  char name[PATH_MAX];
  bool directory;
  std::atomic<bool> claimed;  // by a writer
  std::atomic<bool> ready;    // its name written: the handler may use it
};
Slot g_slots[kSlots];
struct sigaction g_previous[NSIG];

// Claims a slot for `name`; returns its index, or kSlots when none is free (or the name is
// too long to keep): that temporary is then not cleared by a signal, as before.
int claim_slot(const std::string& name, bool directory) {
  if (name.size() >= PATH_MAX) return kSlots;
  for (int i = 0; i < kSlots; ++i) {
    bool free = false;
    if (!g_slots[i].claimed.compare_exchange_strong(free, true)) continue;
    std::memcpy(g_slots[i].name, name.c_str(), name.size() + 1);
    g_slots[i].directory = directory;
    g_slots[i].ready.store(true);
    return i;
  }
  return kSlots;
}

void release_slot(int i) {
  if (i < 0 || i >= kSlots) return;
  g_slots[i].ready.store(false);
  g_slots[i].claimed.store(false);
}

// Six characters of a temporary's name (its XXXXXX), different between calls, threads and
// processes: a counter, the process id and the clock, mixed (splitmix64). O_EXCL decides.
void fill_six(std::string& name, size_t at) {
  static std::atomic<uint64_t> counter{0};
  uint64_t x = (uint64_t(::getpid()) << 32) ^ uint64_t(std::chrono::steady_clock::now().time_since_epoch().count()) ^
               (counter.fetch_add(1) * 0x9E3779B97F4A7C15ULL);
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  x ^= x >> 31;
  static const char kDigits[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  for (size_t i = 0; i < 6; ++i, x /= 62) name[at + i] = kDigits[x % 62];
}

// Names a temporary (its six characters at `at`), registers the name for the signal handler,
// and only then creates it with `create` (exclusive: false and errno EEXIST on a clash, then
// another name): a signal at any moment, on any thread, finds the file, if it exists, named in
// a slot. (mkostemps then claim_slot left a moment with the file on disk and no slot: a signal
// there left it behind, seen once under tests/reliability/signals.sh.) Returns the slot (kSlots
// when none was free: that temporary is not cleared by a signal), or -1 with errno set.
template <class Create>
int create_registered(std::string& name, size_t at, bool directory, Create&& create) {
  for (int attempt = 0; attempt < 100; ++attempt) {
    fill_six(name, at);
    const int slot = claim_slot(name, directory);
    if (create()) return slot;
    const int err = errno;
    release_slot(slot);
    errno = err;
    if (err != EEXIST) return -1;
  }
  return -1;  // errno EEXIST
}

// Empties and removes a directory of plain files with system calls only (no malloc).
void remove_directory_now(const char* dir) {
  const int fd = ::open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    alignas(8) static char buf[1 << 15];
    for (long n; (n = ::syscall(SYS_getdents64, fd, buf, sizeof buf)) > 0;)
      for (long at = 0; at < n;) {
        const auto* d = reinterpret_cast<const struct dirent64*>(buf + at);
        if (std::strcmp(d->d_name, ".") != 0 && std::strcmp(d->d_name, "..") != 0) ::unlinkat(fd, d->d_name, 0);
        at += d->d_reclen;
      }
    ::close(fd);
  }
  ::rmdir(dir);
}

void remove_temporaries_and_reraise(int sig) {
  for (Slot& slot : g_slots)
    if (slot.ready.load()) slot.directory ? remove_directory_now(slot.name) : (void)::unlink(slot.name);
  ::sigaction(sig, &g_previous[sig], nullptr);  // then what would have happened happens
  ::raise(sig);
}

// Once: a file-size limit (ulimit -f) fails the write with EFBIG, as a full disk does, rather
// than killing the process with SIGXFSZ halfway through; every other signal that ends the process
// (kEndingSignals, and the real-time ones) removes the temporaries first, where nobody else
// handles it (its action is still the default).
void prepare_signals() {
  static std::once_flag once;
  std::call_once(once, [] {
    std::signal(SIGXFSZ, SIG_IGN);
    for_each_ending_signal([](int sig, bool) {
      struct sigaction now {};
      if (::sigaction(sig, nullptr, &g_previous[sig]) != 0) return;
      if (g_previous[sig].sa_handler != SIG_DFL || (g_previous[sig].sa_flags & SA_SIGINFO)) return;
      now.sa_handler = remove_temporaries_and_reraise;
      sigemptyset(&now.sa_mask);
      ::sigaction(sig, &now, nullptr);
    });
  });
}

// A temporary being written: created unique (mkostemps), registered for the signal handler,
// removed unless kept (renamed over its target).
class Temporary {
 public:
  explicit Temporary(std::string name) : name_(std::move(name)) {
    const size_t at = name_.size() - kPartialLength - 6;
    slot_ = create_registered(name_, at, false, [this] {
      fd_ = ::open(name_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
      return created_ = fd_ >= 0;
    });
  }
  ~Temporary() {
    if (fd_ >= 0) ::close(fd_);
    if (created_ && !kept_) ::unlink(name_.c_str());  // never a name another process holds
    release_slot(slot_);
  }
  Temporary(const Temporary&) = delete;
  Temporary& operator=(const Temporary&) = delete;
  int fd() const { return fd_; }
  const std::string& name() const { return name_; }
  /// Closes the file; returns 0 or the error (a write the file system deferred shows here).
  int close() {
    const int rc = ::close(fd_);
    fd_ = -1;
    return rc == 0 ? 0 : errno;
  }
  void keep() { kept_ = true; }

 private:
  std::string name_;
  int fd_ = -1, slot_ = kSlots;
  bool created_ = false, kept_ = false;
};

// Linux's append-only or immutable flag (chattr +a, +i) on a file or directory: a directory
// with it takes no rename, a file with it cannot be renamed over.
bool append_only_or_immutable(const fs::path& p) {
  const int fd = ::open(p.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) return false;
  int flags = 0;
  const bool got = ::ioctl(fd, FS_IOC_GETFLAGS, &flags) == 0;
  ::close(fd);
  return got && (flags & (FS_APPEND_FL | FS_IMMUTABLE_FL));
}

}  // namespace

StagingDirectory::StagingDirectory(const std::string& dir) : path_((fs::path(dir) / ".ringside-staging.XXXXXX").string()) {
  prepare_signals();
  slot_ = create_registered(path_, path_.size() - 6, true, [this] { return ::mkdir(path_.c_str(), 0700) == 0; });
  if (slot_ < 0) throw Error("cannot create a directory in " + dir + ": " + std::strerror(errno));
}

StagingDirectory::~StagingDirectory() {
  std::error_code ec;
  fs::remove_all(path_, ec);
  release_slot(slot_);
}

SignalsHeld::SignalsHeld() {
  sigset_t hold;
  sigemptyset(&hold);
  for_each_ending_signal([&](int sig, bool fault) {
    if (!fault) sigaddset(&hold, sig);  // a fault held off would be undefined
  });
  ::pthread_sigmask(SIG_BLOCK, &hold, &previous_);
}

SignalsHeld::~SignalsHeld() { ::pthread_sigmask(SIG_SETMASK, &previous_, nullptr); }

void check(const std::string& path, const std::string& option) {
  auto refusal = [&](const std::string& why) { return ConfigError(option + ": cannot write " + path + ": " + why); };
  if (path.empty()) throw ConfigError(option + " needs a file name");
  const Target t = classify(path);
  switch (t.kind) {
    case Kind::refused: throw refusal(t.why);
    case Kind::standard_output: {
      struct stat out {};
      if (::fstat(STDOUT_FILENO, &out) != 0) throw refusal("standard output is closed");
      const int mode = ::fcntl(STDOUT_FILENO, F_GETFL);
      if (S_ISDIR(out.st_mode) || mode < 0 || (mode & O_ACCMODE) == O_RDONLY)
        throw refusal("standard output is open for reading only");
      move_report_to_stderr();
      return;
    }
    case Kind::through: {
      if (::access(path.c_str(), W_OK) != 0) throw refusal(std::strerror(errno));
      // A device is opened as a redirection would open it (/dev/tty with no terminal fails
      // here, not after the work); a FIFO is not: its reader would see an empty stream.
      struct stat st {};
      if (::stat(path.c_str(), &st) == 0 && S_ISCHR(st.st_mode)) {
        const int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
        if (fd < 0) throw refusal(std::strerror(errno));
        ::close(fd);
      }
      return;
    }
    case Kind::regular:
      if (::access(path.c_str(), W_OK) != 0) throw refusal(std::strerror(errno));
      [[fallthrough]];
    case Kind::absent: {
      const fs::path dir = t.real.parent_path();
      const std::string name = t.real.filename().string();
      if (name.empty() || name == "." || name == "..") throw refusal("not a file name");
      struct stat st {}, target {};
      if (::stat(dir.c_str(), &st) != 0)
        throw refusal("the directory " + dir.string() + (errno == ENOENT ? " does not exist" : ": " + std::string(std::strerror(errno))));
      if (!S_ISDIR(st.st_mode)) throw refusal(dir.string() + " is not a directory");
      // Where the rename over the file will not be allowed, say so now, not after the work.
      if (append_only_or_immutable(dir)) throw refusal(dir.string() + " is append-only or immutable: no file there can be replaced");
      if (t.kind == Kind::regular && append_only_or_immutable(t.real))
        throw refusal("it is append-only or immutable (chattr): it cannot be replaced");
      if (t.kind == Kind::regular && ::stat(t.real.c_str(), &target) == 0 && target.st_dev != st.st_dev)
        throw refusal("it is mounted over (a bind mount): it cannot be replaced");
      const uid_t me = ::geteuid();
      if (t.kind == Kind::regular && (st.st_mode & S_ISVTX) && me != 0 && st.st_uid != me &&
          ::stat(t.real.c_str(), &target) == 0 && target.st_uid != me)
        throw refusal("it belongs to another user in a sticky directory (like /tmp), where only its owner may replace it");
      // The temporary is the file actually written: prove it can be made, then remove it.
      Temporary probe(temp_template(t.real));
      if (probe.fd() < 0) throw refusal("cannot create a file in " + dir.string() + ": " + std::strerror(errno));
      return;
    }
  }
}

bool written_through(const std::string& path) {
  const Kind k = classify(path).kind;
  return k == Kind::through || k == Kind::standard_output;
}

void write_with(const std::string& path, const std::function<void(std::ostream&)>& fill, const std::string& option) {
  prepare_signals();
  auto failure = [&](const std::string& why) { return Error(option + ": cannot write " + path + ": " + why); };
  const Target t = classify(path);
  if (t.kind == Kind::refused) throw failure(t.why);
  if (t.kind == Kind::standard_output) {
    if (const int err = fill_through(standard_output_fd(), fill)) throw failure(std::strerror(err));
    return;
  }
  if (t.kind == Kind::through) {
    // As `>>` would: a device or pipe does not care, a file behind /dev/fd keeps what it has.
    const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
    if (fd < 0) throw failure(std::strerror(errno));
    int err = 0;
    try {
      err = fill_through(fd, fill);
    } catch (...) {
      ::close(fd);
      throw;
    }
    if (::close(fd) != 0 && err == 0) err = errno;
    if (err) throw failure(std::strerror(err));
    return;
  }
  // A regular file, or none yet: a temporary of our own, renamed over the name once whole.
  prepare_signals();
  Temporary tmp(temp_template(t.real));
  if (tmp.fd() < 0) throw failure("cannot create " + tmp.name() + ": " + std::strerror(errno));
  if (const int err = fill_fd(tmp.fd(), fill)) throw failure(std::strerror(err));
  // The replaced file's mode and owner carry over; a new file gets 0666 less the umask.
  struct stat old {};
  if (t.kind == Kind::regular && ::stat(t.real.c_str(), &old) == 0) {
    ::fchmod(tmp.fd(), old.st_mode & 07777);
    if (::fchown(tmp.fd(), old.st_uid, old.st_gid) != 0) {
      // Only root may give a file away; anyone else's copy is theirs, as a new file would be.
    }
  } else {
    ::fchmod(tmp.fd(), 0666 & ~process_umask());
  }
  if (::fsync(tmp.fd()) != 0) throw failure(std::strerror(errno));
  if (const int err = tmp.close()) throw failure(std::strerror(err));
  if (::rename(tmp.name().c_str(), t.real.c_str()) != 0) throw failure(std::strerror(errno));
  tmp.keep();
}

void write(const std::string& path, std::string_view text, const std::string& option) {
  write_with(path, [&](std::ostream& os) { os.write(text.data(), std::streamsize(text.size())); }, option);
}

bool is_regular(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string read_input(const std::string& path, const std::string& option, size_t max_bytes) {
  const std::string shown = detail::shown_input(path);
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    throw ConfigError(detail::concat(option, " ", shown, ": ", std::strerror(errno)));
  if (!S_ISREG(st.st_mode)) throw ConfigError(detail::concat(option, " ", shown, ": not a regular file"));
  if (size_t(st.st_size) > max_bytes)
    throw ConfigError(detail::concat(option, " ", shown, ": ", st.st_size, " bytes, more than the ", max_bytes, " this input may have"));
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw ConfigError(detail::concat(option, " ", shown, ": ", std::strerror(errno)));
  std::string text;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      ::close(fd);
      throw ConfigError(detail::concat(option, " ", shown, ": ", std::strerror(e)));
    }
    if (n == 0) break;
    text.append(buf, size_t(n));
    if (text.size() > max_bytes) {
      ::close(fd);
      throw ConfigError(detail::concat(option, " ", shown, ": more than the ", max_bytes, " bytes this input may have"));
    }
  }
  ::close(fd);
  return text;
}

bool same_file(const std::string& a, const std::string& b) {
  struct stat sa {}, sb {};
  const bool a_exists = ::stat(a.c_str(), &sa) == 0, b_exists = ::stat(b.c_str(), &sb) == 0;
  if (a_exists && b_exists) return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
  if (a_exists != b_exists) return false;
  return real_path(a) == real_path(b);
}

void check_distinct(const std::vector<Named>& outputs, const std::vector<Named>& inputs) {
  // A character device takes any number of outputs (/dev/null twice); anything else, a pipe or
  // standard output included (a terminal too: two documents would run into one), takes one,
  // and never an input.
  std::vector<bool> shared;  // each output's target, classified once
  for (const Named& o : outputs) {
    if (o.path.empty()) {
      shared.push_back(false);
      continue;
    }
    const Target t = classify(o.path);
    shared.push_back(t.device && t.kind != Kind::standard_output);
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Named& o = outputs[i];
    if (o.path.empty()) continue;
    // Two names of one file clash unless both are shared devices (a terminal by two names,
    // /dev/stderr and /dev/stdout, is standard output by one of them: they clash).
    for (size_t j = i + 1; j < outputs.size(); ++j)
      if (!outputs[j].path.empty() && same_file(o.path, outputs[j].path) && !(shared[i] && shared[j]))
        throw ConfigError(o.option + " " + o.path + " and " + outputs[j].option + " " + outputs[j].path +
                          " name the same file: give each its own");
    if (shared[i]) continue;
    for (const Named& in : inputs)
      if (!in.path.empty() && same_file(o.path, in.path))
        throw ConfigError(o.option + " " + o.path + " would replace the input " +
                          (in.option.empty() ? std::string() : in.option + " ") + in.path);
  }
}

}  // namespace ringside::output
