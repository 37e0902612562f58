#include "engine/data/byte_tokenizer.h"

namespace sluice::data {

std::vector<int32_t> ByteTokenizer::Encode(std::string_view text) {
  std::vector<int32_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
  return ids;
}

Result<std::string> ByteTokenizer::Decode(std::span<const int32_t> ids) {
  std::string text(ids.size(), '\0');
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= kVocabSize) {
      return InvalidArgumentError(
          "byte tokenizer cannot decode token id {} at position {}: ids are 0..255", ids[i], i);
    }
    text[i] = static_cast<char>(ids[i]);
  }
  return text;
}

}  // namespace sluice::data
