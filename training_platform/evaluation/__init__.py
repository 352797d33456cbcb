"""Evaluation: GSM8K, MATH, HumanEval, multiple choice and custom sets, scored honestly, with a real sandbox.

Modules (import what you need; this package's import is cheap and pulls in nothing heavy):

* `config`      EvalConfig / ModelSpec / BenchmarkSpec / SandboxSpec (pydantic)
* `benchmarks`  registry (`get_benchmark`, `@register_benchmark`) and the benchmarks
* `extract`     answer extraction (GSM8K strict/flexible, MATH `\\boxed{}`), `math_equal`
* `math_equiv`  math-verify with a timeout that works off the main thread
* `scorers`     exact / numeric / math / regex / contains scorers for custom sets
* `metrics`     accuracy + stderr + Wilson CI, unbiased pass@k
* `generation`  backends: transformers, vLLM (import-guarded), OpenAI-compatible HTTP
* `sandbox`     bubblewrap sandbox for generated code (fails closed)
* `runner`      `run_evaluation(config, out_dir)`, `score_predictions(benchmark, rows)`
* `report`      report.md / report.html; `compare`: two runs sample by sample
"""
