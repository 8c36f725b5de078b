// The Engram normalised-token map built from each fixture's tokenizer.json equals golden
// `engram.token_map` exactly, with engram_compressed_vocab_size distinct ids (model.md §3.8).
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "format/config.h"
#include "format/tokenizer.h"
#include "model/engram_token_map.h"
#include "tests/golden_file.h"

namespace dsv41 {
namespace {

TEST(GoldenEngramTokenMap, MatchesTheFixtureTokenMap) {
  DSV41_SKIP_WITHOUT_GOLDEN();
  for (const char* fixture : {"v41-tiny-f32", "v41-tiny-bf16", "v41-tiny-f32/official"}) {
    const std::string dir = std::string(DSV41_GOLDEN_DIR) + "/" + fixture;
    auto tok = Tokenizer::load(dir + "/tokenizer.json");
    ASSERT_TRUE(tok.ok()) << tok.status().to_string();
    auto config = load_model_config(dir);
    ASSERT_TRUE(config.ok()) << config.status().to_string();
    std::vector<std::string> decoded(tok->vocab_size()), raw(tok->vocab_size());
    for (int32_t id = 0; id < tok->vocab_size(); ++id) {
      decoded[id] = std::string(tok->decode_token(id));
      if (auto r = tok->id_to_token(id)) raw[id] = std::string(*r);
    }
    const EngramTokenMap map = build_engram_token_map(decoded, raw);
    EXPECT_EQ(map.distinct, config->engram_compressed_vocab_size) << fixture;
    const std::string gdir = std::string(DSV41_GOLDEN_DIR) + "/" +
                             (std::string(fixture).find("bf16") != std::string::npos ? "v41-tiny-bf16" : "v41-tiny-f32");
    testing::GoldenFile g(gdir + "/golden.safetensors");
    EXPECT_EQ(map.ids, g.get("engram.token_map").i64) << fixture;
  }
}

}  // namespace
}  // namespace dsv41
