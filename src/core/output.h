// Output files: checked before any work, written whole or not at all, and never replacing
// something that is not a regular file.
//
// Every file ringside writes (--trace, --json, --dump's files, the viewer's --screenshot) goes
// through here. What happens depends on what the path names, as a shell redirection would see it:
//
//   a regular file, or nothing yet   written to a temporary of this writer's own
//                                    (NAME.XXXXXX.partial, in the same directory), renamed over
//                                    NAME once whole: a reader sees the old file or the new
//                                    one; a write that fails (a full disk, a file-size limit)
//                                    removes the temporary and leaves the old file as it was;
//                                    two runs writing one name each rename a whole file
//   a character device or a pipe     written through, never replaced: /dev/null, a FIFO, and
//   (or an open file's name)         /dev/stderr, /dev/fd/N, /proc/self/fd/N whatever they lead to
//   standard output by name          (/dev/stdout, /dev/fd/1, /proc/self/fd/1) written through,
//                                    and the command's report moves to standard error, so that
//                                    `--json /dev/stdout | jq` reads JSON alone
//   anything else                    refused before any work: a directory, a socket, a block
//                                    device
#pragma once
#include <csignal>
#include <functional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace ringside::output {

/// Proves, before any work, that `path` can take an output: what it names may be written as
/// above, its directory exists, and the temporary that will actually be written there (the
/// name the rename needs, within the file system's name length) can be created. `option`
/// names the output in messages ("--trace"). Leaves nothing behind and never opens the target,
/// so a FIFO whose reader comes later does not block the run's start. For standard output by
/// name, moves the report (this process's stdout) to stderr. Throws ConfigError
/// "<option> <path>: <reason>".
void check(const std::string& path, const std::string& option);

/// Whether `path` is written through (a device, a pipe, standard output) rather than replaced:
/// such a target takes one whole output, not the live rewrites of a running trace.
bool written_through(const std::string& path);

/// Writes `text` to `path` as the header says. Throws ringside::Error "<option>: cannot write
/// <path>: <reason>" (the temporary removed, an existing file untouched).
void write(const std::string& path, std::string_view text, const std::string& option);
/// write's streaming form, for outputs too large to hold as one string: `fill` writes the
/// whole content into the stream it is given (a failed write shows when the stream is flushed).
void write_with(const std::string& path, const std::function<void(std::ostream&)>& fill, const std::string& option);

/// A fresh directory of temporaries inside `dir` (DIR/.ringside-staging.XXXXXX), for outputs
/// of many files (a dump): removed with what it holds when the object goes, and also when a
/// signal ends the process first (any whose default action ends it: SIGINT, SIGTERM, SIGHUP,
/// SIGQUIT, SIGUSR1, SIGALRM, ... as the temporaries of write). Throws ringside::Error if it
/// cannot be made.
class StagingDirectory {
 public:
  explicit StagingDirectory(const std::string& dir);
  ~StagingDirectory();
  StagingDirectory(const StagingDirectory&) = delete;
  StagingDirectory& operator=(const StagingDirectory&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int slot_;
};

/// While it lives, the signals that end the process from outside it (SIGINT, SIGTERM, SIGHUP,
/// SIGQUIT, SIGUSR1, SIGALRM, ...: all but the faults) wait, blocked on this thread: a short
/// sequence of renames (a dump moving in) is not cut in half. They arrive when it goes.
class SignalsHeld {
 public:
  SignalsHeld();
  ~SignalsHeld();
  SignalsHeld(const SignalsHeld&) = delete;
  SignalsHeld& operator=(const SignalsHeld&) = delete;

 private:
  sigset_t previous_;
};

/// Whether `a` and `b` name the same file: by identity (device and inode) when both exist,
/// else by their resolved absolute paths (symlinks followed, `.` and `..` removed), so that
/// `x`, `./x` and `sub/../x` are one file.
bool same_file(const std::string& a, const std::string& b);

/// An output or input file and the option that names it.
struct Named {
  std::string option, path;
};
/// Throws ConfigError when two outputs name the same file ("--trace t.json and --json ./t.json
/// name the same file") or an output names an input ("--json f.json would replace the input
/// f.json"). Character devices other than standard output (/dev/null twice) may coincide;
/// standard output, a terminal included, takes one output. Empty paths are skipped.
void check_distinct(const std::vector<Named>& outputs, const std::vector<Named>& inputs = {});

/// Whether `path` is a regular file (symlinks followed), never throwing: a loop of links, a
/// name too long or a missing file are all "no" (the caller says what it expected).
bool is_regular(const std::string& path);

/// The whole of a small input file (a profile, a chapter) that `option` names. Throws
/// ConfigError naming the option, the path and the reason: not a regular file, unreadable
/// (the system's message, "Permission denied"), or larger than `max_bytes`.
std::string read_input(const std::string& path, const std::string& option, size_t max_bytes);

}  // namespace ringside::output
