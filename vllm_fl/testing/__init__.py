"""Running the plugin inside real vLLM, for the tests and the benchmarks (and a vendor checking
its backend end to end). Importing it imports neither vLLM nor torch.

- `models`: the models the plugin is checked on: tiny ones built locally (nothing downloaded),
  full-size model shapes as configs for dummy weights, the quantized checkpoint formats;
- `formats`: the quantized checkpoint formats, and a float checkpoint folder quantised into one
  (round-to-nearest in the format's own layout);
- `child`: the one protocol of a child process: the answer is a JSON file it writes;
- `engine`: the child side of a vLLM run (``python -m vllm_fl.testing.engine``): build the engine,
  generate greedily or run a task, report tokens, timings and the dispatch's record;
- `launch`: the parent side: a vLLM run in a fresh interpreter with a given environment;
- `zygote`, `zygotes`: the fork server that stands in for that fresh interpreter (vLLM imported
  once per environment, a forked child per run), and its parent side;
- `census`: an engine task counting which of vLLM's own kernels ran under the profiler;
- `checkpoint`: a real checkpoint (SmolLM2-135M-Instruct) from the package registry, converted
  once to an ordinary HF checkpoint, and its quantised twins;
- `texts`: real text shipped with CPython (the Zen of Python, the PSF license);
- `accuracy`: an engine task: greedy text, perplexity and a cloze task on a real checkpoint;
- `quantize`: the quantisation schemes of the parity tests' quantized inputs (imports torch).
- `inputs`: the quantized and derived test inputs of ops.yaml, built as the parity tests build
  them, for the compile and opcheck samples and the benchmarks (imports torch).
- `collectives`: the machinery of the generated collectives' tests, `run_collectives`, which
  runs a spec of them on spawned CPU processes over gloo (imports torch).
- `parity`: the machinery of the generated parity tests, `Parity`, which the conftest generated
  next to them constructs with the manifest's reference impl and seed (imports torch and pytest).
"""
