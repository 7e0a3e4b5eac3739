#include "hotloop/cli/config.h"

#include "hotloop/core/error.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <type_traits>
#include <utility>

namespace hotloop::cli {
namespace {

using Value = Config::Value;
using hotloop::detail::str_cat;

bool is_list(OptionType type) {
  return type == OptionType::kFloatList || type == OptionType::kIntList;
}

const char* type_name(OptionType type) {
  // In OptionType order.
  constexpr const char* kNames[] = {
      "true or false",
      "an integer",
      "a number",
      "a string",
      "a list of numbers",
      "a list of integers",
  };
  return kNames[static_cast<int>(type)];
}

// Decimal digits with an optional sign, within int64.
std::optional<int64_t> parse_int(const std::string& text) {
  if (text.empty() || text.find_first_not_of("+-0123456789") != text.npos) {
    return std::nullopt;
  }
  char* end = nullptr;
  errno = 0;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || end == text.c_str()) {
    return std::nullopt;
  }
  return static_cast<int64_t>(value);
}

// Decimal or exponent notation, finite: no hex, inf or nan.
std::optional<double> parse_float(const std::string& text) {
  if (text.empty() || text.find_first_not_of("+-.0123456789eE") != text.npos) {
    return std::nullopt;
  }
  char* end = nullptr;
  errno = 0;
  const double value = std::strtod(text.c_str(), &end);
  if (errno != 0 || *end != '\0' || !std::isfinite(value)) {
    return std::nullopt;
  }
  return value;
}

// The shortest text that reads back as exactly `value`.
std::string format_float(double value) {
  char buffer[32];
  // Whole numbers as such (10000, not %g's 1e+04): counts and factors read
  // as people write them.
  if (std::isfinite(value) && value == std::floor(value) &&
      std::fabs(value) < 1e15) {
    std::snprintf(buffer, sizeof(buffer), "%.0f", value);
    return buffer;
  }
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buffer, sizeof(buffer), "%.*g", precision, value);
    if (std::strtod(buffer, nullptr) == value) {
      break;
    }
  }
  return buffer;
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& item : items) {
    out += (out.empty() ? "" : ", ") + item;
  }
  return out;
}

// "x.yaml:3" (or "x.yaml:3:7") from a 0-based mark, or the bare source
// without one.
std::string where(
    const std::string& source, const YAML::Mark& mark, bool column = false) {
  if (mark.is_null()) {
    return source;
  }
  return str_cat(source, ":", mark.line + 1) +
         (column ? str_cat(":", mark.column + 1) : "");
}

// A node as the user wrote it, on one line: `ten`, `[1, 2]`.
std::string node_text(const YAML::Node& node) {
  if (node.IsScalar()) {
    return node.Scalar();
  }
  YAML::Node flow = YAML::Clone(node);
  flow.SetStyle(YAML::EmitterStyle::Flow);
  return YAML::Dump(flow);
}

// "<prefix>expected an integer, got 'ten'" (or "got an empty value").
ConfigError type_error(
    const std::string& prefix, OptionType type, const YAML::Node& node) {
  return ConfigError(
      prefix + "expected " + type_name(type) + ", got " +
      (node.IsNull() ? "an empty value" : "'" + node_text(node) + "'"));
}

// Parses a scalar `node` as `type` (a scalar type, or the element type of a
// list) and checks it against the bounds and choices of `spec`. `prefix`
// ("<where>: <key>: ") starts every error.
Value parse_scalar(
    const OptionSpec& spec,
    OptionType type,
    const YAML::Node& node,
    const std::string& prefix) {
  if (node.IsNull() && type == OptionType::kString) {
    return std::string(); // `monitor:`, `monitor: null`: YAML's empty value
  }
  if (!node.IsScalar()) {
    throw type_error(prefix, type, node);
  }
  const std::string& text = node.Scalar();
  std::optional<Value> value;
  std::optional<double> number; // for the bounds
  if (type == OptionType::kBool) {
    if (text == "true" || text == "True" || text == "false" ||
        text == "False") {
      value = text[0] == 't' || text[0] == 'T';
    }
  } else if (type == OptionType::kInt) {
    if (const std::optional<int64_t> i = parse_int(text)) {
      value = *i;
      number = static_cast<double>(*i);
    }
  } else if (type == OptionType::kFloat) {
    if ((number = parse_float(text))) {
      value = *number;
    }
  } else {
    value = text;
  }
  if (!value) {
    throw type_error(prefix, type, node);
  }
  if (number && spec.min && *number < *spec.min) {
    throw ConfigError(
        prefix + str_cat("must be >= ", *spec.min, ", got ") + text);
  }
  if (number && spec.max && *number > *spec.max) {
    throw ConfigError(
        prefix + str_cat("must be <= ", *spec.max, ", got ") + text);
  }
  const auto& choices = spec.choices;
  if (!choices.empty() &&
      std::find(choices.begin(), choices.end(), text) == choices.end()) {
    throw ConfigError(
        prefix + "expected one of " + join(choices) + ", got '" + text + "'");
  }
  return *value;
}

// Parses `node` as the value of `spec`; `location` starts every error.
Value parse_value(
    const OptionSpec& spec,
    const YAML::Node& node,
    const std::string& location) {
  const std::string prefix = str_cat(location, ": ", spec.key, ": ");
  if (!is_list(spec.type)) {
    return parse_scalar(spec, spec.type, node, prefix);
  }
  // As Lightning's CLI: a scalar where a list is expected is a one-element
  // list (`image_size: 32`, `--data.mean=0.5`), and a scalar with commas
  // its elements (`--model.channels=8,16`).
  std::vector<YAML::Node> elements;
  if (node.IsSequence()) {
    for (size_t i = 0; i < node.size(); ++i) {
      elements.push_back(node[i]);
    }
  } else if (
      node.IsScalar() && !node.Scalar().empty() && node.Scalar()[0] != '[') {
    const std::string& text = node.Scalar();
    size_t start = 0;
    while (true) {
      const size_t comma = std::min(text.find(',', start), text.size());
      std::string piece = text.substr(start, comma - start);
      const size_t first = piece.find_first_not_of(' ');
      piece =
          first == std::string::npos
              ? std::string()
              : piece.substr(first, piece.find_last_not_of(' ') - first + 1);
      elements.push_back(piece.empty() ? YAML::Node() : YAML::Node(piece));
      if (comma == text.size()) {
        break;
      }
      start = comma + 1;
    }
  } else {
    throw type_error(prefix, spec.type, node);
  }
  const bool ints = spec.type == OptionType::kIntList;
  std::vector<double> floats;
  std::vector<int64_t> integers;
  for (size_t i = 0; i < elements.size(); ++i) {
    const Value element = parse_scalar(
        spec,
        ints ? OptionType::kInt : OptionType::kFloat,
        elements[i],
        str_cat(location, ": ", spec.key, "[", i, "]: "));
    if (ints) {
      integers.push_back(std::get<int64_t>(element));
    } else {
      floats.push_back(std::get<double>(element));
    }
  }
  return ints ? Value(integers) : Value(floats);
}

// The node for `text` from the command line or a default: strings verbatim,
// lists as YAML flow text.
YAML::Node text_node(const OptionSpec& spec, const std::string& text) {
  if (text.empty() && spec.type != OptionType::kString) {
    return YAML::Node(); // null: "got an empty value"
  }
  if (is_list(spec.type)) {
    try {
      return YAML::Load(text);
    } catch (const YAML::Exception&) {
      // Falls through: reported as "expected a list ..., got '<text>'".
    }
  }
  return YAML::Node(text);
}

Value default_of(const OptionSpec& spec) {
  return parse_value(spec, text_node(spec, spec.default_value), "default");
}

YAML::Node to_node(const Value& value) {
  return std::visit(
      [](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, double>) {
          return YAML::Node(format_float(v));
        } else if constexpr (
            std::is_same_v<T, std::vector<double>> ||
            std::is_same_v<T, std::vector<int64_t>>) {
          YAML::Node list(YAML::NodeType::Sequence);
          list.SetStyle(YAML::EmitterStyle::Flow);
          for (const auto element : v) {
            list.push_back(to_node(Value(element)));
          }
          return list;
        } else {
          return YAML::Node(v);
        }
      },
      value);
}

// Levenshtein distance, or `limit` once it is sure to be at least that
// (a row's smallest entry never decreases further down).
size_t edit_distance(const std::string& a, const std::string& b, size_t limit) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) {
    row[j] = j;
  }
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    size_t smallest = row[0];
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t substitute = diagonal + (a[i - 1] != b[j - 1] ? 1 : 0);
      diagonal = row[j];
      row[j] = std::min(std::min(row[j], row[j - 1]) + 1, substitute);
      smallest = std::min(smallest, row[j]);
    }
    if (smallest >= limit) {
      return limit;
    }
  }
  return std::min(row[b.size()], limit);
}

// The candidate nearest to `key`, also matching candidates' last segment,
// within edits of fewer than half the length of key's last segment plus one
// (further is not a typo of it: the section a key shares with a candidate
// says nothing of its name, so `trainer.bogus` is no typo of
// `trainer.logger`); none for a key longer than any option could be
// mistyped from (the cost grows with the key's length times each
// candidate's).
std::string closest(
    const std::string& key, const std::vector<std::string>& candidates) {
  constexpr size_t kLongestMistypedKey = 128;
  if (key.size() > kLongestMistypedKey) {
    return {};
  }
  std::string best;
  const size_t dot = key.rfind('.');
  const size_t name_size =
      dot == std::string::npos ? key.size() : key.size() - dot - 1;
  size_t best_distance = name_size / 2 + 1;
  const auto gap = [&](const std::string& other) {
    return key.size() > other.size() ? key.size() - other.size()
                                     : other.size() - key.size();
  };
  for (const std::string& candidate : candidates) {
    const std::string leaf = candidate.substr(candidate.rfind('.') + 1);
    // The lengths' difference is a lower bound of the distance.
    if (std::min(gap(candidate), gap(leaf)) >= best_distance) {
      continue;
    }
    const size_t distance = std::min(
        edit_distance(key, candidate, best_distance),
        edit_distance(key, leaf, best_distance));
    if (distance < best_distance) {
      best = candidate;
      best_distance = distance;
    }
  }
  return best;
}

std::string unknown_key_message(
    const std::string& what,
    const std::string& key,
    const std::string& suggestion) {
  std::string message = str_cat("unknown ", what, " '", key, "'");
  if (!suggestion.empty()) {
    message += str_cat("; did you mean '", suggestion, "'?");
  }
  return message;
}

// Collects the values of the leaves under `node` (a map at `prefix`).
void collect(
    const ConfigSchema& schema,
    const YAML::Node& node,
    const std::string& prefix,
    const std::string& source,
    std::vector<std::pair<std::string, Value>>& updates) {
  std::set<std::string> seen;
  for (const auto& entry : node) {
    const YAML::Node& name = entry.first;
    const std::string at = where(source, name.Mark());
    if (!name.IsScalar()) {
      throw ConfigError(
          at + ": expected a key name, got '" + node_text(name) + "'");
    }
    const std::string key =
        prefix.empty() ? name.Scalar() : prefix + "." + name.Scalar();
    if (!seen.insert(name.Scalar()).second) {
      throw ConfigError(at + ": duplicate key '" + key + "'");
    }
    if (const OptionSpec* spec = schema.find(key)) {
      updates.emplace_back(key, parse_value(*spec, entry.second, at));
    } else if (schema.is_section(key)) {
      const YAML::Node& section = entry.second;
      if (!section.IsMap() && !section.IsNull()) { // `trainer:` alone is fine
        throw ConfigError(
            at + ": " + key + ": expected a map of keys, got '" +
            node_text(section) + "'");
      }
      collect(schema, section, key, source, updates);
    } else {
      throw ConfigError(
          at + ": " + unknown_key_message("key", key, schema.closest_key(key)));
    }
  }
}

} // namespace

ConfigSchema& ConfigSchema::add(OptionSpec spec) {
  const std::string& key = spec.key;
  const auto fail = [&](const std::string& why) {
    return std::logic_error(str_cat("ConfigSchema: '", key, "' ", why));
  };
  if (key.empty() || key.front() == '.' || key.back() == '.' ||
      key.find("..") != std::string::npos) {
    throw fail("is not a key like 'section.name'");
  }
  for (const OptionSpec& other : options_) {
    if (other.key == key) {
      throw fail("was added twice");
    }
    if (other.key.rfind(key + ".", 0) == 0 ||
        key.rfind(other.key + ".", 0) == 0) {
      throw fail(str_cat("clashes with '", other.key, "'"));
    }
  }
  if ((spec.min || spec.max) &&
      (spec.type == OptionType::kBool || spec.type == OptionType::kString)) {
    throw fail("has bounds but is not numeric");
  }
  if (!spec.choices.empty() && spec.type != OptionType::kString) {
    throw fail("has choices but is not a string");
  }
  try {
    default_of(spec);
  } catch (const ConfigError& e) {
    throw fail(str_cat("has an invalid default: ", e.what()));
  }
  options_.push_back(std::move(spec));
  return *this;
}

const OptionSpec* ConfigSchema::find(const std::string& key) const {
  for (const OptionSpec& spec : options_) {
    if (spec.key == key) {
      return &spec;
    }
  }
  return nullptr;
}

std::string ConfigSchema::closest_key(const std::string& key) const {
  std::vector<std::string> candidates;
  for (const OptionSpec& spec : options_) {
    for (size_t dot = spec.key.find('.'); dot != std::string::npos;
         dot = spec.key.find('.', dot + 1)) {
      candidates.push_back(spec.key.substr(0, dot));
    }
    candidates.push_back(spec.key);
  }
  return closest(key, candidates);
}

bool ConfigSchema::is_section(const std::string& section) const {
  return std::any_of(options_.begin(), options_.end(), [&](const auto& spec) {
    return spec.key.rfind(section + ".", 0) == 0;
  });
}

Config::Config(const ConfigSchema& schema)
    : schema_(std::make_shared<const ConfigSchema>(schema)) {
  for (const OptionSpec& spec : schema_->options()) {
    values_[spec.key] = default_of(spec);
  }
}

void Config::merge_yaml_file(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code error;
  const auto check = [&](bool ok, const char* problem) {
    HOTLOOP_CHECK_AS(ConfigError, ok, "config file '", path, "' ", problem);
  };
  check(fs::exists(path, error), "does not exist");
  check(!fs::is_directory(path, error), "is a directory");
  std::ifstream in(path);
  check(in.is_open(), "cannot be read");
  std::ostringstream text;
  text << in.rdbuf();
  merge_yaml_string(text.str(), path);
}

void Config::merge_yaml_string(
    const std::string& text, const std::string& source_name) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw ConfigError(
        where(source_name, e.mark, /*column=*/true) +
        ": malformed YAML: " + e.msg);
  }
  if (root.IsNull()) {
    return; // empty file or comments only
  }
  if (!root.IsMap()) {
    throw ConfigError(
        where(source_name, root.Mark()) +
        ": expected a map of sections at the top level, got '" +
        node_text(root) + "'");
  }
  std::vector<std::pair<std::string, Value>> updates;
  collect(*schema_, root, "", source_name, updates);
  for (auto& [key, value] : updates) {
    values_[key] = std::move(value);
    set_keys_.insert(key);
  }
}

void Config::set(
    const std::string& key,
    const std::string& value_text,
    const std::string& source) {
  const OptionSpec* spec = schema_->find(key);
  if (spec == nullptr) {
    throw ConfigError(
        source + ": " +
        unknown_key_message("key", key, schema_->closest_key(key)));
  }
  // A string may be empty as in YAML: `--key=`, `--key=""` (the quotes a
  // shell passes on when quoted again), `--key=null`, `--key=~`.
  const bool empty_string =
      spec->type == OptionType::kString &&
      (value_text.empty() || value_text == "\"\"" || value_text == "''" ||
       value_text == "null" || value_text == "~");
  if (value_text.empty() && !empty_string) {
    throw type_error(str_cat(source, ": ", key, ": "), spec->type, {});
  }
  values_[key] = parse_value(
      *spec, text_node(*spec, empty_string ? "" : value_text), source);
  set_keys_.insert(key);
}

template <typename T>
const T& Config::get(const std::string& key, OptionType type) const {
  const OptionSpec* spec = schema_->find(key);
  if (spec == nullptr) {
    throw std::logic_error(str_cat("Config: unknown key '", key, "'"));
  }
  if (spec->type != type) {
    throw std::logic_error(
        "Config: '" + key + "' holds " + type_name(spec->type) + ", not " +
        type_name(type));
  }
  return std::get<T>(values_.at(key));
}

bool Config::get_bool(const std::string& key) const {
  return get<bool>(key, OptionType::kBool);
}

int64_t Config::get_int(const std::string& key) const {
  return get<int64_t>(key, OptionType::kInt);
}

double Config::get_float(const std::string& key) const {
  return get<double>(key, OptionType::kFloat);
}

std::string Config::get_string(const std::string& key) const {
  return get<std::string>(key, OptionType::kString);
}

std::vector<double> Config::get_float_list(const std::string& key) const {
  return get<std::vector<double>>(key, OptionType::kFloatList);
}

std::vector<int64_t> Config::get_int_list(const std::string& key) const {
  return get<std::vector<int64_t>>(key, OptionType::kIntList);
}

bool Config::is_set(const std::string& key) const {
  return set_keys_.count(key) > 0;
}

std::string Config::to_yaml() const {
  YAML::Node root(YAML::NodeType::Map);
  for (const OptionSpec& spec : schema_->options()) {
    // Walk down the sections; yaml-cpp nodes are handles into one tree.
    YAML::Node parent = root;
    std::string rest = spec.key;
    for (size_t dot; (dot = rest.find('.')) != std::string::npos;) {
      parent.reset(parent[rest.substr(0, dot)]);
      rest = rest.substr(dot + 1);
    }
    parent[rest] = to_node(values_.at(spec.key));
  }
  return YAML::Dump(root) + "\n";
}

std::map<std::string, std::string> Config::flat() const {
  std::map<std::string, std::string> values;
  for (const OptionSpec& spec : schema_->options()) {
    const Value& value = values_.at(spec.key);
    if (const auto* text = std::get_if<std::string>(&value)) {
      values[spec.key] = *text; // the text itself, not YAML's quoting of it
      continue;
    }
    YAML::Emitter out;
    out << YAML::Flow << to_node(value);
    values[spec.key] = out.c_str();
  }
  return values;
}

ParsedArgs parse_args(
    const ConfigSchema& schema,
    const std::vector<std::string>& args,
    const std::set<std::string>& extra_flags) {
  ParsedArgs parsed{Config(schema), {}};
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg.rfind("--", 0) != 0 || arg.size() == 2) {
      throw ConfigError(
          "unexpected argument '" + arg +
          "'; options look like --section.key=VALUE");
    }
    const size_t equals = arg.find('=');
    const std::string name = arg.substr(2, equals - 2);
    const bool next_is_value =
        i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0;
    // The inline or following value; nullopt when there is none.
    const auto take_value = [&]() -> std::optional<std::string> {
      if (equals != std::string::npos) {
        return arg.substr(equals + 1);
      }
      if (next_is_value) {
        return args[++i];
      }
      return std::nullopt;
    };
    const OptionSpec* spec = schema.find(name);
    if (name == "config" || (spec && spec->type != OptionType::kBool)) {
      const std::optional<std::string> value = take_value();
      if (!value) {
        throw ConfigError("option '--" + name + "' expects a value");
      }
      if (name == "config") {
        parsed.config.merge_yaml_file(*value);
      } else {
        parsed.config.set(name, *value, "command line");
      }
    } else if (spec) {
      parsed.config.set(name, take_value().value_or("true"), "command line");
    } else if (extra_flags.count(name)) {
      parsed.extra[name] = take_value().value_or("");
    } else {
      std::vector<std::string> candidates(
          extra_flags.begin(), extra_flags.end());
      candidates.push_back("config");
      for (const OptionSpec& option : schema.options()) {
        candidates.push_back(option.key);
      }
      const std::string suggestion = closest(name, candidates);
      throw ConfigError(unknown_key_message(
          "option", "--" + name, suggestion.empty() ? "" : "--" + suggestion));
    }
  }
  return parsed;
}

std::string help_text(const ConfigSchema& schema) {
  struct Row {
    std::string section, flag, help;
  };
  std::vector<std::string> sections; // in order of first appearance
  std::vector<Row> rows;
  size_t width = 0;
  for (const OptionSpec& spec : schema.options()) {
    const size_t dot = spec.key.find('.');
    Row row{
        dot == std::string::npos ? "" : spec.key.substr(0, dot),
        str_cat("--", spec.key, "=", YAML::Dump(to_node(default_of(spec)))),
        spec.help};
    if (!spec.choices.empty()) {
      row.help += str_cat(
          row.help.empty() ? "" : " ", "(one of ", join(spec.choices), ")");
    }
    if (std::find(sections.begin(), sections.end(), row.section) ==
        sections.end()) {
      sections.push_back(row.section);
    }
    width = std::max(width, row.flag.size());
    rows.push_back(std::move(row));
  }
  // Within a section, options whose help starts with "<kind>: " (and names
  // no other kind, "; <other>: ") apply to one kind of data or model: they
  // follow the section's general options under a "<kind>:" subheading.
  const auto kind_of = [](const std::string& help) -> std::string {
    const size_t colon = help.find(": ");
    if (colon == std::string::npos || colon == 0 ||
        !std::islower(static_cast<unsigned char>(help[0])) ||
        help.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_") !=
            colon) {
      return "";
    }
    for (size_t at = help.find("; "); at != std::string::npos;
         at = help.find("; ", at + 2)) {
      const size_t next = help.find(": ", at + 2);
      if (next != std::string::npos && next > at + 2 &&
          std::islower(static_cast<unsigned char>(help[at + 2])) &&
          help.find_first_not_of(
              "abcdefghijklmnopqrstuvwxyz0123456789_", at + 2) == next) {
        return ""; // a second kind: it applies to several
      }
    }
    return help.substr(0, colon);
  };
  std::ostringstream out;
  const auto print = [&](const Row& row, const std::string& help) {
    out << "  " << row.flag;
    if (!help.empty()) {
      out << std::string(width - row.flag.size() + 2, ' ') << help;
    }
    out << "\n";
  };
  for (const std::string& section : sections) {
    if (!section.empty()) { // top-level keys have no header
      out << section << ":\n";
    }
    std::vector<std::string> kinds;
    for (const Row& row : rows) {
      const std::string kind = kind_of(row.help);
      if (row.section != section) {
        continue;
      }
      if (kind.empty()) {
        print(row, row.help);
      } else if (std::find(kinds.begin(), kinds.end(), kind) == kinds.end()) {
        kinds.push_back(kind);
      }
    }
    for (const std::string& kind : kinds) {
      out << " " << section << (section.empty() ? "" : " ") << "for " << kind
          << ":\n";
      for (const Row& row : rows) {
        if (row.section == section && kind_of(row.help) == kind) {
          print(row, row.help.substr(kind.size() + 2));
        }
      }
    }
  }
  return out.str();
}

} // namespace hotloop::cli
