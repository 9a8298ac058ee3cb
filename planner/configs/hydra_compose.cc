// Hydra's defaults-list composition (hydra_compose.h), following Hydra 1.3's sources:
// hydra/core/default_element.py (paths, packages, override keys), hydra/_internal/defaults_list.py
// (the tree, _self_, overrides), hydra/_internal/config_repository.py (parsing an entry),
// hydra/plugins/config_source.py (the `# @package` header) and
// hydra/_internal/config_loader_impl.py (the merge, packages as nested keys).
#include "planner/configs/hydra_compose.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>

#include "model/errors.h"
#include "model/text.h"
#include "planner/configs/config_yaml.h"
#include "planner/configs/import_reader.h"

namespace shardtune::configs {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

// `doc` without its key `key`. (ordered_json's erase shifts the later members without
// re-pointing their children's parents, which JSON_DIAGNOSTICS builds assert on: copy instead.)
Json Without(const Json& doc, const std::string& key) {
  Json out = Json::object();
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    if (it.key() != key) out[it.key()] = it.value();
  }
  return out;
}

using internal::QuoteName;
using model::Trim;

// hydra/plugins/config_source.py _get_header_dict: leading "# @key value" lines (blank lines
// skipped), stopping at the first other line; only @package is used.
std::optional<std::string> PackageHeader(const std::string& text, const std::string& file) {
  std::istringstream in(text.substr(0, 512));  // FileConfigSource reads the first 512 bytes
  std::string line;
  while (std::getline(in, line)) {
    std::string t = Trim(line);
    if (!t.empty() && t.back() == '\r') t = Trim(t.substr(0, t.size() - 1));
    if (t.empty()) continue;
    if (t[0] != '#') break;
    std::string body = Trim(t.substr(t.find_first_not_of('#')));
    if (body.empty() || body[0] != '@') break;
    std::istringstream words(body);
    std::vector<std::string> parts;
    for (std::string w; words >> w;) parts.push_back(w);
    if (parts.size() != 2) {
      throw InputError(file + ": expected a header line \"# @KEY VALUE\", got " + QuoteName(t));
    }
    if (parts[0] == "@package") return parts[1];
  }
  return std::nullopt;
}

struct Loaded {
  Json content;   // without `defaults`
  Json defaults;  // null when the file has none
  std::optional<std::string> header;
  std::string file;
};

struct Root {
  fs::path dir;
  std::string label;  // how the user would recognise it
};

class Repository {
 public:
  explicit Repository(std::vector<Root> roots) : roots_(std::move(roots)) {}

  // hydra FileConfigSource: ROOT/PATH.yaml (".yaml" added unless PATH ends in .yaml or .yml),
  // the first root that has it.
  const Loaded* Load(const std::string& config_path) {
    auto it = cache_.find(config_path);
    if (it != cache_.end()) return it->second.get();
    std::unique_ptr<Loaded> loaded;
    std::string name = config_path;
    if (!model::EndsWith(name, ".yaml") && !model::EndsWith(name, ".yml")) name += ".yaml";
    for (const Root& r : roots_) {
      fs::path p = (r.dir / name).lexically_normal();
      std::error_code ec;
      if (!fs::is_regular_file(p, ec)) continue;
      std::ifstream in(p, std::ios::binary);
      if (!in) throw InputError(p.string() + ": expected a readable config file, got an unreadable path");
      std::ostringstream text;
      text << in.rdbuf();
      loaded = std::make_unique<Loaded>();
      loaded->file = p.string();
      Json doc = ParseYamlSubset(text.str(), loaded->file, YamlFlavor::kOmegaConf);
      if (doc.is_null()) doc = Json::object();
      if (!doc.is_object()) {
        throw InputError(loaded->file + ": expected a mapping of config keys, got a " +
                         (doc.is_array() ? "list" : "value"));
      }
      loaded->header = PackageHeader(text.str(), loaded->file);
      if (doc.contains("defaults")) loaded->defaults = doc["defaults"];
      loaded->content = Without(doc, "defaults");
      break;
    }
    const Loaded* out = loaded.get();
    cache_[config_path] = std::move(loaded);
    return out;
  }

  bool GroupExists(const std::string& group) const {
    if (group.empty()) return false;
    for (const Root& r : roots_) {
      std::error_code ec;
      if (fs::is_directory((r.dir / group).lexically_normal(), ec)) return true;
    }
    return false;
  }

  std::string Describe() const {
    std::vector<std::string> parts;
    for (const Root& r : roots_) parts.push_back(r.label);
    return model::Join(parts, ", ");
  }

  void SetPrimary(const std::string& config_path, Loaded loaded) {
    cache_[config_path] = std::make_unique<Loaded>(std::move(loaded));
  }

 private:
  std::vector<Root> roots_;
  std::map<std::string, std::unique_ptr<Loaded>> cache_;
};

// One defaults-list entry (hydra/core/default_element.py ConfigDefault / GroupDefault).
struct Default {
  bool group = false;  // GroupDefault ("group: option") or ConfigDefault ("name")
  bool self = false;   // _self_
  std::string path;    // ConfigDefault: the config path; GroupDefault: the group
  std::optional<std::string> package;
  std::optional<std::string> package_header;  // "_global_..." (set_package_header)
  Json value;  // GroupDefault: the option (string), options (list), or null
  bool optional = false;
  bool override_ = false;
  bool external_append = false;
  bool deleted = false;
  std::string parent_base_dir;
  std::string parent_package;
  std::string listed_in;  // the file whose defaults list has it, for messages
  std::string written;    // the entry as the file writes it, for messages

  bool Absolute(const std::string& p) const { return !p.empty() && p[0] == '/'; }
  std::string Stripped(const std::string& p) const { return Absolute(p) ? p.substr(1) : p; }

  std::optional<std::string> Name() const {
    if (!group) {
      size_t i = path.rfind('/');
      return i == std::string::npos ? path : path.substr(i + 1);
    }
    if (value.is_string()) return value.get<std::string>();
    return std::nullopt;
  }
  bool IsOptions() const { return group && value.is_array(); }

  std::string GroupPath() const {
    if (group) {
      const bool absolute = Absolute(path) || external_append;
      std::string g = Stripped(path);
      if (parent_base_dir.empty() || absolute) return g;
      return parent_base_dir + "/" + g;
    }
    std::string p = Stripped(path);
    size_t i = p.rfind('/');
    std::string g = i == std::string::npos ? "" : p.substr(0, i);
    if (Absolute(path)) return g;
    if (parent_base_dir.empty()) return g;
    return g.empty() ? parent_base_dir : parent_base_dir + "/" + g;
  }

  std::string ConfigPath() const {
    if (group) return GroupPath() + "/" + Name().value_or("");
    std::string p = Stripped(path);
    if (Absolute(path) || parent_base_dir.empty()) return p;
    return parent_base_dir + "/" + p;
  }

  std::string RelativeGroupPath() const {
    std::string p = Stripped(path);
    if (group) return p;
    size_t i = p.rfind('/');
    return i == std::string::npos ? "" : p.substr(0, i);
  }

  std::optional<std::string> Package(bool use_header) const {
    if (!package && use_header) return package_header;
    return package;
  }

  // InputDefault._get_final_package.
  std::string FinalPackage(bool use_header = true) const {
    std::string parent = group && external_append ? "" : parent_package;
    std::string pkg;
    if (auto p = Package(use_header)) {
      pkg = *p;
    } else {
      pkg = RelativeGroupPath();
      for (char& c : pkg) {
        if (c == '/') c = '.';
      }
    }
    std::string ret = parent.empty() ? pkg : (pkg.empty() ? parent : parent + "." + pkg);
    size_t g = ret.rfind("_global_");
    if (g == std::string::npos) return ret;
    size_t from = g + std::string("_global_").size() + 1;
    return from >= ret.size() ? "" : ret.substr(from);
  }

  // InputDefault.get_override_key.
  std::string OverrideKey() const {
    std::string key = GroupPath();
    std::string default_pkg = key;
    for (char& c : default_pkg) {
      if (c == '/') c = '.';
    }
    std::string final_pkg = FinalPackage(false);
    if (default_pkg != final_pkg) key += "@" + (final_pkg.empty() ? "_global_" : final_pkg);
    return key;
  }

  std::string Shown() const {
    if (self) return "_self_";
    if (!written.empty()) return written;
    std::string s = path + (package ? "@" + *package : "");
    if (!group) return s;
    return s + ": " + (value.is_string() ? value.get<std::string>() : value.dump());
  }
};

// config_repository.py _split_group: "group@package" (a ":rename" after the package is dropped).
void SplitPackage(const std::string& text, std::string* path, std::optional<std::string>* package) {
  size_t at = text.find('@');
  if (at == std::string::npos) {
    *path = text;
    return;
  }
  *path = text.substr(0, at);
  std::string pkg = text.substr(at + 1);
  size_t colon = pkg.find(':');
  if (colon != std::string::npos) pkg = pkg.substr(0, colon);
  *package = pkg == "_here_" ? "" : pkg;
}

// config_repository.py _create_defaults_list: one entry of `file`'s defaults list.
Default ParseEntry(const Json& item, const std::string& file) {
  const std::string where = file + ": defaults entry ";
  Default d;
  d.listed_in = file;
  if (item.is_string()) {
    std::string text = Trim(item.get<std::string>());
    d.written = text;
    SplitPackage(text, &d.path, &d.package);
    if (d.path == "_self_") {
      if (d.package) throw InputError(where + QuoteName(text) + ": expected _self_ without @package, got one");
      d.self = true;
    }
    if (d.path.empty()) throw InputError(where + QuoteName(text) + ": expected a config name, got none");
    return d;
  }
  if (!item.is_object() || item.size() != 1) {
    throw InputError(where + item.dump() +
                     ": expected a config name or one \"group: option\" mapping, got " +
                     (item.is_object() ? std::to_string(item.size()) + " keys" : "a " + std::string(item.type_name())));
  }
  const std::string key = item.begin().key();
  std::istringstream words(key);
  std::vector<std::string> parts;
  for (std::string w; words >> w;) parts.push_back(w);
  if (parts.empty()) throw InputError(where + QuoteName(key) + ": expected a group name, got none");
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    if (parts[i] == "optional") {
      d.optional = true;
    } else if (parts[i] == "override") {
      d.override_ = true;
    } else {
      throw InputError(where + QuoteName(key) + ": expected the keywords optional or override before the group, got " +
                       QuoteName(parts[i]));
    }
  }
  d.group = true;
  d.written = key + ": " + (item.begin().value().is_string() ? item.begin().value().get<std::string>()
                                                           : item.begin().value().dump());
  SplitPackage(parts.back(), &d.path, &d.package);
  if (d.path.empty()) throw InputError(where + QuoteName(key) + ": expected a group name, got none");
  const Json& v = item.begin().value();
  if (v.is_array()) {
    for (const Json& o : v) {
      if (!o.is_string()) {
        throw InputError(where + QuoteName(key) + ": expected a list of option names, got " + o.dump());
      }
    }
  } else if (!v.is_null() && !v.is_string()) {
    throw InputError(where + QuoteName(key) + ": expected an option name, a list of them or null, got " + v.dump());
  }
  d.value = v;
  // The shorthand "group: sub/option" is group "group/sub", option "option".
  if (v.is_string()) {
    std::string s = v.get<std::string>();
    size_t slash = s.rfind('/');
    const std::vector<std::string> segments = model::Split(s, '/');
    const bool dotdot = std::find(segments.begin(), segments.end(), "..") != segments.end();
    if (slash != std::string::npos && !dotdot && s != "???" && s.find("${") == std::string::npos) {
      d.path += "/" + s.substr(0, slash);
      d.value = s.substr(slash + 1);
    }
  }
  if (d.value.is_string() && d.value.get<std::string>().find("${") != std::string::npos) {
    throw InputError(where + QuoteName(key) + ": expected a plain option, got the interpolation " +
                     d.value.dump() + ", which shardtune does not resolve in a defaults list; give the "
                     "composed config (python3 -m verl.trainer.main_ppo ... --cfg job)");
  }
  return d;
}

// An OmegaConf merge of `src` into `dst` (omegaconf BaseContainer._map_merge): mappings merge key
// by key, anything else (lists included) replaces; a "???" value does not replace a set one.
void Merge(Json* dst, const Json& src) {
  if (!dst->is_object() || !src.is_object()) {
    if (src.is_string() && src.get<std::string>() == "???" && !dst->is_null()) return;
    *dst = src;
    return;
  }
  for (auto it = src.begin(); it != src.end(); ++it) {
    if (!dst->contains(it.key())) {
      (*dst)[it.key()] = it.value();
    } else {
      Merge(&(*dst)[it.key()], it.value());
    }
  }
}

struct Node {
  Default d;
  bool expanded = false;  // the config had a defaults list (Hydra: children is not None)
  std::vector<std::unique_ptr<Node>> children;
};

struct ChoiceOverride {
  Json value;
  bool external = false;
  bool used = false;
  std::string text;  // as given, or the entry and its file
};

class Composer {
 public:
  explicit Composer(Repository* repo) : repo_(repo) {}

  std::map<std::string, ChoiceOverride> choices;
  std::map<std::string, std::pair<std::optional<std::string>, bool>> deletions;  // key -> (name, used)
  std::vector<Default> appends;
  std::set<std::string> builtin;          // ComposeHydraConfig's `builtin`
  std::vector<std::string> builtin_used;  // those the tree named and the search path lacks

  void Expand(Node* root, bool is_root) {
    Default& parent = root->d;
    // Loaded (and cached) once: its header places it before the checks below, as Hydra's
    // update_package_header does.
    const Loaded* loaded = repo_->Load(parent.ConfigPath());
    if (loaded && loaded->header) {
      std::string h = *loaded->header;
      if (h != "_global_" && h.rfind("_global_.", 0) != 0) h = h.empty() ? "_global_" : "_global_." + h;
      parent.package_header = h;
    }
    if (IsDeleted(parent)) {
      parent.deleted = true;
      return;
    }
    if (!parent.Name()) return;  // "group: null"
    if (parent.Name() == "???") {
      throw InputError(parent.listed_in + ": defaults entry " + QuoteName(parent.Shown()) +
                       ": expected an option chosen for " + parent.OverrideKey() + ", got ??? (give --set " +
                       parent.OverrideKey() + "=OPTION)");
    }
    if (!loaded) {
      if (parent.optional) {
        parent.deleted = true;
        return;
      }
      if (!parent.group && builtin.count(parent.ConfigPath())) {
        parent.deleted = true;
        builtin_used.push_back(parent.ConfigPath());
        return;
      }
      throw InputError(parent.listed_in + ": defaults entry " + QuoteName(parent.Shown()) + ": expected a config " +
                       parent.ConfigPath() + ".yaml in one of the search folders (" + repo_->Describe() +
                       "), got it in none; run shardtune from where the trainer is launched (verl: the "
                       "checkout's root; ROLL: the file in its place under the checkout's examples/), "
                       "or give the composed config (verl: python3 -m verl.trainer.main_ppo ... "
                       "--cfg job > job.yaml)");
    }
    if (seen_.count(parent.ConfigPath())) {
      throw InputError(parent.listed_in + ": defaults entry " + QuoteName(parent.Shown()) +
                       ": expected a defaults tree without cycles, got " + parent.ConfigPath() +
                       " within itself");
    }
    std::vector<Default> defaults;
    if (!loaded->defaults.is_null()) {
      if (!loaded->defaults.is_array()) {
        throw InputError(loaded->file + ":/defaults: expected a list, got " +
                         (loaded->defaults.is_object() ? std::string("a mapping") : loaded->defaults.dump()));
      }
      for (const Json& item : loaded->defaults) defaults.push_back(ParseEntry(item, loaded->file));
    }
    if (!defaults.empty() || (is_root && !appends.empty())) {
      // defaults_list.py _validate_self.
      bool has_self = false;
      bool has_non_override = false;
      for (const Default& d : defaults) {
        if (!d.override_) has_non_override = true;
        if (d.self) {
          if (has_self) throw InputError(loaded->file + ":/defaults: expected one _self_, got two");
          has_self = true;
        }
      }
      if ((!has_self && has_non_override) || defaults.empty()) {
        Default self;
        self.self = true;
        self.listed_in = loaded->file;
        defaults.push_back(self);
      }
    }
    if (is_root) defaults.insert(defaults.end(), appends.begin(), appends.end());
    // _update_overrides: parents, and overrides only at the end of the list.
    bool seen_override = false;
    for (Default& d : defaults) {
      if (d.self) continue;
      if (!d.external_append) {
        d.parent_base_dir = parent.GroupPath();
        d.parent_package = parent.FinalPackage();
      }
      if (seen_override && !(d.override_ || d.external_append)) {
        throw InputError(loaded->file + ":/defaults: expected override entries at the end of the list, got " +
                         QuoteName(d.Shown()) + " after one");
      }
      if (d.override_) seen_override = true;
    }
    seen_.insert(parent.ConfigPath());
    std::vector<std::unique_ptr<Node>> children;
    for (auto it = defaults.rbegin(); it != defaults.rend(); ++it) {
      Default d = *it;
      if (d.self) {
        auto n = std::make_unique<Node>();
        n->d = d;
        children.push_back(std::move(n));
        continue;
      }
      if (d.override_) {
        // The first registered in the reverse walk is the last in depth-first order: it wins;
        // the command line's were registered first.
        std::string key = d.OverrideKey();
        if (!choices.count(key)) choices[key] = {d.value, false, false, loaded->file + ": " + QuoteName(d.Shown())};
        continue;
      }
      if (d.group) {
        auto c = choices.find(d.OverrideKey());
        if (c != choices.end()) {
          d.value = c->second.value;
          c->second.used = true;
        }
      }
      if (d.IsOptions()) {
        Json options = d.value;
        for (auto o = options.rbegin(); o != options.rend(); ++o) {
          Default item;
          item.path = d.path + "/" + o->get<std::string>();
          item.package = d.package;
          item.optional = d.optional;
          item.listed_in = d.listed_in;
          if (d.external_append) {
            item.path = d.GroupPath() + "/" + o->get<std::string>();
          } else {
            item.parent_base_dir = d.parent_base_dir;
            item.parent_package = d.parent_package;
          }
          AddChild(&children, item);
        }
        continue;
      }
      AddChild(&children, d);
    }
    seen_.erase(parent.ConfigPath());
    // A config without a defaults list stays a leaf (Hydra leaves its children None).
    if (children.empty()) return;
    std::reverse(children.begin(), children.end());
    root->children = std::move(children);
    root->expanded = true;
  }

  // defaults_list.py _dfs_walk + _create_result_default: (config path, package, override key
  // of a group entry or "") in merge order.
  struct Result {
    std::string config_path, package, override_key;
  };
  void Walk(const Node* tree, std::vector<Result>* out) const {
    if (!tree->expanded) {
      Emit(nullptr, tree->d, out);
      return;
    }
    for (const auto& child : tree->children) {
      if (child->expanded) {
        Walk(child.get(), out);
      } else {
        Emit(tree, child->d, out);
      }
    }
  }

 private:
  void AddChild(std::vector<std::unique_ptr<Node>>* children, const Default& d) {
    auto n = std::make_unique<Node>();
    n->d = d;
    Expand(n.get(), false);
    children->push_back(std::move(n));
  }

  bool IsDeleted(const Default& d) {
    std::string key = d.group ? d.OverrideKey() : d.ConfigPath();
    auto it = deletions.find(key);
    if (it == deletions.end()) return false;
    bool match = !it->second.first || (d.group && d.Name() == it->second.first);
    if (match) it->second.second = true;
    return match;
  }

  void Emit(const Node* tree, const Default& d, std::vector<Result>* out) const {
    if (d.deleted || !(d.self ? tree->d.Name() : d.Name())) return;
    if (d.self) {
      out->push_back({tree->d.ConfigPath(), tree->d.FinalPackage(), ""});
    } else {
      out->push_back({d.ConfigPath(), d.FinalPackage(), d.group ? d.OverrideKey() : ""});
    }
  }

  Repository* repo_;
  std::set<std::string> seen_;  // the configs being expanded, root to here
};

std::vector<Root> SearchRoots(const Json& doc, const std::string& file, const std::string& cwd) {
  std::vector<Root> roots;
  fs::path primary_dir = fs::path(file).parent_path();
  if (primary_dir.empty()) primary_dir = ".";
  fs::path base = cwd.empty() ? fs::path(".") : fs::path(cwd);
  roots.push_back({primary_dir.is_absolute() ? primary_dir : base / primary_dir,
                   primary_dir.string() + " (the config's folder)"});
  if (!doc.contains("hydra") || !doc["hydra"].is_object() || !doc["hydra"].contains("searchpath")) return roots;
  const Json& sp = doc["hydra"]["searchpath"];
  const std::string where = file + ":/hydra/searchpath";
  if (!sp.is_array()) throw InputError(where + ": expected a list of file:// or pkg:// paths, got " + sp.dump());
  for (size_t i = 0; i < sp.size(); ++i) {
    const std::string at = where + "/" + std::to_string(i);
    if (!sp[i].is_string()) throw InputError(at + ": expected a file:// or pkg:// path, got " + sp[i].dump());
    const std::string entry = sp[i].get<std::string>();
    fs::path dir;
    const bool pkg = entry.rfind("pkg://", 0) == 0;
    if (entry.rfind("file://", 0) == 0) {
      dir = entry.substr(7);
    } else if (pkg) {
      std::string module = entry.substr(6);
      for (char& c : module) {
        if (c == '.') c = '/';
      }
      dir = module;
    } else {
      throw InputError(at + ": expected a file:// or pkg:// path, got " + QuoteName(entry));
    }
    fs::path full = dir.is_absolute() ? dir : base / dir;
    std::error_code ec;
    if (pkg && !fs::is_directory(full, ec)) {
      // A package is importable from PYTHONPATH as well as from the current folder.
      if (const char* py = std::getenv("PYTHONPATH")) {
        for (const std::string& entry_dir : model::Split(py, ':')) {
          fs::path cand = fs::path(entry_dir) / dir;
          if (!entry_dir.empty() && fs::is_directory(cand, ec)) {
            full = cand;
            break;
          }
        }
      }
    }
    if (!fs::is_directory(full, ec)) {
      throw InputError(at + ": expected the folder " + QuoteName(entry) + " relative to the current folder " +
                       QuoteName(fs::absolute(base, ec).lexically_normal().string()) +
                       " (Hydra reads it from where the trainer is launched: run shardtune from the "
                       "checkout's root), got no folder " + QuoteName(full.lexically_normal().string()));
    }
    roots.push_back({full, dir.string() + " (hydra.searchpath " + entry + ")"});
  }
  return roots;
}

// "a.b.c" -> nested mappings holding `content` at that path (OmegaConf.update(cfg, package, ...)).
Json Embed(const std::string& package, const Json& content) {
  if (package.empty()) return content;
  const std::vector<std::string> keys = model::Split(package, '.');
  Json out = content;
  for (auto k = keys.rbegin(); k != keys.rend(); ++k) {
    Json wrap = Json::object();
    wrap[*k] = std::move(out);
    out = std::move(wrap);
  }
  return out;
}

}  // namespace

bool HasDefaultsList(const Json& doc) { return doc.is_object() && doc.contains("defaults"); }

HydraComposition ComposeHydraConfig(const Json& doc, const std::string& text, const std::string& file,
                                    const std::vector<std::string>& overrides, const std::string& cwd,
                                    const std::set<std::string>& builtin) {
  Repository repo(SearchRoots(doc, file, cwd));
  const std::string primary_name = fs::path(file).stem().string();
  Loaded primary;
  primary.file = file;
  primary.header = PackageHeader(text, file);
  if (doc.contains("defaults")) primary.defaults = doc["defaults"];
  primary.content = Without(doc, "defaults");
  repo.SetPrimary(primary_name, primary);

  HydraComposition out;
  Composer composer(&repo);
  composer.builtin = builtin;
  // config_loader's Overrides.__init__: which --set texts are group choices.
  for (const std::string& o : overrides) {
    std::string t = Trim(o);
    bool del = false;
    bool add = false;
    if (!t.empty() && t[0] == '~') {
      del = true;
      t = t.substr(1);
    } else if (t.rfind("++", 0) == 0) {
      t = t.substr(2);
    } else if (!t.empty() && t[0] == '+') {
      add = true;
      t = t.substr(1);
    }
    size_t eq = t.find('=');
    std::string key = Trim(eq == std::string::npos ? t : t.substr(0, eq));
    std::string value = eq == std::string::npos ? "" : Trim(t.substr(eq + 1));
    std::string group;
    std::optional<std::string> package;
    SplitPackage(key, &group, &package);
    if (!repo.GroupExists(group)) continue;
    out.group_overrides.push_back(o);
    if (del) {
      composer.deletions[key] = {value.empty() ? std::nullopt : std::optional<std::string>(value), false};
      continue;
    }
    Json v;
    if (value.size() >= 2 && value.front() == '[' && value.back() == ']') {
      v = Json::array();
      for (const std::string& item : model::SplitCommas(value.substr(1, value.size() - 2))) {
        if (!Trim(item).empty()) v.push_back(Trim(item));
      }
    } else {
      if (value.size() >= 2 && (value.front() == '"' || value.front() == '\'') && value.back() == value.front()) {
        value = value.substr(1, value.size() - 2);
      }
      if (value.empty() || value == "null") {
        throw InputError("--set " + o + ": expected an option of the config group " + group +
                         " (a name, or a list [a, b]), got " + (value.empty() ? "none" : "null") +
                         " (~" + key + " drops the group)");
      }
      v = value;
    }
    if (add) {
      Default d;
      d.group = true;
      d.path = group;
      d.package = package;
      d.value = v;
      d.external_append = true;
      d.listed_in = "--set " + o;
      composer.appends.push_back(d);
    } else {
      composer.choices[key] = {v, true, false, o};
    }
  }

  Node root;
  root.d.path = primary_name;
  root.d.listed_in = file;
  composer.Expand(&root, true);
  // ensure_overrides_used / ensure_deletions_used.
  for (const auto& [key, c] : composer.choices) {
    if (c.used) continue;
    if (c.external) {
      throw InputError("--set " + c.text + ": expected a config group entry with the override key " + QuoteName(key) +
                       " in the defaults tree of " + file + ", got none (+" + key +
                       "=OPTION adds one; a group under a package is named group@package)");
    }
    throw InputError(c.text + ": expected an earlier group entry " + QuoteName(key) + " to override, got none");
  }
  for (const auto& [key, del] : composer.deletions) {
    if (!del.second) {
      throw InputError("--set ~" + key + ": expected a defaults entry " + QuoteName(key) + " to drop, got none");
    }
  }
  std::vector<Composer::Result> order;
  composer.Walk(&root, &order);
  // defaults_list.py ensure_no_duplicates_in_list: a group entry's override key once.
  std::set<std::string> keys;
  out.doc = Json::object();
  for (const auto& [path, package, key] : order) {
    if (!key.empty() && !keys.insert(key).second) {
      throw InputError(file + ": expected the config group entry " + QuoteName(key) +
                       " once in the composed defaults list, got it twice (an `override " + key +
                       ": OPTION` entry changes its option)");
    }
    const Loaded* l = repo.Load(path);
    SHARDTUNE_CHECK(l != nullptr) << "composed config " << path << " not loaded";
    Merge(&out.doc, Embed(package, l->content));
    std::string shown = path == primary_name ? file : fs::path(path + ".yaml").lexically_normal().string();
    out.sources.push_back(package.empty() ? shown : shown + " at " + package);
  }
  for (const auto& b : composer.builtin_used) {
    out.sources.insert(out.sources.begin(), b + ".yaml (not on the search path: the reader's own copy of its defaults)");
  }
  out.doc = Without(out.doc, "hydra");
  return out;
}

}  // namespace shardtune::configs
