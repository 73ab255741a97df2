"""Policy: what may run and in which order.

- ``selection``: ``SelectionPolicy``, a plain validated value (its fields declare their parsers);
  the default orders and the selection tokens;
- ``lists``: the white/black list rules every list pair follows;
- ``current``: the process-wide configuration and current policy, ``policy_context`` and the
  ``with_*`` helpers;
- ``name_checks``: names in a policy that the registry does not know (typos).
"""
