"""The policy in force: what may run now, and the ways to change it at run time. The policy
itself is a value of the configuration (``config.selection.SelectionPolicy``).

- ``current``: the process-wide configuration and current policy, ``policy_context`` and the
  ``with_*`` helpers;
- ``name_checks``: names in a policy that the registry does not know (typos).
"""
