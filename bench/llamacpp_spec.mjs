// llama.cpp's speculative decoding, through npm's node-llama-cpp (its only
// interface to it): plain greedy, a draft model (DraftSequenceTokenPredictor,
// gamma 4) or input lookup (InputLookupTokenPredictor), on prompts given as
// token ids. Run by bench/vs_llamacpp.py. Its JavaScript loop adds a fixed
// cost per generated token, so the plain row here is compared with the same
// greedy loop in C (llamacpp_bench) to state that cost.
//   node bench/llamacpp_spec.mjs TARGET.gguf DRAFT.gguf|- none|draft|lookup THREADS N_NEW PROMPTS_FILE
// PROMPTS_FILE: one prompt a line, comma-separated ids (BOS first).
// Prints one JSON line per prompt: {"index", "ms", "output_ids", "predictions"}.
import {readFileSync} from "node:fs";
import {getLlama, LlamaLogLevel, DraftSequenceTokenPredictor, InputLookupTokenPredictor} from "node-llama-cpp";

const [targetPath, draftPath, mode, threadsArg, nNewArg, promptsPath] = process.argv.slice(2);
const threads = Number(threadsArg), nNew = Number(nNewArg);
const prompts = readFileSync(promptsPath, "utf8").split("\n").filter(l => l.trim()).map(l => l.split(",").map(Number));

const llama = await getLlama({gpu: false, build: "never", maxThreads: threads, logLevel: LlamaLogLevel.error});
const model = await llama.loadModel({modelPath: targetPath, gpuLayers: 0});
const ctx = await model.createContext({contextSize: model.trainContextSize, threads});
let draftModel = null, draftCtx = null;
if (mode === "draft") {
  draftModel = await llama.loadModel({modelPath: draftPath, gpuLayers: 0});
  draftCtx = await draftModel.createContext({contextSize: draftModel.trainContextSize, threads});
}

for (let i = 0; i < prompts.length; ++i) {
  const prompt = prompts[i];
  let predictor, draftSequence;
  if (mode === "draft") {
    draftSequence = draftCtx.getSequence();
    predictor = new DraftSequenceTokenPredictor(draftSequence, {minTokens: 4, maxTokens: 4, minConfidence: 0});
  } else if (mode === "lookup") {
    predictor = new InputLookupTokenPredictor({patternLength: {min: 1}, predictionLength: {min: 1, max: 5}});
    predictor.updateInputTokens(prompt);
  }
  const sequence = ctx.getSequence(predictor ? {tokenPredictor: predictor} : undefined);
  const out = [];
  const t0 = performance.now();
  for await (const token of sequence.evaluate(prompt, {temperature: 0})) {
    out.push(token);
    if (out.length >= nNew) break;
  }
  const ms = performance.now() - t0;
  console.log(JSON.stringify({index: i, ms, output_ids: out, predictions: sequence.tokenPredictions ?? null}));
  sequence.dispose();
  predictor?.dispose?.();
  draftSequence?.dispose();
}
await ctx.dispose();
if (draftCtx) await draftCtx.dispose();
