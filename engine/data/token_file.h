// A validated token file, mapped read-only: text, nanoGPT raw uint16 or llm.c headed .bin.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "engine/data/mapped_file.h"
#include "engine/data/token_format.h"
#include "engine/data/token_view.h"
#include "runtime/status.h"

namespace sluice::data {

// The three meaningful fields of an llm.c header (the other 253 int32 are zero).
struct LlmcHeader {
  int32_t magic = 0;
  int32_t version = 0;
  int64_t num_tokens = 0;
};

class TokenFile {
 public:
  // Maps `path` and checks it completely before any training step: the format (`kAuto` is
  // detected), the llm.c header (magic, version, token count against the file size), the size of
  // a uint16 file, and that every token id is below `vocab_size`. Each error names the file, the
  // byte offset and what is wrong; a truncated file says how many bytes are missing.
  static Result<TokenFile> Open(const std::string& path, TokenFormat format, int64_t vocab_size);

  const std::string& path() const { return file_.path(); }
  TokenFormat format() const { return format_; }  // never kAuto
  // The tokens, read in place. Reads of them belong inside GuardMappedRead(mapping(), ...)
  // (mapped_read_guard.h): the file may shrink under a running job.
  const TokenView& tokens() const { return tokens_; }
  const MappedFile& mapping() const { return file_; }
  int64_t num_tokens() const { return tokens_.size(); }
  // Byte offset of token 0 in the file (1024 for llm.c, 0 otherwise).
  int64_t header_bytes() const { return header_bytes_; }
  int64_t TokenByteOffset(int64_t index) const { return header_bytes_ + index * tokens_.width(); }
  const std::optional<LlmcHeader>& llmc_header() const { return llmc_header_; }

 private:
  MappedFile file_;
  TokenFormat format_ = TokenFormat::kText;
  TokenView tokens_;
  int64_t header_bytes_ = 0;
  std::optional<LlmcHeader> llmc_header_;
};

}  // namespace sluice::data
