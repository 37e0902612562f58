#include "engine/estimate/estimate_report.h"

#include <fmt/format.h>

#include "engine/estimate/count_format.h"
#include "runtime/size_format.h"

namespace sluice::estimate {
namespace {

std::string FamilyText(ModelFamily family) {
  return family == ModelFamily::kLlama ? "llama" : "gpt2";
}

// "Grid: data 2 x tensor 2 x pipeline 1 = 4 rank(s)", and whose figures follow.
std::string GridLine(const MemoryEstimate& e, int pipeline_stages) {
  std::string line =
      fmt::format("Grid: data {} x tensor {} x pipeline {} = {} rank(s)", e.world_size,
                  e.tensor_parallel, pipeline_stages, e.ranks() * pipeline_stages);
  if (e.tensor_parallel > 1) {
    line += fmt::format(
        "; tensor parallelism{}: each rank holds its tensor rank's pieces, {} of the model's {} "
        "parameters on tensor rank 0 (the largest, shown)",
        e.sequence_parallel ? " with sequence parallelism" : "", FormatCount(e.parameters),
        FormatCount(e.model_parameters));
  }
  return line + "\n";
}

std::string Headline(const Config& config, const MemoryEstimate& e, int pipeline_stages) {
  const ModelConfig& m = config.model;
  std::string offload;
  if (e.offload_optimizer != OffloadDevice::kNone) {
    offload += fmt::format(", optimizer on {}", OffloadDeviceName(e.offload_optimizer));
  }
  if (e.offload_param != OffloadDevice::kNone) {
    offload += fmt::format(", parameters on {}", OffloadDeviceName(e.offload_param));
  }
  return GridLine(e, pipeline_stages) +
         fmt::format(
             "Model: {}, {} layers, {} heads ({} kv), d_model {}, d_ff {}, vocab {}, seq_len {}: "
             "{} parameters{}\n"
             "ZeRO stage {} on {} {}rank(s), {}{}, micro-batch {}; bytes per rank (shard of {} "
             "elements)\n",
             FamilyText(m.family), m.n_layer, m.n_head, m.n_kv_head, m.d_model, m.d_ff,
             m.vocab_size, m.seq_len, FormatCount(e.model_parameters),
             e.tensor_parallel > 1
                 ? fmt::format(", {} on this tensor rank (Ψ)", FormatCount(e.parameters))
                 : std::string(" (Ψ)"),
             e.stage, e.world_size, e.tensor_parallel > 1 ? "data-parallel " : "", e.precision,
             offload, e.micro_batch, FormatCount(e.shard_elements));
}

std::string BudgetText(const BudgetCheck& check) {
  if (!check.limit.has_value()) {
    return fmt::format("  {:<6} {:>11}   {}\n", check.name, FormatBytes(check.need),
                       check.limit_source);
  }
  const std::string verdict =
      check.fits() ? fmt::format("fits, {} to spare", FormatBytes(*check.limit - check.need))
                   : fmt::format("DOES NOT FIT, {} over", FormatBytes(check.need - *check.limit));
  return fmt::format("  {:<6} {:>11} of {:>11} ({}): {}\n", check.name, FormatBytes(check.need),
                     FormatBytes(*check.limit), check.limit_source, verdict);
}

std::string VariantTable(const std::vector<Variant>& variants, std::string_view first_column) {
  size_t width = first_column.size();
  for (const Variant& v : variants) width = std::max(width, v.change.size());
  std::string out = fmt::format("  {:<{}}  {:>11}  {:>11}  {:>11}  {:>11}  {}\n", first_column,
                                width, "device", "host pinned", "host", "nvme", "fits");
  for (const Variant& v : variants) {
    const MemoryEstimate& e = v.estimate;
    std::string fits;
    for (const BudgetCheck& check : v.fit.checks) {
      if (!check.limit.has_value()) continue;
      if (!fits.empty()) fits += ", ";
      fits += check.name + (check.fits() ? " yes" : " NO");
    }
    out += fmt::format(
        "  {:<{}}  {:>11}  {:>11}  {:>11}  {:>11}  {}\n", v.change, width,
        ByteCell(e.tier_bytes(MemoryTier::kDevice)),
        ByteCell(e.tier_bytes(MemoryTier::kHostPinned)), ByteCell(e.tier_bytes(MemoryTier::kHost)),
        ByteCell(e.tier_bytes(MemoryTier::kNvme)), fits.empty() ? "not checked" : fits);
  }
  return out;
}

nlohmann::ordered_json TierJson(const MemoryEstimate& e) {
  nlohmann::ordered_json tiers;
  for (MemoryTier tier : kAllMemoryTiers) {
    nlohmann::ordered_json categories;
    for (MemoryCategory category : kAllMemoryCategories) {
      categories[std::string(MemoryCategoryName(category))] = e.bytes(tier, category);
    }
    tiers[std::string(MemoryTierName(tier))] = {{"total", e.tier_bytes(tier)},
                                                {"categories", categories}};
  }
  tiers["total"] = e.total_bytes();
  return tiers;
}

nlohmann::ordered_json VariantJson(const Variant& v) {
  nlohmann::ordered_json j;
  j["change"] = v.change;
  j["stage"] = v.estimate.stage;
  j["offload_optimizer"] = std::string(OffloadDeviceName(v.estimate.offload_optimizer));
  j["offload_param"] = std::string(OffloadDeviceName(v.estimate.offload_param));
  j["micro_batch"] = v.estimate.micro_batch;
  j["activation_checkpointing"] = v.estimate.activation_checkpointing;
  for (MemoryTier tier : kAllMemoryTiers) {
    j[std::string(MemoryTierName(tier))] = v.estimate.tier_bytes(tier);
  }
  j["fits"] = v.fit.fits();
  return j;
}

}  // namespace

std::string FormatTierTable(const MemoryEstimate& e) {
  std::string out = fmt::format("  {:<12}", "tier");
  for (MemoryCategory category : kAllMemoryCategories) {
    out += fmt::format(" {:>11}", MemoryCategoryName(category));
  }
  out += fmt::format(" {:>11}\n", "total");
  for (MemoryTier tier : kAllMemoryTiers) {
    out += fmt::format("  {:<12}", MemoryTierName(tier));
    for (MemoryCategory category : kAllMemoryCategories) {
      out += fmt::format(" {:>11}", ByteCell(e.bytes(tier, category)));
    }
    out += fmt::format(" {:>11}\n", ByteCell(e.tier_bytes(tier)));
  }
  out += fmt::format("  {:<12}", "all tiers");
  for (MemoryCategory category : kAllMemoryCategories) {
    int64_t sum = 0;
    for (MemoryTier tier : kAllMemoryTiers) sum += e.bytes(tier, category);
    out += fmt::format(" {:>11}", ByteCell(sum));
  }
  out += fmt::format(" {:>11}\n", ByteCell(e.total_bytes()));
  return out;
}

std::string FormatEstimateText(const EstimateReport& report) {
  const MemoryEstimate& e = report.estimate;
  std::string out = Headline(*report.config, e, report.pipeline_stages);
  out += '\n';
  out += FormatTierTable(e);

  out += "\nLine items\n";
  size_t width = 4;
  for (const LineItem& item : e.items) width = std::max(width, item.name.size());
  for (const LineItem& item : e.items) {
    out += fmt::format("  {:<12} {:<12} {:>11}  {:<{}}  {}\n", MemoryTierName(item.tier),
                       MemoryCategoryName(item.category), FormatBytes(item.bytes), item.name, width,
                       item.formula);
  }
  if (!e.notes.empty()) {
    out += "\nNotes\n";
    for (const std::string& note : e.notes) out += fmt::format("  - {}\n", note);
  }

  out += "\nBudgets\n";
  for (const BudgetCheck& check : report.fit.checks) out += BudgetText(check);
  if (!report.alternatives.empty()) {
    out += "\nDoes not fit. Each change below alone, re-estimated:\n";
    out += VariantTable(report.alternatives, "change");
  }
  if (!report.stages.empty()) {
    out += fmt::format(
        "\nZeRO stages on {} rank(s) (model states, buffers and activations per rank):\n",
        e.world_size);
    out += VariantTable(report.stages, "configuration");
  }
  return out;
}

nlohmann::ordered_json EstimateJson(const EstimateReport& report) {
  const Config& config = *report.config;
  const MemoryEstimate& e = report.estimate;
  nlohmann::ordered_json j;
  j["schema"] = "sluice.memory_estimate/1";
  j["config"] = config.source_file;
  const ModelConfig& m = config.model;
  j["model"] = {{"family", FamilyText(m.family)},
                {"n_layer", m.n_layer},
                {"n_head", m.n_head},
                {"n_kv_head", m.n_kv_head},
                {"d_model", m.d_model},
                {"d_ff", m.d_ff},
                {"vocab_size", m.vocab_size},
                {"seq_len", m.seq_len},
                {"tie_embeddings", m.tie_embeddings},
                {"parameters", e.model_parameters}};
  j["settings"] = {{"world_size", e.world_size},
                   {"stage", e.stage},
                   {"precision", e.precision},
                   {"param_dtype", std::string(DTypeName(e.param_dtype))},
                   {"micro_batch", e.micro_batch},
                   {"activation_checkpointing", e.activation_checkpointing},
                   {"checkpointed_blocks", e.checkpointed_blocks},
                   {"cpu_checkpointing", e.cpu_checkpointing},
                   {"offload_optimizer", std::string(OffloadDeviceName(e.offload_optimizer))},
                   {"offload_param", std::string(OffloadDeviceName(e.offload_param))},
                   {"shard_elements", e.shard_elements},
                   {"last_shard_elements", e.last_shard_elements}};
  j["grid"] = {{"data", e.world_size},
               {"tensor", e.tensor_parallel},
               {"pipeline", report.pipeline_stages},
               {"world", e.ranks() * report.pipeline_stages},
               {"sequence_parallel", e.sequence_parallel},
               {"vocab_parallel", e.vocab_parallel},
               {"tensor_rank_parameters", e.parameters}};
  j["per_rank"] = TierJson(e);
  nlohmann::ordered_json items = nlohmann::ordered_json::array();
  for (const LineItem& item : e.items) {
    items.push_back({{"name", item.name},
                     {"tier", std::string(MemoryTierName(item.tier))},
                     {"category", std::string(MemoryCategoryName(item.category))},
                     {"bytes", item.bytes},
                     {"formula", item.formula}});
  }
  j["items"] = items;
  nlohmann::ordered_json budgets = nlohmann::ordered_json::array();
  for (const BudgetCheck& check : report.fit.checks) {
    nlohmann::ordered_json b = {{"name", check.name}, {"need", check.need}};
    b["limit"] = check.limit.has_value() ? nlohmann::ordered_json(*check.limit) : nullptr;
    b["limit_source"] = check.limit_source;
    b["fits"] = check.fits();
    budgets.push_back(b);
  }
  j["budgets"] = budgets;
  j["fits"] = report.fit.fits();
  j["alternatives"] = nlohmann::ordered_json::array();
  for (const Variant& v : report.alternatives) j["alternatives"].push_back(VariantJson(v));
  j["stages"] = nlohmann::ordered_json::array();
  for (const Variant& v : report.stages) j["stages"].push_back(VariantJson(v));
  j["notes"] = e.notes;
  return j;
}

}  // namespace sluice::estimate
