#include "engine/checkpoint/manifest_checksum.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <map>
#include <vector>

#include "offload/checksum.h"
#include "runtime/json_text.h"

namespace sluice::checkpoint {
namespace {

using Json = nlohmann::ordered_json;

// Fields deeper than this are part of their ancestor's value.
constexpr int kFieldDepth = 3;
constexpr size_t kMaxNamedFields = 8;

void AppendCanonical(const Json& value, std::string* out) {
  if (value.is_object()) {
    std::vector<const std::string*> keys;
    keys.reserve(value.size());
    for (auto it = value.begin(); it != value.end(); ++it) keys.push_back(&it.key());
    std::sort(keys.begin(), keys.end(),
              [](const std::string* a, const std::string* b) { return *a < *b; });
    out->push_back('{');
    for (size_t i = 0; i < keys.size(); ++i) {
      if (i > 0) out->push_back(',');
      *out += JsonText(Json(*keys[i]));
      out->push_back(':');
      AppendCanonical(value.at(*keys[i]), out);
    }
    out->push_back('}');
  } else if (value.is_array()) {
    out->push_back('[');
    for (size_t i = 0; i < value.size(); ++i) {
      if (i > 0) out->push_back(',');
      AppendCanonical(value[i], out);
    }
    out->push_back(']');
  } else {
    *out += JsonText(value);
  }
}

uint64_t ChecksumOf(const Json& value) {
  const std::string text = CanonicalJson(value);
  return offload::Checksum64(text.data(), text.size());
}

// The manifest without its integrity fields.
Json Content(const Json& manifest) {
  Json content = manifest;
  content.erase(std::string(kManifestChecksumKey));
  content.erase(std::string(kManifestFieldChecksumsKey));
  return content;
}

void CollectFields(const Json& value, const std::string& path, int depth,
                   std::map<std::string, std::string>* fields) {
  if (value.is_object() && depth < kFieldDepth) {
    for (auto it = value.begin(); it != value.end(); ++it) {
      CollectFields(it.value(), path.empty() ? it.key() : path + "." + it.key(), depth + 1, fields);
    }
    if (!value.empty() || path.empty()) return;
  }
  (*fields)[path] = FormatChecksum(ChecksumOf(value));
}

std::map<std::string, std::string> FieldChecksums(const Json& content) {
  std::map<std::string, std::string> fields;
  CollectFields(content, "", 0, &fields);
  return fields;
}

std::string NameFields(const std::vector<std::string>& fields, std::string_view how) {
  std::string names;
  for (size_t i = 0; i < fields.size() && i < kMaxNamedFields; ++i) {
    names += fmt::format("{}'{}'", i == 0 ? "" : ", ", fields[i]);
  }
  if (fields.size() > kMaxNamedFields) {
    names += fmt::format(" and {} more", fields.size() - kMaxNamedFields);
  }
  return fmt::format("{} {} {}", fields.size() == 1 ? "field" : "fields", names, how);
}

}  // namespace

std::string CanonicalJson(const Json& value) {
  std::string out;
  AppendCanonical(value, &out);
  return out;
}

std::string FormatChecksum(uint64_t checksum) { return fmt::format("xxh3:{:016x}", checksum); }

std::optional<uint64_t> ParseChecksum(std::string_view text) {
  constexpr std::string_view kPrefix = "xxh3:";
  if (!text.starts_with(kPrefix) || text.size() != kPrefix.size() + 16) return std::nullopt;
  uint64_t value = 0;
  const char* begin = text.data() + kPrefix.size();
  const char* end = text.data() + text.size();
  if (std::any_of(begin, end, [](char c) { return c >= 'A' && c <= 'F'; })) return std::nullopt;
  auto [ptr, ec] = std::from_chars(begin, end, value, 16);
  if (ec != std::errc() || ptr != end) return std::nullopt;
  return value;
}

void SealManifestJson(Json* manifest) {
  SLUICE_CHECK(manifest->is_object());
  manifest->erase(std::string(kManifestChecksumKey));
  Json fields = Json::object();
  for (const auto& [field, checksum] : FieldChecksums(Content(*manifest))) {
    fields[field] = checksum;
  }
  (*manifest)[std::string(kManifestFieldChecksumsKey)] = std::move(fields);
  (*manifest)[std::string(kManifestChecksumKey)] = FormatChecksum(ChecksumOf(*manifest));
}

Status VerifyManifestJson(const Json& manifest, const std::filesystem::path& path) {
  auto error = [&path](std::string_view what) {
    return DataLossError(
        "{}: {}: the manifest was edited or is corrupt, and the checkpoint's step, progress, "
        "layout or config cannot be trusted; load an earlier checkpoint",
        path.string(), what);
  };
  auto stored_it = manifest.find(std::string(kManifestChecksumKey));
  if (stored_it == manifest.end()) return error("field 'checksum' is missing");
  std::optional<uint64_t> stored =
      stored_it->is_string() ? ParseChecksum(stored_it->get<std::string>()) : std::nullopt;
  if (!stored.has_value()) {
    return error(fmt::format("field 'checksum' is {}, not \"xxh3:\" and 16 hex digits",
                             JsonText(*stored_it)));
  }
  Json rest = manifest;
  rest.erase(std::string(kManifestChecksumKey));
  const uint64_t computed = ChecksumOf(rest);
  if (computed == *stored) return OkStatus();

  // Which field changed: compare every field with the checksum recorded for it.
  auto fields_it = manifest.find(std::string(kManifestFieldChecksumsKey));
  if (fields_it == manifest.end() || !fields_it->is_object()) {
    return error(
        "field 'field_checksums' is missing or not an object, and field 'checksum' "
        "does not match the manifest");
  }
  const Json& recorded = *fields_it;
  // The content intact and only the recorded field checksums changed: the checksum matches the
  // manifest with field checksums computed afresh.
  const Json content = Content(manifest);
  const std::map<std::string, std::string> fields = FieldChecksums(content);
  Json rebuilt = content;
  Json fresh = Json::object();
  for (const auto& [field, checksum] : fields) fresh[field] = checksum;
  rebuilt[std::string(kManifestFieldChecksumsKey)] = std::move(fresh);
  if (ChecksumOf(rebuilt) == *stored) {
    return error("field 'field_checksums' was changed (the other fields match the checksum)");
  }
  std::vector<std::string> changed;
  std::vector<std::string> added;
  std::vector<std::string> removed;
  for (const auto& [field, checksum] : fields) {
    auto it = recorded.find(field);
    if (it == recorded.end()) {
      added.push_back(field);
    } else if (!it->is_string() || it->get<std::string>() != checksum) {
      changed.push_back(field);
    }
  }
  for (auto it = recorded.begin(); it != recorded.end(); ++it) {
    if (!fields.contains(it.key())) removed.push_back(it.key());
  }
  std::vector<std::string> parts;
  if (!changed.empty()) {
    parts.push_back(NameFields(changed, "changed since the checkpoint was written"));
  }
  if (!added.empty()) parts.push_back(NameFields(added, "added"));
  if (!removed.empty()) parts.push_back(NameFields(removed, "removed"));
  if (parts.empty()) {
    return error(fmt::format(
        "field 'checksum' was changed: it is {} but the manifest hashes to {}, and every other "
        "field matches its entry in field_checksums",
        FormatChecksum(*stored), FormatChecksum(computed)));
  }
  std::string what;
  for (size_t i = 0; i < parts.size(); ++i) what += (i == 0 ? "" : "; ") + parts[i];
  return error(fmt::format("{} (field 'checksum' is {}, the manifest hashes to {})", what,
                           FormatChecksum(*stored), FormatChecksum(computed)));
}

}  // namespace sluice::checkpoint
