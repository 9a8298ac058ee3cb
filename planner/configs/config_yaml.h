// A reader for the YAML subset trainer configs are written in (Accelerate, ROLL, verl): no YAML
// library is among the project's dependencies (README.md set-up), so this is a small, strict one.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace shardtune::configs {

// Parses `text` into a JSON tree. Supported: block mappings and block sequences (indented with
// spaces; "- key: v" items), flow sequences and mappings ([a, b], {k: v}, also over several lines),
// plain, single- and double-quoted scalars, literal and folded block scalars (| and >, with
// chomping and indentation indicators), comments, a leading "---". Plain scalars follow YAML
// 1.1 as PyYAML's safe_load reads them: null, ~ and an empty value -> null;
// true/false/yes/no/on/off in any of the three cases (true, True, TRUE) -> boolean; integers and
// floats with a '.' (1.0e-6, .inf; 1e-5 stays a string, as in PyYAML) -> numbers; anything else ->
// string. Quoted scalars are always strings. Not supported (InputError naming the line): anchors
// and aliases, tags, multi-document files, tabs in indentation, keys that
// are not scalars, collections nested more than 64 deep, text that is not UTF-8 or holds control
// characters other than tab (a UTF-8 byte order mark and CRLF line ends are fine). Double-quoted
// escapes: \n \t \r \0 \" \\ \/ \xXX \uXXXX (a surrogate pair as one) \UXXXXXXXX. Duplicate
// keys are errors. `file` prefixes every message: "cfg.yaml:12: expected ..., got ...", which is
// one line: keys from the file are shown as JSON strings ("a\nb").
// kOmegaConf reads scalars as OmegaConf's YAML loader does (verl and ROLL load their files
// through it): also 1e-5 (digits, an exponent, no '.') is a float.
enum class YamlFlavor { kPyYaml, kOmegaConf };
nlohmann::ordered_json ParseYamlSubset(const std::string& text, const std::string& file,
                                       YamlFlavor flavor = YamlFlavor::kPyYaml);

// Throws InputError "file:LINE: expected UTF-8 text, got the byte 0xD6 at column 7" when `text`
// is not well-formed UTF-8 (overlong forms, surrogates and code points past U+10FFFF included).
// ParseYamlSubset checks this (and rejects control characters but tab) itself; for JSON text.
void CheckUtf8(const std::string& text, const std::string& file);

// Appends code point `cp` (at most U+10FFFF, no surrogate) to `out` as UTF-8: the escapes of the
// YAML and TOML readers.
void AppendUtf8(uint32_t cp, std::string* out);

}  // namespace shardtune::configs
