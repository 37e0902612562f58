#include "engine/checkpoint/strict_json.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

namespace sluice::checkpoint {
namespace {

using Json = nlohmann::ordered_json;

// Where the parser is: one frame per open object or array.
struct Frame {
  bool object = false;
  std::set<std::string> keys;  // objects: the keys seen so far
  std::string key;             // objects: the key whose value is being read
  size_t index = 0;            // arrays: the element being read
};

std::string FieldPath(const std::vector<Frame>& frames) {
  std::string path;
  for (const Frame& f : frames) {
    if (f.object) {
      if (!path.empty()) path += '.';
      path += f.key;
    } else {
      path += fmt::format("[{}]", f.index);
    }
  }
  return path;
}

// The deepest nesting of objects and arrays in `text` (strings skipped).
size_t NestingDepth(std::string_view text) {
  size_t depth = 0;
  size_t deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      deepest = std::max(deepest, ++depth);
    } else if ((c == '}' || c == ']') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

}  // namespace

Result<Json> ParseJsonWithoutDuplicateKeys(std::string_view text,
                                           const std::filesystem::path& path) {
  // What reads the document afterwards (copies, the canonical text) recurses per level.
  if (const size_t depth = NestingDepth(text); depth > kMaxJsonDepth) {
    return DataLossError(
        "{}: objects and arrays nested {} deep, more than the {} this reader takes", path.string(),
        depth, kMaxJsonDepth);
  }
  std::vector<Frame> frames;
  std::string duplicate;  // the first duplicated field
  // An element of an array is complete: the next one starts.
  auto next_element = [&frames] {
    if (!frames.empty() && !frames.back().object) ++frames.back().index;
  };
  Json::parser_callback_t callback = [&](int /*depth*/, Json::parse_event_t event, Json& parsed) {
    using Event = Json::parse_event_t;
    switch (event) {
      case Event::object_start:
      case Event::array_start:
        frames.push_back(Frame{.object = event == Event::object_start});
        break;
      case Event::key: {
        Frame& f = frames.back();
        f.key = parsed.get<std::string>();
        if (!f.keys.insert(f.key).second && duplicate.empty()) duplicate = FieldPath(frames);
        break;
      }
      case Event::object_end:
      case Event::array_end:
        frames.pop_back();
        next_element();
        break;
      case Event::value:
        next_element();
        break;
    }
    return true;
  };
  Json json = Json::parse(text, callback, /*allow_exceptions=*/false);
  if (json.is_discarded()) {
    return DataLossError("{}: not valid JSON ({} bytes): the file is corrupt", path.string(),
                         text.size());
  }
  if (!duplicate.empty()) {
    return DataLossError(
        "{}: field '{}' appears twice (a duplicated JSON key, of which a reader would silently "
        "take one): the file was edited or is corrupt",
        path.string(), duplicate);
  }
  return json;
}

}  // namespace sluice::checkpoint
