"""A child for the fork server's tests (`tests/testing/test_zygotes.py`): reports what its
interpreter looks like when it starts, then leaves traces a later run must not see.

``python -m tests.support.zygote_probe [--fail] --result FILE``; its preload is
`tests.support.zygote_preload` (the tests add it to `vllm_fl.testing.zygotes.PRELOADS`)."""

from __future__ import annotations

import multiprocessing.process
import os
import sys

#: whether a fork server imported the preload before this module ran
PRELOADED = "tests.support.zygote_preload" in sys.modules

from tests.support import zygote_preload  # noqa: E402  (after the look above)
from vllm_fl.testing.child import write_result  # noqa: E402

#: the variables the tests set; the run's own are compared, the rest of the environment is
#: pytest's and the same both ways
PREFIX = "ZYGOTE_TEST_"


def report() -> dict:
    return {
        "preloaded": PRELOADED,
        "runs_in_preload": list(zygote_preload.RUNS),
        "env": {k: v for k, v in os.environ.items() if k.startswith(PREFIX)},
        "cwd": os.getcwd(),
        "path": sys.path,
        "argv": sys.argv[1:-2],
        "name": __name__,
        "main": sys.modules["__main__"].__spec__.name,
        "original_dir": multiprocessing.process.ORIGINAL_DIR,
        "fds": sorted(int(fd) for fd in os.listdir("/proc/self/fd")),
    }


def main() -> int:
    data = report()
    # traces a later run forked from the same server must not see
    zygote_preload.RUNS.append(os.getpid())
    os.environ[PREFIX + "LEAK"] = "from an earlier run"
    print("probe output")
    if "--fail" in sys.argv:
        raise SystemExit("failed on purpose")
    write_result(sys.argv[-1], data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
