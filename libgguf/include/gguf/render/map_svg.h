// A picture of a mix: the model as a grid of layers by roles, each cell coloured by its bits
// per weight (gguf-inspect --map) or by the error of B against A (gguf-diff --values --map),
// written as plain SVG (no script, no external fonts).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "gguf/format/names.h"
#include "gguf/ops/diff.h"
#include "gguf/ops/inspect.h"

namespace gguf {

// The tensors of one layer (or of none) and one role.
struct MapCell {
  std::optional<int> layer;  // nullopt: the row of tensors outside layers (embedding, output)
  Role role = Role::kOther;
  // Parameters per type id, the dominant type (most parameters; the lower id on a tie) first.
  std::vector<std::pair<uint32_t, uint64_t>> types;
  uint64_t tensors = 0, params = 0, bytes = 0;
  // The size of a tensor whose type cannot be sized is unknown: such a cell has no bpw.
  uint64_t sized_params = 0;
  // gguf-diff: B's error against A pooled over the cell's measured tensors (weighted by the
  // importance matrix when one was given); nullopt when none was measured.
  std::optional<double> error;
  uint64_t measured = 0, identical = 0;  // tensors with metrics; of the cell, byte-identical
  std::optional<double> bpw() const;
};

struct TypeMap {
  std::string heading;  // the file(s) and totals
  bool error_scale = false;
  bool weighted = false;       // the errors are importance-weighted
  std::vector<MapCell> cells;  // ordered by row (no layer first, then layers) and role
};

// From gguf-inspect's report (its selected tensors).
TypeMap type_map(const InspectReport& r);
// From gguf-diff --values: B's tensors, coloured by their error against A.
TypeMap error_map(const DiffReport& r);

// The SVG document: one row per layer ("0" ... "42", the bare number as its own <text>) and a
// row for tensors outside layers, one column per role present; each cell a <rect> with a
// <title> naming layer, role, type(s) and bpw (or error), its type in ggml's spelling written in
// it (the dominant one, marked '*' when the cell holds several); a legend; totals in the title.
std::string render_map_svg(const TypeMap& m);

}  // namespace gguf
