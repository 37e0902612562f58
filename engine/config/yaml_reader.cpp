// YAML documents via yaml-cpp. yaml-cpp reports errors by exception; they stop here.
#include <yaml-cpp/yaml.h>

#include <set>

#include "engine/config/config_tree.h"

namespace sluice {
namespace {

class YamlConverter {
 public:
  // `positions` false: nodes and messages carry no line:col (one-line override values).
  YamlConverter(std::string_view source_name, bool positions)
      : source_name_(source_name), positions_(positions) {}

  SourcePos PosOf(const YAML::Mark& mark) const {
    if (!positions_ || mark.is_null()) return {};
    return {mark.line + 1, mark.column + 1};
  }

  std::string Where(const YAML::Mark& mark) const {
    return FormatSourcePos(source_name_, PosOf(mark));
  }

  Result<ConfigNode> Convert(const YAML::Node& node, const std::string& path) const {
    ConfigNode out;
    out.pos = PosOf(node.Mark());
    switch (node.Type()) {
      case YAML::NodeType::Undefined:
      case YAML::NodeType::Null:
        out.kind = ConfigNode::Kind::kNull;
        return out;
      case YAML::NodeType::Scalar:
        out.kind = ConfigNode::Kind::kScalar;
        out.text = node.Scalar();
        // yaml-cpp tags plain scalars "?" and quoted ones "!".
        out.scalar_kind =
            node.Tag() == "!" ? ConfigNode::ScalarKind::kString : ConfigNode::ScalarKind::kPlain;
        return out;
      case YAML::NodeType::Sequence:
        out.kind = ConfigNode::Kind::kSequence;
        for (const YAML::Node& item : node) {
          SLUICE_ASSIGN_OR_RETURN(ConfigNode child, Convert(item, path + "[]"));
          out.items.push_back(std::move(child));
        }
        return out;
      case YAML::NodeType::Map: {
        out.kind = ConfigNode::Kind::kMap;
        std::set<std::string> seen;
        for (auto it = node.begin(); it != node.end(); ++it) {
          // Copies: yaml-cpp's map iterator hands out a proxy by value, so a reference to
          // it->first would dangle at the end of this statement.
          const YAML::Node key = it->first;
          const YAML::Node value = it->second;
          if (!key.IsScalar()) {
            return InvalidArgumentError("{}: a key under {} is not a plain name", Where(key.Mark()),
                                        path.empty() ? "the top level" : path);
          }
          std::string name = key.Scalar();
          std::string child_path = path.empty() ? name : path + "." + name;
          if (!seen.insert(name).second) {
            return InvalidArgumentError("{}: duplicate key {}", Where(key.Mark()), child_path);
          }
          SLUICE_ASSIGN_OR_RETURN(ConfigNode child, Convert(value, child_path));
          out.entries.push_back({std::move(name), PosOf(key.Mark()), std::move(child)});
        }
        return out;
      }
    }
    return out;
  }

 private:
  std::string_view source_name_;
  bool positions_;
};

}  // namespace

Result<ConfigNode> ParseYamlConfig(std::string_view text, std::string_view source_name,
                                   bool positions) {
  YamlConverter converter(source_name, positions);
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::ParserException& e) {
    return InvalidArgumentError("{}: YAML syntax error: {}", converter.Where(e.mark), e.msg);
  } catch (const YAML::Exception& e) {
    return InvalidArgumentError("{}: YAML error: {}", converter.Where(e.mark), e.msg);
  }
  return converter.Convert(root, "");
}

}  // namespace sluice
