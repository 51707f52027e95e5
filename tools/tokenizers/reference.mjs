// Reference token ids for boostlm's tokenizer tests and benchmark.
// Usage: node reference.mjs IMPL TOKENIZER RECORDS OUT
//   IMPL       hf: transformers.js's tokenizers (@lenml/tokenizers) reading TOKENIZER, a
//              tokenizer.json (with the tokenizer_config.json beside it, if any);
//              tiktoken: tiktoken's encoding named TOKENIZER (gpt2), every special token allowed
//   RECORDS    texts as "<byte length>\n<bytes>" one after another; the bytes are decoded as
//              UTF-8 with U+FFFD for each maximal ill-formed subpart (WHATWG's decoder)
//   OUT        one line per text: its ids (with the post-processor's, for hf), space-separated
// Or: node reference.mjs bench IMPL TOKENIZER TEXT REPEATS: MB/s of encoding the file TEXT
// (its lines), the median of REPEATS runs after one warm-up.
import { readFileSync, writeFileSync, existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { TokenizerLoader } from "@lenml/tokenizers";
import { get_encoding } from "tiktoken";

function loadEncoder(impl, tokenizer) {
  if (impl === "tiktoken") {
    const encoding = get_encoding(tokenizer);
    return (text) => encoding.encode(text, "all");
  }
  if (impl !== "hf") throw new Error(`unknown implementation ${impl}`);
  const config = join(dirname(tokenizer), "tokenizer_config.json");
  const hf = TokenizerLoader.fromPreTrained({
    tokenizerJSON: JSON.parse(readFileSync(tokenizer, "utf8")),
    tokenizerConfig: existsSync(config) ? JSON.parse(readFileSync(config, "utf8"))
                                        : { tokenizer_class: "PreTrainedTokenizerFast" },
  });
  return (text) => hf.encode(text);
}

function readRecords(path) {
  const bytes = readFileSync(path);
  const decoder = new TextDecoder("utf-8");
  const texts = [];
  for (let at = 0; at < bytes.length;) {
    const newline = bytes.indexOf(10, at);
    const length = Number(bytes.subarray(at, newline).toString("latin1"));
    texts.push(decoder.decode(bytes.subarray(newline + 1, newline + 1 + length)));
    at = newline + 1 + length;
  }
  return texts;
}

if (process.argv[2] === "bench") {
  const [, , , impl, tokenizer, textPath, repeats] = process.argv;
  const encode = loadEncoder(impl, tokenizer);
  const bytes = readFileSync(textPath);
  const lines = bytes.toString("utf8").split("\n");
  const times = [];
  for (let run = 0; run <= Number(repeats); ++run) {
    const start = process.hrtime.bigint();
    for (const line of lines) encode(line);
    const seconds = Number(process.hrtime.bigint() - start) / 1e9;
    if (run > 0) times.push(seconds);
  }
  times.sort((a, b) => a - b);
  const median = times[Math.floor(times.length / 2)];
  console.log(JSON.stringify({ impl, tokenizer, bytes: bytes.length, seconds: median,
                               mb_per_s: bytes.length / 1e6 / median }));
} else {
  const [, , impl, tokenizer, records, out] = process.argv;
  const encode = loadEncoder(impl, tokenizer);
  const lines = readRecords(records).map((text) => Array.from(encode(text)).join(" "));
  writeFileSync(out, lines.join("\n") + "\n");
}
