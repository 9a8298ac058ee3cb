// MemoryPlotSvg: stacked step chart of allocated bytes per category over the program's ops, with
// reserved, capacity and the peak marked, and a bar per job phase.
#include "simulator/memory_plot.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "model/errors.h"
#include "model/text.h"
#include "simulator/memory_ledger.h"
#include "simulator/trace_json.h"

namespace shardtune::sim {
namespace {

// One colour per category, in stacking order (persistent states at the bottom).
constexpr std::array<const char*, kNumCategories> kColours = {
    "#4e79a7", "#76b7b2", "#59a14f", "#8cd17d", "#f28e2b", "#ffbe7d", "#e15759",
    "#ff9d9a", "#b07aa1", "#9c755f", "#edc948", "#bab0ac", "#d37295", "#79706e",
    "#a0cbe8"};
constexpr const char* kOutsideColour = "#cccccc";

std::string Escape(const std::string& s) { return model::EscapeXml(s); }

std::string GiB(int64_t b) { return model::GiBText(Bytes::Of(b)); }

std::string Num(double v) { return model::FormatNumber(v, "%.1f"); }

}  // namespace

std::vector<CategoryBytes> CategoriesAtOpPeaks(const StepProgram& p) {
  std::vector<CategoryBytes> out(p.ops.size());
  CategoryBytes cur{};
  int64_t total = 0;
  for (size_t i = 0; i < p.ops.size(); ++i) {
    CategoryBytes at = cur;
    int64_t peak = total;
    for (uint32_t a = p.ops[i].mem_begin; a < p.ops[i].mem_end; ++a) {
      const MemAction& m = p.actions[a];
      auto c = static_cast<size_t>(m.category);
      int64_t b = RoundToBlock(m.bytes < 0 ? -m.bytes : m.bytes);
      cur[c] += m.bytes > 0 ? b : -b;
      total += m.bytes > 0 ? b : -b;
      if (total > peak) {
        peak = total;
        at = cur;
      }
    }
    out[i] = at;
  }
  return out;
}

namespace {

// The step panel's geometry (SVG user units) and scale: one column per op, bytes up to y_max.
struct StepPanel {
  double left = 70, top = 50, width = 880, height = 320;
  size_t columns = 1;
  int64_t y_max = 1;
  double X(size_t i) const { return left + width * static_cast<double>(i) / static_cast<double>(columns); }
  double Y(int64_t b) const { return top + height - height * static_cast<double>(b) / static_cast<double>(y_max); }
};

// Gridlines every fifth of the range, rounded to whole GiB, with their labels.
void DrawAxis(const StepPanel& f, std::ostringstream& s) {
  const int64_t gib = int64_t{1} << 30;
  int64_t tick = std::max<int64_t>(1, f.y_max / 5 / gib) * gib;
  for (int64_t v = 0; v <= f.y_max; v += tick) {
    s << "<line x1=\"" << f.left << "\" x2=\"" << f.left + f.width << "\" y1=\"" << Num(f.Y(v)) << "\" y2=\""
      << Num(f.Y(v)) << "\" stroke=\"#eeeeee\"/>\n";
    s << "<text x=\"" << f.left - 6 << "\" y=\"" << Num(f.Y(v) + 4) << "\" text-anchor=\"end\">"
      << v / gib << " GiB</text>\n";
  }
}

// The polygon of the band between `below` and `below` + `add` per column.
void DrawBand(const StepPanel& f, const std::vector<int64_t>& below, const std::vector<int64_t>& add,
              const char* fill, const std::string& title, std::ostringstream& s) {
  std::ostringstream upper, lower;
  for (size_t i = 0; i < below.size(); ++i) {
    const int64_t y = below[i] + add[i];
    upper << Num(f.X(i)) << "," << Num(f.Y(y)) << " " << Num(f.X(i + 1)) << "," << Num(f.Y(y)) << " ";
  }
  for (size_t i = below.size(); i-- > 0;) {
    lower << Num(f.X(i + 1)) << "," << Num(f.Y(below[i])) << " " << Num(f.X(i)) << "," << Num(f.Y(below[i])) << " ";
  }
  s << "<polygon fill=\"" << fill << "\" stroke=\"none\" points=\"" << upper.str() << lower.str()
    << "\"><title>" << title << "</title></polygon>\n";
}

// Stacked areas: each category's band between the running sums below and including it, then the
// memory outside the allocator on top. Returns the categories drawn, in stacking order.
std::vector<size_t> DrawStackedCategories(const StepPanel& f, const std::vector<CategoryBytes>& cats,
                                          int64_t outside, std::ostringstream& s) {
  std::vector<int64_t> below(cats.size(), 0), add(cats.size(), 0);
  std::vector<size_t> shown;
  for (size_t c = 0; c < static_cast<size_t>(kNumCategories); ++c) {
    int64_t most = 0;
    for (const auto& v : cats) most = std::max(most, v[c]);
    if (most <= 0) continue;
    shown.push_back(c);
    for (size_t i = 0; i < cats.size(); ++i) add[i] = std::max<int64_t>(0, cats[i][c]);
    DrawBand(f, below, add, kColours[c], Escape(ToString(static_cast<Category>(c))), s);
    for (size_t i = 0; i < cats.size(); ++i) below[i] += add[i];
  }
  if (outside > 0) {
    std::fill(add.begin(), add.end(), outside);
    DrawBand(f, below, add, kOutsideColour, "outside the allocator (CUDA context, NCCL)", s);
  }
  return shown;
}

// A dashed line at each step's first op.
void DrawStepBoundaries(const StepPanel& f, const StepProgram& p, std::ostringstream& s) {
  for (int step = 0; step < 2; ++step) {
    for (size_t i = 0; i < p.ops.size(); ++i) {
      if (p.ops[i].step == step && p.ops[i].kind != OpKind::kStartup) {
        s << "<line x1=\"" << Num(f.X(i)) << "\" x2=\"" << Num(f.X(i)) << "\" y1=\"" << f.top << "\" y2=\""
          << f.top + f.height << "\" stroke=\"#555555\" stroke-dasharray=\"2,3\"/>\n";
        s << "<text x=\"" << Num(f.X(i) + 3) << "\" y=\"" << f.top + 12 << "\">step " << step << "</text>\n";
        break;
      }
    }
  }
}

// Reserved (an outline: allocated + cached free blocks, + outside), per step when replayed; the
// usable capacity; the measured peak when there is one.
void DrawReferenceLines(const StepPanel& f, const StepProgram& p, const MemoryReport& r, int64_t outside,
                        const MeasuredMemory* measured, std::ostringstream& s) {
  auto hline = [&](double x1, double x2, int64_t b, const char* colour, const char* dash,
                   const std::string& label) {
    s << "<line x1=\"" << Num(x1) << "\" x2=\"" << Num(x2) << "\" y1=\"" << Num(f.Y(b)) << "\" y2=\""
      << Num(f.Y(b)) << "\" stroke=\"" << colour << "\" stroke-width=\"1.5\" stroke-dasharray=\"" << dash
      << "\"/>\n";
    s << "<text x=\"" << Num(x2 - 4) << "\" y=\"" << Num(f.Y(b) - 4) << "\" text-anchor=\"end\" fill=\""
      << colour << "\">" << Escape(label) << "</text>\n";
  };
  const double left = f.left, right = f.left + f.width;
  if (r.allocator_replayed) {
    size_t first1 = p.ops.size();
    for (size_t i = 0; i < p.ops.size(); ++i) {
      if (p.ops[i].step == 1) {
        first1 = i;
        break;
      }
    }
    hline(left, f.X(first1), r.reserved_step0.count() + outside, "#333333", "6,3",
          "reserved + outside, step 0: " + GiB(r.reserved_step0.count() + outside));
    hline(f.X(first1), right, r.reserved_steady.count() + outside, "#333333", "6,3",
          "reserved + outside, steady: " + GiB(r.reserved_steady.count() + outside));
  } else {
    hline(left, right, r.reserved_no_pressure.count() + outside, "#333333", "6,3",
          "reserved + outside: " + GiB(r.reserved_no_pressure.count() + outside));
  }
  hline(left, right, r.capacity.count(), "#d62728", "none", "usable capacity " + GiB(r.capacity.count()));
  if (measured && measured->peak_tracked.count() > 0) {
    hline(left, right, measured->peak_tracked.count(), "#000000", "1,2",
          "measured peak allocated (tracked): " + GiB(measured->peak_tracked.count()));
  }
}

// The peak's moment: a dot on the highest column and its label beside it, on the side with more
// room (the reserved and capacity labels sit at the right end above their lines), with a white
// halo over the lines it crosses.
void DrawPeak(const StepPanel& f, const StepProgram& p, const std::vector<CategoryBytes>& cats,
              int64_t outside, std::ostringstream& s) {
  size_t peak_op = 0;
  int64_t peak = -1;
  for (size_t i = 0; i < cats.size(); ++i) {
    int64_t t = 0;
    for (int64_t v : cats[i]) t += v;
    if (t > peak) {
      peak = t;
      peak_op = i;
    }
  }
  double px = (f.X(peak_op) + f.X(peak_op + 1)) / 2;
  s << "<circle cx=\"" << Num(px) << "\" cy=\"" << Num(f.Y(peak + outside)) << "\" r=\"4\" fill=\"black\"/>\n";
  bool right_half = px > f.left + f.width / 2;
  s << "<text x=\"" << Num(right_half ? px - 8 : px + 8) << "\" y=\"" << Num(f.Y(peak + outside) + 4)
    << "\" text-anchor=\"" << (right_half ? "end" : "start")
    << "\" font-weight=\"bold\" paint-order=\"stroke\" stroke=\"white\" stroke-width=\"3\">peak "
    << GiB(peak) << " allocated: " << Escape(p.ops.empty() ? "" : p.OpName(peak_op)) << "</text>\n";
}

// One swatch per category drawn (and the outside band), wrapped to the panel's width.
void DrawLegend(const StepPanel& f, std::vector<size_t> shown, int64_t outside, std::ostringstream& s) {
  double lx = f.left, ly = f.top + f.height + 24;
  shown.push_back(static_cast<size_t>(kNumCategories));  // outside the allocator
  for (size_t c : shown) {
    bool out_band = c == static_cast<size_t>(kNumCategories);
    if (out_band && outside <= 0) continue;
    std::string name = out_band ? "outside the allocator" : ToString(static_cast<Category>(c));
    double w = 26 + 7.0 * static_cast<double>(name.size());  // ~7 px per character at 12 px
    if (lx + w > f.left + f.width) {
      lx = f.left;
      ly += 18;
    }
    s << "<rect x=\"" << Num(lx) << "\" y=\"" << Num(ly - 10) << "\" width=\"12\" height=\"12\" fill=\""
      << (out_band ? kOutsideColour : kColours[c]) << "\"/>\n";
    s << "<text x=\"" << Num(lx + 16) << "\" y=\"" << Num(ly) << "\">" << Escape(name) << "</text>\n";
    lx += w;
  }
}

// Job phases: allocated peak (bar) and required (outlined) against the capacity, with the
// measured peaks when there are some.
void DrawPhasePanel(const StepPanel& f, double phase_top, double phase_height, const JobPhases& phases,
                    const MeasuredMemory* measured, std::ostringstream& s) {
  const double left = f.left, width = f.width;
  int64_t pmax = phases.capacity.count();
  for (const auto& ph : phases.phases) pmax = std::max(pmax, ph.required.count());
  if (measured) {
    for (const auto& [name, b] : measured->phase_peaks) pmax = std::max(pmax, b.count());
  }
  pmax += pmax / 10;
  auto PY = [&](int64_t b) {
    return phase_top + phase_height - phase_height * static_cast<double>(b) / static_cast<double>(pmax);
  };
  s << "<text x=\"" << left << "\" y=\"" << Num(phase_top - 14) << "\" font-weight=\"bold\">Job phases: "
       "allocated peak (filled) and required = reserved + outside the allocator (outlined)</text>\n";
  double slot = width / static_cast<double>(phases.phases.size());
  for (size_t k = 0; k < phases.phases.size(); ++k) {
    const PhaseMemory& ph = phases.phases[k];
    double x = left + slot * static_cast<double>(k) + slot * 0.2, w = slot * 0.6;
    s << "<rect x=\"" << Num(x) << "\" y=\"" << Num(PY(ph.allocated_peak.count())) << "\" width=\""
      << Num(w) << "\" height=\"" << Num(PY(0) - PY(ph.allocated_peak.count()))
      << "\" fill=\"#4e79a7\"><title>" << Escape(ph.moment) << "</title></rect>\n";
    s << "<rect x=\"" << Num(x) << "\" y=\"" << Num(PY(ph.required.count())) << "\" width=\"" << Num(w)
      << "\" height=\"" << Num(PY(0) - PY(ph.required.count())) << "\" fill=\"none\" stroke=\""
      << (ph.fits ? "#333333" : "#d62728") << "\" stroke-width=\"1.5\"/>\n";
    s << "<text x=\"" << Num(x + w / 2) << "\" y=\"" << Num(PY(0) + 16) << "\" text-anchor=\"middle\">"
      << Escape(ToString(ph.phase)) << "</text>\n";
    s << "<text x=\"" << Num(x + w / 2) << "\" y=\"" << Num(PY(ph.required.count()) - 4)
      << "\" text-anchor=\"middle\">" << GiB(ph.required.count()) << (ph.fits ? "" : " OOM")
      << "</text>\n";
    if (!measured) continue;
    for (const auto& [name, b] : measured->phase_peaks) {
      if (name != ToString(ph.phase)) continue;
      double cx = x + w / 2, cy = PY(b.count());
      s << "<polygon points=\"" << Num(cx) << "," << Num(cy - 6) << " " << Num(cx + 6) << "," << Num(cy)
        << " " << Num(cx) << "," << Num(cy + 6) << " " << Num(cx - 6) << "," << Num(cy)
        << "\" fill=\"black\"><title>measured</title></polygon>\n";
      s << "<text x=\"" << Num(cx + 9) << "\" y=\"" << Num(cy + 4) << "\">measured " << GiB(b.count())
        << "</text>\n";
    }
  }
  s << "<line x1=\"" << left << "\" x2=\"" << left + width << "\" y1=\"" << Num(PY(phases.capacity.count()))
    << "\" y2=\"" << Num(PY(phases.capacity.count())) << "\" stroke=\"#d62728\" stroke-width=\"1.5\"/>\n";
  s << "<line x1=\"" << left << "\" x2=\"" << left + width << "\" y1=\"" << Num(PY(0)) << "\" y2=\""
    << Num(PY(0)) << "\" stroke=\"#555555\"/>\n";
}

}  // namespace

std::string MemoryPlotSvg(const StepProgram& p, const MemoryReport& r, const JobPhases* phases,
                          const std::string& title, const MeasuredMemory* measured) {
  std::vector<CategoryBytes> cats = CategoriesAtOpPeaks(p);
  const int64_t outside = r.outside_total.count();
  int64_t reserved_top = r.allocator_replayed ? std::max(r.reserved_step0, r.reserved_steady).count()
                                              : r.reserved_no_pressure.count();
  StepPanel f;
  f.columns = std::max<size_t>(1, cats.size());
  int64_t y_max = std::max({r.capacity.count(), r.peak_allocated.count() + outside,
                            reserved_top + outside, int64_t{1}});
  if (measured) y_max = std::max(y_max, measured->peak_tracked.count());
  f.y_max = y_max + y_max / 10;
  const double phase_top = f.top + f.height + 120, phase_height = 170;
  const double total_height = phases ? phase_top + phase_height + 60 : f.top + f.height + 150;
  std::ostringstream s;
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"1000\" height=\"" << Num(total_height)
    << "\" viewBox=\"0 0 1000 " << Num(total_height) << "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  s << "<rect width=\"1000\" height=\"" << Num(total_height) << "\" fill=\"white\"/>\n";
  s << "<text x=\"" << f.left << "\" y=\"24\" font-size=\"15\" font-weight=\"bold\">" << Escape(title)
    << "</text>\n";
  s << "<text x=\"" << f.left << "\" y=\"40\">GPU memory per rank over start-up, step 0 and step 1 "
       "(one column per op; allocated bytes stacked by category, memory outside the allocator on top)</text>\n";
  DrawAxis(f, s);
  const std::vector<size_t> shown = DrawStackedCategories(f, cats, outside, s);
  DrawStepBoundaries(f, p, s);
  DrawReferenceLines(f, p, r, outside, measured, s);
  DrawPeak(f, p, cats, outside, s);
  DrawLegend(f, shown, outside, s);
  if (phases && !phases->phases.empty()) DrawPhasePanel(f, phase_top, phase_height, *phases, measured, s);
  s << "</svg>\n";
  return s.str();
}

void WritePlotDocument(const std::string& path, const std::string& flag, const std::string& svg,
                       const std::string& title) {
  CheckPlotName(path, flag);
  if (!model::HasExtension(path, ".html")) {
    WriteFileAtomically(path, svg);
    return;
  }
  WriteFileAtomically(path, "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>" +
                                Escape(title) + "</title></head>\n<body>\n" + svg + "</body></html>\n");
}

void WriteMemoryPlot(const std::string& path, const std::string& flag, const StepProgram& program,
                     const MemoryReport& report, const JobPhases* phases, const std::string& title) {
  WritePlotDocument(path, flag, MemoryPlotSvg(program, report, phases, title), title);
}

void CheckPlotName(const std::string& path, const std::string& flag) {
  if (!model::HasExtension(path, ".html") && !model::HasExtension(path, ".svg")) {
    throw InputError(flag + ": expected a file name ending in .svg or .html, got \"" + path + "\"");
  }
}

}  // namespace shardtune::sim
