// `meshtrain simulate --progress`: the runs' progress on stderr, off stdout so that the results
// stay byte-identical with or without it.
// Thread-safety: called from the simulator's thread that reports progress, one run at a time.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>

#include "sim/psp_sim.h"

namespace meshtrain::cli {

// Progress of the runs on stderr (--progress): on a terminal one line rewritten in place at most
// every half second and cleared when a run ends; elsewhere a line every 10 s of wall time.
class ProgressLine {
 public:
  ProgressLine(bool tty, size_t runs) : tty_(tty), runs_(runs) {}

  void StartRun(size_t index, const std::string& label) {
    index_ = index;
    label_ = label;
    run_start_ = Clock::now();
    training_start_ = {};
    last_ = {};
    setup_s_ = -1;
  }

  void operator()(const sim::SimProgress& p) {
    const Clock::time_point now = Clock::now();
    using Phase = sim::SimProgress::Phase;
    if (p.phase != Phase::kSetup && setup_s_ < 0) setup_s_ = Seconds(run_start_, now);
    if (p.phase == Phase::kTraining && training_start_ == Clock::time_point{}) {
      training_start_ = now;
    }
    const bool last = p.phase == Phase::kTraining && p.t_s >= p.duration_s;
    const double every = tty_ ? 0.5 : 10;
    if (p.phase != Phase::kSetup && !last && last_ != Clock::time_point{} &&
        Seconds(last_, now) < every) {
      return;
    }
    last_ = now;
    char text[256];
    const std::string head = "simulate " + label_ + " (" + std::to_string(index_ + 1) + "/" +
                             std::to_string(runs_) + ")";
    if (p.phase == Phase::kSetup) {
      std::snprintf(text, sizeof text, "%s: setting up %zu nodes", head.c_str(), p.nodes);
    } else if (p.phase == Phase::kWarmUp) {
      std::snprintf(text, sizeof text, "%s: membership warm-up, %.1f virtual s, %.0f s",
                    head.c_str(), p.t_s, Seconds(run_start_, now));
    } else {
      const double share = p.duration_s > 0 ? std::min(1.0, p.t_s / p.duration_s) : 1;
      const double spent = Seconds(training_start_, now);
      std::string left;
      if (p.t_s > 0 && !last) {
        const double rest = spent / p.t_s * (p.duration_s - p.t_s);
        left = ", about " + Duration(rest) + " left";
      }
      std::snprintf(text, sizeof text,
                    "%s: %.0f of %.0f virtual s (%.0f %%), median step %llu; setup %s, "
                    "training %s%s",
                    head.c_str(), p.t_s, p.duration_s, 100 * share,
                    static_cast<unsigned long long>(p.median_step), Duration(setup_s_).c_str(),
                    Duration(spent).c_str(), left.c_str());
    }
    if (tty_) {
      std::fprintf(stderr, "\r\033[K%s", text);
    } else {
      std::fprintf(stderr, "%s\n", text);
    }
    std::fflush(stderr);
  }

  // The run is over: a terminal's line is cleared (the results follow on stdout).
  void EndRun() {
    if (tty_) std::fprintf(stderr, "\r\033[K");
    std::fflush(stderr);
  }

 private:
  using Clock = std::chrono::steady_clock;
  static double Seconds(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  }
  static std::string Duration(double s) {
    char buf[32];
    if (s < 60) {
      std::snprintf(buf, sizeof buf, "%.1f s", std::max(0.0, s));
    } else {
      const auto whole = static_cast<long long>(std::llround(s));
      std::snprintf(buf, sizeof buf, "%lld min %02lld s", whole / 60, whole % 60);
    }
    return buf;
  }

  bool tty_;
  size_t runs_;
  size_t index_ = 0;
  std::string label_;
  Clock::time_point run_start_{};
  Clock::time_point training_start_{};
  Clock::time_point last_{};
  double setup_s_ = -1;
};

}  // namespace meshtrain::cli
