// What a long command is doing, told on stderr while it runs: the phase it is in, how far it has
// got, and about how long is left, so that no run of more than a few seconds is silent. The work
// reports its phases and their units (ProgressReport); a ProgressLine prints them, from a thread
// of its own, every couple of seconds, whatever the work is doing between two units.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <string>
#include <thread>

namespace ringside {

/// The progress of a long computation, as the code doing it reports it. This base shows nothing:
/// library code reports to one whether or not anyone is watching (a test, a lesson).
class ProgressReport {
 public:
  virtual ~ProgressReport() = default;
  /// A phase begins, and the one before it ends: `what` it does, in words ("bounding every
  /// configuration"; no colon, which separates a line's fields), and its work, `total` units of
  /// `unit` ("TP x CP groups"), `at_most` when the total is an upper bound (a search that may
  /// stop sooner).
  virtual void phase(const std::string& what, size_t total, const std::string& unit, bool at_most = false) {
    (void)what, (void)total, (void)unit, (void)at_most;
  }
  /// `units` more of the phase's work done.
  virtual void advance(size_t units = 1) { (void)units; }
  /// The last phase has ended: nothing more to report (before the results are printed).
  virtual void finish() {}
};

/// The seconds between two progress lines: RINGSIDE_PROGRESS_INTERVAL where it is set (a number
/// from 0 to 3600, digits and at most one decimal point; 0 prints a line at each phase's start and
/// end, whatever its length: for tests), else 2. Throws ConfigError for any other value.
double progress_interval_s();

/// Progress on stderr, one line at a time, never on stdout (where tables and `--json -` go):
///   ringside plan: bounding every configuration: 120 of 1530 TP x CP groups (7%), 4 s so far, about 47 s left
/// A line is printed whenever `interval_s` seconds have passed since the last one (or since the
/// command began) while a phase runs, so that every phase of a long command says what it does
/// within 3 s of its start at the default interval. At interval 0 each phase prints a line as it
/// starts ("0 of N ..., time left not known yet") and as it ends ("done: N of N ... in 0.4 s"),
/// and no other.
class ProgressLine : public ProgressReport {
 public:
  /// `command` names the lines ("plan", "validate").
  explicit ProgressLine(std::string command, double interval_s = progress_interval_s());
  ~ProgressLine() override;
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;

  void phase(const std::string& what, size_t total, const std::string& unit, bool at_most = false) override;
  void advance(size_t units = 1) override;
  void finish() override;

 private:
  using Clock = std::chrono::steady_clock;
  void tick();                       // the thread: a line whenever one is due
  std::string line(Clock::time_point now) const;  // the current phase's line (mutex held)
  void end_phase(Clock::time_point now);          // interval 0: the finished phase's last line

  const std::string command_;
  const double interval_s_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  bool running_ = false;  // a phase is under way
  std::string what_, unit_;
  size_t total_ = 0;
  bool at_most_ = false;
  std::atomic<size_t> done_{0};
  Clock::time_point phase_start_, last_line_;
  std::thread thread_;
};

}  // namespace ringside
