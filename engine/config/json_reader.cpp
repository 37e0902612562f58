// JSON documents via nlohmann::json's SAX interface: exceptions off, duplicate keys rejected (as
// DeepSpeed does), and key positions tracked through a reading iterator so that errors about a
// key can say file:line:col.
#include <algorithm>
#include <cctype>
#include <iterator>
#include <nlohmann/json.hpp>
#include <set>

#include "engine/config/config_tree.h"

namespace sluice {
namespace {

// A char iterator that remembers the furthest character the lexer has looked at.
class TrackingIterator {
 public:
  using iterator_category = std::forward_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;

  TrackingIterator() = default;
  TrackingIterator(const char* p, const char** last_read) : p_(p), last_read_(last_read) {}
  reference operator*() const {
    if (last_read_ != nullptr && (*last_read_ == nullptr || p_ > *last_read_)) *last_read_ = p_;
    return *p_;
  }
  TrackingIterator& operator++() {
    ++p_;
    return *this;
  }
  TrackingIterator operator++(int) {
    TrackingIterator old = *this;
    ++p_;
    return old;
  }
  bool operator==(const TrackingIterator& other) const { return p_ == other.p_; }
  bool operator!=(const TrackingIterator& other) const { return p_ != other.p_; }

 private:
  const char* p_ = nullptr;
  const char** last_read_ = nullptr;
};

SourcePos PosAt(std::string_view text, size_t offset) {
  SourcePos pos{1, 1};
  for (size_t i = 0; i < offset && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++pos.line;
      pos.column = 1;
    } else {
      ++pos.column;
    }
  }
  return pos;
}

bool IsLiteralChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '+';
}

// The first character of the token a parse error is about. nlohmann reports how many characters
// it has read, which ends past the token (a string's closing quote, the character after a
// literal); walk back to where the token starts.
size_t OffendingTokenStart(std::string_view text, size_t position, std::string_view what) {
  if (text.empty() || what.find("end of input") != std::string_view::npos) return text.size();
  size_t i = std::min(position == 0 ? 0 : position - 1, text.empty() ? 0 : text.size() - 1);
  while (i > 0 && std::isspace(static_cast<unsigned char>(text[i]))) --i;
  if (what.find("unexpected string literal") != std::string_view::npos && text[i] == '"') {
    while (i > 0) {
      --i;
      if (text[i] == '"' && (i == 0 || text[i - 1] != '\\')) break;
    }
    return i;
  }
  if (IsLiteralChar(text[i])) {
    while (i > 0 && IsLiteralChar(text[i - 1])) --i;
  }
  return i;
}

class TreeBuilder : public nlohmann::json_sax<nlohmann::json> {
 public:
  TreeBuilder(std::string_view text, std::string_view source_name, const char** last_read)
      : text_(text), source_name_(source_name), last_read_(last_read) {}

  bool null() override { return Add(ConfigNode{}); }
  bool boolean(bool value) override {
    return AddScalar(ConfigNode::ScalarKind::kBool, value ? "true" : "false");
  }
  bool number_integer(number_integer_t value) override {
    return AddScalar(ConfigNode::ScalarKind::kNumber, std::to_string(value));
  }
  bool number_unsigned(number_unsigned_t value) override {
    return AddScalar(ConfigNode::ScalarKind::kNumber, std::to_string(value));
  }
  bool number_float(number_float_t, const string_t& text) override {
    return AddScalar(ConfigNode::ScalarKind::kNumber, text);
  }
  bool string(string_t& value) override {
    return AddScalar(ConfigNode::ScalarKind::kString, value);
  }
  bool binary(binary_t&) override { return AddScalar(ConfigNode::ScalarKind::kString, ""); }

  bool start_object(std::size_t) override {
    ConfigNode node;
    node.kind = ConfigNode::Kind::kMap;
    return Open(std::move(node));
  }
  bool end_object() override { return Close(); }
  bool start_array(std::size_t) override {
    ConfigNode node;
    node.kind = ConfigNode::Kind::kSequence;
    return Open(std::move(node));
  }
  bool end_array() override { return Close(); }

  bool key(string_t& name) override {
    Frame& frame = stack_.back();
    SourcePos pos = KeyPos();
    std::string path = frame.path.empty() ? name : frame.path + "." + name;
    if (!frame.keys.insert(name).second) {
      error_ = InvalidArgumentError("{}: duplicate key {} (DeepSpeed rejects duplicate keys too)",
                                    FormatSourcePos(source_name_, pos), path);
      return false;
    }
    pending_key_ = name;
    pending_key_pos_ = pos;
    return true;
  }

  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception& ex) override {
    std::string what = ex.what();
    SourcePos pos = PosAt(text_, OffendingTokenStart(text_, position, what));
    size_t column = what.find("column ");
    size_t colon = column == std::string::npos ? std::string::npos : what.find(": ", column);
    if (colon != std::string::npos) what = what.substr(colon + 2);
    error_ =
        InvalidArgumentError("{}: JSON syntax error: {}", FormatSourcePos(source_name_, pos), what);
    return false;
  }

  Result<ConfigNode> Finish(bool ok) {
    if (!error_.ok()) return error_;
    if (!ok || !root_set_) return InternalError("{}: JSON parse stopped early", source_name_);
    return std::move(root_);
  }

 private:
  struct Frame {
    ConfigNode node;
    std::string path;
    std::set<std::string> keys;
  };

  SourcePos KeyPos() const {
    if (*last_read_ == nullptr) return {};
    size_t close = static_cast<size_t>(*last_read_ - text_.data());
    size_t open = close;
    while (open > 0) {
      --open;
      if (text_[open] == '"' && (open == 0 || text_[open - 1] != '\\')) break;
    }
    return PosAt(text_, open);
  }

  bool AddScalar(ConfigNode::ScalarKind kind, std::string text) {
    ConfigNode node;
    node.kind = ConfigNode::Kind::kScalar;
    node.scalar_kind = kind;
    node.text = std::move(text);
    return Add(std::move(node));
  }

  std::string ChildPath() const {
    if (stack_.empty()) return "";
    const Frame& frame = stack_.back();
    if (frame.node.kind == ConfigNode::Kind::kSequence) return frame.path + "[]";
    return frame.path.empty() ? pending_key_ : frame.path + "." + pending_key_;
  }

  bool Add(ConfigNode node) {
    if (stack_.empty()) {
      root_ = std::move(node);
      root_set_ = true;
      return true;
    }
    Frame& frame = stack_.back();
    if (frame.node.kind == ConfigNode::Kind::kSequence) {
      frame.node.items.push_back(std::move(node));
    } else {
      node.pos = pending_key_pos_;
      frame.node.entries.push_back({pending_key_, pending_key_pos_, std::move(node)});
    }
    return true;
  }

  bool Open(ConfigNode node) {
    std::string path = ChildPath();
    if (!stack_.empty() && stack_.back().node.kind == ConfigNode::Kind::kMap) {
      node.pos = pending_key_pos_;
    }
    // Remember which key this container belongs to; restored on Close.
    open_keys_.push_back({pending_key_, pending_key_pos_});
    stack_.push_back({std::move(node), std::move(path), {}});
    return true;
  }

  bool Close() {
    ConfigNode node = std::move(stack_.back().node);
    stack_.pop_back();
    pending_key_ = open_keys_.back().first;
    pending_key_pos_ = open_keys_.back().second;
    open_keys_.pop_back();
    return Add(std::move(node));
  }

  std::string_view text_;
  std::string_view source_name_;
  const char** last_read_;
  std::vector<Frame> stack_;
  std::vector<std::pair<std::string, SourcePos>> open_keys_;
  std::string pending_key_;
  SourcePos pending_key_pos_;
  ConfigNode root_;
  bool root_set_ = false;
  Status error_;
};

}  // namespace

Result<ConfigNode> ParseJsonConfig(std::string_view text, std::string_view source_name) {
  const char* last_read = nullptr;
  TreeBuilder builder(text, source_name, &last_read);
  TrackingIterator first(text.data(), &last_read);
  TrackingIterator last(text.data() + text.size(), nullptr);
  // Comments are accepted: DeepSpeed also reads HJSON-style files with comments.
  bool ok = nlohmann::json::sax_parse(first, last, &builder, nlohmann::json::input_format_t::json,
                                      /*strict=*/true, /*ignore_comments=*/true);
  return builder.Finish(ok);
}

}  // namespace sluice
