// `dsv41 inspect` end to end: both golden fixtures under both naming schemes inspect cleanly
// (exit 0, tensor check ok); a checkpoint with a tensor dropped fails naming it.
#include <cstdio>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "format/safetensors.h"
#include "tests/cli_runner.h"
#include "tests/golden_file.h"

namespace dsv41 {
namespace {

namespace fs = std::filesystem;

using testing::CliResult;

CliResult run_dsv41(const std::string& args) { return testing::run_cli(args, testing::Stderr::kMerge); }

TEST(CmdInspect, GoldenFixturesInspectCleanly) {
  DSV41_SKIP_WITHOUT_GOLDEN();
  for (const char* sub : {"v41-tiny-f32", "v41-tiny-f32/official", "v41-tiny-bf16", "v41-tiny-bf16/official"}) {
    SCOPED_TRACE(sub);
    CliResult r = run_dsv41(std::string("inspect ") + DSV41_GOLDEN_DIR + "/" + sub);
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("check     ok: 0 missing, 0 mismatched, 0 unexpected"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("6  Full          1"), std::string::npos) << r.out;  // the layer plan table
  }
}

TEST(CmdInspect, DroppedTensorIsNamed) {
  DSV41_SKIP_WITHOUT_GOLDEN();
  const std::string golden = std::string(DSV41_GOLDEN_DIR) + "/v41-tiny-f32/official";
  Result<TensorSet> set = TensorSet::open(golden + "/model.safetensors");
  ASSERT_TRUE(set.ok()) << set.status().to_string();
  std::vector<TensorView> keep;
  for (const std::string& name : set->names())
    if (name != "layers.4.attn.indexer.wq_b.weight") keep.push_back(*set->find(name));
  fs::path dir = fs::temp_directory_path() / ("dsv41_inspect_drop_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  fs::copy_file(golden + "/config.json", dir / "config.json", fs::copy_options::overwrite_existing);
  ASSERT_TRUE(write_safetensors((dir / "model.safetensors").string(), keep).ok());
  CliResult r = run_dsv41("inspect " + dir.string());
  fs::remove_all(dir);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("missing: layers.4.attn.indexer.wq_b.weight"), std::string::npos) << r.out;
  // A config alone still inspects (no weights needed).
  CliResult c = run_dsv41("inspect --config " + golden + "/config.json");
  EXPECT_EQ(c.code, 0) << c.out;
}

}  // namespace
}  // namespace dsv41
