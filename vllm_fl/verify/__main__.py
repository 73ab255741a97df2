"""``python -m vllm_fl.verify``: see ``vllm_fl.verify.cli``."""

import sys

from .cli import main

sys.exit(main())
