#include "sim/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

namespace meshtrain::sim {
namespace {

// Colour-blind-safe palette (Okabe & Ito), cycled.
constexpr const char* kColors[] = {"#0072B2", "#D55E00", "#009E73", "#CC79A7",
                                   "#E69F00", "#56B4E9", "#000000", "#F0E442"};
constexpr int kWidth = 900;
constexpr int kPanelHeight = 320;
constexpr int kLeft = 70, kRight = 190, kTop = 40, kGap = 60, kBottom = 45;

std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", v);
  return buf;
}

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// "Nice" tick step for a range: 1, 2 or 5 × 10^k giving about `target` ticks.
double TickStep(double range, int target) {
  if (!(range > 0)) return 1;
  const double raw = range / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double norm = raw / mag;
  return (norm < 1.5 ? 1 : norm < 3.5 ? 2 : norm < 7.5 ? 5 : 10) * mag;
}

std::string TickLabel(double v) {
  char buf[32];
  if (std::fabs(v - std::round(v)) < 1e-9) {
    std::snprintf(buf, sizeof(buf), "%.0f", v);
  } else {
    std::snprintf(buf, sizeof(buf), "%g", v);
  }
  return buf;
}

struct Panel {
  double x0, y0, w, h;  // pixel box
  double tmax;          // x range [0, tmax]
  double ymin, ymax;    // y range (log10 values when log)
  bool log = false;
  double X(double t) const { return x0 + (tmax > 0 ? t / tmax : 0) * w; }
  double Y(double v) const {
    const double u = log ? std::log10(std::max(v, 1e-12)) : v;
    const double f = ymax > ymin ? (u - ymin) / (ymax - ymin) : 0;
    return y0 + h - std::clamp(f, 0.0, 1.0) * h;
  }
};

void Axes(std::string* svg, const Panel& p, const std::string& ylabel) {
  *svg += "<rect x=\"" + Num(p.x0) + "\" y=\"" + Num(p.y0) + "\" width=\"" + Num(p.w) +
          "\" height=\"" + Num(p.h) + "\" fill=\"none\" stroke=\"#444\"/>\n";
  const double xs = TickStep(p.tmax, 8);
  for (double t = 0; t <= p.tmax + 1e-9; t += xs) {
    *svg += "<line x1=\"" + Num(p.X(t)) + "\" y1=\"" + Num(p.y0 + p.h) + "\" x2=\"" + Num(p.X(t)) +
            "\" y2=\"" + Num(p.y0 + p.h + 5) + "\" stroke=\"#444\"/>\n";
    *svg += "<text x=\"" + Num(p.X(t)) + "\" y=\"" + Num(p.y0 + p.h + 18) +
            "\" text-anchor=\"middle\">" + TickLabel(t) + "</text>\n";
  }
  *svg += "<text x=\"" + Num(p.x0 + p.w / 2) + "\" y=\"" + Num(p.y0 + p.h + 36) +
          "\" text-anchor=\"middle\">virtual time (s)</text>\n";
  if (p.log) {
    for (int e = static_cast<int>(std::floor(p.ymin)); e <= static_cast<int>(std::ceil(p.ymax));
         ++e) {
      if (e < p.ymin - 1e-9 || e > p.ymax + 1e-9) continue;
      const double y = p.Y(std::pow(10.0, e));
      *svg += "<line x1=\"" + Num(p.x0 - 5) + "\" y1=\"" + Num(y) + "\" x2=\"" + Num(p.x0 + p.w) +
              "\" y2=\"" + Num(y) + "\" stroke=\"#ddd\"/>\n";
      *svg += "<text x=\"" + Num(p.x0 - 8) + "\" y=\"" + Num(y + 4) + "\" text-anchor=\"end\">" +
              "1e" + std::to_string(e) + "</text>\n";
    }
  } else {
    const double ys = TickStep(p.ymax - p.ymin, 6);
    for (double v = std::ceil(p.ymin / ys) * ys; v <= p.ymax + 1e-9; v += ys) {
      const double y = p.Y(v);
      *svg += "<line x1=\"" + Num(p.x0 - 5) + "\" y1=\"" + Num(y) + "\" x2=\"" + Num(p.x0 + p.w) +
              "\" y2=\"" + Num(y) + "\" stroke=\"#ddd\"/>\n";
      *svg += "<text x=\"" + Num(p.x0 - 8) + "\" y=\"" + Num(y + 4) + "\" text-anchor=\"end\">" +
              TickLabel(v) + "</text>\n";
    }
  }
  *svg += "<text transform=\"translate(" + Num(p.x0 - 52) + "," + Num(p.y0 + p.h / 2) +
          ") rotate(-90)\" text-anchor=\"middle\">" + Escape(ylabel) + "</text>\n";
}

// A closed band between two per-point values.
template <typename Lo, typename Hi>
std::string Band(const Panel& p, const std::vector<TimePoint>& s, Lo lo, Hi hi) {
  std::string pts;
  for (const TimePoint& tp : s) pts += Num(p.X(tp.t_s)) + "," + Num(p.Y(hi(tp))) + " ";
  for (auto it = s.rbegin(); it != s.rend(); ++it) {
    pts += Num(p.X(it->t_s)) + "," + Num(p.Y(lo(*it))) + " ";
  }
  return pts;
}

}  // namespace

std::string RenderProgressSvg(const std::vector<PlotRun>& runs, const std::string& title) {
  double tmax = 0, smax = 1, emin = 0, emax = 0;
  bool any_error = false;
  for (const PlotRun& r : runs) {
    for (const TimePoint& tp : r.series) {
      tmax = std::max(tmax, tp.t_s);
      smax = std::max(smax, static_cast<double>(tp.max));
      if (tp.error && *tp.error > 0) {
        const double e = std::log10(*tp.error);
        emin = any_error ? std::min(emin, e) : e;
        emax = any_error ? std::max(emax, e) : e;
        any_error = true;
      }
    }
  }
  const int panels = any_error ? 2 : 1;
  const int height = kTop + panels * kPanelHeight + (panels - 1) * kGap + kBottom;
  std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + std::to_string(kWidth) +
                    "\" height=\"" + std::to_string(height) +
                    "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  svg += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  svg += "<text x=\"" + std::to_string(kWidth / 2) +
         "\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">" + Escape(title) + "</text>\n";

  const double pw = kWidth - kLeft - kRight;
  Panel progress{kLeft, kTop, pw, kPanelHeight, tmax, 0, smax * 1.05, false};
  Axes(&svg, progress, "steps per node (median, p10-p90, min-max)");
  for (size_t k = 0; k < runs.size(); ++k) {
    const char* color = kColors[k % (sizeof(kColors) / sizeof(kColors[0]))];
    const std::vector<TimePoint>& s = runs[k].series;
    if (s.empty()) continue;
    auto as = [](uint64_t v) { return static_cast<double>(v); };
    svg += "<polygon fill=\"" + std::string(color) + "\" fill-opacity=\"0.10\" points=\"" +
           Band(
               progress, s, [&](const TimePoint& t) { return as(t.min); },
               [&](const TimePoint& t) { return as(t.max); }) +
           "\"/>\n";
    svg += "<polygon fill=\"" + std::string(color) + "\" fill-opacity=\"0.25\" points=\"" +
           Band(
               progress, s, [&](const TimePoint& t) { return as(t.p10); },
               [&](const TimePoint& t) { return as(t.p90); }) +
           "\"/>\n";
    std::string line;
    for (const TimePoint& tp : s)
      line += Num(progress.X(tp.t_s)) + "," + Num(progress.Y(as(tp.median))) + " ";
    svg += "<polyline fill=\"none\" stroke=\"" + std::string(color) +
           "\" stroke-width=\"2\" points=\"" + line + "\"/>\n";
  }

  if (any_error) {
    if (emax - emin < 1) emax = emin + 1;
    Panel err{kLeft,
              kTop + kPanelHeight + kGap,
              pw,
              kPanelHeight,
              tmax,
              std::floor(emin),
              std::ceil(emax),
              true};
    Axes(&svg, err, "model error (mean node test MSE)");
    for (size_t k = 0; k < runs.size(); ++k) {
      const char* color = kColors[k % (sizeof(kColors) / sizeof(kColors[0]))];
      std::string line;
      for (const TimePoint& tp : runs[k].series) {
        if (tp.error) line += Num(err.X(tp.t_s)) + "," + Num(err.Y(*tp.error)) + " ";
      }
      if (line.empty()) continue;
      svg += "<polyline fill=\"none\" stroke=\"" + std::string(color) +
             "\" stroke-width=\"2\" points=\"" + line + "\"/>\n";
    }
  }

  // Legend.
  for (size_t k = 0; k < runs.size(); ++k) {
    const char* color = kColors[k % (sizeof(kColors) / sizeof(kColors[0]))];
    const double y = kTop + 10 + 20.0 * static_cast<double>(k);
    const double x = kLeft + pw + 15;
    svg += "<rect x=\"" + Num(x) + "\" y=\"" + Num(y - 9) +
           "\" width=\"18\" height=\"10\" fill=\"" + color + "\"/>\n";
    svg += "<text x=\"" + Num(x + 24) + "\" y=\"" + Num(y) + "\">" + Escape(runs[k].label) +
           "</text>\n";
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace meshtrain::sim
