"""The FlagCX backend's implementations (see ops.yaml)."""
