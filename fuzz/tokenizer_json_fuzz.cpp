// libFuzzer target: arbitrary bytes as tokenizer.json (spec model.md §5). The loader must
// return an error or a tokenizer, never crash; a tokenizer that loads must encode a short
// mixed string to ids that all name tokens, and decode them (one shot and streaming).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "format/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto tok = dsv41::Tokenizer::parse(text, "fuzz.json");
  if (!tok.ok()) return 0;
  const std::string_view sample = "Hello, 世界! 123 <｜User｜> \n\n  😀";
  auto ids = tok->encode(sample);
  if (!ids.ok()) return 0;
  for (dsv41::TokenId id : *ids) {
    if (id < 0 || id >= tok->vocab_size()) __builtin_trap();  // ids always name a token
  }
  dsv41::StreamDecoder stream(*tok);
  for (dsv41::TokenId id : *ids) (void)stream.push(id);
  (void)stream.flush();
  (void)tok->decode_text(*ids);
  return 0;
}
