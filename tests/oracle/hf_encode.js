// Oracle for dsv41's tokenizer tests: encodes each JSON-string line of INPUT with Hugging Face
// tokenizers (the Rust library's Node binding) and TOKENIZER_JSON, no special tokens added,
// writing one JSON array of ids per line to OUTPUT.
// Usage: node hf_encode.js TOKENIZER_JSON INPUT OUTPUT
const { Tokenizer } = require('tokenizers');
const fs = require('fs');

(async () => {
  const [tokenizerPath, inputPath, outputPath] = process.argv.slice(2);
  const tok = Tokenizer.fromFile(tokenizerPath);
  const lines = fs.readFileSync(inputPath, 'utf8').split('\n').filter((l) => l.length > 0);
  const out = [];
  for (const line of lines) {
    const enc = await tok.encode(JSON.parse(line), null, { addSpecialTokens: false });
    out.push(JSON.stringify(enc.getIds()));
  }
  fs.writeFileSync(outputPath, out.join('\n') + '\n');
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
