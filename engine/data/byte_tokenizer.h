// The byte-level tokenizer: every byte of a text is one token, id = the byte's value (vocab 256).
// A text file needs no tokenization pass: TokenFile maps it and its bytes are the token stream.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/status.h"

namespace sluice::data {

class ByteTokenizer {
 public:
  static constexpr int64_t kVocabSize = 256;

  static std::vector<int32_t> Encode(std::string_view text);
  // Fails on an id outside 0..255, naming its position.
  static Result<std::string> Decode(std::span<const int32_t> ids);
};

}  // namespace sluice::data
