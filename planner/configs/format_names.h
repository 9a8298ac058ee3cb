// The name <-> enum lookups behind ExportFormat and ImportFormat: each enum's names are one list
// in declaration order (ExportFormatNames, ImportFormatNames), so both directions index it.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "model/errors.h"
#include "model/strict_json.h"
#include "model/text.h"

namespace shardtune::configs::internal {

// The name of value `i` of an enum whose names are `names`; `kind` ("export format") names the
// enum in the check that fails for a value without a name.
inline const char* FormatName(const std::vector<std::string>& names, size_t i, const char* kind) {
  SHARDTUNE_CHECK(i < names.size()) << kind << " " << i << " has no name";
  return names[i].c_str();
}

// The index of `text` in `names`. Throws InputError "where: expected one of a, b, got " + `got`
// (the caller's quoting of `text`) and the closest name when it is none of them.
inline size_t ParseFormatName(const std::vector<std::string>& names, const std::string& text,
                              const std::string& where, const std::string& got) {
  auto it = std::find(names.begin(), names.end(), text);
  if (it != names.end()) return static_cast<size_t>(it - names.begin());
  std::string hint = model::ClosestName(text, names);
  throw InputError(where + ": expected one of " + model::Join(names, ", ") + ", got " + got +
                   model::DidYouMean(hint));
}

}  // namespace shardtune::configs::internal
