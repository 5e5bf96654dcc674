// Progress lines on stderr (progress.h).
#include "core/progress.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <system_error>

#include "core/error.h"

namespace ringside {

double progress_interval_s() {
  const char* v = std::getenv("RINGSIDE_PROGRESS_INTERVAL");
  if (!v) return 2.0;
  // Digits with at most one decimal point, nothing else: no sign, space, exponent or hex.
  const std::string text = v;
  const bool decimal = text.find_first_not_of("0123456789.") == std::string::npos &&
                       std::count(text.begin(), text.end(), '.') <= 1 && text.find_first_of("0123456789") != std::string::npos;
  const double s = decimal ? std::strtod(v, nullptr) : NAN;
  if (!(s >= 0 && s <= 3600))
    throw ConfigError(detail::concat("RINGSIDE_PROGRESS_INTERVAL='", detail::shown_input(v),
                                     "' must be the seconds between progress lines, 0 to 3600 (0: a line at each phase's start and end)"));
  return s;
}

namespace {

// "12 s", "1.4 s" under 10 s, "3 min 20 s" past 100 s.
std::string duration_text(double s) {
  char buf[48];
  if (s < 10) std::snprintf(buf, sizeof buf, "%.1f s", s);
  else if (s < 100) std::snprintf(buf, sizeof buf, "%.0f s", s);
  else std::snprintf(buf, sizeof buf, "%.0f min %02.0f s", std::floor(s / 60), std::fmod(std::round(s), 60.0));
  return buf;
}

}  // namespace

ProgressLine::ProgressLine(std::string command, double interval_s)
    : command_(std::move(command)), interval_s_(interval_s), last_line_(Clock::now()) {
  if (interval_s_ == 0) return;
  try {
    thread_ = std::thread([this] { tick(); });
  } catch (const std::system_error& e) {
    // A limit on threads (ulimit -u): the work can still run, without its progress lines.
    std::fprintf(stderr, "ringside %s: no progress lines: could not start their thread (%s)\n", command_.c_str(), e.what());
  }
}

ProgressLine::~ProgressLine() {
  finish();
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void ProgressLine::phase(const std::string& what, size_t total, const std::string& unit, bool at_most) {
  std::lock_guard lock(mutex_);
  const Clock::time_point now = Clock::now();
  end_phase(now);
  what_ = what, unit_ = unit, total_ = total, at_most_ = at_most;
  done_ = 0;
  phase_start_ = now, running_ = true;
  if (interval_s_ == 0) std::fprintf(stderr, "%s\n", line(now).c_str());
}

void ProgressLine::advance(size_t units) { done_ += units; }

void ProgressLine::finish() {
  std::lock_guard lock(mutex_);
  end_phase(Clock::now());
  running_ = false;
}

void ProgressLine::end_phase(Clock::time_point now) {
  if (!running_ || interval_s_ > 0) return;
  const double s = std::chrono::duration<double>(now - phase_start_).count();
  std::fprintf(stderr, "ringside %s: %s: done: %zu of %s%zu %s in %s\n", command_.c_str(), what_.c_str(), done_.load(),
               at_most_ ? "at most " : "", total_, unit_.c_str(), duration_text(s).c_str());
}

std::string ProgressLine::line(Clock::time_point now) const {
  const size_t done = done_.load(), total = total_;
  const double s = std::chrono::duration<double>(now - phase_start_).count();
  char head[64];
  if (total > 0) std::snprintf(head, sizeof head, " (%.0f%%)", 100.0 * double(std::min(done, total)) / double(total));
  else head[0] = '\0';
  std::string left = "time left not known yet";
  if (done > 0 && done <= total) {
    left = (at_most_ ? "at most about " : "about ") + duration_text(s * double(total - done) / double(done)) + " left";
    if (done == total) left = "finishing";
  }
  return detail::concat("ringside ", command_, ": ", what_, ": ", done, " of ", at_most_ ? "at most " : "", total, " ", unit_, head,
                        ", ", duration_text(s), " so far, ", left);
}

void ProgressLine::tick() {
  std::unique_lock lock(mutex_);
  const auto interval = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(interval_s_));
  while (!stop_) {
    // A line is due `interval` after the last one; look again at least every 100 ms.
    const Clock::time_point due = last_line_ + interval;
    wake_.wait_until(lock, std::min(due, Clock::now() + std::chrono::milliseconds(100)));
    if (stop_) break;
    const Clock::time_point now = Clock::now();
    if (!running_ || now < due) continue;
    std::fprintf(stderr, "%s\n", line(now).c_str());
    last_line_ = now;
  }
}

}  // namespace ringside
