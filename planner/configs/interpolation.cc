// OmegaConf interpolation and Hydra overrides (planner/configs/interpolation.h). Written from
// omegaconf's grammar (OmegaConfGrammarLexer.g4 / Parser.g4: "${" node path or resolver "}",
// "\${" escapes, resolver arguments split at top-level commas), omegaconf/resolvers/oc
// (oc.env, oc.select, oc.decode) and Hydra's override grammar (hydra/core/override_parser).
#include "planner/configs/interpolation.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <set>

#include "model/errors.h"
#include "model/strict_json.h"
#include "model/text.h"

namespace shardtune::configs {
namespace {

using Json = nlohmann::ordered_json;
using Path = std::vector<std::string>;

using model::Trim;

std::string Pointer(const Path& p) {
  std::string out;
  for (const auto& t : p) out += "/" + model::EscapePointerToken(t);
  return out;
}

std::string Dotted(const Path& p) {
  std::string out;
  for (const auto& t : p) out += (out.empty() ? "" : ".") + t;
  return out;
}

bool AllDigits(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

// A plain scalar as OmegaConf's grammar and Hydra's override parser type it: null, true/false
// (any case), integers, floats (with '.', an exponent, inf or nan), else the text as a string.
Json Scalar(const std::string& raw) {
  std::string s = Trim(raw);
  std::string lower = s;
  for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "null" || lower == "~") return nullptr;
  if (lower == "true") return true;
  if (lower == "false") return false;
  if (s.size() >= 2 && (s.front() == '\'' || s.front() == '"') && s.back() == s.front()) {
    return s.substr(1, s.size() - 2);
  }
  std::string digits = s;
  if (!digits.empty() && (digits[0] == '-' || digits[0] == '+')) digits = digits.substr(1);
  std::string no_underscores;
  for (char c : digits) {
    if (c != '_') no_underscores += c;
  }
  if (AllDigits(no_underscores) && no_underscores.size() <= 18) {
    int64_t v = std::stoll(no_underscores);
    return s[0] == '-' ? -v : v;
  }
  if (!s.empty() && s.find_first_of(".eE") != std::string::npos) {
    char* end = nullptr;
    double d = std::strtod(s.c_str(), &end);
    if (end && *end == '\0' && end != s.c_str()) return d;
  }
  if (lower == "inf" || lower == "+inf" || lower == ".inf") return HUGE_VAL;
  if (lower == "-inf" || lower == "-.inf") return -HUGE_VAL;
  return s;
}

// Splits at commas outside quotes, brackets and nested "${...}".
std::vector<std::string> SplitTopLevel(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  int depth = 0;
  char quote = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (quote) {
      if (c == quote) quote = 0;
    } else if (c == '\'' || c == '"') {
      quote = c;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      --depth;
    } else if (c == ',' && depth == 0) {
      out.push_back(cur);
      cur.clear();
      continue;
    }
    cur += c;
  }
  out.push_back(cur);
  return out;
}

// "a.b[0].c" -> {a, b, 0, c}; leading dots are counted into `up` (relative references).
bool ParseNodePath(const std::string& text, int* up, Path* path) {
  size_t i = 0;
  *up = 0;
  while (i < text.size() && text[i] == '.') {
    ++*up;
    ++i;
  }
  std::string cur;
  for (; i < text.size(); ++i) {
    char c = text[i];
    if (c == '.') {
      if (cur.empty()) return false;
      path->push_back(cur);
      cur.clear();
    } else if (c == '[') {
      if (!cur.empty()) path->push_back(cur);
      size_t close = text.find(']', i);
      if (close == std::string::npos) return false;
      path->push_back(text.substr(i + 1, close - i - 1));
      cur.clear();
      i = close;
      if (i + 1 < text.size() && text[i + 1] == '.') ++i;
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) path->push_back(cur);
  return !path->empty();
}

// Bounds on the recursion a hostile file could ask for (the fuzzers feed this reader): references
// followed one after another, and "${" nested inside one value.
constexpr size_t kMaxReferenceChain = 64;
constexpr int kMaxNesting = 16;

class Resolver {
 public:
  Resolver(Json* doc, const EnvLookup& env) : doc_(*doc), env_(env) {}

  void ResolveAll(const Path& at, UnresolvedInterpolations* out) {
    Json* node = Find(at);
    if (!node) return;
    if (node->is_object()) {
      std::vector<std::string> keys;
      for (auto it = node->begin(); it != node->end(); ++it) keys.push_back(it.key());
      for (const auto& k : keys) {
        Path p = at;
        p.push_back(k);
        ResolveAll(p, out);
      }
    } else if (node->is_array()) {
      for (size_t i = 0; i < node->size(); ++i) {
        Path p = at;
        p.push_back(std::to_string(i));
        ResolveAll(p, out);
      }
    } else if (node->is_string()) {
      std::string why;
      if (!ResolveAt(at, &why)) (*out)[Pointer(at)] = why;
    }
  }

 private:
  Json* Find(const Path& p) {
    Json* n = &doc_;
    for (const auto& t : p) {
      if (n->is_object()) {
        auto it = n->find(t);
        if (it == n->end()) return nullptr;
        n = &*it;
      } else if (n->is_array() && AllDigits(t) && std::stoul(t) < n->size()) {
        n = &(*n)[std::stoul(t)];
      } else {
        return nullptr;
      }
    }
    return n;
  }

  // Resolves the string at `at` in place (and a referenced mapping's strings); false with `why`
  // when it cannot.
  bool ResolveAt(const Path& at, std::string* why) {
    Json* node = Find(at);
    if (!node || !node->is_string()) return true;
    std::string key = Pointer(at);
    if (done_.count(key)) return true;
    if (std::find(stack_.begin(), stack_.end(), key) != stack_.end()) {
      std::string chain;
      for (const auto& s : stack_) chain += s + " -> ";
      *why = "a cycle: " + chain + key;
      return false;
    }
    std::string text = node->get<std::string>();
    if (text.find("${") == std::string::npos && text.find("\\${") == std::string::npos) {
      done_.insert(key);
      return true;
    }
    if (stack_.size() >= kMaxReferenceChain) {
      *why = "references chained more than " + std::to_string(kMaxReferenceChain) + " deep";
      return false;
    }
    stack_.push_back(key);
    Path container(at.begin(), at.end() - 1);
    const int outer_nesting = nesting_;  // nesting counts within one value
    nesting_ = 0;
    std::optional<Json> v = ResolveString(text, container, why);
    nesting_ = outer_nesting;
    stack_.pop_back();
    if (!v) return false;
    *Find(at) = *v;  // Find again: resolving may not reallocate, but be safe
    done_.insert(key);
    return true;
  }

  // Makes every string under `at` resolved (a mapping returned by a reference is used whole).
  bool ResolveSubtree(const Path& at, std::string* why) {
    Json* node = Find(at);
    if (!node) return true;
    if (node->is_string()) return ResolveAt(at, why);
    std::vector<std::string> keys;
    if (node->is_object()) {
      for (auto it = node->begin(); it != node->end(); ++it) keys.push_back(it.key());
    } else if (node->is_array()) {
      for (size_t i = 0; i < node->size(); ++i) keys.push_back(std::to_string(i));
    }
    for (const auto& k : keys) {
      Path p = at;
      p.push_back(k);
      if (!ResolveSubtree(p, why)) return false;
    }
    return true;
  }

  std::optional<Json> Reference(const std::string& text, const Path& container, std::string* why,
                                bool optional = false) {
    int up = 0;
    Path rel;
    if (!ParseNodePath(Trim(text), &up, &rel)) {
      *why = "\"" + text + "\" is not a key path";
      return std::nullopt;
    }
    Path target;
    if (up > 0) {  // ${.x}: the value's own mapping; each further dot one level up
      if (static_cast<size_t>(up - 1) > container.size()) {
        *why = "\"" + text + "\" goes above the top of the file";
        return std::nullopt;
      }
      target.assign(container.begin(), container.end() - (up - 1));
    }
    target.insert(target.end(), rel.begin(), rel.end());
    if (!Find(target)) {
      if (optional) return std::nullopt;
      *why = "no key " + Dotted(target) + " in the file";
      return std::nullopt;
    }
    if (!ResolveSubtree(target, why)) return std::nullopt;
    return *Find(target);
  }

  std::optional<Json> Argument(const std::string& raw, const Path& container, std::string* why) {
    std::string a = Trim(raw);
    if (a.find("${") != std::string::npos) return ResolveString(a, container, why);
    return Scalar(a);
  }

  std::optional<Json> CallResolver(const std::string& name, const std::string& args,
                                   const Path& container, std::string* why) {
    std::vector<std::string> parts = SplitTopLevel(args);
    if (name == "oc.env" || name == "env") {
      std::string var = Trim(parts[0]);
      if (auto v = env_(var)) return Scalar(*v);
      if (parts.size() >= 2) return Argument(parts[1], container, why);
      *why = "environment variable " + var + " is not set (and no default is given)";
      return std::nullopt;
    }
    if (name == "oc.select") {
      std::string inner;
      if (auto v = Reference(parts[0], container, &inner, true)) return v;
      if (!inner.empty()) {
        *why = inner;
        return std::nullopt;
      }
      if (parts.size() >= 2) return Argument(parts[1], container, why);
      return Json(nullptr);
    }
    if (name == "oc.decode") {
      std::optional<Json> v = Argument(args, container, why);
      if (v && v->is_string()) return Scalar(v->get<std::string>());
      return v;
    }
    if (name == "hydra" || name == "now") {
      *why = "${" + name + ":...} is Hydra's, known only when the job runs";
    } else {
      *why = "resolver " + name + " is registered by the trainer's own code, not OmegaConf";
    }
    return std::nullopt;
  }

  // One "${...}" body.
  std::optional<Json> Interpolation(const std::string& body, const Path& container,
                                    std::string* why) {
    // A resolver's name is a dotted identifier followed by ':'; a node path has no ':'.
    size_t colon = body.find(':');
    size_t brace = body.find("${");
    if (colon != std::string::npos && (brace == std::string::npos || colon < brace)) {
      return CallResolver(Trim(body.substr(0, colon)), body.substr(colon + 1), container, why);
    }
    if (brace != std::string::npos) {  // a node path built from another interpolation
      std::optional<Json> key = ResolveString(body, container, why);
      if (!key) return std::nullopt;
      if (!key->is_string()) {
        *why = "the key path " + key->dump() + " is not text";
        return std::nullopt;
      }
      return Reference(key->get<std::string>(), container, why);
    }
    return Reference(body, container, why);
  }

  // Text with interpolations: one interpolation alone keeps the value's type; otherwise the parts
  // are concatenated as text (Python's str(): True, None).
  std::optional<Json> ResolveString(const std::string& text, const Path& container,
                                    std::string* why) {
    if (++nesting_ > kMaxNesting) {
      --nesting_;
      *why = "interpolations nested more than " + std::to_string(kMaxNesting) + " deep";
      return std::nullopt;
    }
    std::optional<Json> out = ResolveText(text, container, why);
    --nesting_;
    return out;
  }

  std::optional<Json> ResolveText(const std::string& text, const Path& container,
                                  std::string* why) {
    std::vector<std::pair<bool, std::string>> parts;  // (is interpolation, text or body)
    std::string lit;
    for (size_t i = 0; i < text.size();) {
      if (text.compare(i, 3, "\\${") == 0) {
        lit += "${";
        i += 3;
        continue;
      }
      if (text.compare(i, 2, "${") == 0) {
        int depth = 0;
        size_t j = i;
        for (; j < text.size(); ++j) {
          if (text.compare(j, 2, "${") == 0) {
            ++depth;
            ++j;
          } else if (text[j] == '}' && --depth == 0) {
            break;
          }
        }
        if (j >= text.size()) {
          *why = "\"" + text + "\" has an unclosed \"${\"";
          return std::nullopt;
        }
        if (!lit.empty()) parts.emplace_back(false, lit);
        lit.clear();
        parts.emplace_back(true, text.substr(i + 2, j - i - 2));
        i = j + 1;
        continue;
      }
      lit += text[i++];
    }
    if (!lit.empty()) parts.emplace_back(false, lit);
    if (parts.size() == 1 && parts[0].first) return Interpolation(parts[0].second, container, why);
    std::string out;
    for (const auto& [interp, s] : parts) {
      if (!interp) {
        out += s;
        continue;
      }
      std::optional<Json> v = Interpolation(s, container, why);
      if (!v) return std::nullopt;
      if (v->is_string()) {
        out += v->get<std::string>();
      } else if (v->is_boolean()) {
        out += v->get<bool>() ? "True" : "False";
      } else if (v->is_null()) {
        out += "None";
      } else if (v->is_number()) {
        out += v->dump();
      } else {
        *why = "${" + s + "} is a " + (v->is_object() ? "mapping" : "list") +
               ", which cannot be part of a longer string";
        return std::nullopt;
      }
    }
    return Json(out);
  }

  Json& doc_;
  const EnvLookup& env_;
  std::vector<std::string> stack_;
  std::set<std::string> done_;
  int nesting_ = 0;
};

}  // namespace

EnvLookup ProcessEnvironment() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (!v) return std::nullopt;
    return std::string(v);
  };
}

UnresolvedInterpolations ResolveInterpolations(nlohmann::ordered_json* doc, const EnvLookup& env) {
  UnresolvedInterpolations out;
  Resolver(doc, env).ResolveAll({}, &out);
  return out;
}

Override ParseOverride(const std::string& text, const std::string& where) {
  Override o;
  o.text = text;
  std::string s = text;
  if (s.rfind("++", 0) == 0) {
    o.op = Override::Op::kForceSet;
    s = s.substr(2);
  } else if (s.rfind("+", 0) == 0) {
    o.op = Override::Op::kAdd;
    s = s.substr(1);
  } else if (s.rfind("~", 0) == 0) {
    o.op = Override::Op::kDelete;
    s = s.substr(1);
  }
  size_t eq = s.find('=');
  if (eq == std::string::npos && o.op != Override::Op::kDelete) {
    throw InputError(where + ": expected KEY=VALUE (Hydra's override, e.g. "
                             "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8), got \"" +
                     model::EscapeControls(text) + "\"");
  }
  std::string key = Trim(s.substr(0, eq));
  int up = 0;
  if (!ParseNodePath(key, &up, &o.path) || up > 0) {
    throw InputError(where + ": expected a dotted key path before '=', got \"" +
                     model::EscapeControls(key) + "\" in \"" + model::EscapeControls(text) + "\"");
  }
  if (eq == std::string::npos) return o;
  std::string v = Trim(s.substr(eq + 1));
  if (v.size() >= 2 && v.front() == '[' && v.back() == ']') {
    o.value = Json::array();
    std::string inner = Trim(v.substr(1, v.size() - 2));
    if (!inner.empty()) {
      for (const auto& e : SplitTopLevel(inner)) o.value.push_back(Scalar(e));
    }
  } else {
    o.value = v.empty() ? Json("") : Scalar(v);
  }
  return o;
}

void ApplyOverride(const Override& o, const std::string& where, nlohmann::ordered_json* doc) {
  Json* n = doc;
  std::string walked;
  for (size_t i = 0; i + 1 < o.path.size(); ++i) {
    walked += (walked.empty() ? "" : ".") + o.path[i];
    if (!n->is_object()) {
      throw InputError(where + " " + model::EscapeControls(o.text) + ": expected " + walked +
                       "'s parent to be a mapping, got a value");
    }
    auto it = n->find(o.path[i]);
    if (it == n->end() || it->is_null()) {
      if (o.op == Override::Op::kDelete) {
        throw InputError(where + " " + model::EscapeControls(o.text) + ": expected key " +
                         walked + " in the config to delete from, got none");
      }
      (*n)[o.path[i]] = Json::object();
      it = n->find(o.path[i]);
    }
    if (!it->is_object()) {
      throw InputError(where + " " + model::EscapeControls(o.text) + ": expected " + walked +
                       " to be a mapping, got a value");
    }
    n = &*it;
  }
  const std::string& last = o.path.back();
  if (!n->is_object()) {
    throw InputError(where + " " + model::EscapeControls(o.text) + ": expected " +
                     Dotted(o.path) + "'s parent to be a mapping, got a value");
  }
  bool present = n->contains(last);
  switch (o.op) {
    case Override::Op::kAdd:
      // Hydra's _apply_overrides_to_config (hydra/_internal/config_loader_impl.py): "+" onto a
      // key that is there is allowed when its value is null or the new value is a list or a
      // mapping (OmegaConf.update(..., merge=True, force_add=True): a mapping merges into the
      // one there, a list replaces it); else "Could not append to config".
      if (present && !(*n)[last].is_null() && !o.value.is_array() && !o.value.is_object()) {
        throw InputError(where + " " + model::EscapeControls(o.text) + ": expected key " +
                         Dotted(o.path) + " to be absent or null (\"+\" adds a key; use \"++\" "
                         "or no prefix to change it), got it in the config");
      }
      if (present && (*n)[last].is_object() && o.value.is_object()) {
        (*n)[last].update(o.value, /*merge_objects=*/true);
      } else {
        (*n)[last] = o.value;
      }
      break;
    case Override::Op::kSet:
    case Override::Op::kForceSet:
      (*n)[last] = o.value;
      break;
    case Override::Op::kDelete:
      if (!present) {
        throw InputError(where + " " + model::EscapeControls(o.text) + ": expected key " +
                         Dotted(o.path) + " in the config to delete, got none");
      }
      n->erase(last);
      break;
  }
}

}  // namespace shardtune::configs
