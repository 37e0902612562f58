// The settings registry on its own: declaration, the environment-name rule, validation messages,
// resolved values with their sources, and the record.
#include "runtime/settings.h"

#include <gtest/gtest.h>

namespace sluice {
namespace {

class SettingsRegistryTest : public ::testing::Test {
 protected:
  SettingsRegistryTest() {
    registry_.AddSection("zero", "ZeRO");
    registry_.Add("zero.stage", SettingType::kInt, "stage").Default(int64_t{0}).Range(0, 3);
    registry_.Add("zero.offload.device", SettingType::kEnum, "device")
        .Default(std::string("none"))
        .Allowed({"none", "cpu", "nvme"});
    registry_.Add("zero.offload.nvme_path", SettingType::kString, "path").Unset("no swap");
    registry_.Add("opt.type", SettingType::kEnum, "type")
        .Default(std::string("AdamW"))
        .Allowed({"Adam", "AdamW"}, /*case_insensitive=*/true);
    registry_.Add("opt.betas", SettingType::kFloatList, "betas")
        .Default(std::vector<double>{0.9, 0.999})
        .ListSize(2)
        .Min(0)
        .Max(1, /*exclusive=*/true);
    registry_.Add("opt.eps", SettingType::kFloat, "eps").Default(1e-8).Min(0, /*exclusive=*/true);
    registry_.Add("mem", SettingType::kSize, "bytes")
        .Derived("from the machine")
        .Min(1)
        .Auto("RAM");
    registry_.Add("tags", SettingType::kStringList, "tags").Default(std::vector<std::string>{});
    registry_.Add("flag", SettingType::kBool, "flag").Default(false);
  }
  SettingsRegistry registry_{"TEST_CFG_"};
};

TEST_F(SettingsRegistryTest, FindsSettingsAndSections) {
  ASSERT_NE(registry_.Find("zero.stage"), nullptr);
  EXPECT_EQ(registry_.Find("zero.stage")->type, SettingType::kInt);
  EXPECT_EQ(registry_.Find("zero.stag"), nullptr);
  EXPECT_TRUE(registry_.IsSection("zero"));
  EXPECT_TRUE(registry_.IsSection("zero.offload"));
  EXPECT_FALSE(registry_.IsSection("zero.stage"));
  EXPECT_EQ(registry_.SectionDoc("zero"), "ZeRO");
  EXPECT_EQ(registry_.ChildNames("zero"), (std::vector<std::string>{"offload", "stage"}));
  EXPECT_EQ(registry_.ChildNames(""),
            (std::vector<std::string>{"opt", "zero", "mem", "tags", "flag"}));
}

TEST_F(SettingsRegistryTest, EnvironmentNameRuleIsReversible) {
  EXPECT_EQ(registry_.EnvVarName("zero.offload.nvme_path"), "TEST_CFG_ZERO__OFFLOAD__NVME_PATH");
  EXPECT_EQ(registry_.Get("zero.stage").env_var, "TEST_CFG_ZERO__STAGE");
  for (const SettingSpec& spec : registry_.settings()) {
    EXPECT_EQ(registry_.PathFromEnvVar(spec.env_var), spec.path);
  }
  EXPECT_EQ(registry_.PathFromEnvVar("OTHER_ZERO__STAGE"), std::nullopt);
  EXPECT_EQ(registry_.PathFromEnvVar("TEST_CFG_"), std::nullopt);
}

TEST_F(SettingsRegistryTest, ValidateNamesKeyValueAndAllowed) {
  Status s = registry_.Validate(registry_.Get("zero.stage"), int64_t{4});
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange);
  EXPECT_EQ(s.message(), "zero.stage: 4 is out of range: allowed an integer 0 to 3");
  EXPECT_TRUE(registry_.Validate(registry_.Get("zero.stage"), int64_t{3}).ok());

  s = registry_.Validate(registry_.Get("zero.offload.device"), std::string("disk"));
  EXPECT_EQ(s.message(), "zero.offload.device: \"disk\" is not allowed: one of: none, cpu, nvme");

  s = registry_.Validate(registry_.Get("opt.betas"), std::vector<double>{0.9, 0.99, 0.1});
  EXPECT_EQ(s.message(),
            "opt.betas: [0.9, 0.99, 0.1] has 3 elements: expected a list of 2 numbers");
  s = registry_.Validate(registry_.Get("opt.betas"), std::vector<double>{0.9, 1.0});
  EXPECT_EQ(s.message(),
            "opt.betas: element 1 of [0.9, 1.0] is out of range: each element >= 0 and < 1");

  s = registry_.Validate(registry_.Get("opt.eps"), 0.0);
  EXPECT_EQ(s.message(), "opt.eps: 0 is out of range: allowed a number > 0");
  s = registry_.Validate(registry_.Get("opt.eps"), int64_t{1});
  EXPECT_EQ(s.message(), "opt.eps: 1 is not a valid float");
}

TEST_F(SettingsRegistryTest, EnumMatchingHonoursCase) {
  EXPECT_EQ(MatchEnumValue(registry_.Get("opt.type"), "adamw"), "AdamW");
  EXPECT_EQ(MatchEnumValue(registry_.Get("opt.type"), "ADAM"), "Adam");
  EXPECT_EQ(MatchEnumValue(registry_.Get("zero.offload.device"), "CPU"), std::nullopt);
  EXPECT_EQ(MatchEnumValue(registry_.Get("zero.offload.device"), "cpu"), "cpu");
}

TEST_F(SettingsRegistryTest, DescribesDefaults) {
  EXPECT_EQ(DescribeDefault(registry_.Get("zero.stage")), "0");
  EXPECT_EQ(DescribeDefault(registry_.Get("mem")), "derived: from the machine");
  EXPECT_EQ(DescribeDefault(registry_.Get("zero.offload.nvme_path")), "unset: no swap");
  EXPECT_EQ(DescribeAllowed(registry_.Get("opt.type")), "one of: Adam, AdamW (any case)");
  EXPECT_EQ(FormatSettingValue(std::vector<std::string>{"a", "b"}), "[\"a\", \"b\"]");
  EXPECT_EQ(FormatSettingValue(1.0), "1.0");
}

TEST_F(SettingsRegistryTest, ValuesTrackSourceAndResolution) {
  SettingValues values(registry_);
  EXPECT_EQ(values.GetInt("zero.stage"), 0);
  EXPECT_EQ(values.entry("zero.stage").source, ValueSource::kDefault);
  EXPECT_FALSE(values.IsGiven("zero.stage"));
  EXPECT_FALSE(values.HasValue("mem"));

  values.Set("zero.stage", int64_t{3}, ValueSource::kFile, "f.yaml:2:3");
  EXPECT_TRUE(values.IsGiven("zero.stage"));
  EXPECT_EQ(values.GetInt("zero.stage"), 3);

  values.SetAuto("mem", ValueSource::kEnv, "env TEST_CFG_MEM");
  EXPECT_TRUE(values.IsAuto("mem"));
  EXPECT_FALSE(values.HasValue("mem"));
  values.Resolve("mem", int64_t{1024}, "RAM");
  EXPECT_EQ(values.GetInt("mem"), 1024);
  EXPECT_EQ(values.entry("mem").source, ValueSource::kEnv);  // the "auto" came from the env
  EXPECT_EQ(values.entry("mem").note, "auto -> 1024: RAM");

  values.Resolve("zero.offload.nvme_path", std::string("/x"), "computed");
  EXPECT_EQ(values.entry("zero.offload.nvme_path").source, ValueSource::kDerived);
  EXPECT_EQ(values.FindString("zero.offload.nvme_path"), "/x");

  values.Set("tags", std::vector<std::string>{"a", "b"}, ValueSource::kSet);
  EXPECT_EQ(values.GetStringList("tags"), (std::vector<std::string>{"a", "b"}));
}

TEST_F(SettingsRegistryTest, RecordListsEverySettingWithSource) {
  SettingValues values(registry_);
  values.Set("zero.stage", int64_t{2}, ValueSource::kSet, "--set zero.stage=2");
  values.SetAuto("mem", ValueSource::kFile, "f:1:1");
  nlohmann::ordered_json record = values.ToRecordJson();
  EXPECT_EQ(record.size(), registry_.settings().size());
  EXPECT_EQ(record["zero.stage"]["value"], 2);
  EXPECT_EQ(record["zero.stage"]["source"], "--set");
  EXPECT_EQ(record["mem"]["value"], "auto");
  EXPECT_TRUE(record["zero.offload.nvme_path"]["value"].is_null());
  EXPECT_EQ(record.begin().key(), "zero.stage");  // registry order

  nlohmann::ordered_json nested = values.ToNestedJson();
  EXPECT_EQ(nested["zero"]["stage"], 2);
  EXPECT_EQ(nested["zero"]["offload"]["device"], "none");
  EXPECT_FALSE(nested["zero"]["offload"].contains("nvme_path"));
}

TEST_F(SettingsRegistryTest, UnreadPathsShrinkAsSettingsAreRead) {
  SettingValues values(registry_);
  EXPECT_EQ(values.UnreadPaths().size(), registry_.settings().size());
  (void)values.GetInt("zero.stage");
  (void)values.FindInt("mem");
  std::vector<std::string> unread = values.UnreadPaths();
  EXPECT_EQ(std::count(unread.begin(), unread.end(), "zero.stage"), 0);
  EXPECT_EQ(std::count(unread.begin(), unread.end(), "mem"), 0);
  EXPECT_EQ(unread.size(), registry_.settings().size() - 2);
}

TEST(SettingsRegistryDeathTest, DuplicateDeclarationIsAProgrammerError) {
  SettingsRegistry registry("X_");
  registry.Add("a.b", SettingType::kInt, "doc");
  EXPECT_DEATH(registry.Add("a.b", SettingType::kInt, "doc"), "declared twice");
  EXPECT_DEATH(registry.Add("a.b.c", SettingType::kInt, "doc"), "under the setting");
  EXPECT_DEATH(registry.Add("x__y", SettingType::kInt, "doc"), "bad setting path");
}

}  // namespace
}  // namespace sluice
