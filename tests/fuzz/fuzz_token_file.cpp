// Fuzzes the token-file reader (engine/data/token_file.cpp, token_format.cpp): the input is a
// whole token file, opened the ways a run can open it: format `auto` under a binary and a text
// name, and each explicit format (text, nanogpt_u16, llmc_bin with the GPT-2 and the Llama 3
// vocabulary). An accepted file must hold exactly the tokens its layout says, every one below
// the vocabulary size, inside the mapping.
#include <cstddef>
#include <cstdint>
#include <string>

#include "engine/data/token_file.h"
#include "fuzz_util.h"

namespace {

using sluice::data::TokenFile;
using sluice::data::TokenFormat;

void OpenAndCheck(const std::string& path, TokenFormat format, int64_t vocab, size_t file_bytes) {
  sluice::Result<TokenFile> file = TokenFile::Open(path, format, vocab);
  if (!file.ok()) {
    SLUICE_FUZZ_EXPECT(!file.status().message().empty(), "an error without a message");
    return;
  }
  SLUICE_FUZZ_EXPECT(file->format() != TokenFormat::kAuto, "format left at auto");
  const int64_t n = file->num_tokens();
  const int width = file->tokens().width();
  SLUICE_FUZZ_EXPECT(n >= 0 && width >= 1 && width <= 4, "n %lld width %d",
                     static_cast<long long>(n), width);
  SLUICE_FUZZ_EXPECT(file->header_bytes() + n * width == static_cast<int64_t>(file_bytes),
                     "header %lld + %lld tokens x %d != %zu bytes",
                     static_cast<long long>(file->header_bytes()), static_cast<long long>(n),
                     width, file_bytes);
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t id = file->tokens()[i];
    SLUICE_FUZZ_EXPECT(id < static_cast<uint64_t>(vocab), "token %lld is %u >= vocab %lld",
                       static_cast<long long>(i), id, static_cast<long long>(vocab));
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  sluice::fuzz::QuietLogs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes = sluice::fuzz::AsText(data, size);
  const std::string bin = sluice::fuzz::WriteScratchFile("tokens.bin", bytes).string();
  const std::string txt = sluice::fuzz::WriteScratchFile("tokens.txt", bytes).string();
  OpenAndCheck(bin, TokenFormat::kAuto, 50257, size);
  OpenAndCheck(txt, TokenFormat::kAuto, 256, size);
  OpenAndCheck(bin, TokenFormat::kText, 200, size);
  OpenAndCheck(bin, TokenFormat::kNanogptU16, 50257, size);
  OpenAndCheck(bin, TokenFormat::kLlmcBin, 50257, size);
  OpenAndCheck(bin, TokenFormat::kLlmcBin, 128256, size);
  (void)TokenFile::Open(bin, TokenFormat::kAuto, 0);  // refused before the file is read
  return 0;
}
