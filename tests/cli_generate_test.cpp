// `dsv41 generate` end to end (issue 9 item 7): the same ids with --parallel 1 and 8 on the
// embedded default model and the golden fixture, bad lines fail alone naming their id and line,
// bad options fail before the model loads; requests with images (issue 16) on the vision fixture
// give `dsv41 run --image`'s ids, whatever the parallelism and with the prefix cache, and a bad
// image fails its request alone.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/cli_runner.h"

namespace dsv41 {
namespace {

using testing::run_cli;
using testing::Stderr;

std::string write_requests(const std::string& body) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("dsv41_generate_" + std::to_string(getpid()) + ".jsonl")).string();
  std::ofstream(path) << body;
  return path;
}

const char* kRequests =
    "{\"id\": \"greedy\", \"prompt\": \"Python's asyncio module\", \"max_tokens\": 12}\n"
    "{\"id\": \"sampled\", \"prompt\": \"SELECT * FROM\", \"max_tokens\": 9, \"temperature\": 0.8, \"seed\": 3}\n"
    "{\"id\": \"ids\", \"prompt_ids\": [0, 100, 200, 300], \"max_tokens\": 7, \"ignore_eos\": true}\n"
    "\n"
    "{\"id\": \"unknown-key\", \"prompt\": \"x\", \"colour\": 3}\n"
    "{\"id\": \"bad-id\", \"prompt_ids\": [0, 999999]}\n"
    "{\"id\": \"nucleus\", \"prompt\": \"The Linux kernel\", \"max_tokens\": 11, \"temperature\": 0.7, "
    "\"top_p\": 0.9, \"seed\": 11}\n"
    "{\"id\": \"too-long\", \"prompt_ids\": [0, 5], \"max_tokens\": 100000}\n"
    "{\"id\": \"p2\", \"prompt\": \"Debian packages\", \"max_tokens\": 5, \"temperature\": 1.0, \"seed\": 5}\n";

void expect_parallel_invariant(const std::string& model) {
  const std::string req = write_requests(kRequests);
  const auto one = run_cli("generate -m " + model + " --requests " + req + " --parallel 1", Stderr::kDiscard);
  const auto eight = run_cli("generate -m " + model + " --requests " + req + " --parallel 8 --prefill-chunk 3",
                             Stderr::kDiscard);
  const auto merged = run_cli("generate -m " + model + " --requests " + req + " --parallel 3", Stderr::kMerge);
  std::filesystem::remove(req);
  EXPECT_EQ(one.code, 1) << "some requests fail";
  EXPECT_EQ(one.out, eight.out);
  EXPECT_NE(one.out.find("\"id\":\"greedy\",\"ids\":["), std::string::npos) << one.out;
  EXPECT_NE(one.out.find("\"error\":\"unknown key \\\"colour\\\"\",\"id\":\"unknown-key\",\"line\":5"),
            std::string::npos)
      << one.out;
  EXPECT_NE(one.out.find("\"id\":\"bad-id\",\"line\":6"), std::string::npos) << one.out;
  EXPECT_NE(one.out.find("exceeds the context"), std::string::npos) << one.out;
  EXPECT_NE(merged.out.find("request \"too-long\" (line 8)"), std::string::npos) << merged.out;
  // Nine lines of output, one per non-blank input line, in input order.
  EXPECT_EQ(std::count(one.out.begin(), one.out.end(), '\n'), 8);
  EXPECT_LT(one.out.find("\"greedy\""), one.out.find("\"p2\""));
}

TEST(CliGenerate, DefaultModelSameIdsWhateverTheParallelism) {
  expect_parallel_invariant(std::string(DSV41_SOURCE_DIR) + "/models/dsv41-mini");
}

TEST(CliGenerate, GoldenFixtureSameIdsWhateverTheParallelism) {
  const std::string dir = std::string(DSV41_GOLDEN_DIR) + "/v41-tiny-f32";
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << dir << " is absent (a plain clone has no ../shared)";
  expect_parallel_invariant(dir);
}

// --ranks N (expert parallelism + attention data parallelism in one process, docs/PARALLEL.md):
// the same output lines as one engine, bad requests included, for 2 and 3 ranks of the CPU
// backend, 2 ranks of the device backend's emulation, and with DSpark (against one engine with the
// same --dspark: sampled requests verify by the rejection rule, whose tokens are not plain
// decoding's); what it does not run yet is refused.
std::string file_text(const std::string& path) {
  std::ifstream f(path);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// The output lines of `generate --ranks N` against one engine's, for model directory `model`.
void expect_ranks_match_one_engine(const std::string& model, const std::string& req) {
  const auto one = run_cli("generate -m " + model + " --requests " + req + " --parallel 2", Stderr::kDiscard);
  EXPECT_EQ(one.code, 1) << "some requests fail";
  EXPECT_NE(one.out.find("\"id\":\"greedy\",\"ids\":["), std::string::npos) << one.out;
  for (const char* ranks : {"--parallel 2 --ranks 2", "--parallel 1 --ranks 3", "--parallel 2 --ranks 2 --backend device-emulation"}) {
    const auto got = run_cli("generate -m " + model + " --requests " + req + " " + ranks, Stderr::kDiscard);
    EXPECT_EQ(got.code, 1) << ranks;
    EXPECT_EQ(got.out, one.out) << model << " " << ranks;
  }
}

// The golden fixture (an independent implementation's model, ../shared): the same.
TEST(CliGenerate, GoldenFixtureRanksGiveOneEnginesOutput) {
  const std::string dir = std::string(DSV41_GOLDEN_DIR) + "/v41-tiny-f32";
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << dir << " is absent (a plain clone has no ../shared)";
  const std::string req = write_requests(kRequests);
  expect_ranks_match_one_engine(dir, req);
  std::filesystem::remove(req);
}

TEST(CliGenerate, RanksGiveOneEnginesOutput) {
  const std::string model = std::string(DSV41_SOURCE_DIR) + "/models/dsv41-mini";
  const std::string req = write_requests(kRequests);
  expect_ranks_match_one_engine(model, req);
  // With DSpark (fixed K = 2: every decoding sequence drafts 2 at every step, so the drafts
  // verified and accepted do not depend on which rank holds a sequence): the same lines, and the
  // summary line (every rank's counts summed) the same counts as one engine's.
  const std::string one_out = req + ".one", ranks_out = req + ".ranks";
  const auto one_dspark = run_cli("generate -m " + model + " --requests " + req + " --parallel 2 --dspark 2 --out " + one_out,
                                  Stderr::kMerge);
  const auto ranks_dspark = run_cli(
      "generate -m " + model + " --requests " + req + " --parallel 2 --dspark 2 --ranks 2 --out " + ranks_out, Stderr::kMerge);
  EXPECT_EQ(ranks_dspark.code, 1);
  EXPECT_NE(file_text(one_out), "");
  EXPECT_EQ(file_text(ranks_out), file_text(one_out));
  const auto counts = [](const std::string& err) {
    const std::regex line(R"(dspark 2: (\d+) drafting steps, (\d+) drafts verified, (\d+) accepted)");
    std::smatch m;
    return std::regex_search(err, m, line) ? m[1].str() + " " + m[2].str() + " " + m[3].str() : std::string("none");
  };
  EXPECT_NE(counts(one_dspark.out), "none") << one_dspark.out;
  EXPECT_EQ(counts(ranks_dspark.out), counts(one_dspark.out)) << ranks_dspark.out;
  std::filesystem::remove(one_out);
  std::filesystem::remove(ranks_out);
  for (const auto& [refused, why] : {std::pair{"--ranks 2 --cache-dir /tmp/dsv41-unused", "not served across ranks yet"},
                                     std::pair{"--ranks 2 --backend cuda", "runs the cpu backend or device-emulation"}}) {
    const auto r = run_cli("generate -m " + model + " --requests " + req + " " + refused, Stderr::kMerge);
    EXPECT_EQ(r.code, 2) << refused << ": " << r.out;
    EXPECT_NE(r.out.find(why), std::string::npos) << refused << ": " << r.out;
  }
  std::filesystem::remove(req);
}

TEST(CliGenerate, BadOptionsFailBeforeTheModelLoads) {
  const std::string req = write_requests("{\"id\": \"a\", \"prompt\": \"x\"}\n");
  for (const char* bad : {"--parallel 0", "--parallel 100000", "--prefill-chunk 0", "--ctx -3", "--ranks 0", "--ranks 65"}) {
    const auto r = run_cli("generate -m /nonexistent --requests " + req + " " + bad, Stderr::kMerge);
    EXPECT_NE(r.code, 0) << bad;
    EXPECT_EQ(r.out.find("/nonexistent"), std::string::npos) << bad << ": " << r.out;
    EXPECT_NE(r.out.find(std::string(bad).substr(0, std::string(bad).find(' '))), std::string::npos) << r.out;
  }
  const auto missing = run_cli("generate -m " + std::string(DSV41_SOURCE_DIR) + "/models/dsv41-mini --requests /nonexistent.jsonl",
                               Stderr::kMerge);
  EXPECT_EQ(missing.code, 1);
  EXPECT_NE(missing.out.find("/nonexistent.jsonl"), std::string::npos) << missing.out;
  std::filesystem::remove(req);
}

// The JSON output line of request `id`.
nlohmann::json line_of(const std::string& out, const std::string& id) {
  size_t pos = 0;
  while (pos < out.size()) {
    const size_t end = out.find('\n', pos);
    auto j = nlohmann::json::parse(out.substr(pos, end - pos), nullptr, false);
    if (j.is_object() && j.value("id", "") == id) return j;
    if (end == std::string::npos) break;
    pos = end + 1;
  }
  return nlohmann::json();
}

// The generated ids `dsv41 run` prints last (--print-ids).
std::string run_ids(const std::string& out) {
  std::string s = out;
  while (!s.empty() && s.back() == '\n') s.pop_back();
  return s.substr(s.rfind('\n') + 1);
}

std::string ids_text(const nlohmann::json& ids) {
  std::string out;
  for (const auto& v : ids) out += (out.empty() ? "" : ",") + std::to_string(v.get<int64_t>());
  return out;
}

TEST(CliGenerate, RequestsWithImagesGiveRunsIdsAndBadImagesFailAlone) {
  const std::string vl = std::string(DSV41_SOURCE_DIR) + "/tests/fixtures/vl-micro";
  const std::string images = std::string(DSV41_TEST_DATA_DIR) + "/images";
  const std::string tmp = (std::filesystem::temp_directory_path() / ("dsv41_generate_img_" + std::to_string(getpid()))).string();
  std::filesystem::create_directories(tmp);
  {  // a PNG cut in half
    std::ifstream in(images + "/rgb.png", std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream(tmp + "/cut.png", std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  }
  const std::string png = images + "/rgb.png", jpg = images + "/baseline.jpg";
  const std::string mark = "<｜deepseek_image｜>";
  auto q = [](const std::string& s) { return "\"" + s + "\""; };
  const std::string common = ", \"max_tokens\": 4, \"ignore_eos\": true}\n";
  const std::string body =
      "{\"id\": \"before\", \"prompt\": \"Look at this\", \"images\": [" + q(png) + "]" + common +
      "{\"id\": \"text\", \"prompt\": \"Look at this\"" + common +
      "{\"id\": \"marked\", \"prompt\": \"" + mark + "Look at this\", \"images\": [" + q(png) + "]" + common +
      "{\"id\": \"missing\", \"prompt\": \"x\", \"images\": [" + q(tmp + "/missing.png") + "]" + common +
      "{\"id\": \"two\", \"prompt\": \"A" + mark + "B" + mark + "C\", \"images\": [" + q(jpg) + ", " + q(png) + "]" + common +
      "{\"id\": \"cut\", \"prompt\": \"x\", \"images\": [" + q(png) + ", " + q(tmp + "/cut.png") + "]" + common +
      "{\"id\": \"count\", \"prompt\": \"A" + mark + "B" + mark + "\", \"images\": [" + q(png) + "]" + common +
      "{\"id\": \"ids\", \"prompt_ids\": [0, 305, 79, 114], \"images\": [" + q(png) + "]" + common +
      "{\"id\": \"not-a-list\", \"prompt\": \"x\", \"images\": " + q(png) + common +
      "{\"id\": \"jpeg\", \"prompt\": \"Look at this\", \"images\": [" + q(jpg) + "]" + common;
  const std::string req = tmp + "/requests.jsonl";
  std::ofstream(req) << body;
  const std::string base = "generate -m " + vl + " --requests " + req + " --depth full";
  const auto one = run_cli(base + " --parallel 1", Stderr::kMerge);
  const auto four = run_cli(base + " --parallel 4 --prefill-chunk 3", Stderr::kDiscard);
  const auto cached = run_cli(base + " --parallel 3 --cache-dir " + tmp + "/cache --cache-chunk 4", Stderr::kDiscard);
  const auto again = run_cli(base + " --parallel 3 --cache-dir " + tmp + "/cache --cache-chunk 4", Stderr::kDiscard);
  EXPECT_EQ(one.code, 1) << one.out;
  for (const char* id : {"before", "text", "marked", "two", "ids", "jpeg"}) {
    const auto a = line_of(one.out, id);
    ASSERT_TRUE(a.contains("ids")) << id << "\n" << one.out;
    EXPECT_EQ(a["ids"].size(), 4u) << id;
    EXPECT_EQ(line_of(four.out, id), a) << id << "\n" << four.out;
    // Through the prefix cache (cold, then hits keyed by the images' content): the same ids.
    for (const auto* other : {&cached, &again}) EXPECT_EQ(line_of(other->out, id)["ids"], a["ids"]) << id << "\n" << other->out;
  }
  // Placed before the text or at its placeholder: the same prompt, the text's with a span of at
  // least 4 positions (start, a token, a newline, end).
  EXPECT_EQ(line_of(one.out, "before")["ids"], line_of(one.out, "marked")["ids"]);
  EXPECT_EQ(line_of(one.out, "before")["prompt_tokens"], line_of(one.out, "marked")["prompt_tokens"]);
  EXPECT_NE(line_of(one.out, "before")["ids"], line_of(one.out, "jpeg")["ids"]);  // the image reaches the output
  EXPECT_GE(line_of(one.out, "before")["prompt_tokens"].get<int64_t>(), line_of(one.out, "text")["prompt_tokens"].get<int64_t>() + 4);
  // `dsv41 run --image` gives the same ids, and another image other ids or at least other logits
  // (checked through run with the JPEG).
  const auto run = run_cli("run -m " + vl + " --image " + png + " -p 'Look at this' -n 4 --ignore-eos --print-ids --depth full",
                           Stderr::kDiscard);
  ASSERT_EQ(run.code, 0) << run.out;
  EXPECT_EQ(run_ids(run.out), ids_text(line_of(one.out, "before")["ids"])) << run.out;
  const auto run_jpg = run_cli("run -m " + vl + " --image " + jpg + " -p 'Look at this' -n 4 --ignore-eos --print-ids --depth full",
                               Stderr::kDiscard);
  EXPECT_EQ(run_ids(run_jpg.out), ids_text(line_of(one.out, "jpeg")["ids"])) << run_jpg.out;
  // Bad images fail their request alone, naming its id, line and the image.
  const auto expect_failed = [&](const std::string& id, int line, const std::string& words) {
    const auto j = line_of(one.out, id);
    ASSERT_TRUE(j.contains("error")) << id << "\n" << one.out;
    EXPECT_EQ(j["line"], line) << id;
    EXPECT_NE(j["error"].get<std::string>().find(words), std::string::npos) << id << ": " << j["error"];
    EXPECT_NE(one.out.find("request \"" + id + "\" (line " + std::to_string(line) + ")"), std::string::npos) << one.out;
  };
  expect_failed("missing", 4, tmp + "/missing.png");
  expect_failed("cut", 6, tmp + "/cut.png");
  expect_failed("count", 7, "2 image placeholder(s) (token 305) but 1 image(s)");
  expect_failed("not-a-list", 9, "\"images\" must be an array");
  // A text-only model refuses images, naming the request.
  const auto text_only = run_cli("generate -m " + std::string(DSV41_SOURCE_DIR) + "/tests/fixtures/v41-micro --requests " + req,
                                 Stderr::kDiscard);
  EXPECT_EQ(text_only.code, 1);
  EXPECT_NE(line_of(text_only.out, "before").value("error", "").find("text only"), std::string::npos) << text_only.out;
  EXPECT_TRUE(line_of(text_only.out, "text").contains("ids")) << text_only.out;
  std::filesystem::remove_all(tmp);
}

}  // namespace
}  // namespace dsv41
