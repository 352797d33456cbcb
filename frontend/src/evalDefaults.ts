// What a new evaluation (and a new evaluation schedule) starts with, in one place: change it here.
// `benchmarks` are BenchmarkSpec objects as POST /evaluations takes them (the picker ticks these, with these
// options filled in); `generation` holds the defaults for every benchmark (the form's generation fields).

export interface EvalFormDefaults {
  benchmarks: Record<string, unknown>[]
  generation: Record<string, unknown>
}

// The demo's example evaluation (training_platform/demo/arithmetic.py DEMO_EVAL_BENCHMARK; a test checks they agree):
// held-out sums asked as "3+5=", the format the demo model was trained on, so the score moves after SFT.
export const EVAL_FORM_DEFAULTS: EvalFormDefaults = {
  benchmarks: [{ name: 'gsm8k', data: 'demo/data/gsm8k_eval.jsonl', prompt_template: '{prompt}', limit: 40 }],
  generation: { max_new_tokens: 8 },
}

/** One line under the form while it holds the demo's example: why its score is what it is. */
export const DEMO_EVAL_HINT =
  'The example asks held-out sums as "3+5=" (prompt_template {prompt}), the format the demo model was trained on: ' +
  'the untrained model scores 0, sft_tiny (400 steps) well above it. GSM8K wording would score ~0 for a model this small.'

/** A fresh copy of the defaults (the form edits its own). */
export function evalFormDefaults(): EvalFormDefaults {
  return JSON.parse(JSON.stringify(EVAL_FORM_DEFAULTS)) as EvalFormDefaults
}

/** What an empty field means where the schema has no default (the placeholder says it; else "each benchmark's
 * default" in the generation section). */
export const EMPTY_MEANS: Record<string, string> = { limit: 'all items' }
