// `dsv41 tokenize` end to end: the golden prompt's ids, JSON output, decoding, bad paths.
#include <cstdio>
#include <string>

#include <gtest/gtest.h>

namespace {

// Runs a shell command, returns stdout; `rc` gets the exit status.
std::string run(const std::string& cmd, int* rc) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  *rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

const std::string kBin = DSV41_BINARY;
const std::string kGolden = std::string(DSV41_GOLDEN_DIR) + "/v41-tiny-f32";

TEST(CmdTokenize, EncodesDecodesAndReportsErrors) {
  int rc = -1;
  // golden.json sequence 1 (BOS, then 288 223 332 336 271 274 for "The river car") continues.
  EXPECT_EQ(run(kBin + " tokenize -t " + kGolden + " 'The river carries'", &rc),
            "288 223 332 336 271 274 332 272\n");
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(run(kBin + " tokenize -t " + kGolden + "/tokenizer.json --json '<｜end▁of▁sentence｜>The'", &rc),
            "{\"ids\":[1,288],\"tokens\":[\"<｜end▁of▁sentence｜>\",\"The\"]}\n");
  EXPECT_EQ(run(kBin + " tokenize -t " + kGolden + " -d 288 223 332 336 271 274", &rc), "The river car\n");
  EXPECT_EQ(run(kBin + " tokenize -t /nonexistent 'x' 2>&1", &rc),
            "dsv41 tokenize: i/o error: /nonexistent/tokenizer.json: cannot open\n");
  EXPECT_EQ(rc, 1);
}

}  // namespace
