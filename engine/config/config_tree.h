// A parsed config document, format-independent: YAML and JSON both become a ConfigNode tree
// whose map keys keep their source positions, so later errors can say file:line:col.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/status.h"

namespace sluice {

struct SourcePos {
  int line = 0;    // 1-based; 0 = unknown
  int column = 0;  // 1-based
};

struct ConfigNode {
  enum class Kind { kNull, kScalar, kMap, kSequence };
  // How a scalar was written. YAML plain scalars are untyped text that each setting interprets;
  // quoted YAML and JSON strings are strings; JSON numbers and booleans are typed.
  enum class ScalarKind { kPlain, kString, kNumber, kBool };
  struct Entry;

  Kind kind = Kind::kNull;
  ScalarKind scalar_kind = ScalarKind::kPlain;
  std::string text;               // scalar text: JSON numbers keep their spelling ("5e8")
  std::vector<Entry> entries;     // kMap, in document order
  std::vector<ConfigNode> items;  // kSequence
  SourcePos pos;

  // "a mapping", "the string \"x\"", "the number 3", ...: used in wrong-type messages.
  std::string Describe() const;
};

struct ConfigNode::Entry {
  std::string key;
  SourcePos key_pos;
  ConfigNode value;
};

enum class ConfigFormat { kYaml, kJson };

// "name:line:col" or "name" when the position is unknown.
std::string FormatSourcePos(std::string_view source_name, SourcePos pos);

// Parses a whole document. Syntax errors and duplicate keys are InvalidArgument errors whose
// message starts with "source_name:line:col:".
Result<ConfigNode> ParseConfigText(std::string_view text, ConfigFormat format,
                                   std::string_view source_name);
// `positions` false: messages and nodes carry no line:col (a one-line override value).
Result<ConfigNode> ParseYamlConfig(std::string_view text, std::string_view source_name,
                                   bool positions = true);
Result<ConfigNode> ParseJsonConfig(std::string_view text, std::string_view source_name);
// Reads a file; .json is JSON, .yaml/.yml is YAML, anything else is sniffed ('{' = JSON).
Result<ConfigNode> ReadConfigFile(const std::string& path);
// Parses one value written on a command line or in the environment, as YAML flow text
// ("3", "[0.9, 0.95]", "{device: cpu}", "auto").
Result<ConfigNode> ParseConfigValueText(std::string_view text, std::string_view source_name);

}  // namespace sluice
