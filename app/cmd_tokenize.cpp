// `dsv41 tokenize`: encode text to token ids or decode ids to text with a model's
// tokenizer.json (spec model.md §5), for checking prompts and special tokens by hand.
// No BOS is added (dsv41 adds it when it builds a prompt).
#include <cstdio>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "app/command.h"
#include "app/option_checks.h"
#include "format/tokenizer.h"

namespace dsv41::app {
namespace {

int run_tokenize(int argc, char** argv) {
  CLI::App cli("Encode text to token ids, or decode ids (no BOS is added)", argv[0]);
  std::string path;
  std::vector<std::string> text;
  std::vector<TokenId> decode_ids;
  bool from_stdin = false, no_special = false, as_json = false;
  cli.add_option("-t,--tokenizer", path, "tokenizer.json, or a model directory holding one")->required();
  cli.add_option("text", text, "text to encode (words are joined by single spaces)");
  cli.add_flag("--stdin", from_stdin, "encode all of standard input instead");
  cli.add_option("-d,--decode", decode_ids, "decode these ids instead of encoding");
  cli.add_flag("--no-special", no_special, "treat special-token strings in the text as plain text");
  cli.add_flag("--json", as_json, "print JSON: ids with each token's text, or the decoded text");
  name_parse_errors(cli);
  try {
    cli.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return cli.exit(e);
  }
  if (path.size() < 5 || path.compare(path.size() - 5, 5, ".json") != 0) path += "/tokenizer.json";
  auto tok = Tokenizer::load(path);
  if (!tok.ok()) {
    std::fprintf(stderr, "dsv41 tokenize: %s\n", tok.status().to_string().c_str());
    return 1;
  }

  if (!decode_ids.empty()) {
    const std::string out = tok->decode_text(decode_ids);
    if (as_json) std::printf("%s\n", nlohmann::json(out).dump().c_str());
    else std::printf("%s\n", out.c_str());
    return 0;
  }

  std::string input;
  if (from_stdin) {
    input.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  } else {
    for (size_t i = 0; i < text.size(); ++i) input += (i ? " " : "") + text[i];
  }
  TokenizerEncodeOptions options;
  options.match_special_tokens = !no_special;
  auto ids = tok->encode(input, options);
  if (!ids.ok()) {
    std::fprintf(stderr, "dsv41 tokenize: %s\n", ids.status().to_string().c_str());
    return 1;
  }
  if (as_json) {
    nlohmann::json tokens = nlohmann::json::array();
    for (TokenId id : *ids) {
      // Single tokens may hold part of a UTF-8 character: shown with U+FFFD.
      tokens.push_back(tok->decode_text(std::vector<TokenId>{id}));
    }
    std::printf("%s\n", nlohmann::json{{"ids", *ids}, {"tokens", tokens}}.dump().c_str());
  } else {
    for (size_t i = 0; i < ids->size(); ++i) std::printf("%s%d", i ? " " : "", (*ids)[i]);
    std::printf("\n");
  }
  return 0;
}

const CommandRegistration kRegister{{"tokenize", "encode text to token ids or decode ids (tokenizer.json)",
                                     run_tokenize}};

}  // namespace
}  // namespace dsv41::app
