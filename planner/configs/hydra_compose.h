// Hydra's defaults list: the composition verl and ROLL configs go through before their trainers
// read them. verl's launch scripts name a primary config (verl/trainer/config/ppo_trainer.yaml,
// sft_trainer_engine.yaml, or a recipe's own file under --config-path with
// `defaults: [ppo_trainer, _self_]` and `hydra.searchpath: [file://verl/trainer/config]`), whose
// defaults list pulls in config groups (`actor@actor_rollout_ref.actor: dp_actor`,
// `../optim@optim: fsdp`) that pull in their own; ROLL's example files pull in
// `../config/traj_envs@_here_`. `--from` such a file composes it as Hydra does, from the files
// next to it and on its search path, so the reader sees what the trainer sees.
#pragma once

#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

namespace shardtune::configs {

struct HydraComposition {
  nlohmann::ordered_json doc;  // the composed config, without `defaults` and `hydra`
  // The configs merged, in merge order: "actor/dp_actor.yaml at actor_rollout_ref.actor".
  std::vector<std::string> sources;
  // The --set texts taken as config-group choices ("engine=fsdp", "+group=option", "~group").
  std::vector<std::string> group_overrides;
};

// True when `doc` is a mapping with a top-level `defaults` key: Hydra composes such a file.
bool HasDefaultsList(const nlohmann::ordered_json& doc);

// Composes the primary config `file` (its parsed tree `doc` and its text, for the `# @package`
// header) as Hydra 1.3 does (hydra/_internal/defaults_list.py, hydra/core/default_element.py,
// hydra/_internal/config_loader_impl.py _compose_config_from_defaults_list):
//  - the search path is the file's folder (Hydra's --config-path), then the primary's
//    `hydra.searchpath` entries: file://DIR relative to `cwd` (as Hydra reads them; verl's
//    recipes assume the checkout's root), pkg://a.b.c as the folder a/b/c under `cwd` or
//    under a PYTHONPATH entry;
//  - entries: `_self_`, a config (`name`, `dir/name`, `/abs`, with `@package`), a group choice
//    (`group: option`, `group@package: option`, a list of options, null to drop it, `???` that a
//    choice must fill), with the keywords `optional` and `override`; a group or config path is
//    relative to the folder of the config that lists it (`../optim` included, as verl writes
//    it), a package relative to that config's package (`_here_` is the same package,
//    `_global_` the root); a `# @package X` header places a file whose entry names no package;
//  - `_self_` is appended to a defaults list that lacks it; the tree is walked depth first and
//    the configs merged in that order as OmegaConf merges (mappings key by key, anything else
//    replaced, a `???` value never replaces a set one);
//  - `override group: option` entries and the command line's group choices change the option of
//    a group entry whose override key matches (`engine=fsdp`, `actor@actor_rollout_ref.actor=x`);
//    the command line wins. An override that matches no entry, a defaults entry whose config is
//    in none of the search folders, a `???` left unfilled, a key listed twice: InputError naming
//    the file and the entry.
// `overrides` are the --set texts: those whose key names a config-group folder on the search
// path (Hydra's repository.group_exists) are group choices, returned in group_overrides; the
// others are left to the caller, to apply to the composed config. `builtin`: config entries
// (not groups) whose defaults the caller's reader applies itself (verl's ppo_trainer,
// sft_trainer and sft_trainer_engine: import_verl.cc reads every key it needs with verl's
// default); when the search
// path lacks one, it is skipped and named in `sources`, not an error. Any other entry that is
// in no search folder is an error.
HydraComposition ComposeHydraConfig(const nlohmann::ordered_json& doc, const std::string& text,
                                    const std::string& file,
                                    const std::vector<std::string>& overrides,
                                    const std::string& cwd,
                                    const std::set<std::string>& builtin = {});

}  // namespace shardtune::configs
