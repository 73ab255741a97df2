"""The vllm_fl generator: ops.yaml -> FLBackendBase, register_ops, OOT classes, parity tests, docs.

``python -m codegen`` regenerates, ``--check`` verifies, ``vendor NAME --ops OP,...`` scaffolds a
vendor for those ops.
"""
