// Runs GGUF files in llama.cpp (node-llama-cpp's prebuilt CPU binary, installed by install.sh)
// and prints, for each `--model` in order, one line of JSON:
//   log_probs        log p(token[i+1] | window's tokens up to i) for the ids of `--tokens` (the
//                    JSON of `boostlm eval --text --per-token`), in its consecutive windows of
//                    seq_len, each a fresh context: the same windows boostlm scored
//   greedy_ids       the greedy continuation (temperature 0) of the prompt ids (`--prompt`: the
//                    JSON of `boostlm eval --per-token` on the prompt text, less its final EOS),
//                    `--max-new-tokens` ids or up to EOS
//   tokenized        llama.cpp's own tokenization of `--text` (a file), for the tokenizer check
//
// Usage: node llama_eval.mjs --deps DIR --model FILE.gguf [--model FILE.gguf...] --tokens EVAL.json
//        [--prompt EVAL.json --max-new-tokens N --vocab-limit V] [--text FILE]
// The context computes in fp32 where it can: fp32 KV cache, no flash attention, one sequence.
// Each model is loaded into a fresh model and context; llama.cpp itself is loaded once (starting
// Node.js and node-llama-cpp takes seconds, the tiny models' scoring less).
import {readFileSync} from "node:fs";
import {join} from "node:path";
import {pathToFileURL} from "node:url";

function parseArgs(argv) {
  const args = {models: []};
  for (let i = 0; i < argv.length; i += 2) {
    if (!argv[i].startsWith("--") || i + 1 >= argv.length)
      throw new Error(`llama_eval.mjs: expected --name value pairs, got ${argv[i]}`);
    if (argv[i] === "--model") args.models.push(argv[i + 1]);
    else args[argv[i].slice(2)] = argv[i + 1];
  }
  if (args.models.length === 0) throw new Error("llama_eval.mjs: --model is required");
  for (const required of ["deps", "tokens"])
    if (!(required in args)) throw new Error(`llama_eval.mjs: --${required} is required`);
  return args;
}

const args = parseArgs(process.argv.slice(2));
const {getLlama, LlamaLogLevel} = await import(
  pathToFileURL(join(args.deps, "node_modules/node-llama-cpp/dist/index.js")).href);
// build "never": the prebuilt binary or nothing (no download, no compiler).
const llama = await getLlama({gpu: false, build: "never", usePrebuiltBinaries: true,
                              skipDownload: true, progressLogs: false,
                              logLevel: LlamaLogLevel.error});

// One model: its log-probabilities, greedy continuation and tokenization, as described above.
async function evaluate(modelPath) {
  const model = await llama.loadModel({modelPath, gpuLayers: 0});
  const scored = JSON.parse(readFileSync(args.tokens, "utf8"));
  const seqLen = scored.seq_len;
  const ids = scored.token_ids;
  const context = await model.createContext({
    contextSize: Math.max(seqLen, 64) + Number(args["max-new-tokens"] ?? 0) + 64,
    batchSize: 512, sequences: 1, flashAttention: false, threads: Number(args.threads ?? 1),
    experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32"});
  const sequence = context.getSequence();

  // The probabilities node-llama-cpp returns are the softmax of the raw logits (greedy sampler,
  // no penalties), each exp(logit - max) in fp32 divided by their sum accumulated in fp32: over a
  // GPT-2 vocabulary of 50k that sum is off by ~1e-4 relative. Dividing by their sum in double
  // undoes it (p_i = e_i / S32, so p_t / sum(p_i) = e_t / S).
  async function windowLogProbs(window) {
    await sequence.clearHistory();
    const input = window.slice(0, -1).map(id => [id, {generateNext: {probabilities: true}}]);
    const results = await sequence.controlledEvaluate(input);
    return window.slice(1).map((target, i) => {
      const probabilities = results[i].next.probabilities;
      let sum = 0;
      for (const p of probabilities.values()) sum += p;
      return Math.log(probabilities.get(target) ?? 0) - Math.log(sum);
    });
  }

  const logProbs = [];
  for (let start = 0; start + 1 < ids.length; start += seqLen)
    logProbs.push(...await windowLogProbs(ids.slice(start, Math.min(start + seqLen, ids.length - 1) + 1)));

  const out = {model: modelPath, log_probs: logProbs, eos_id: model.tokens.eos};
  if (args.prompt) {
    const promptIds = JSON.parse(readFileSync(args.prompt, "utf8")).token_ids;
    if (promptIds.at(-1) === model.tokens.eos) promptIds.pop();  // eval's EOS after the document
    await sequence.clearHistory();
    const greedy = [];
    let next = promptIds;
    // Greedy over the ids the tokenizer can decode (`--vocab-limit`, as boostlm generate samples
    // only those of a padded vocabulary): the most probable such id of the full distribution.
    const limit = Number(args["vocab-limit"] ?? Infinity);
    for (let n = 0; n < Number(args["max-new-tokens"] ?? 16); ++n) {
      const results = await sequence.controlledEvaluate(
        next.map((id, i) => i + 1 < next.length ? id : [id, {generateNext: {probabilities: true}}]));
      let token = null;
      for (const [id] of results.at(-1).next.probabilities) {  // sorted, most probable first
        if (id < limit) { token = id; break; }
      }
      greedy.push(token);
      if (token === model.tokens.eos) break;
      next = [token];
    }
    out.prompt_ids = promptIds;
    out.greedy_ids = greedy;
  }
  // One document: boostlm drops the text's final newline(s) (data/prepare.h split_documents).
  if (args.text) out.tokenized = model.tokenize(readFileSync(args.text, "utf8").replace(/(\r?\n)+$/, ""));
  await context.dispose();
  await model.dispose();
  return out;
}

for (const modelPath of args.models) console.log(JSON.stringify(await evaluate(modelPath)));
await llama.dispose();
