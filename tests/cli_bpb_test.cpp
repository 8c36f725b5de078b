// `dsv41 bpb` and `dsv41 run`'s EOS stop end to end on the f32 golden fixture: output formats
// (summary, --per-file, --json) agree with the library (runtime/bpb.h); bad input is a clear
// error with a non-zero exit; `run` stops after EOS unless --ignore-eos.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "runtime/bpb.h"
#include "tests/cli_runner.h"
#include "tests/golden_file.h"

namespace dsv41 {
namespace {

const std::string kDir = std::string(DSV41_GOLDEN_DIR) + "/v41-tiny-f32";

std::string write_temp(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "dsv41_cli_bpb_" + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

std::vector<std::string> lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

TEST(CliBpb, SummaryPerFileAndJsonAgreeWithLibrary) {
  DSV41_SKIP_WITHOUT_GOLDEN();
  const std::string a = write_temp("a.txt", "Hello world, this is a small file of text.\n");
  const std::string b = write_temp("b.txt", "def f(x):\n    return x * 2  # doubled\n");
  auto model = Model::load(kDir).value();
  auto tok = Tokenizer::load(kDir + "/tokenizer.json").value();
  BpbOptions o;
  o.context = 8;
  o.stride = 3;
  BpbTotals want = score_file_bpb(*model, tok, a, o).value();
  const BpbTotals want_b = score_file_bpb(*model, tok, b, o).value();
  const BpbTotals want_a = want;
  want += want_b;

  const testing::CliResult r =
      testing::run_cli("bpb -m " + kDir + " " + a + " " + b + " --context 8 --stride 3 --per-file", testing::Stderr::kDiscard);
  ASSERT_EQ(r.code, 0) << r.out;
  const auto ls = lines(r.out);
  ASSERT_EQ(ls.size(), 3u) << r.out;
  double v = 0;
  long long n = 0, bytes = 0;
  char path[512];
  ASSERT_EQ(std::sscanf(ls[0].c_str(), "file %511s bpb %lf tokens %lld bytes %lld", path, &v, &n, &bytes), 4) << ls[0];
  EXPECT_EQ(path, a);
  EXPECT_NEAR(v, want_a.bpb(), 1e-6);
  EXPECT_EQ(n, want_a.tokens);
  ASSERT_EQ(std::sscanf(ls[2].c_str(), "bpb %lf tokens %lld bytes %lld", &v, &n, &bytes), 3) << ls[2];
  EXPECT_NEAR(v, want.bpb(), 1e-6);
  EXPECT_EQ(n, want.tokens);
  EXPECT_EQ(bytes, want.bytes);

  const testing::CliResult j =
      testing::run_cli("bpb -m " + kDir + " " + a + " " + b + " --context 8 --stride 3 --json", testing::Stderr::kDiscard);
  ASSERT_EQ(j.code, 0) << j.out;
  const auto parsed = nlohmann::json::parse(j.out, nullptr, false);
  ASSERT_FALSE(parsed.is_discarded()) << j.out;
  EXPECT_NEAR(parsed["bpb"].get<double>(), want.bpb(), 1e-9);
  EXPECT_EQ(parsed["tokens"].get<int64_t>(), want.tokens);
  EXPECT_EQ(parsed["bytes"].get<int64_t>(), want.bytes);
  EXPECT_EQ(parsed["context"].get<int64_t>(), 8);
  EXPECT_EQ(parsed["stride"].get<int64_t>(), 3);
  ASSERT_EQ(parsed["files"].size(), 2u);
  EXPECT_EQ(parsed["files"][1]["tokens"].get<int64_t>(), want_b.tokens);

  // Progress goes to stderr only and says how far it got.
  const testing::CliResult p = testing::run_cli("bpb -m " + kDir + " " + a + " 2>&1 >/dev/null", testing::Stderr::kInherit);
  EXPECT_NE(p.out.find("tok/s"), std::string::npos) << p.out;
  std::remove(a.c_str());
  std::remove(b.c_str());
}

TEST(CliBpb, BadInputIsAnErrorNotACrash) {
  DSV41_SKIP_WITHOUT_GOLDEN();
  const std::string ok = write_temp("ok.txt", "some text\n");
  const std::string empty = write_temp("empty.txt", "");
  for (const std::string& args : {std::string("/nonexistent.txt"), empty, ok + " --context 1", ok + " --context 8 --stride 8",
                                  ok + " --stride -2", std::string()}) {
    const testing::CliResult r = testing::run_cli("bpb -m " + kDir + " " + args, testing::Stderr::kMerge);
    EXPECT_NE(r.code, 0) << args << ": " << r.out;
    EXPECT_EQ(r.out.find("bpb 0"), std::string::npos) << r.out;
  }
  const testing::CliResult m = testing::run_cli("bpb -m " + kDir + " " + empty, testing::Stderr::kMerge);
  EXPECT_NE(m.out.find("empty"), std::string::npos) << m.out;
  EXPECT_NE(testing::run_cli("bpb -m /nonexistent " + ok, testing::Stderr::kDiscard).code, 0);
  std::remove(ok.c_str());
  std::remove(empty.c_str());
}

std::vector<std::string> split_ids(const std::string& line) {
  std::vector<std::string> out;
  std::istringstream in(line);
  for (std::string x; std::getline(in, x, ',');) out.push_back(x);
  return out;
}

std::string last_line(const std::string& out) {
  const auto ls = lines(out);
  return ls.empty() ? "" : ls.back();
}

// The tiny model spreads its mass widely over 643 ids, so hot sampling meets EOS (id 1 in the
// config) within a few hundred tokens for most seeds; the first seed that does is used, so the
// test does not hang on one seed's exact float path.
TEST(CliRun, StopsAtEosUnlessIgnoreEos) {
  DSV41_SKIP_WITHOUT_GOLDEN();
  for (int seed = 11; seed < 31; ++seed) {
    const std::string base =
        "run -m " + kDir + " --ids 0,5,7 -n 600 --temp 3 --seed " + std::to_string(seed) + " --print-ids";
    const testing::CliResult all = testing::run_cli(base + " --ignore-eos", testing::Stderr::kDiscard);
    ASSERT_EQ(all.code, 0);
    const auto ids = split_ids(last_line(all.out));
    ASSERT_EQ(ids.size(), 600u);
    const auto eos = std::find(ids.begin(), ids.end(), "1");
    if (eos == ids.end()) continue;  // this seed never samples EOS: try the next
    const testing::CliResult stop = testing::run_cli(base, testing::Stderr::kDiscard);
    ASSERT_EQ(stop.code, 0);
    EXPECT_EQ(split_ids(last_line(stop.out)), std::vector<std::string>(ids.begin(), eos + 1)) << "seed " << seed;
    return;
  }
  FAIL() << "no seed in 11..30 sampled EOS within 600 tokens";
}

}  // namespace
}  // namespace dsv41
