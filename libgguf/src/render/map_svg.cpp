// The map of a mix as plain SVG: cells of layers by roles, coloured by bits per weight or by the
// error of B against A, with titles, labels and a legend; nothing but rects and text.
#include "gguf/render/map_svg.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "gguf/base/escape.h"
#include "gguf/base/table.h"
#include "gguf/base/units.h"
#include "gguf/format/types.h"

namespace gguf {
namespace {

constexpr int kLabelW = 64, kCellW = 84, kCellH = 18, kTop = 64, kLegendH = 64, kMinW = 640;

// Text from a file (names, paths) for an XML document: terminal-escaped first, so no control
// character (which XML 1.0 forbids) or invalid UTF-8 remains, then the XML specials.
std::string xml(std::string_view s) {
  std::string out;
  for (char c : escape_for_terminal(s)) switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  return out;
}

std::string rgb_of_hsl(double h, double s, double l) {
  const double c = (1 - std::fabs(2 * l - 1)) * s;
  const double hp = h / 60.0;
  const double x = c * (1 - std::fabs(std::fmod(hp, 2.0) - 1));
  double r = 0, g = 0, b = 0;
  if (hp < 1) {
    r = c, g = x;
  } else if (hp < 2) {
    r = x, g = c;
  } else if (hp < 3) {
    g = c, b = x;
  } else if (hp < 4) {
    g = x, b = c;
  } else if (hp < 5) {
    r = x, b = c;
  } else {
    r = c, b = x;
  }
  const double m = l - c / 2;
  const auto byte = [m](double v) {
    return static_cast<int>(std::lround(std::clamp(v + m, 0.0, 1.0) * 255));
  };
  return fmt::format("#{:02x}{:02x}{:02x}", byte(r), byte(g), byte(b));
}

// Bits per weight from 1.5 (red) through 4 (yellow-green) to 32 (violet), on a log scale.
std::string bpw_colour(double bpw) {
  const double t = std::clamp(std::log(bpw / 1.5) / std::log(32 / 1.5), 0.0, 1.0);
  return rgb_of_hsl(270 * t, 0.75, 0.62);
}

// Relative error from 1e-4 (green) to 1 (red), on a log scale; none at all is pale green.
std::string error_colour(double e) {
  if (e <= 0) return rgb_of_hsl(120, 0.5, 0.82);
  const double t = std::clamp((std::log10(e) + 4) / 4, 0.0, 1.0);
  return rgb_of_hsl(120 * (1 - t), 0.75, 0.58);
}

std::string row_label(const std::optional<int>& layer) {
  return layer ? std::to_string(*layer) : std::string("-");
}

std::string pct(uint64_t part, uint64_t whole) {
  return whole ? fmt::format("{:.1f}%",
                             100.0 * static_cast<double>(part) / static_cast<double>(whole))
               : "-";
}

// Cells keyed by (row, role), row -1 for tensors outside layers.
struct Builder {
  std::map<std::pair<long, int>, MapCell> cells;
  std::map<std::pair<long, int>, ErrorMetrics> pooled;
  MapCell& at(std::optional<int> layer, Role role) {
    auto& c = cells[{layer ? *layer : -1L, static_cast<int>(role)}];
    c.layer = layer;
    c.role = role;
    return c;
  }
  static void add_type(MapCell& c, uint32_t type, uint64_t params) {
    for (auto& [t, p] : c.types)
      if (t == type) {
        p += params;
        return;
      }
    c.types.emplace_back(type, params);
  }
  std::vector<MapCell> done() {
    std::vector<MapCell> out;
    for (auto& [key, c] : cells) {
      std::stable_sort(c.types.begin(), c.types.end(), [](const auto& a, const auto& b) {
        return a.second != b.second ? a.second > b.second : a.first < b.first;
      });
      out.push_back(std::move(c));
    }
    return out;
  }
};

uint64_t elements(const std::vector<int64_t>& shape) {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(std::max<int64_t>(d, 0));
  return n;
}

std::string types_text(const MapCell& c) {
  std::string out;
  for (const auto& [t, p] : c.types) {
    if (!out.empty()) out += ", ";
    out += type_name(t);
    if (c.types.size() > 1) out += fmt::format(" {}", pct(p, c.params));
  }
  if (c.types.size() > 1) out += fmt::format(" (dominant {})", type_name(c.types.front().first));
  return out;
}

}  // namespace

std::optional<double> MapCell::bpw() const {
  if (!sized_params || sized_params != params) return std::nullopt;
  return 8.0 * static_cast<double>(bytes) / static_cast<double>(params);
}

TypeMap type_map(const InspectReport& r) {
  Builder b;
  for (const auto& t : r.tensors) {
    MapCell& c = b.at(t.layer, t.role);
    ++c.tensors;
    c.params += t.n_elements;
    if (t.bytes) {
      c.bytes += *t.bytes;
      c.sized_params += t.n_elements;
    }
    Builder::add_type(c, t.type_id, t.n_elements);
  }
  TypeMap m;
  m.cells = b.done();
  std::string files;
  for (const auto& f : r.files) files += (files.empty() ? "" : ", ") + f;
  m.heading = fmt::format(
      "{}: {} tensors, {} params, {}, {}", files, r.tensors.size(), short_count(r.params),
      human_bytes(r.tensor_bytes),
      r.sized_params ? fmt::format("{:.2f} bpw", 8.0 * static_cast<double>(r.tensor_bytes) /
                                                     static_cast<double>(r.sized_params))
                     : std::string("bpw unknown"));
  return m;
}

TypeMap error_map(const DiffReport& r) {
  Builder b;
  uint64_t measured = 0;
  for (const auto& t : r.tensors) {
    if (!t.b) continue;  // only in A: not in the picture of B
    MapCell& c = b.at(t.layer, t.role);
    const uint64_t n = elements(t.b->shape);
    ++c.tensors;
    c.params += n;
    if (t.b->bytes) {
      c.bytes += *t.b->bytes;
      c.sized_params += n;
    }
    Builder::add_type(c, t.b->type_id, n);
    if (t.change == TensorChange::kSame) ++c.identical;
    if (t.metrics) {
      ++c.measured;
      ++measured;
      b.pooled[{t.layer ? *t.layer : -1L, static_cast<int>(t.role)}].pool(*t.metrics);
    }
  }
  for (auto& [key, c] : b.cells) {
    const auto it = b.pooled.find(key);
    if (it != b.pooled.end()) {
      const double w = it->second.weighted_rel();
      c.error = r.weighted && !std::isnan(w) ? w : it->second.rel();
    } else if (c.identical == c.tensors) {
      c.error = 0.0;
    }
  }
  TypeMap m;
  m.error_scale = true;
  m.weighted = r.weighted;
  m.cells = b.done();
  std::string a, bs;
  for (const auto& f : r.files_a) a += (a.empty() ? "" : ", ") + f;
  for (const auto& f : r.files_b) bs += (bs.empty() ? "" : ", ") + f;
  m.heading = fmt::format(
      "{} against {}: {}relative error of {} tensors ({} measured, {} identical)", bs, a,
      r.weighted ? "importance-weighted " : "", r.tensors.size(), measured, r.counts.same);
  return m;
}

std::string render_map_svg(const TypeMap& m) {
  std::vector<Role> roles;
  std::vector<std::optional<int>> rows;
  for (Role role : all_roles())
    if (std::any_of(m.cells.begin(), m.cells.end(),
                    [&](const MapCell& c) { return c.role == role; }))
      roles.push_back(role);
  for (const auto& c : m.cells)
    if (std::find(rows.begin(), rows.end(), c.layer) == rows.end()) rows.push_back(c.layer);
  std::sort(rows.begin(), rows.end());  // nullopt (no layer) first
  const int width = std::max(kMinW, kLabelW + kCellW * static_cast<int>(roles.size()) + 16);
  const int height = kTop + kCellH * static_cast<int>(rows.size()) + kLegendH;
  std::string out = fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} "
      "{1}\" font-family=\"monospace\" font-size=\"11\">\n"
      "<title>{2}</title>\n"
      "<rect x=\"0\" y=\"0\" width=\"{0}\" height=\"{1}\" fill=\"#ffffff\"/>\n"
      "<text x=\"8\" y=\"18\" font-size=\"12\">{2}</text>\n",
      width, height, xml(m.heading));
  for (size_t k = 0; k < roles.size(); ++k)
    out += fmt::format("<text class=\"role\" x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n",
                       kLabelW + kCellW * static_cast<int>(k) + kCellW / 2, kTop - 8,
                       role_name(roles[k]));
  out += fmt::format("<text x=\"8\" y=\"{}\">layer</text>\n", kTop - 8);
  for (size_t i = 0; i < rows.size(); ++i) {
    const int y = kTop + kCellH * static_cast<int>(i);
    out += fmt::format("<text class=\"layer\" x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\n",
                       kLabelW - 8, y + kCellH - 5, row_label(rows[i]));
  }
  for (const auto& c : m.cells) {
    const auto row = std::find(rows.begin(), rows.end(), c.layer) - rows.begin();
    const auto col = std::find(roles.begin(), roles.end(), c.role) - roles.begin();
    const int x = kLabelW + kCellW * static_cast<int>(col);
    const int y = kTop + kCellH * static_cast<int>(row);
    const auto bpw = c.bpw();
    std::string fill = "#dddddd", measure;
    const std::string bpw_text = bpw ? fmt::format("{:.2f} bpw", *bpw) : "bpw unknown";
    if (m.error_scale) {
      if (c.error) fill = error_colour(*c.error);
      measure = c.error ? fmt::format("relative error {:.3g}{}", *c.error,
                                      m.weighted ? " (importance-weighted)" : "")
                        : "error not measured";
      measure += ", " + bpw_text;
    } else {
      if (bpw) fill = bpw_colour(*bpw);
      measure = bpw_text;
    }
    const std::string type = type_name(c.types.front().first);
    const bool mixed = c.types.size() > 1;
    out += fmt::format(
        "<g class=\"cell\" data-layer=\"{}\" data-role=\"{}\" data-type=\"{}\">"
        "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\" stroke=\"#ffffff\">"
        "<title>{}, {}: {}; {}; {} tensor{}, {} params</title></rect>"
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}{}</text></g>\n",
        row_label(c.layer), role_name(c.role), type, x, y, kCellW, kCellH, fill,
        c.layer ? fmt::format("layer {}", *c.layer) : std::string("outside layers"),
        role_name(c.role), types_text(c), measure, c.tensors, c.tensors == 1 ? "" : "s",
        short_count(c.params), x + kCellW / 2, y + kCellH - 5, type, mixed ? "*" : "");
  }
  // Legend.
  int y = kTop + kCellH * static_cast<int>(rows.size()) + 16;
  std::vector<std::pair<std::string, std::string>> swatches;
  if (m.error_scale) {
    swatches.emplace_back(error_colour(0), "0");
    for (double e : {1e-4, 1e-3, 1e-2, 1e-1, 1.0})
      swatches.emplace_back(error_colour(e), fmt::format("{:g}", e));
    swatches.emplace_back("#dddddd", "not measured");
  } else {
    for (double b : {1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 16.0, 32.0})
      swatches.emplace_back(bpw_colour(b), fmt::format("{:g}", b));
  }
  out += fmt::format(
      "<text x=\"8\" y=\"{}\">{}</text>\n", y + 12,
      m.error_scale ? (m.weighted ? "weighted rel. error" : "relative error") : "bits per weight");
  int x = 8 + 150;
  for (const auto& [colour, label] : swatches) {
    const int w = std::max(40, static_cast<int>(label.size()) * 7 + 8);
    out += fmt::format(
        "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"/>"
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n",
        x, y, w, kCellH, colour, x + w / 2, y + 12, label);
    x += w + 2;
  }
  out += fmt::format(
      "<text x=\"8\" y=\"{}\">* the cell holds several types; the one with most parameters is "
      "shown (all are in its title)</text>\n",
      y + kCellH + 18);
  out += "</svg>\n";
  return out;
}

}  // namespace gguf
