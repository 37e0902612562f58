// The safetensors writer and reader: byte layout, streaming writes, validation that names the
// tensor and field, and sharded models with model.safetensors.index.json.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/checkpoint/safetensors_file.h"
#include "engine/checkpoint/safetensors_writer.h"
#include "tests/checkpoint/checkpoint_test_util.h"

namespace sluice::checkpoint {
namespace {

using testing::TempDir;

std::string ReadBytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteBytes(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// A file made by hand: header JSON (unpadded) and `data_bytes` zero bytes of data.
void WriteRaw(const std::filesystem::path& path, const std::string& json, size_t data_bytes) {
  uint64_t n = json.size();
  std::string bytes(8, '\0');
  std::memcpy(bytes.data(), &n, 8);
  WriteBytes(path, bytes + json + std::string(data_bytes, '\0'));
}

Status OpenStatus(const std::filesystem::path& path) {
  return SafetensorsFile::Open(path).status();
}

bool Contains(const Status& s, std::string_view text) {
  return s.message().find(text) != std::string::npos;
}

TEST(SafetensorsTest, SingleTensorMatchesTheReferenceByteLayout) {
  TempDir tmp;
  const auto path = tmp.path() / "t.safetensors";
  auto writer = SafetensorsWriter::Create(path, {{"test", SafetensorsDType::kI32, {2, 2}}}, {});
  ASSERT_TRUE(writer.ok()) << writer.status().ToString();
  const int32_t values[4] = {0, 1, 2, 3};
  ASSERT_TRUE((*writer)->Append(values, sizeof(values)).ok());
  ASSERT_TRUE((*writer)->Finish().ok());
  // What huggingface/safetensors' serialize() produces for this tensor: the JSON padded with
  // spaces to a multiple of 8, its length first.
  std::string json = R"({"test":{"dtype":"I32","shape":[2,2],"data_offsets":[0,16]}})";
  json.resize((json.size() + 7) / 8 * 8, ' ');
  uint64_t n = json.size();
  std::string expected(8, '\0');
  std::memcpy(expected.data(), &n, 8);
  expected += json;
  expected.append(reinterpret_cast<const char*>(values), sizeof(values));
  EXPECT_EQ(ReadBytes(path), expected);
  EXPECT_FALSE(std::filesystem::exists(tmp.path() / "t.safetensors.tmp"));
}

TEST(SafetensorsTest, StreamingRoundTripWithMetadataAndOddShapes) {
  TempDir tmp;
  const auto path = tmp.path() / "m.safetensors";
  std::vector<float> a(6 * 5);
  for (size_t i = 0; i < a.size(); ++i) a[i] = 0.5f * static_cast<float>(i) - 3.0f;
  std::vector<uint16_t> b = {0x3f80, 0xc000, 0x7f80};
  std::vector<int64_t> c = {-1, 1ll << 40};
  auto writer = SafetensorsWriter::Create(path,
                                          {{"a", SafetensorsDType::kF32, {6, 5}},
                                           {"empty", SafetensorsDType::kF32, {0, 4}},
                                           {"b", SafetensorsDType::kBF16, {3}},
                                           {"scalar_pair", SafetensorsDType::kI64, {2}}},
                                          {{"format", "pt"}, {"note", "x"}});
  ASSERT_TRUE(writer.ok());
  // Pieces that straddle tensor boundaries.
  ASSERT_EQ((*writer)->current()->name, "a");
  ASSERT_TRUE((*writer)->Append(a.data(), 7).ok());
  ASSERT_TRUE((*writer)->Append(reinterpret_cast<char*>(a.data()) + 7, a.size() * 4 - 7).ok());
  ASSERT_EQ((*writer)->current()->name, "b");  // the empty tensor needs nothing
  std::string rest(reinterpret_cast<char*>(b.data()), 6);
  rest.append(reinterpret_cast<char*>(c.data()), 16);
  ASSERT_TRUE((*writer)->Append(rest.data(), rest.size()).ok());
  EXPECT_EQ((*writer)->current(), nullptr);
  ASSERT_TRUE((*writer)->Finish().ok());

  const std::string bytes = ReadBytes(path);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ((*file)->metadata().at("format"), "pt");
  ASSERT_EQ((*file)->tensors().size(), 4u);
  const SafetensorsTensor* ta = (*file)->Find("a");
  ASSERT_NE(ta, nullptr);
  EXPECT_EQ(ta->shape, (std::vector<int64_t>{6, 5}));
  std::vector<float> a2(a.size());
  ASSERT_TRUE((*file)->Read(*ta, a2.data()).ok());
  EXPECT_EQ(a2, a);
  std::vector<uint16_t> b2(3);
  ASSERT_TRUE((*file)->Read(*(*file)->Find("b"), b2.data()).ok());
  EXPECT_EQ(b2, b);
  int64_t c1 = 0;
  ASSERT_TRUE((*file)->ReadBytes(*(*file)->Find("scalar_pair"), 8, 8, &c1).ok());
  EXPECT_EQ(c1, c[1]);
  EXPECT_EQ((*file)->Find("empty")->numel(), 0);
}

TEST(SafetensorsTest, WriterRefusesTooMuchOrTooLittleData) {
  TempDir tmp;
  const auto path = tmp.path() / "w.safetensors";
  {
    auto writer = SafetensorsWriter::Create(
        path, {{"x", SafetensorsDType::kF32, {2}}, {"y", SafetensorsDType::kF32, {3}}}, {});
    ASSERT_TRUE(writer.ok());
    float v[8] = {};
    ASSERT_TRUE((*writer)->Append(v, 12).ok());
    Status finish = (*writer)->Finish();
    EXPECT_EQ(finish.code(), StatusCode::kFailedPrecondition);
    EXPECT_TRUE(Contains(finish, "tensor 'y' has 4 of its 12 bytes")) << finish.message();
    Status over = (*writer)->Append(v, 32);
    EXPECT_EQ(over.code(), StatusCode::kInvalidArgument);
    EXPECT_TRUE(Contains(over, "'y'")) << over.message();
  }
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(tmp.path() / "w.safetensors.tmp"));
  auto dup = SafetensorsWriter::Create(
      path, {{"x", SafetensorsDType::kF32, {1}}, {"x", SafetensorsDType::kF32, {1}}}, {});
  EXPECT_EQ(dup.status().code(), StatusCode::kInvalidArgument);
}

TEST(SafetensorsTest, ValidationNamesTheTensorAndField) {
  TempDir tmp;
  const auto p = tmp.path() / "bad.safetensors";
  WriteRaw(p, R"({"w":{"dtype":"Q7","shape":[2],"data_offsets":[0,8]}})", 8);
  Status s = OpenStatus(p);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_TRUE(Contains(s, "tensor 'w' field 'dtype'")) << s.message();

  WriteRaw(p, R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8);
  s = OpenStatus(p);
  EXPECT_TRUE(Contains(s, "tensor 'w' field 'data_offsets'")) << s.message();
  EXPECT_TRUE(Contains(s, "[3]")) << s.message();

  WriteRaw(p, R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8);
  s = OpenStatus(p);
  EXPECT_TRUE(Contains(s, "tensor 'w' field 'shape'")) << s.message();

  WriteRaw(p,
           R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
           R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
           12);
  s = OpenStatus(p);
  EXPECT_TRUE(Contains(s, "tensor 'b'")) << s.message();
  EXPECT_TRUE(Contains(s, "overlaps tensor 'a'")) << s.message();

  WriteRaw(p,
           R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
           R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
           12);
  s = OpenStatus(p);
  EXPECT_TRUE(Contains(s, "tensor 'b'")) << s.message();
  EXPECT_TRUE(Contains(s, "hole")) << s.message();

  WriteRaw(p, R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 10);
  s = OpenStatus(p);
  EXPECT_TRUE(Contains(s, "tensor 'w'")) << s.message();
  EXPECT_TRUE(Contains(s, "truncated")) << s.message();

  WriteRaw(p, R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 9);
  s = OpenStatus(p);
  EXPECT_TRUE(Contains(s, "cover 4 bytes")) << s.message();

  WriteRaw(p, R"([1, 2])", 0);
  EXPECT_TRUE(Contains(OpenStatus(p), "does not start with '{'"));
  WriteRaw(p, R"({"w": )", 0);
  EXPECT_TRUE(Contains(OpenStatus(p), "not a JSON object"));

  std::string huge(8, '\0');
  const uint64_t too_big = uint64_t{1} << 40;
  std::memcpy(huge.data(), &too_big, 8);
  WriteBytes(p, huge + "{}");
  EXPECT_TRUE(Contains(OpenStatus(p), "exceeds")) << OpenStatus(p).message();
  const uint64_t past = 64;
  std::memcpy(huge.data(), &past, 8);
  WriteBytes(p, huge + "{}");
  EXPECT_TRUE(Contains(OpenStatus(p), "past the end")) << OpenStatus(p).message();
}

TEST(SafetensorsTest, ShardedIndexFindsEveryTensorInItsFile) {
  TempDir tmp;
  const float x[2] = {1, 2}, y[3] = {3, 4, 5};
  for (auto [file, name, data, n] : {std::tuple{"model-00001-of-00002.safetensors", "x", x, 2},
                                     std::tuple{"model-00002-of-00002.safetensors", "y", y, 3}}) {
    auto w = SafetensorsWriter::Create(tmp.path() / file, {{name, SafetensorsDType::kF32, {n}}},
                                       {{"format", "pt"}});
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->Append(data, n * sizeof(float)).ok());
    ASSERT_TRUE((*w)->Finish().ok());
  }
  nlohmann::json index = {
      {"metadata", {{"total_size", 20}}},
      {"weight_map",
       {{"x", "model-00001-of-00002.safetensors"}, {"y", "model-00002-of-00002.safetensors"}}}};
  WriteBytes(tmp.path() / "model.safetensors.index.json", index.dump());
  for (const auto& path : {tmp.path(), tmp.path() / "model.safetensors.index.json"}) {
    auto source = SafetensorsSource::Open(path);
    ASSERT_TRUE(source.ok()) << source.status().ToString();
    EXPECT_EQ((*source)->Names(), (std::vector<std::string>{"x", "y"}));
    auto at = (*source)->Find("y");
    ASSERT_NE(at.file, nullptr);
    float got[3];
    ASSERT_TRUE(at.file->Read(*at.tensor, got).ok());
    EXPECT_EQ(got[2], 5.0f);
    EXPECT_EQ((*source)->Find("z").file, nullptr);
  }
  index["weight_map"]["y"] = "model-00001-of-00002.safetensors";
  WriteBytes(tmp.path() / "model.safetensors.index.json", index.dump());
  auto wrong = SafetensorsSource::Open(tmp.path());
  ASSERT_FALSE(wrong.ok());
  EXPECT_TRUE(Contains(wrong.status(), "tensor 'y'")) << wrong.status().message();
  EXPECT_TRUE(Contains(wrong.status(), "model-00001-of-00002")) << wrong.status().message();
  index["weight_map"]["y"] = "model-00009-of-00009.safetensors";
  WriteBytes(tmp.path() / "model.safetensors.index.json", index.dump());
  EXPECT_EQ(SafetensorsSource::Open(tmp.path()).status().code(), StatusCode::kNotFound);
  std::filesystem::remove(tmp.path() / "model.safetensors.index.json");
  EXPECT_EQ(SafetensorsSource::Open(tmp.path()).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace sluice::checkpoint
