"""Configuration: where settings come from, what they may be, and the typed values they make.
The one reader of the environment; it holds no state (``policy`` holds the policy in force).

- ``values``: one parser per kind of setting value, shared by every source, and for each
  parser of a policy setting its check (``is_*``: already parsed?);
- ``settings``: the table of every setting (variable, file key, parser, default, scope, doc),
  ``read_env`` for code that needs one variable;
- ``lists``: the white/black list rules every list pair follows;
- ``selection``: ``SelectionPolicy``, the selection settings as a typed value (one field per
  row), the default orders and the selection tokens;
- ``files``: the one hardened YAML/JSON reader (also the generator's, ``codegen.yamlnodes``);
- ``loader``: the sources and their precedence, ``load_config`` -> ``DispatchConfig`` (one field
  per process setting, the policy, where each value came from);
- ``docs``: ``docs/configuration.md`` and the README's settings table, rendered from the table;
- ``cpu.yaml``, ``cuda.yaml``, ``ascend.yaml``: the platform YAMLs (package data).

Nothing here imports torch or vLLM.
"""
