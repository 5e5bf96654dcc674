#include "cli/peer_process.h"

#include <cerrno>
#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <utility>

#include "core/error.h"

extern char** environ;

namespace ringside::cli {

PeerProcess::PeerProcess(std::string name, const std::vector<std::string>& argv) : name_(std::move(name)) {
  RS_CHECK(!argv.empty(), name_, ": no program to run");
  int in[2], out[2];  // the child's stdin and stdout; close-on-exec here, dup2'd onto 0 and 1 there
  RS_CHECK(::pipe2(in, O_CLOEXEC) == 0, name_, ": cannot make a pipe: ", std::strerror(errno));
  if (::pipe2(out, O_CLOEXEC) != 0) {
    const int err = errno;
    ::close(in[0]), ::close(in[1]);
    throw Error(detail::concat(name_, ": cannot make a pipe: ", std::strerror(err)));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in[0], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  posix_spawnattr_t attr;  // the child starts with no signal held, whatever this thread holds
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  const int err = ::posix_spawnp(&pid, args[0], &actions, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  ::close(in[0]), ::close(out[1]);
  if (err != 0) {
    ::close(in[1]), ::close(out[0]);
    why_not_ = detail::concat("cannot run ", argv[0], ": ", std::strerror(err));
    return;
  }
  pid_ = pid, to_child_ = in[1], from_child_ = out[0];
}

PeerProcess::~PeerProcess() {
  if (to_child_ >= 0) ::close(to_child_);  // end of file: a peer reading its stdin exits
  if (pid_ > 0 && !reaped_) {
    // A moment to exit on its own (2 s), then killed: no peer outlives ringside.
    for (int i = 0; i < 200 && !reaped_; ++i) {
      reap(false);
      if (!reaped_) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    kill();
  }
  if (from_child_ >= 0) ::close(from_child_);
}

void PeerProcess::reap(bool block) {
  if (pid_ <= 0 || reaped_) return;
  int status = 0;
  pid_t r;
  do r = ::waitpid(pid_, &status, block ? 0 : WNOHANG);
  while (r < 0 && errno == EINTR);
  if (r == pid_ || (r < 0 && errno == ECHILD)) reaped_ = true, status_ = status;
}

void PeerProcess::kill() {
  if (pid_ <= 0 || reaped_) return;
  ::kill(pid_, SIGKILL);
  reap(true);
}

std::string PeerProcess::exit_description() {
  reap(true);
  if (WIFEXITED(status_)) return detail::concat("exited with status ", WEXITSTATUS(status_));
  if (WIFSIGNALED(status_)) return detail::concat("was killed by signal ", WTERMSIG(status_), " (", strsignal(WTERMSIG(status_)), ")");
  return "ended";
}

void PeerProcess::send_line(const std::string& line) {
  RS_CHECK(pid_ > 0 && to_child_ >= 0, name_, ": not running");
  // SIGPIPE held for this thread: a peer that has gone makes the write fail with EPIPE, an error
  // naming it, instead of ending ringside without a word. The signal then pending is taken.
  sigset_t pipe_signal, previous;
  sigemptyset(&pipe_signal);
  sigaddset(&pipe_signal, SIGPIPE);
  ::pthread_sigmask(SIG_BLOCK, &pipe_signal, &previous);
  const std::string text = line + "\n";
  size_t done = 0;
  int err = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(to_child_, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      err = errno;
      break;
    }
    done += static_cast<size_t>(n);
  }
  if (err == EPIPE) {
    const struct timespec now {};
    while (::sigtimedwait(&pipe_signal, nullptr, &now) == SIGPIPE) {
    }
  }
  ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  if (err == EPIPE) throw Error(detail::concat(name_, ": it has gone (its stdin is closed): it ", exit_description()));
  RS_CHECK(err == 0, name_, ": cannot write to it: ", std::strerror(err));
}

std::optional<std::string> PeerProcess::read_line(double timeout_s) {
  RS_CHECK(pid_ > 0 && from_child_ >= 0, name_, ": not running");
  using clock = std::chrono::steady_clock;
  const auto deadline = clock::now() + std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(timeout_s));
  for (;;) {
    if (const size_t nl = buffered_.find('\n'); nl != std::string::npos) {
      std::string line = buffered_.substr(0, nl);
      buffered_.erase(0, nl + 1);
      return line;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now()).count();
    if (left <= 0) {
      kill();
      throw Error(detail::concat(name_, ": no answer in ", timeout_s, " s; stopped it (RINGSIDE_PEER_TIMEOUT sets the wait)"));
    }
    pollfd p{from_child_, POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 1000)));
    if (ready < 0 && errno != EINTR) throw Error(detail::concat(name_, ": cannot wait for it: ", std::strerror(errno)));
    if (ready <= 0) continue;
    char buf[4096];
    const ssize_t n = ::read(from_child_, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    RS_CHECK(n >= 0, name_, ": cannot read from it: ", std::strerror(errno));
    if (n == 0) {  // it closed its stdout: a last line without its newline, then nothing
      if (buffered_.empty()) return std::nullopt;
      return std::exchange(buffered_, std::string());
    }
    buffered_.append(buf, static_cast<size_t>(n));
  }
}

}  // namespace ringside::cli
