// Byte tokenizer, the three token file formats, auto detection, and every malformed-file error.
#include "engine/data/token_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "engine/data/byte_tokenizer.h"
#include "engine/data/token_dataset.h"
#include "engine/data/token_writer.h"
#include "engine/train/run_setup.h"
#include "tests/data/test_files.h"

namespace sluice::data {
namespace {

using ::testing::HasSubstr;
using testing::LlmcBytes;
using testing::ScratchDir;
using testing::WriteBytes;
using testing::WriteString;

// The file mapped at `address` in this process, from /proc/self/maps ("" when none).
std::string MappingOf(const void* address) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  const auto a = reinterpret_cast<uintptr_t>(address);
  while (std::getline(maps, line)) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx", &lo, &hi) != 2) continue;
    if (a >= lo && a < hi) {
      const size_t slash = line.find('/');
      return slash == std::string::npos ? "" : line.substr(slash);
    }
  }
  return "";
}

Status OpenError(const std::string& path, TokenFormat format, int64_t vocab = 65536) {
  Result<TokenFile> file = TokenFile::Open(path, format, vocab);
  EXPECT_FALSE(file.ok()) << path << " opened but should not";
  return file.ok() ? OkStatus() : file.status();
}

TEST(ByteTokenizer, RoundTripsEveryByte) {
  std::string text = "héllo, wörld\n";
  for (int b = 0; b < 256; ++b) text.push_back(static_cast<char>(b));
  const std::vector<int32_t> ids = ByteTokenizer::Encode(text);
  ASSERT_EQ(ids.size(), text.size());
  EXPECT_EQ(ids[0], 'h');
  EXPECT_EQ(ids[1], 0xC3);  // first byte of 'é' in UTF-8
  Result<std::string> back = ByteTokenizer::Decode(ids);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, text);
}

TEST(ByteTokenizer, DecodeRejectsIdsOutsideBytes) {
  const std::vector<int32_t> ids = {72, 105, 256};
  Result<std::string> text = ByteTokenizer::Decode(ids);
  ASSERT_FALSE(text.ok());
  EXPECT_THAT(text.status().message(), HasSubstr("token id 256 at position 2"));
}

TEST(TokenFormat, NamesRoundTrip) {
  for (TokenFormat f :
       {TokenFormat::kAuto, TokenFormat::kText, TokenFormat::kNanogptU16, TokenFormat::kLlmcBin}) {
    Result<TokenFormat> parsed = ParseTokenFormat(TokenFormatName(f));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, f);
  }
  Result<TokenFormat> bad = ParseTokenFormat("gpt2");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("'gpt2'"));
  EXPECT_THAT(bad.status().message(), HasSubstr("nanogpt_u16"));
}

TEST(TokenFile, TextIsMappedBytesWithoutACopy) {
  ScratchDir dir;
  const std::string text = "To be, or not to be, that is the question.\n";
  const std::string path = dir.File("hamlet.txt");
  WriteString(path, text);
  Result<TokenFile> file = TokenFile::Open(path, TokenFormat::kAuto, 256);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ(file->format(), TokenFormat::kText);
  EXPECT_EQ(file->tokens().width(), 1);
  ASSERT_EQ(file->num_tokens(), static_cast<int64_t>(text.size()));
  const std::span<const uint8_t> bytes = file->tokens().AsU8();
  EXPECT_EQ(std::string(bytes.begin(), bytes.end()), text);
  EXPECT_EQ(MappingOf(bytes.data()), path);
  // Decoding the token stream gives the text back.
  std::vector<int32_t> ids(text.size());
  file->tokens().CopyToInt32(0, file->num_tokens(), ids.data());
  EXPECT_EQ(*ByteTokenizer::Decode(ids), text);
}

TEST(TokenFile, AutoDetectsTextByContentWithoutExtension) {
  ScratchDir dir;
  const std::string path = dir.File("corpus");
  WriteString(path, "plain UTF-8 text — no extension\n");
  Result<TokenFile> file = TokenFile::Open(path, TokenFormat::kAuto, 256);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ(file->format(), TokenFormat::kText);
}

TEST(TokenFile, NanogptU16ReadsInPlace) {
  ScratchDir dir;
  const std::vector<uint16_t> tokens = {0, 1, 64, 50256, 13, 65535, 7};
  const std::string path = dir.File("train.bin");
  WriteBytes(path, tokens.data(), tokens.size() * 2);
  for (TokenFormat f : {TokenFormat::kNanogptU16, TokenFormat::kAuto}) {
    Result<TokenFile> file = TokenFile::Open(path, f, 65536);
    ASSERT_TRUE(file.ok()) << file.status().ToString();
    EXPECT_EQ(file->format(), TokenFormat::kNanogptU16);
    EXPECT_EQ(file->header_bytes(), 0);
    EXPECT_FALSE(file->llmc_header().has_value());
    const std::span<const uint16_t> view = file->tokens().AsU16();
    EXPECT_EQ(std::vector<uint16_t>(view.begin(), view.end()), tokens);
    EXPECT_EQ(MappingOf(view.data()), path);
  }
}

TEST(TokenFile, LlmcGpt2HeaderAndTokens) {
  ScratchDir dir;
  const std::vector<uint16_t> tokens = {50256, 15496, 11, 995, 0, 1};
  const std::string path = dir.File("tiny_shakespeare_val.bin");
  const std::vector<uint8_t> bytes = LlmcBytes<uint16_t>(20240520, 1, 6, tokens);
  WriteBytes(path, bytes.data(), bytes.size());
  for (TokenFormat f : {TokenFormat::kLlmcBin, TokenFormat::kAuto}) {
    Result<TokenFile> file = TokenFile::Open(path, f, 50257);
    ASSERT_TRUE(file.ok()) << file.status().ToString();
    EXPECT_EQ(file->format(), TokenFormat::kLlmcBin);
    ASSERT_TRUE(file->llmc_header().has_value());
    EXPECT_EQ(file->llmc_header()->magic, 20240520);
    EXPECT_EQ(file->llmc_header()->version, 1);
    EXPECT_EQ(file->llmc_header()->num_tokens, 6);
    EXPECT_EQ(file->header_bytes(), 1024);
    EXPECT_EQ(file->TokenByteOffset(3), 1030);
    const std::span<const uint16_t> view = file->tokens().AsU16();
    EXPECT_EQ(std::vector<uint16_t>(view.begin(), view.end()), tokens);
    EXPECT_EQ(MappingOf(view.data()), path);
  }
}

TEST(TokenFile, LlmcLlama3HasUint32Tokens) {
  ScratchDir dir;
  const std::vector<uint32_t> tokens = {128000, 9906, 1917, 128001, 0};
  const std::string path = dir.File("llama.bin");
  const std::vector<uint8_t> bytes = LlmcBytes<uint32_t>(20240801, 7, 5, tokens);
  WriteBytes(path, bytes.data(), bytes.size());
  Result<TokenFile> file = TokenFile::Open(path, TokenFormat::kAuto, 128256);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ(file->llmc_header()->version, 7);
  EXPECT_EQ(file->tokens().width(), 4);
  const std::span<const uint32_t> view = file->tokens().AsU32();
  EXPECT_EQ(std::vector<uint32_t>(view.begin(), view.end()), tokens);
  EXPECT_EQ(file->tokens()[0], 128000u);
}

TEST(TokenWriter, WritesWhatTheReaderReads) {
  ScratchDir dir;
  const std::vector<int32_t> ids = {5, 50256, 0, 65535, 42};
  ASSERT_TRUE(WriteNanogptU16(dir.File("a.bin"), ids).ok());
  ASSERT_TRUE(WriteLlmc(dir.File("b.bin"), ids, LlmcTokenKind::kGpt2).ok());
  std::vector<int32_t> big = ids;
  big.push_back(128255);
  ASSERT_TRUE(WriteLlmc(dir.File("c.bin"), big, LlmcTokenKind::kLlama3).ok());

  Result<TokenFile> a = TokenFile::Open(dir.File("a.bin"), TokenFormat::kNanogptU16, 65536);
  Result<TokenFile> b = TokenFile::Open(dir.File("b.bin"), TokenFormat::kAuto, 65536);
  Result<TokenFile> c = TokenFile::Open(dir.File("c.bin"), TokenFormat::kAuto, 128256);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(b->llmc_header()->magic, kLlmcGpt2Magic);
  EXPECT_EQ(c->llmc_header()->magic, kLlmcLlama3Magic);
  for (const TokenFile* f : {&*a, &*b, &*c}) {
    std::vector<int32_t> back(static_cast<size_t>(f->num_tokens()));
    f->tokens().CopyToInt32(0, f->num_tokens(), back.data());
    EXPECT_EQ(back, f == &*c ? big : ids) << f->path();
  }
  EXPECT_FALSE(std::filesystem::exists(dir.File("a.bin.tmp")));

  Status too_big = WriteNanogptU16(dir.File("d.bin"), big);
  EXPECT_THAT(too_big.message(), HasSubstr("token 5 has id 128255, outside 0..65535"));
  EXPECT_FALSE(std::filesystem::exists(dir.File("d.bin")));
}

TEST(TokenFileErrors, WrongMagicShowsFoundAndExpected) {
  ScratchDir dir;
  const std::string path = dir.File("bad_magic.bin");
  const std::vector<uint8_t> bytes = LlmcBytes<uint16_t>(20240521, 1, 4, {1, 2, 3, 4});
  WriteBytes(path, bytes.data(), bytes.size());
  const Status s = OpenError(path, TokenFormat::kLlmcBin);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr(path));
  EXPECT_THAT(s.message(), HasSubstr("byte offset 0: wrong magic 20240521"));
  EXPECT_THAT(s.message(), HasSubstr("expected 20240520"));
}

TEST(TokenFileErrors, UnsupportedVersion) {
  ScratchDir dir;
  const std::string path = dir.File("v2.bin");
  const std::vector<uint8_t> bytes = LlmcBytes<uint16_t>(20240520, 2, 4, {1, 2, 3, 4});
  WriteBytes(path, bytes.data(), bytes.size());
  const Status s = OpenError(path, TokenFormat::kAuto);
  EXPECT_THAT(s.message(), HasSubstr("byte offset 4: unsupported version 2 for magic 20240520"));
  EXPECT_THAT(s.message(), HasSubstr("expected version 1"));
}

TEST(TokenFileErrors, TruncatedSaysHowManyBytesAreMissing) {
  ScratchDir dir;
  const std::string path = dir.File("cut.bin");
  std::vector<uint16_t> tokens(90, 7);
  const std::vector<uint8_t> bytes = LlmcBytes<uint16_t>(20240520, 1, 100, tokens);
  WriteBytes(path, bytes.data(), bytes.size());
  const Status s = OpenError(path, TokenFormat::kAuto);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("truncated"));
  EXPECT_THAT(s.message(), HasSubstr("declares 100 tokens = 200 bytes"));
  EXPECT_THAT(s.message(), HasSubstr("file holds 180 (20 bytes missing"));
}

TEST(TokenFileErrors, TruncatedInsideTheHeader) {
  ScratchDir dir;
  const std::string path = dir.File("stub.bin");
  std::vector<uint8_t> bytes = LlmcBytes<uint16_t>(20240520, 1, 10, {});
  bytes.resize(100);
  WriteBytes(path, bytes.data(), bytes.size());
  const Status s = OpenError(path, TokenFormat::kAuto);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("truncated inside its header: 100 bytes"));
  EXPECT_THAT(s.message(), HasSubstr("924 bytes missing"));
}

TEST(TokenFileErrors, BytesBeyondTheHeaderCount) {
  ScratchDir dir;
  const std::string path = dir.File("long.bin");
  const std::vector<uint8_t> bytes = LlmcBytes<uint16_t>(20240520, 1, 3, {1, 2, 3, 4, 5});
  WriteBytes(path, bytes.data(), bytes.size());
  const Status s = OpenError(path, TokenFormat::kLlmcBin);
  EXPECT_THAT(s.message(), HasSubstr("declares 3 tokens = 6 bytes, but 4 more bytes follow"));
  EXPECT_THAT(s.message(), HasSubstr("byte offset 1030"));
}

TEST(TokenFileErrors, OddSizeUint16) {
  ScratchDir dir;
  const std::string path = dir.File("odd.bin");
  const uint8_t bytes[7] = {1, 0, 2, 0, 3, 0, 4};
  WriteBytes(path, bytes, sizeof(bytes));
  const Status s = OpenError(path, TokenFormat::kNanogptU16);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("odd size (7 bytes)"));
  EXPECT_THAT(s.message(), HasSubstr("byte offset 6 is cut off"));
}

TEST(TokenFileErrors, AutoCannotDecideAnOddBinaryFile) {
  ScratchDir dir;
  const std::string path = dir.File("mystery.dat");
  const uint8_t bytes[5] = {'a', 'b', 0, 'c', 'd'};
  WriteBytes(path, bytes, sizeof(bytes));
  const Status s = OpenError(path, TokenFormat::kAuto);
  EXPECT_THAT(s.message(), HasSubstr("cannot detect the format"));
  EXPECT_THAT(s.message(), HasSubstr("byte offset 2 is not text"));
  EXPECT_THAT(s.message(), HasSubstr("set data.format"));
}

TEST(TokenFileErrors, OutOfVocabNamesTheFirstOffendingToken) {
  ScratchDir dir;
  // nanoGPT: token 5 is the first >= 256 (byte offset 10); token 7 also is.
  const std::vector<uint16_t> raw = {1, 2, 3, 4, 5, 300, 6, 999};
  WriteBytes(dir.File("raw.bin"), raw.data(), raw.size() * 2);
  Status s = OpenError(dir.File("raw.bin"), TokenFormat::kNanogptU16, 256);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(),
              HasSubstr("byte offset 10 (token 5): token id 300 is >= vocab_size 256"));

  // llm.c: the header shifts the offset by 1024.
  const std::vector<uint8_t> headed = LlmcBytes<uint16_t>(20240520, 1, 8, raw);
  WriteBytes(dir.File("headed.bin"), headed.data(), headed.size());
  s = OpenError(dir.File("headed.bin"), TokenFormat::kAuto, 256);
  EXPECT_THAT(s.message(), HasSubstr("byte offset 1034 (token 5): token id 300"));

  // Text with a vocabulary smaller than a byte: the first byte >= 128.
  WriteString(dir.File("t.txt"), "ascii then \xC3\xA9");
  s = OpenError(dir.File("t.txt"), TokenFormat::kText, 128);
  EXPECT_THAT(s.message(), HasSubstr("byte offset 11 (token 11): token id 195 is >= vocab_size"));

  // Offending tokens far apart (past the first 64 Ki-token scan block) are still found first.
  std::vector<uint16_t> long_raw(200000, 9);
  long_raw[150001] = 70;
  long_raw[190000] = 71;
  WriteBytes(dir.File("long.bin"), long_raw.data(), long_raw.size() * 2);
  s = OpenError(dir.File("long.bin"), TokenFormat::kNanogptU16, 64);
  EXPECT_THAT(s.message(), HasSubstr("byte offset 300002 (token 150001): token id 70"));
}

TEST(TokenFileErrors, EmptyFile) {
  ScratchDir dir;
  const std::string path = dir.File("empty.bin");
  WriteBytes(path, "", 0);
  for (TokenFormat f : {TokenFormat::kAuto, TokenFormat::kNanogptU16, TokenFormat::kText}) {
    const Status s = OpenError(path, f);
    EXPECT_THAT(s.message(), HasSubstr("'" + path + "' is empty (0 bytes)"));
  }
}

TEST(TokenFileErrors, MissingFileAndDirectory) {
  ScratchDir dir;
  const std::string path = dir.File("nope.bin");
  Status s = OpenError(path, TokenFormat::kAuto);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr(path));
  EXPECT_THAT(s.message(), HasSubstr("token file: " + path + " does not exist"));

  s = OpenError(dir.File(""), TokenFormat::kAuto);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("is a directory, not a regular file"));
}

TEST(TokenFileErrors, FileShorterThanOneWindow) {
  ScratchDir dir;
  const std::string path = dir.File("short.txt");
  WriteString(path, "0123456789");  // 10 tokens
  DataOptions options = train::DefaultDataOptions();
  options.train_path = path;
  options.seq_len = 16;
  Result<TokenDataset> ds = TokenDataset::Open(options);
  ASSERT_FALSE(ds.ok());
  EXPECT_THAT(ds.status().message(), HasSubstr(path));
  EXPECT_THAT(ds.status().message(),
              HasSubstr("holds 10 tokens (10 bytes of data from byte offset 0), fewer than one "
                        "window of model.seq_len + 1 = 17 tokens"));
  options.seq_len = 9;  // 10 tokens is exactly one window, but a split needs a second
  ds = TokenDataset::Open(options);
  ASSERT_FALSE(ds.ok());
  EXPECT_THAT(ds.status().message(), HasSubstr("leaves 0 training and 10 validation tokens"));
  options.val_fraction = 0;
  EXPECT_TRUE(TokenDataset::Open(options).ok());
}

}  // namespace
}  // namespace sluice::data
