// Writes GPT-2's tokenizer.json (Hugging Face's format) from the ranks tiktoken's npm package
// ships: the vocabulary is every rank's bytes through GPT-2's byte-to-unicode table, and the
// merge list is the ranks from 256 on, each split into the two tokens that BPE with only the
// lower ranks leaves of its bytes (GPT-2's ids are its merge order, so rank r is merge r - 256).
// Usage: node make_gpt2.mjs OUT.json
import { writeFileSync } from "node:fs";
import { get_encoding } from "tiktoken";

const encoding = get_encoding("gpt2");
const endOfText = 50256;

const byteToChar = [];
{
  let next = 256;
  for (let b = 0; b < 256; ++b) {
    const kept = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    byteToChar.push(String.fromCodePoint(kept ? b : next++));
  }
}
const toChars = (bytes) => Array.from(bytes, (b) => byteToChar[b]).join("");
const key = (bytes) => Buffer.from(bytes).toString("latin1");

const tokens = [];
const rankOf = new Map();
for (let rank = 0; rank < endOfText; ++rank) {
  const bytes = encoding.decode_single_token_bytes(rank);
  tokens.push(bytes);
  rankOf.set(key(bytes), rank);
}

// BPE of `bytes` with ranks below `limit`, down to two parts.
function split(bytes, limit) {
  let parts = Array.from(bytes, (b) => Uint8Array.of(b));
  while (parts.length > 2) {
    let best = -1, bestRank = limit;
    for (let i = 0; i + 1 < parts.length; ++i) {
      const rank = rankOf.get(key([...parts[i], ...parts[i + 1]]));
      if (rank !== undefined && rank < bestRank) { best = i; bestRank = rank; }
    }
    if (best < 0) throw new Error(`rank ${limit} cannot be split`);
    parts.splice(best, 2, Uint8Array.from([...parts[best], ...parts[best + 1]]));
  }
  return parts;
}

const vocab = {};
tokens.forEach((bytes, rank) => { vocab[toChars(bytes)] = rank; });
vocab["<|endoftext|>"] = endOfText;
const merges = [];
for (let rank = 256; rank < endOfText; ++rank) {
  const [a, b] = split(tokens[rank], rank);
  merges.push(`${toChars(a)} ${toChars(b)}`);
}
const byteLevel = { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: true };
const tokenizer = {
  version: "1.0",
  truncation: null,
  padding: null,
  added_tokens: [{ id: endOfText, content: "<|endoftext|>", single_word: false, lstrip: false,
                   rstrip: false, normalized: true, special: true }],
  normalizer: null,
  pre_tokenizer: byteLevel,
  post_processor: { ...byteLevel, trim_offsets: false },
  decoder: byteLevel,
  model: { type: "BPE", dropout: null, unk_token: null, continuing_subword_prefix: "",
           end_of_word_suffix: "", fuse_unk: false, byte_fallback: false, vocab, merges },
};
writeFileSync(process.argv[2], JSON.stringify(tokenizer));
encoding.free();
