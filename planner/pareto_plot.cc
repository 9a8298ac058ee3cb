// ParetoPlotSvg: memory (x) against throughput (y) of the listed and Pareto plans.
#include "planner/pareto_plot.h"

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <vector>

#include "model/text.h"

namespace shardtune::planner {
namespace {

std::string Num(double v) { return model::FormatNumber(v, "%.1f"); }

}  // namespace

std::string ParetoPlotSvg(const SearchResult& r, const std::string& title) {
  std::vector<const Candidate*> points;
  for (const auto& c : r.pareto) points.push_back(&c);
  for (const auto& c : r.top) points.push_back(&c);
  // Axes over the plans' range, not from zero: the front usually spans a few GiB and a few
  // percent of tokens/s, which a zero-based axis flattens into one dot.
  double x_lo = 1e300, x_hi = 0, y_lo = 1e300, y_hi = 0;
  Bytes capacity;
  for (const Candidate* c : points) {
    x_lo = std::min(x_lo, c->required.gib());
    x_hi = std::max({x_hi, c->required.gib(), c->capacity.gib()});
    y_lo = std::min(y_lo, c->tokens_per_s);
    y_hi = std::max(y_hi, c->tokens_per_s);
    capacity = std::max(capacity, c->capacity);
  }
  if (points.empty()) x_lo = 0, x_hi = 1, y_lo = 0, y_hi = 1;
  double x_pad = std::max(0.5, 0.08 * (x_hi - x_lo)), y_pad = std::max(1.0, 0.12 * (y_hi - y_lo));
  x_lo = std::max(0.0, x_lo - x_pad);
  x_hi += x_pad;
  y_lo = std::max(0.0, y_lo - y_pad);
  y_hi += y_pad;
  const double left = 80, top = 50, width = 860, height = 380;
  auto X = [&](double gib) { return left + width * (gib - x_lo) / (x_hi - x_lo); };
  auto Y = [&](double tps) { return top + height - height * (tps - y_lo) / (y_hi - y_lo); };
  std::ostringstream s;
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"1000\" height=\"520\" viewBox=\"0 0 1000 520\" "
       "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"1000\" height=\"520\" fill=\"white\"/>\n";
  s << "<text x=\"" << left << "\" y=\"24\" font-size=\"15\" font-weight=\"bold\">" << model::EscapeXml(title)
    << "</text>\n<text x=\"" << left << "\" y=\"40\">per-GPU memory required (x) against tokens/s (y): "
       "the Pareto front joined, the top plans as circles, the winner in red</text>\n";
  s << "<line x1=\"" << left << "\" x2=\"" << left + width << "\" y1=\"" << top + height << "\" y2=\""
    << top + height << "\" stroke=\"#555555\"/>\n<line x1=\"" << left << "\" x2=\"" << left << "\" y1=\""
    << top << "\" y2=\"" << top + height << "\" stroke=\"#555555\"/>\n";
  for (int k = 0; k <= 5; ++k) {
    double gib = x_lo + (x_hi - x_lo) * k / 5, tps = y_lo + (y_hi - y_lo) * k / 5;
    s << "<text x=\"" << Num(X(gib)) << "\" y=\"" << top + height + 16 << "\" text-anchor=\"middle\">"
      << Num(gib) << " GiB</text>\n";
    s << "<text x=\"" << left - 6 << "\" y=\"" << Num(Y(tps) + 4) << "\" text-anchor=\"end\">"
      << static_cast<long long>(tps) << "</text>\n";
  }
  s << "<text x=\"" << left + width / 2 << "\" y=\"" << top + height + 32
    << "\" text-anchor=\"middle\">required per GPU (reserved + outside the allocator)</text>\n"
    << "<text x=\"16\" y=\"" << top + height / 2 << "\" transform=\"rotate(-90 16 " << top + height / 2
    << ")\" text-anchor=\"middle\">tokens/s</text>\n";
  if (capacity.count() > 0) {
    s << "<line x1=\"" << Num(X(capacity.gib())) << "\" x2=\"" << Num(X(capacity.gib())) << "\" y1=\"" << top
      << "\" y2=\"" << top + height << "\" stroke=\"#d62728\" stroke-width=\"1.5\"/>\n<text x=\""
      << Num(X(capacity.gib()) - 4) << "\" y=\"" << top + 12 << "\" text-anchor=\"end\" fill=\"#d62728\">"
      << "usable capacity " << model::GiBText(capacity) << "</text>\n";
  }
  if (!r.pareto.empty()) {
    s << "<polyline fill=\"none\" stroke=\"#4e79a7\" stroke-width=\"1.5\" points=\"";
    for (const auto& c : r.pareto) s << Num(X(c.required.gib())) << "," << Num(Y(c.tokens_per_s)) << " ";
    s << "\"/>\n";
    for (const auto& c : r.pareto) {
      s << "<rect x=\"" << Num(X(c.required.gib()) - 3) << "\" y=\"" << Num(Y(c.tokens_per_s) - 3)
        << "\" width=\"6\" height=\"6\" fill=\"#4e79a7\"><title>" << model::EscapeXml(c.key) << ": "
        << model::GiBText(c.required) << ", " << static_cast<long long>(c.tokens_per_s)
        << " tokens/s</title></rect>\n";
    }
  }
  for (size_t i = 0; i < r.top.size(); ++i) {
    const Candidate& c = r.top[i];
    bool winner = i == 0;
    s << "<circle cx=\"" << Num(X(c.required.gib())) << "\" cy=\"" << Num(Y(c.tokens_per_s)) << "\" r=\""
      << (winner ? 6 : 4) << "\" fill=\"" << (winner ? "#d62728" : "none") << "\" stroke=\"#d62728\"><title>#"
      << i + 1 << " " << model::EscapeXml(c.key) << "</title></circle>\n";
    if (!winner) {
      s << "<text x=\"" << Num(X(c.required.gib()) + 6) << "\" y=\"" << Num(Y(c.tokens_per_s) + 14)
        << "\" fill=\"#d62728\">#" << i + 1 << "</text>\n";
    }
  }
  if (!r.top.empty()) {
    const Candidate& w = r.top.front();
    s << "<text x=\"" << Num(std::min(X(w.required.gib()) + 10, left + width - 420)) << "\" y=\""
      << Num(std::max(Y(w.tokens_per_s) - 10, top + 26.0)) << "\" font-weight=\"bold\">winner: "
      << static_cast<long long>(w.tokens_per_s) << " tokens/s, needs " << model::GiBText(w.required)
      << "</text>\n<text x=\"" << left << "\" y=\"" << top + height + 56 << "\">winner: "
      << model::EscapeXml(w.key) << "</text>\n";
  } else {
    s << "<text x=\"" << left << "\" y=\"" << top + height / 2 << "\">no plan fits</text>\n";
  }
  s << "</svg>\n";
  return s.str();
}

}  // namespace shardtune::planner
