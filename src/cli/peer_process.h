// A peer process spoken to over pipes, one line at a time: how `bench layer --peer pytorch`
// runs the same layer in another framework in the same run (cli/peer_pytorch.h).
#pragma once
#include <optional>
#include <string>
#include <sys/types.h>
#include <vector>

namespace ringside::cli {

/// A child process whose stdin and stdout are pipes to this one (its stderr is this process's).
/// Lines go in with send_line and come back with read_line, which waits at most the given time:
/// a peer that hangs or dies is an error naming it, never a hang of ringside. The destructor
/// closes its stdin, gives it a moment to exit, then kills it (SIGKILL) and reaps it, on every
/// path, an exception's included.
class PeerProcess {
 public:
  /// Starts argv (argv[0] searched on PATH, as a shell does). `name` names the peer in every
  /// error ("peer pytorch (gpt layer)"). When argv[0] cannot be run (absent, not executable)
  /// running() is false and why_not() says why; nothing is thrown. Throws ringside::Error when
  /// the pipes cannot be made.
  PeerProcess(std::string name, const std::vector<std::string>& argv);
  ~PeerProcess();
  PeerProcess(const PeerProcess&) = delete;
  PeerProcess& operator=(const PeerProcess&) = delete;

  /// Whether the program started; if not, why_not(): "cannot run python3: No such file or directory".
  bool running() const { return pid_ > 0; }
  const std::string& why_not() const { return why_not_; }
  const std::string& name() const { return name_; }

  /// Writes `line` and a newline to the peer's stdin. Throws ringside::Error naming the peer when
  /// it has gone (its stdin closed).
  void send_line(const std::string& line);
  /// The next line of the peer's stdout, without its newline; std::nullopt when the peer closed
  /// it (exited). Throws ringside::Error naming the peer after `timeout_s` seconds without a
  /// whole line, and kills it.
  std::optional<std::string> read_line(double timeout_s);
  /// How the peer ended, once read_line returned std::nullopt: "exited with status 3", "was
  /// killed by signal 9"; waits for it (it closed its stdout, so it is ending).
  std::string exit_description();
  /// Ends the peer now: SIGKILL and reap (nothing if it is gone already).
  void kill();

 private:
  std::string name_, why_not_;
  pid_t pid_ = -1;
  int to_child_ = -1, from_child_ = -1;
  std::string buffered_;  // bytes read past the last whole line
  int status_ = 0;        // waitpid's, once reaped
  bool reaped_ = false;
  void reap(bool block);
};

}  // namespace ringside::cli
