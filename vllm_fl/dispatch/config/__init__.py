"""Configuration: where settings come from and what they may be.

- ``values``: one parser per kind of setting value, shared by every source;
- ``settings``: the table of every setting (variable, file key, parser, default, scope, doc);
- ``files``: the one hardened YAML/JSON reader (also the generator's, ``codegen.yamlnodes``);
- ``loader``: the sources and their precedence, ``load_config`` -> ``DispatchConfig``;
- ``docs``: ``docs/configuration.md`` and the README's settings table, rendered from the table;
- ``cpu.yaml``, ``cuda.yaml``, ``ascend.yaml``: the platform YAMLs (package data).

Nothing here imports torch or vLLM.
"""
