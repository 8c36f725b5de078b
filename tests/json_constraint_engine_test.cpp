// Constrained decoding end to end on the trained dsv41-mini (issue 12, response_format): greedy
// output under a JSON mask ends with EOS and is valid JSON (an object; an instance of a schema),
// while an unconstrained request in the same batch gives the tokens it gives alone.
#include <gtest/gtest.h>

#include "backends/cpu/cpu_backend.h"
#include "engine/engine.h"
#include "format/tokenizer.h"
#include "model/model.h"
#include "runtime/json_constraint.h"
#include "runtime/scheduler.h"

namespace dsv41 {
namespace {

using nlohmann::json;

struct Mini {
  std::unique_ptr<Model> model;
  std::optional<Tokenizer> tokenizer;
};

const Mini& mini() {
  static Mini m = [] {
    Mini out;
    const std::string dir = std::string(DSV41_SOURCE_DIR) + "/models/dsv41-mini";
    auto model = Model::load(dir);
    EXPECT_TRUE(model.ok()) << model.status().to_string();
    if (model.ok()) out.model = std::move(*model);
    auto tok = Tokenizer::load(dir + "/tokenizer.json");
    EXPECT_TRUE(tok.ok()) << tok.status().to_string();
    if (tok.ok()) out.tokenizer.emplace(std::move(*tok));
    return out;
  }();
  return m;
}

std::vector<GenerationResult> run(const std::vector<GenerationRequest>& reqs) {
  const Mini& m = mini();
  auto engine = Engine::create(std::make_unique<CpuBackend>(*m.model), m.model->engram_tables());
  EXPECT_TRUE(engine.ok());
  SchedulerOptions o;
  o.parallel = 4;
  o.max_context = 512;
  o.eos_token_id = 1;
  auto s = Scheduler::create(**engine, o);
  EXPECT_TRUE(s.ok());
  std::vector<int64_t> tickets;
  for (const auto& r : reqs) tickets.push_back((*s)->submit(r));
  (*s)->run_to_completion();
  std::vector<GenerationResult> out;
  for (int64_t t : tickets) out.push_back(*(*s)->take(t));
  return out;
}

GenerationRequest request(const std::string& text, int64_t max_tokens) {
  GenerationRequest r;
  r.prompt = {0};  // BOS
  auto ids = mini().tokenizer->encode(text);
  EXPECT_TRUE(ids.ok());
  r.prompt.insert(r.prompt.end(), ids->begin(), ids->end());
  r.max_tokens = max_tokens;
  return r;
}

TEST(JsonConstraintEngine, GreedyMiniOutputIsValidJsonForTheSchema) {
  const Mini& m = mini();
  ASSERT_TRUE(m.model && m.tokenizer);
  auto trie = TokenTrie::build(*m.tokenizer);
  auto schema = JsonSchema::compile(json::parse(R"({"type":"object","properties":{
      "name":{"type":"string"},"version":{"type":"integer"},"enabled":{"type":"boolean"},
      "mode":{"enum":["fast","safe"]}},"required":["name","version","enabled","mode"],"additionalProperties":false})"));
  ASSERT_TRUE(schema.ok());
  const JsonConstraintOptions opts{1, false};

  GenerationRequest free_text = request("{\"name\": \"postgres\", \"version\": 15}\n", 40);
  GenerationRequest object = free_text;
  object.max_tokens = 200;
  object.constraint = std::make_shared<JsonConstraintFactory>(JsonSchema::any_object(), trie, opts);
  GenerationRequest typed = object;
  typed.constraint = std::make_shared<JsonConstraintFactory>(*schema, trie, opts);
  GenerationRequest sampled = object;  // seeded: deterministic too
  sampled.sampling.temperature = 0.8f;
  sampled.sampling.seed = 3;

  const auto alone = run({free_text});
  const auto together = run({object, free_text, typed, sampled});
  // The mask is that sequence's alone.
  EXPECT_EQ(together[1].ids, alone[0].ids);

  for (int i : {0, 2, 3}) {
    const GenerationResult& r = together[static_cast<size_t>(i)];
    ASSERT_TRUE(r.status.ok()) << r.status.to_string();
    const std::string text = m.tokenizer->decode(r.ids);
    EXPECT_EQ(r.finish, FinishReason::kStop) << "cut by max_tokens: " << text;
    ASSERT_TRUE(json::accept(text)) << text;
    const json v = json::parse(text);
    EXPECT_TRUE(v.is_object()) << text;
    if (i == 2) {
      EXPECT_TRUE(schema_accepts(**schema, (*schema)->root(), v)) << text;
    }
    std::cerr << "constrained output " << i << ": " << text << "\n";
  }
}

}  // namespace
}  // namespace dsv41
