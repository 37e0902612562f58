#include "engine/checkpoint/manifest.h"

#include <set>
#include <utility>

#include "engine/checkpoint/manifest_checksum.h"
#include "engine/checkpoint/strict_json.h"
#include "runtime/durable_file.h"
#include "runtime/logging.h"

namespace sluice::checkpoint {
namespace {

using Json = nlohmann::ordered_json;

class FieldReader {
 public:
  explicit FieldReader(const std::filesystem::path& path) : path_(path) {}

  Status Error(std::string_view field, std::string_view problem) const {
    return DataLossError("{}: field '{}': {}", path_.string(), field, problem);
  }

  // The member `key` of `object` (named `field` in errors) with the JSON type `type`.
  Result<const Json*> Member(const Json& object, std::string_view key, std::string_view field,
                             Json::value_t type) const {
    auto it = object.find(std::string(key));
    if (it == object.end()) return Error(field, "missing");
    const bool type_ok = it->type() == type || (type == Json::value_t::number_integer &&
                                                it->type() == Json::value_t::number_unsigned);
    if (!type_ok) {
      return Error(field,
                   fmt::format("is a {}, expected a {}", it->type_name(), Json(type).type_name()));
    }
    return &*it;
  }
  Result<int64_t> Int(const Json& object, std::string_view key, std::string_view field) const {
    SLUICE_ASSIGN_OR_RETURN(const Json* v,
                            Member(object, key, field, Json::value_t::number_integer));
    return v->get<int64_t>();
  }
  Result<std::string> String(const Json& object, std::string_view key,
                             std::string_view field) const {
    SLUICE_ASSIGN_OR_RETURN(const Json* v, Member(object, key, field, Json::value_t::string));
    return v->get<std::string>();
  }

 private:
  const std::filesystem::path& path_;
};

}  // namespace

Json ManifestToJson(const Manifest& m) {
  Json j;
  j["format"] = kManifestFormat;
  j["format_version"] = m.version;
  j["step"] = m.step;
  Json world;
  world["size"] = m.world_size;
  world["zero_stage"] = m.zero_stage;
  Json ranks = Json::array();
  for (const ManifestRank& r : m.ranks) {
    Json rank;
    rank["rank"] = r.rank;
    Json files;
    for (const auto& [group, file] : r.files) {
      Json entry = {{"path", file.path}, {"bytes", file.bytes}};
      if (m.version >= 2 && file.checksum.has_value()) {
        entry["checksum"] = FormatChecksum(*file.checksum);
      }
      files[std::string(ShardGroupName(group))] = std::move(entry);
    }
    rank["files"] = std::move(files);
    ranks.push_back(std::move(rank));
  }
  world["ranks"] = std::move(ranks);
  j["world"] = std::move(world);
  Json tensors = Json::array();
  for (const ManifestTensor& t : m.tensors) {
    Json shape = Json::array();
    for (int64_t d : t.shape.dims()) shape.push_back(d);
    tensors.push_back({{"kind", StateKindName(t.kind)},
                       {"name", t.name},
                       {"dtype", DTypeName(t.dtype)},
                       {"shape", std::move(shape)}});
  }
  j["tensors"] = std::move(tensors);
  j["config"] = m.config;
  j["states"] = m.states;
  if (m.version >= 2) SealManifestJson(&j);
  return j;
}

Result<Manifest> ManifestFromJson(const Json& j, const std::filesystem::path& path) {
  FieldReader f(path);
  if (!j.is_object()) return f.Error("(root)", "not a JSON object");
  Manifest m;
  SLUICE_ASSIGN_OR_RETURN(std::string format, f.String(j, "format", "format"));
  if (format != kManifestFormat) {
    return f.Error("format", fmt::format("'{}' is not '{}'", format, kManifestFormat));
  }
  SLUICE_ASSIGN_OR_RETURN(int64_t version, f.Int(j, "format_version", "format_version"));
  if (version != kManifestVersion && version != kLegacyManifestVersion) {
    return f.Error("format_version",
                   fmt::format("{} but this Sluice reads versions {} and {}", version,
                               kLegacyManifestVersion, kManifestVersion));
  }
  m.version = static_cast<int>(version);
  const bool sealed = j.contains(std::string(kManifestChecksumKey)) ||
                      j.contains(std::string(kManifestFieldChecksumsKey));
  if (version == kManifestVersion) {
    // First: a changed field is then refused as what it is, whatever it was changed to.
    SLUICE_RETURN_IF_ERROR(VerifyManifestJson(j, path));
  } else if (sealed) {
    return f.Error("format_version",
                   fmt::format("{} but the manifest carries the checksums of version {}: the "
                               "version was changed",
                               version, kManifestVersion));
  }
  SLUICE_ASSIGN_OR_RETURN(m.step, f.Int(j, "step", "step"));
  if (m.step < 0) return f.Error("step", fmt::format("{} is negative", m.step));
  SLUICE_ASSIGN_OR_RETURN(const Json* world, f.Member(j, "world", "world", Json::value_t::object));
  SLUICE_ASSIGN_OR_RETURN(int64_t size, f.Int(*world, "size", "world.size"));
  if (size < 1 || size > (1 << 20)) return f.Error("world.size", fmt::format("{}", size));
  m.world_size = static_cast<int>(size);
  SLUICE_ASSIGN_OR_RETURN(int64_t stage, f.Int(*world, "zero_stage", "world.zero_stage"));
  if (stage < 0 || stage > 3) return f.Error("world.zero_stage", fmt::format("{}", stage));
  m.zero_stage = static_cast<int>(stage);
  SLUICE_ASSIGN_OR_RETURN(const Json* ranks,
                          f.Member(*world, "ranks", "world.ranks", Json::value_t::array));
  if (ranks->size() != static_cast<size_t>(m.world_size)) {
    return f.Error("world.ranks",
                   fmt::format("{} entries for world size {}", ranks->size(), m.world_size));
  }
  for (size_t i = 0; i < ranks->size(); ++i) {
    const Json& r = (*ranks)[i];
    const std::string field = fmt::format("world.ranks[{}]", i);
    if (!r.is_object()) return f.Error(field, "not an object");
    ManifestRank rank;
    SLUICE_ASSIGN_OR_RETURN(int64_t index, f.Int(r, "rank", field + ".rank"));
    if (index != static_cast<int64_t>(i)) {
      return f.Error(field + ".rank", fmt::format("{} where rank {} belongs", index, i));
    }
    rank.rank = static_cast<int>(index);
    SLUICE_ASSIGN_OR_RETURN(const Json* files,
                            f.Member(r, "files", field + ".files", Json::value_t::object));
    for (ShardGroup group : kAllShardGroups) {
      const std::string gfield = fmt::format("{}.files.{}", field, ShardGroupName(group));
      SLUICE_ASSIGN_OR_RETURN(
          const Json* file, f.Member(*files, ShardGroupName(group), gfield, Json::value_t::object));
      ManifestFile mf;
      SLUICE_ASSIGN_OR_RETURN(mf.path, f.String(*file, "path", gfield + ".path"));
      if (mf.path.empty() || mf.path.find('/') != std::string::npos || mf.path[0] == '.') {
        return f.Error(gfield + ".path",
                       fmt::format("'{}' is not a plain file name in the step directory", mf.path));
      }
      SLUICE_ASSIGN_OR_RETURN(int64_t bytes, f.Int(*file, "bytes", gfield + ".bytes"));
      if (bytes < 0) return f.Error(gfield + ".bytes", fmt::format("{}", bytes));
      mf.bytes = static_cast<uint64_t>(bytes);
      if (m.version >= 2) {
        SLUICE_ASSIGN_OR_RETURN(std::string checksum,
                                f.String(*file, "checksum", gfield + ".checksum"));
        mf.checksum = ParseChecksum(checksum);
        if (!mf.checksum.has_value()) {
          return f.Error(gfield + ".checksum",
                         fmt::format("'{}' is not \"xxh3:\" and 16 hex digits", checksum));
        }
      }
      rank.files.emplace(group, std::move(mf));
    }
    m.ranks.push_back(std::move(rank));
  }
  SLUICE_ASSIGN_OR_RETURN(const Json* tensors,
                          f.Member(j, "tensors", "tensors", Json::value_t::array));
  std::set<std::pair<StateKind, std::string>> seen;
  for (size_t i = 0; i < tensors->size(); ++i) {
    const Json& t = (*tensors)[i];
    const std::string field = fmt::format("tensors[{}]", i);
    if (!t.is_object()) return f.Error(field, "not an object");
    ManifestTensor mt;
    SLUICE_ASSIGN_OR_RETURN(std::string kind, f.String(t, "kind", field + ".kind"));
    Result<StateKind> parsed_kind = ParseStateKind(kind);
    if (!parsed_kind.ok()) return f.Error(field + ".kind", parsed_kind.status().message());
    mt.kind = *parsed_kind;
    SLUICE_ASSIGN_OR_RETURN(mt.name, f.String(t, "name", field + ".name"));
    SLUICE_ASSIGN_OR_RETURN(std::string dtype, f.String(t, "dtype", field + ".dtype"));
    Result<DType> parsed_dtype = ParseDType(dtype);
    if (!parsed_dtype.ok()) return f.Error(field + ".dtype", parsed_dtype.status().message());
    // f64 is a compute dtype of the reference ops backend, never a stored one.
    if (*parsed_dtype == DType::kF64) return f.Error(field + ".dtype", "f64 is not a stored dtype");
    mt.dtype = *parsed_dtype;
    SLUICE_ASSIGN_OR_RETURN(const Json* shape,
                            f.Member(t, "shape", field + ".shape", Json::value_t::array));
    if (shape->size() > static_cast<size_t>(Shape::kMaxRank)) {
      return f.Error(field + ".shape", fmt::format("{} dimensions", shape->size()));
    }
    std::vector<int64_t> dims;
    for (const Json& d : *shape) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0) {
        return f.Error(field + ".shape", fmt::format("{} is not a dimension", d.dump()));
      }
      dims.push_back(d.get<int64_t>());
    }
    if (!StoredElementCount(dims)) {
      return f.Error(field + ".shape",
                     fmt::format("{} has more elements than fit in int64", shape->dump()));
    }
    mt.shape = Shape(std::span<const int64_t>(dims));
    if (!seen.emplace(mt.kind, mt.name).second) {
      return f.Error(field, fmt::format("tensor '{}/{}' listed twice", kind, mt.name));
    }
    m.tensors.push_back(std::move(mt));
  }
  if (auto it = j.find("config"); it != j.end()) m.config = *it;
  if (auto it = j.find("states"); it != j.end()) m.states = *it;
  return m;
}

Result<Manifest> ReadManifest(const std::filesystem::path& step_dir) {
  const std::filesystem::path path = step_dir / kManifestFileName;
  SLUICE_ASSIGN_OR_RETURN(std::string text, ReadWholeFile(path));
  SLUICE_ASSIGN_OR_RETURN(Json json, ParseJsonWithoutDuplicateKeys(text, path));
  SLUICE_ASSIGN_OR_RETURN(Manifest manifest, ManifestFromJson(json, path));
  if (manifest.version == kLegacyManifestVersion) {
    SLUICE_LOG(kWarn, "checkpoint",
               "{}: format version {}, written before manifests carried checksums: its step, "
               "progress and config are read unverified (only checked against each other); the "
               "next checkpoint saved is version {}",
               path.string(), manifest.version, kManifestVersion);
  }
  return manifest;
}

}  // namespace sluice::checkpoint
