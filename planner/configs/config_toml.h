// A reader for the TOML subset torchtitan's job configs are written in (torchtitan <= 0.2.2
// `--job.config_file`; what `export --format torchtitan` writes): no TOML library is among the
// project's dependencies, so this is a small, strict one.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace shardtune::configs {

// Parses `text` into a JSON tree: each [table] (dotted headers [a.b] nest) is an object of its
// key = value pairs; keys before the first header sit at the top. Supported (TOML 1.0): bare keys
// (A-Za-z0-9_-), basic strings ("..." with \" \\ \n \t \r \b \f \uXXXX), literal strings ('...'),
// integers (signed, with _ separators), floats (1.0, 6e-4, inf, nan), true / false, single-line
// arrays of those, comments and blank lines. Not supported (InputError naming the line): quoted
// or dotted keys, inline tables, multi-line strings and arrays, dates, arrays of tables, a key
// or table given twice. `file` prefixes every message: "job.toml:12: expected ..., got ...".
nlohmann::ordered_json ParseTomlSubset(const std::string& text, const std::string& file);

// True when `text` holds a line that is a TOML table header ("[training]"), which no YAML or
// JSON config has at the top level: how --from tells a torchtitan job config apart.
bool LooksLikeToml(const std::string& text);

}  // namespace shardtune::configs
