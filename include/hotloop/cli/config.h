#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <variant>
#include <vector>

namespace hotloop::cli {

/// The type of one config value, as written in YAML and on the command line.
enum class OptionType {
  kBool,      ///< `true`, `false`, `True` or `False`
  kInt,       ///< `10`, `-3` (no fraction, no exponent)
  kFloat,     ///< `0.001`, `1e-3`, `3` (finite only)
  kString,    ///< any scalar; verbatim on the command line
  kFloatList, ///< `[0.5, 0.25]`
  kIntList,   ///< `[30, 60]`
};

/// One leaf of the config tree, addressed by a dotted key such as
/// `trainer.max_epochs` (section `trainer`, YAML `trainer: {max_epochs: ..}`).
struct OptionSpec {
  /// Dotted path (`trainer.max_epochs`), or a top-level name such as
  /// `seed_everything`; no empty segment.
  std::string key;
  OptionType type = OptionType::kString;
  /// YAML text of the default: `"10"`, `"1e-3"`, `"true"`, `"[0.5, 0.5]"`.
  /// For kString the text is the value itself (`"adamw"`, `""`).
  std::string default_value;
  /// One line, shown by `help_text`.
  std::string help;
  /// Inclusive bounds for kInt, kFloat and every element of the list types.
  std::optional<double> min;
  std::optional<double> max;
  /// Allowed values of a kString option; empty means any.
  std::vector<std::string> choices;
};

/// The set of keys a config may hold, in the order they were added.
class ConfigSchema {
 public:
  /// Appends `spec`. Throws std::logic_error (a programmer error) when the
  /// key is malformed or already present, is a prefix section of another key
  /// (`trainer` beside `trainer.max_epochs`), when bounds or choices do not
  /// fit the type, or when the default does not parse or validate.
  ConfigSchema& add(OptionSpec spec);

  /// The spec of `key`, or nullptr.
  const OptionSpec* find(const std::string& key) const;

  /// Every option, in insertion order.
  const std::vector<OptionSpec>& options() const {
    return options_;
  }

  /// The key or section nearest to `key` by edit distance, comparing `key`
  /// with both the full name and its last segment (so `max_epochs` gives
  /// `trainer.max_epochs`, `trainr` gives `trainer`); ties go to the earlier
  /// option. Empty when the schema is empty.
  std::string closest_key(const std::string& key) const;

  /// True when some key lies under `section` (`trainer` for `trainer.x`).
  bool is_section(const std::string& section) const;

 private:
  std::vector<OptionSpec> options_;
};

/// Resolved config values: every key of a schema, starting at its default and
/// updated by YAML files and overrides, the later winning. Every value a
/// Config holds has been validated against its spec. Copies are independent
/// (the schema, immutable, is shared). Not thread-safe for writes.
class Config {
 public:
  /// Holds every default of `schema` (a copy of it is kept).
  explicit Config(const ConfigSchema& schema);

  /// Merges the YAML file at `path` (see merge_yaml_string), naming errors
  /// after `path`. Throws ConfigError when the file is missing, a directory
  /// or unreadable: `config file 'nope.yaml' does not exist`.
  void merge_yaml_file(const std::string& path);

  /// Merges YAML `text` whose top level maps sections to keys
  /// (`trainer: {max_epochs: 3}`; dotted keys such as `trainer.max_epochs: 3`
  /// work too). Throws ConfigError naming `source_name` and the line, e.g.
  /// `x.yaml:3: unknown key 'trainer.max_epoch'; did you mean
  /// 'trainer.max_epochs'?`, for malformed YAML, a non-map top level or
  /// section, an unknown or duplicate key, an empty value, a wrong type, a
  /// value out of range or not among the choices. On error nothing is
  /// changed. A section left empty (`trainer:`) is accepted.
  void merge_yaml_string(
      const std::string& text, const std::string& source_name);

  /// Sets `key` from `value_text`, validated like a file value; errors read
  /// `<source>: trainer.max_epochs: expected an integer, got 'ten'`. Lists
  /// are YAML flow text (`[0.5, 0.5]`); strings are taken verbatim, except
  /// that empty text, `""`, `''`, `null` and `~` give the empty string (as
  /// in a YAML file). Empty text for any other type is an error. On error
  /// nothing is changed.
  void set(
      const std::string& key,
      const std::string& value_text,
      const std::string& source);

  /// Typed getters. An unknown key or a getter that does not match the
  /// option's type throws std::logic_error (a programmer error).
  bool get_bool(const std::string& key) const;
  int64_t get_int(const std::string& key) const;
  double get_float(const std::string& key) const;
  std::string get_string(const std::string& key) const;
  std::vector<double> get_float_list(const std::string& key) const;
  std::vector<int64_t> get_int_list(const std::string& key) const;

  /// True when a file or an override gave `key` a value (even one equal to
  /// the default); false while it holds its default.
  bool is_set(const std::string& key) const;

  /// Every key with its resolved value as YAML nested by section, in schema
  /// order; `merge_yaml_string` of it reproduces this config.
  std::string to_yaml() const;

  /// Every key with its value as text: numbers and lists as YAML flow text
  /// (`15`, `[16, 32]`), strings as they are (`adamw`, `{epoch}-{step}`,
  /// and `` for the empty string): the run's hyperparameters, as loggers
  /// record them.
  std::map<std::string, std::string> flat() const;

  /// The schema this config was built on.
  const ConfigSchema& schema() const {
    return *schema_;
  }

  /// One stored value; the alternative follows the option's OptionType.
  using Value = std::variant<
      bool,
      int64_t,
      double,
      std::string,
      std::vector<double>,
      std::vector<int64_t>>;

 private:
  template <typename T>
  const T& get(const std::string& key, OptionType type) const;

  std::shared_ptr<const ConfigSchema> schema_;
  std::map<std::string, Value> values_;
  std::set<std::string> set_keys_;
};

/// The result of `parse_args`.
struct ParsedArgs {
  /// Defaults, then every `--config` file and `--key` override in order.
  Config config;
  /// Values of the extra flags that were given: `--ckpt_path last` gives
  /// {"ckpt_path", "last"}; a flag given without a value (`--help`) maps to
  /// "". When repeated, the last wins.
  std::map<std::string, std::string> extra;
};

/// Applies command-line `args` (program name and command excluded) in order,
/// LightningCLI style, so the later wins:
/// - `--config PATH` / `--config=PATH` merges a YAML file (may repeat);
/// - `--key=VALUE` / `--key VALUE` overrides a schema key; a kBool key given
///   alone (`--trainer.deterministic`, followed by nothing or by `--...`)
///   means true;
/// - `--flag[=VALUE]` / `--flag VALUE` for a name in `extra_flags` is
///   returned in ParsedArgs::extra; the value is the next argument unless
///   that starts with `--` or is absent.
/// Throws ConfigError for anything else, naming the closest valid option:
/// `unknown option '--trainer.max_epoch'; did you mean
/// '--trainer.max_epochs'?`, for a missing value, and for every file or
/// value error (see Config).
ParsedArgs parse_args(
    const ConfigSchema& schema,
    const std::vector<std::string>& args,
    const std::set<std::string>& extra_flags);

/// Every option as `--key=DEFAULT  help`, grouped under a `section:` line
/// (first key segment; none for top-level keys) in order of first
/// appearance, help texts aligned; choices are appended to the help. Ends
/// with a newline.
std::string help_text(const ConfigSchema& schema);

} // namespace hotloop::cli
