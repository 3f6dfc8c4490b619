// A self-contained SVG picture of simulator runs (`meshtrain simulate --plot FILE.svg`): the
// step distribution over virtual time — per run a median line, a p10–p90 band and a min–max
// band — and, when the runs carry a model error, a second panel with the error over time on a
// log scale, one line per run. No plotting library: the output is a few hundred lines of plain
// SVG, byte-identical for identical inputs.
//
// Thread-safety: a pure function.
#pragma once

#include <string>
#include <vector>

#include "sim/psp_sim.h"

namespace meshtrain::sim {

struct PlotRun {
  std::string label;              // legend text
  std::vector<TimePoint> series;  // as in PspSimResult::series
};

// The SVG document for these runs under `title`.
std::string RenderProgressSvg(const std::vector<PlotRun>& runs, const std::string& title);

}  // namespace meshtrain::sim
