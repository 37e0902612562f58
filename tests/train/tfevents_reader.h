// A TensorBoard events file read back for the monitor tests, independently of
// engine/train/monitor_tensorboard.*: TFRecord framing with its masked CRC-32C (computed bit by
// bit here, not from a table), and the Event, Summary and SessionLog protobufs decoded field by
// field with a general wire-format parser that refuses unknown wire types and truncated fields.
#pragma once

#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::train::test_util {

inline uint32_t BitwiseCrc32c(std::string_view data) {
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char byte : data) {
    crc ^= byte;
    for (int bit = 0; bit < 8; ++bit) crc = (crc & 1u) ? (crc >> 1) ^ 0x82F63B78u : crc >> 1;
  }
  return crc ^ 0xFFFFFFFFu;
}

inline uint32_t BitwiseMaskedCrc32c(std::string_view data) {
  const uint32_t crc = BitwiseCrc32c(data);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

inline uint64_t LoadLittleEndian(std::string_view bytes) {
  uint64_t value = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    value |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  }
  return value;
}

// One field of a protobuf message as the wire format has it.
struct ProtoField {
  int number = 0;
  int wire_type = 0;
  uint64_t scalar = 0;  // varint, fixed64 or fixed32 payload
  std::string bytes;    // length-delimited payload
};

// Every field of `message`, in order; nullopt (and a test failure) for malformed input.
inline std::optional<std::vector<ProtoField>> ParseProto(std::string_view message) {
  std::vector<ProtoField> fields;
  size_t pos = 0;
  auto varint = [&](uint64_t* out) {
    uint64_t value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos >= message.size()) return false;
      const auto byte = static_cast<unsigned char>(message[pos++]);
      value |= static_cast<uint64_t>(byte & 0x7F) << shift;
      if ((byte & 0x80) == 0) {
        *out = value;
        return true;
      }
    }
    return false;
  };
  while (pos < message.size()) {
    uint64_t key = 0;
    if (!varint(&key)) {
      ADD_FAILURE() << "truncated field key at byte " << pos;
      return std::nullopt;
    }
    ProtoField field;
    field.number = static_cast<int>(key >> 3);
    field.wire_type = static_cast<int>(key & 7);
    bool ok = true;
    switch (field.wire_type) {
      case 0:
        ok = varint(&field.scalar);
        break;
      case 1:
      case 5: {
        const size_t width = field.wire_type == 1 ? 8 : 4;
        ok = pos + width <= message.size();
        if (ok) field.scalar = LoadLittleEndian(message.substr(pos, width));
        pos += width;
        break;
      }
      case 2: {
        uint64_t length = 0;
        ok = varint(&length) && pos + length <= message.size();
        if (ok) field.bytes = std::string(message.substr(pos, length));
        pos += length;
        break;
      }
      default:
        ok = false;
    }
    if (!ok) {
      ADD_FAILURE() << "malformed field " << field.number << " (wire type " << field.wire_type
                    << ")";
      return std::nullopt;
    }
    fields.push_back(std::move(field));
  }
  return fields;
}

struct TfScalar {
  std::string tag;
  float value = 0.0f;
};

struct TfEvent {
  std::string payload;  // the record's Event as written
  double wall_time = 0.0;
  int64_t step = 0;
  std::optional<std::string> file_version;
  std::optional<int> session_status;  // SessionLog.status (1 = START)
  std::vector<TfScalar> scalars;
};

// Every record of `path`, each checked for its framing CRCs; a test failure names what is wrong.
inline std::vector<TfEvent> ReadTfEvents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string data = buffer.str();
  std::vector<TfEvent> events;
  size_t pos = 0;
  while (pos < data.size()) {
    if (pos + 12 > data.size()) {
      ADD_FAILURE() << path << ": a record header cut short at byte " << pos;
      break;
    }
    const std::string_view length_bytes(data.data() + pos, 8);
    const uint64_t length = LoadLittleEndian(length_bytes);
    EXPECT_EQ(LoadLittleEndian(std::string_view(data).substr(pos + 8, 4)),
              BitwiseMaskedCrc32c(length_bytes))
        << path << ": length CRC of the record at byte " << pos;
    if (pos + 12 + length + 4 > data.size()) {
      ADD_FAILURE() << path << ": a record of " << length << " bytes cut short at byte " << pos;
      break;
    }
    const std::string_view payload(data.data() + pos + 12, length);
    EXPECT_EQ(LoadLittleEndian(std::string_view(data).substr(pos + 12 + length, 4)),
              BitwiseMaskedCrc32c(payload))
        << path << ": payload CRC of the record at byte " << pos;
    pos += 12 + length + 4;

    std::optional<std::vector<ProtoField>> fields = ParseProto(payload);
    if (!fields) break;
    TfEvent event;
    event.payload = std::string(payload);
    for (const ProtoField& f : *fields) {
      if (f.number == 1 && f.wire_type == 1) {
        event.wall_time = std::bit_cast<double>(f.scalar);
      } else if (f.number == 2 && f.wire_type == 0) {
        event.step = static_cast<int64_t>(f.scalar);
      } else if (f.number == 3 && f.wire_type == 2) {
        event.file_version = f.bytes;
      } else if (f.number == 5 && f.wire_type == 2) {
        std::optional<std::vector<ProtoField>> summary = ParseProto(f.bytes);
        if (!summary) break;
        for (const ProtoField& v : *summary) {
          EXPECT_TRUE(v.number == 1 && v.wire_type == 2) << "Summary field " << v.number;
          std::optional<std::vector<ProtoField>> value = ParseProto(v.bytes);
          if (!value) break;
          TfScalar scalar;
          for (const ProtoField& x : *value) {
            if (x.number == 1 && x.wire_type == 2) {
              scalar.tag = x.bytes;
            } else if (x.number == 2 && x.wire_type == 5) {
              scalar.value = std::bit_cast<float>(static_cast<uint32_t>(x.scalar));
            } else {
              ADD_FAILURE() << "Summary.Value field " << x.number;
            }
          }
          event.scalars.push_back(scalar);
        }
      } else if (f.number == 7 && f.wire_type == 2) {
        std::optional<std::vector<ProtoField>> log = ParseProto(f.bytes);
        if (log && log->size() == 1 && (*log)[0].number == 1 && (*log)[0].wire_type == 0) {
          event.session_status = static_cast<int>((*log)[0].scalar);
        } else {
          ADD_FAILURE() << "SessionLog with other fields than status";
        }
      } else {
        ADD_FAILURE() << path << ": Event field " << f.number << " (wire type " << f.wire_type
                      << ")";
      }
    }
    events.push_back(std::move(event));
  }
  return events;
}

}  // namespace sluice::train::test_util
