// A parsed config document, format-independent: YAML and JSON both become a ConfigNode tree
// whose map keys keep their source positions, so later errors can say file:line:col.
#pragma once

#include <cstddef>
#include <cstdint>
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

// Bounds on a config document, far beyond any real config (a few KiB, a few levels, a handful of
// aliases), so that a corrupt or hostile file is refused with an error instead of exhausting
// memory or the stack: a 600-byte YAML alias bomb expands to billions of nodes.
inline constexpr size_t kMaxConfigBytes = size_t{16} << 20;
inline constexpr size_t kMaxConfigDepth = 64;           // nested mappings and lists
inline constexpr size_t kMaxConfigAliasNodes = 100000;  // copied for YAML anchors, aliases

// InvalidArgument naming the source when `bytes` exceed kMaxConfigBytes.
Status CheckConfigSize(uint64_t bytes, std::string_view source_name);

// "name:line:col" or "name" when the position is unknown.
std::string FormatSourcePos(std::string_view source_name, SourcePos pos);

// Parses a whole document. Syntax errors, duplicate keys and the bounds above are
// InvalidArgument errors whose message starts with "source_name:line:col:" (or "source_name:"
// for the size). Strings are bytes: YAML carries any; JSON, being UTF-8, reports the first byte
// that is not.
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
