// Progress of a long prefill, written to stderr by `dsv41 run` between the prompt's pieces: a
// 86K-token prompt prefills for minutes, and silence looks like a hang. On a terminal one line is
// rewritten in place (tokens done, tok/s, time left); otherwise (a log file, a pipe) only one
// final line is written, so logs carry no carriage-return noise. A prefill shorter than
// kQuietSeconds prints nothing at all: the usual short prompt stays as quiet as before.
//
// Only formats text; the caller writes it. Times come in as arguments, so tests need no clock.
// Header-only so the test binary can use it without linking the app's objects.
#pragma once

#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>

namespace dsv41::app {

// "45 s", "3 min 05 s", "2 h 07 min": whole seconds, largest two units.
inline std::string format_duration(double seconds) {
  const int64_t s = seconds > 0 ? static_cast<int64_t>(std::llround(seconds)) : 0;
  char buf[64];
  if (s < 60) {
    std::snprintf(buf, sizeof buf, "%" PRId64 " s", s);
  } else if (s < 3600) {
    std::snprintf(buf, sizeof buf, "%" PRId64 " min %02" PRId64 " s", s / 60, s % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%" PRId64 " h %02" PRId64 " min", s / 3600, (s % 3600) / 60);
  }
  return buf;
}

class PrefillProgress {
 public:
  // Below this the prefill is quick enough that a progress line would only flicker.
  static constexpr double kQuietSeconds = 2.0;

  // total: tokens to prefill. live: stderr is a terminal.
  PrefillProgress(int64_t total, bool live) : total_(total), live_(live) {}

  // After `done` of the tokens, `elapsed` seconds since the prefill began: the text to write
  // now, or "" (not live, or still within kQuietSeconds).
  std::string update(int64_t done, double elapsed) {
    if (!live_ || elapsed < kQuietSeconds || done <= 0) return {};
    shown_ = true;
    const double rate = done / elapsed;
    const double left = (total_ - done) / rate;
    char buf[160];
    std::snprintf(buf, sizeof buf, "prefill: %" PRId64 "/%" PRId64 " tokens (%d%%), %.1f tok/s, %s left", done,
                  total_, static_cast<int>(100 * done / (total_ > 0 ? total_ : 1)), rate,
                  format_duration(left).c_str());
    // \r returns to the line's start, ESC[K erases what a longer previous line left behind.
    return std::string("\r") + buf + "\x1b[K";
  }

  // When the prefill has ended after `elapsed` seconds: the closing text. A quick prefill gets
  // "" (or, if a live line was shown, the sequence that erases it); a long one a final line.
  std::string finish(double elapsed) const {
    if (elapsed < kQuietSeconds) return shown_ ? "\r\x1b[K" : "";
    char buf[160];
    std::snprintf(buf, sizeof buf, "prefill: %" PRId64 " tokens in %s (%.1f tok/s)", total_,
                  format_duration(elapsed).c_str(), total_ / elapsed);
    return (live_ ? std::string("\r") + buf + "\x1b[K" : std::string(buf)) + "\n";
  }

  bool shown() const { return shown_; }

 private:
  int64_t total_;
  bool live_;
  bool shown_ = false;  // a live line is on the terminal
};

}  // namespace dsv41::app
