"""Benchmarks of the plugin: kernels, dispatch overhead, and real vLLM end to end.

Run from the repository root as ``python -m benchmarks.<name>``:

- `bench_ops`: every op x backend x dtype x token count, eager and in CUDA graphs (GPU);
- `bench_layers`: a replaced layer's ``forward_oot`` against vLLM's ``forward_cuda`` (GPU);
- `bench_dispatch`: what the dispatch adds to a call (CPU);
- `bench_host_launch`, `profile_flagos`, `bench_align`, `bench_triton_op`: the flagos backend's
  host and launch costs; `tune_moe`: the fused experts' tuned configs (GPU);
- `e2e`: end-to-end throughput, configuration against configuration, in one of four A/B designs
  (`e2e_rounds`, `e2e_paired`, `e2e_policies`);
- `profile_engine`, `trace_engine`: where an engine step's time goes; `census`: which of vLLM's
  own kernels still run under a policy; `host_probe`: the host's speed across processes;
- `report`: the docs' tables rendered from the result files in ``benchmarks/results``.

What they share: `timing` (the timers), `tables`, `cli` (argument types, result files),
`engines` (a vLLM engine for a model and a policy, through `vllm_fl.testing`), `cases` and
`shapes` (each op's inputs at model size, from ops.yaml).
"""
