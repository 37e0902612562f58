// YAML documents via yaml-cpp's event parser. yaml-cpp reports errors by exception; they stop
// here. The tree is built from parser events rather than from YAML::Load's node graph, which
// shares aliased nodes: expanding that graph is what turned a 600-byte alias bomb into billions
// of nodes, and an alias inside its own anchor into endless recursion. Here every alias is
// expanded as it is read, against a budget, and nesting is bounded before yaml-cpp recurses.
#include <yaml-cpp/anchor.h>
#include <yaml-cpp/emitterstyle.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/exceptions.h>
#include <yaml-cpp/mark.h>
#include <yaml-cpp/parser.h>

#include <map>
#include <set>
#include <sstream>
#include <utility>
#include <vector>

#include "engine/config/config_tree.h"

namespace sluice {
namespace {

// Carries an error out of the event handler through yaml-cpp's parser, which stops on it.
struct StopParsing {
  Status status;
};

size_t CountNodes(const ConfigNode& node) {
  size_t count = 1;
  for (const ConfigNode& item : node.items) count += CountNodes(item);
  for (const ConfigNode::Entry& entry : node.entries) count += CountNodes(entry.value);
  return count;
}

class YamlTreeBuilder : public YAML::EventHandler {
 public:
  // `positions` false: nodes and messages carry no line:col (one-line override values).
  YamlTreeBuilder(std::string_view source_name, bool positions)
      : source_name_(source_name), positions_(positions) {}

  SourcePos PosOf(const YAML::Mark& mark) const {
    if (!positions_ || mark.is_null()) return {};
    return {mark.line + 1, mark.column + 1};
  }

  std::string Where(const YAML::Mark& mark) const {
    return FormatSourcePos(source_name_, PosOf(mark));
  }

  ConfigNode TakeRoot() { return std::move(root_); }

  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}

  void OnAnchor(const YAML::Mark&, const std::string& name) override { anchor_name_ = name; }

  void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    ConfigNode node;
    node.pos = PosOf(mark);
    Add(std::move(node), anchor);
  }

  void OnScalar(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                const std::string& value) override {
    ConfigNode node;
    node.kind = ConfigNode::Kind::kScalar;
    node.pos = PosOf(mark);
    node.text = value;
    // yaml-cpp tags plain scalars "?" and quoted ones "!".
    node.scalar_kind =
        tag == "!" ? ConfigNode::ScalarKind::kString : ConfigNode::ScalarKind::kPlain;
    Add(std::move(node), anchor);
  }

  void OnAlias(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    const std::string& name = anchor_names_[anchor];
    auto it = anchors_.find(anchor);
    if (it == anchors_.end()) {
      Stop(InvalidArgumentError(
          "{}: alias *{} is inside the node &{} it refers to, which would then contain itself: "
          "refer to a node that is complete before the alias",
          Where(mark), name, name));
    }
    Copied(it->second.second, FormatSourcePos(source_name_, PosOf(mark)), "alias *" + name);
    Add(it->second.first, YAML::NullAnchor);
  }

  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value) override {
    Open(ConfigNode::Kind::kSequence, mark, anchor);
  }
  void OnSequenceEnd() override { Close(); }
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value) override {
    Open(ConfigNode::Kind::kMap, mark, anchor);
  }
  void OnMapEnd() override { Close(); }

 private:
  struct Frame {
    ConfigNode node;
    YAML::anchor_t anchor = YAML::NullAnchor;
    std::string name;  // of this node in its parent: a key, "[]" for a list item, "" at the top
    std::set<std::string> keys;
    bool has_key = false;  // a map's key has been read; the next node is its value
    std::string key;
    SourcePos key_pos;
  };

  [[noreturn]] static void Stop(Status status) { throw StopParsing{std::move(status)}; }

  // The dotted path of the node the next event belongs to ("zero_optimization.stage").
  std::string Path() const {
    std::string path;
    for (const Frame& frame : stack_) {
      if (frame.name == "[]") {
        path += "[]";
      } else if (!frame.name.empty()) {
        path += path.empty() ? frame.name : "." + frame.name;
      }
    }
    return path;
  }

  [[noreturn]] void NotAName(SourcePos pos) const {
    std::string path = Path();
    Stop(InvalidArgumentError("{}: a key under {} is not a plain name",
                              FormatSourcePos(source_name_, pos),
                              path.empty() ? "the top level" : path));
  }

  // Both copies an anchor costs count: the one kept for its aliases (anchors nested in anchors
  // are each kept whole) and the one each alias expands to.
  void Copied(size_t nodes, const std::string& where, const std::string& what) {
    copied_nodes_ += nodes;
    if (copied_nodes_ <= kMaxConfigAliasNodes) return;
    Stop(InvalidArgumentError(
        "{}: {} takes the nodes copied for YAML anchors and aliases past {}; a config needs far "
        "fewer: write the values out instead of nesting aliases",
        where, what, kMaxConfigAliasNodes));
  }

  // A copy of an anchored node, for the aliases that follow.
  void Remember(const ConfigNode& node, YAML::anchor_t anchor) {
    if (anchor == YAML::NullAnchor) return;
    const size_t nodes = CountNodes(node);
    Copied(nodes, FormatSourcePos(source_name_, node.pos), "anchor &" + anchor_names_[anchor]);
    anchors_[anchor] = {node, nodes};
  }

  // Events carry an anchor's number; messages use the name OnAnchor gave just before.
  void NameAnchor(YAML::anchor_t anchor) {
    if (anchor == YAML::NullAnchor) return;
    anchor_names_[anchor] = std::move(anchor_name_);
    anchor_name_.clear();
  }

  void Open(ConfigNode::Kind kind, const YAML::Mark& mark, YAML::anchor_t anchor) {
    NameAnchor(anchor);
    // A container where a key belongs is refused in Place, once complete: yaml-cpp opens one
    // for what turns out to be a syntax error ("[0.9," starts a map keyed by a list), and its
    // message is the useful one.
    std::string name;
    if (!stack_.empty()) {
      const Frame& parent = stack_.back();
      name = parent.node.kind == ConfigNode::Kind::kSequence ? "[]" : parent.key;
    }
    if (stack_.size() >= kMaxConfigDepth) {
      std::string path = Path();
      Stop(InvalidArgumentError(
          "{}: mappings and lists nested deeper than {} levels{}; a config needs a few: look "
          "for unbalanced brackets",
          Where(mark), kMaxConfigDepth, path.empty() ? "" : " under " + path));
    }
    Frame frame;
    frame.node.kind = kind;
    frame.node.pos = PosOf(mark);
    frame.anchor = anchor;
    frame.name = std::move(name);
    stack_.push_back(std::move(frame));
  }

  void Close() {
    Frame frame = std::move(stack_.back());
    stack_.pop_back();
    Remember(frame.node, frame.anchor);
    Place(std::move(frame.node));
  }

  void Add(ConfigNode node, YAML::anchor_t anchor) {
    NameAnchor(anchor);
    Remember(node, anchor);
    Place(std::move(node));
  }

  void Place(ConfigNode node) {
    if (stack_.empty()) {
      root_ = std::move(node);
      return;
    }
    Frame& frame = stack_.back();
    if (frame.node.kind == ConfigNode::Kind::kSequence) {
      frame.node.items.push_back(std::move(node));
      return;
    }
    if (frame.has_key) {
      frame.node.entries.push_back({std::move(frame.key), frame.key_pos, std::move(node)});
      frame.key.clear();
      frame.has_key = false;
      return;
    }
    if (node.kind != ConfigNode::Kind::kScalar) NotAName(node.pos);
    if (!frame.keys.insert(node.text).second) {
      std::string path = Path();
      Stop(InvalidArgumentError("{}: duplicate key {}", FormatSourcePos(source_name_, node.pos),
                                path.empty() ? node.text : path + "." + node.text));
    }
    frame.key = std::move(node.text);
    frame.key_pos = node.pos;
    frame.has_key = true;
  }

  std::string_view source_name_;
  bool positions_;
  std::vector<Frame> stack_;
  ConfigNode root_;
  std::map<YAML::anchor_t, std::pair<ConfigNode, size_t>> anchors_;  // node, its node count
  std::map<YAML::anchor_t, std::string> anchor_names_;
  std::string anchor_name_;  // from OnAnchor, for the node event that follows
  size_t copied_nodes_ = 0;
};

// Stops at the start of a second document, before reading it (the other events never come).
class SecondDocument : public YAML::EventHandler {
 public:
  explicit SecondDocument(const YamlTreeBuilder& builder) : builder_(builder) {}
  void OnDocumentStart(const YAML::Mark& mark) override {
    throw StopParsing{InvalidArgumentError(
        "{}: a second YAML document (after a --- or ... line); a config file holds one "
        "document: remove the marker and what follows, or put it in a file of its own and give "
        "both with --config",
        builder_.Where(mark))};
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}

 private:
  const YamlTreeBuilder& builder_;
};

}  // namespace

Result<ConfigNode> ParseYamlConfig(std::string_view text, std::string_view source_name,
                                   bool positions) {
  SLUICE_RETURN_IF_ERROR(CheckConfigSize(text.size(), source_name));
  YamlTreeBuilder builder(source_name, positions);
  std::istringstream stream{std::string(text)};
  try {
    YAML::Parser parser(stream);
    // No document at all (an empty file, only comments) is an empty config.
    if (!parser.HandleNextDocument(builder)) return ConfigNode{};
    SecondDocument second(builder);
    parser.HandleNextDocument(second);
  } catch (const StopParsing& stop) {
    return stop.status;
  } catch (const YAML::ParserException& e) {
    return InvalidArgumentError("{}: YAML syntax error: {}", builder.Where(e.mark), e.msg);
  } catch (const YAML::Exception& e) {
    return InvalidArgumentError("{}: YAML error: {}", builder.Where(e.mark), e.msg);
  }
  return builder.TakeRoot();
}

}  // namespace sluice
