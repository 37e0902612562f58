// JSON documents via nlohmann::json's SAX interface: exceptions off, duplicate keys rejected (as
// DeepSpeed does), and key positions tracked through a reading iterator so that errors about a
// key can say file:line:col. The SAX parser does not recurse; the tree it builds here is bounded
// in depth like YAML's, so that nothing after it recurses without bound either.
#include <algorithm>
#include <cctype>
#include <iterator>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "engine/config/config_tree.h"
#include "runtime/json_text.h"

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

// Line and column of an offset, from the offsets where lines start: one pass over the text, then
// a binary search per position (rescanning the text per key took 12 s for 40,000 keys).
class LineIndex {
 public:
  explicit LineIndex(std::string_view text) {
    starts_.push_back(0);
    for (size_t i = 0; i < text.size(); ++i) {
      if (text[i] == '\n') starts_.push_back(i + 1);
    }
  }

  size_t LineStart(size_t offset) const { return *LineOf(offset); }

  SourcePos PosAt(size_t offset) const {
    auto line = LineOf(offset);
    return {static_cast<int>(line - starts_.begin()) + 1, static_cast<int>(offset - *line) + 1};
  }

 private:
  std::vector<size_t>::const_iterator LineOf(size_t offset) const {
    return std::upper_bound(starts_.begin(), starts_.end(), offset) - 1;
  }

  std::vector<size_t> starts_;
};

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
      : text_(text), lines_(text), source_name_(source_name), last_read_(last_read) {}

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
    if (!frame.keys.insert(name).second) {
      std::string path = Path();
      error_ = InvalidArgumentError("{}: duplicate key {} (DeepSpeed rejects duplicate keys too)",
                                    FormatSourcePos(source_name_, pos),
                                    path.empty() ? name : path + "." + name);
      return false;
    }
    pending_key_ = name;
    pending_key_pos_ = pos;
    return true;
  }

  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception& ex) override {
    std::string what = ex.what();
    if (what.find("ill-formed UTF-8") != std::string::npos) {
      // The lexer has read past the bad byte; it is on this line (a string does not span lines).
      const size_t line_start = lines_.LineStart(position == 0 ? 0 : position - 1);
      const size_t bad = line_start + FindInvalidUtf8(text_.substr(line_start));
      if (bad < text_.size()) {
        error_ = InvalidArgumentError(
            "{}: byte 0x{:02X} is not UTF-8, and JSON text is: save the file as UTF-8; a file "
            "name in another encoding can be given in a YAML config or with --set",
            FormatSourcePos(source_name_, lines_.PosAt(bad)),
            static_cast<unsigned char>(text_[bad]));
        return false;
      }
    }
    SourcePos pos = lines_.PosAt(OffendingTokenStart(text_, position, what));
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
    std::string name;  // of this node in its parent: a key, "[]" for a list item, "" at the top
    std::set<std::string> keys;
  };

  // The dotted path of the innermost open node ("zero_optimization.offload_param").
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

  // Where the lexer is: the last character it read.
  size_t ReadOffset() const {
    return *last_read_ == nullptr ? 0 : static_cast<size_t>(*last_read_ - text_.data());
  }

  // The key's opening quote: the lexer has just read its closing one. Inside a JSON string every
  // quote is escaped, so the first unescaped one back is the opening quote.
  SourcePos KeyPos() const {
    if (*last_read_ == nullptr) return {};
    size_t open = ReadOffset();
    while (open > 0) {
      --open;
      if (text_[open] == '"' && (open == 0 || text_[open - 1] != '\\')) break;
    }
    return lines_.PosAt(open);
  }

  bool AddScalar(ConfigNode::ScalarKind kind, std::string text) {
    ConfigNode node;
    node.kind = ConfigNode::Kind::kScalar;
    node.scalar_kind = kind;
    node.text = std::move(text);
    return Add(std::move(node));
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
    if (stack_.size() >= kMaxConfigDepth) {
      std::string path = Path();
      error_ = InvalidArgumentError(
          "{}: mappings and lists nested deeper than {} levels{}; a config needs a few: look "
          "for unbalanced brackets",
          FormatSourcePos(source_name_, lines_.PosAt(ReadOffset())), kMaxConfigDepth,
          path.empty() ? "" : " under " + path);
      return false;
    }
    std::string name;
    if (!stack_.empty()) {
      const bool in_map = stack_.back().node.kind == ConfigNode::Kind::kMap;
      if (in_map) node.pos = pending_key_pos_;
      name = in_map ? pending_key_ : "[]";
    }
    // Remember which key this container belongs to; restored on Close.
    open_keys_.push_back({pending_key_, pending_key_pos_});
    stack_.push_back({std::move(node), std::move(name), {}});
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
  LineIndex lines_;
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
  SLUICE_RETURN_IF_ERROR(CheckConfigSize(text.size(), source_name));
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
